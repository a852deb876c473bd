"""Inference speed of every head: dense vs EUGen unfused vs EUGen fused (eager and compiled) vs the
dense twin narrowed to the EUGen parameter count, measured side by side in one process.

For each method family the models are built from the registered method configs (the small
CPU sizes, or ``--full-size``) with their initial weights: speed does not depend on the weights, and
quality against the dense twin is what the ``nerf`` suite (:mod:`eugen_nerf.bench.suites.methods`) measures on trained runs. Here the
fused form is checked to render the same image as the unfused one (``max_abs_rgb_diff_fused``).

Per variant: field points per second (``Field.forward`` on random points, as in ``eugen-eval``), render
FPS on the scene's test cameras, MLP multiply-accumulates per point, and the measured speedup divided
by the MAC ratio. Variants alternate inside every repeat (``benchmark_interleaved``), so load from
other processes hits them alike. Writes the JSON report given by ``--out`` (merged with the heads measured
before) and its plot beside it. The iSDF head's inference speed is measured by the ``isdf`` suite (its field
is an SDF, not a radiance field).

    eugen-bench inference                                           # nerf, nerfacto, siren
    python -m eugen_nerf.bench.suites.inference --compile           # also the torch.compile'd fused form
"""

from __future__ import annotations

import copy
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import tyro

from eugen_nerf.bench.merge import write_report
from eugen_nerf.bench.suites import command_line
from eugen_nerf.bench.suites.methods import variants  # the EUGen / dense / narrowed configs of each family
from eugen_nerf.eval.field_speed import find_field, random_ray_samples
from eugen_nerf.eval.size import count_parameters
from eugen_nerf.eval.timing import benchmark_interleaved
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.layers import EUGenMLP
from eugen_nerf.scenes import dataparser_config

GOALS = {"field_speedup": 2.0, "render_speedup": 1.5, "speedup_over_mac_ratio": 0.8}


def build(config, scene: Path, device: str):
    """The model of ``config`` with its initial weights, and the scene's test cameras."""
    outputs = dataparser_config(data=scene).setup().get_dataparser_outputs("test")
    model = config.pipeline.model.setup(scene_box=outputs.scene_box, num_train_data=8, metadata={})
    return model.to(device).eval(), outputs.cameras.to(device)


def eugen_mlps(model: torch.nn.Module) -> list[EUGenMLP]:
    return [m for m in model.modules() if isinstance(m, EUGenMLP)]


def mlp_macs(model: torch.nn.Module, fused: bool) -> int:
    """MACs per field point of the field's MLPs (encodings and hash grids excluded)."""
    _, field = find_field(model)
    return sum(
        m.fused().macs_per_point() if fused and m.has_eugen else m.macs_per_point() for m in eugen_mlps(field)
    )


class Variant:
    """A model with a fixed inference mode: calling ``field``/``render`` switches it into that mode first."""

    def __init__(self, model, fused: bool, compiled: bool = False) -> None:
        self.model, self.fused, self.compiled = model, fused, compiled

    def _mode(self) -> None:
        for mlp in eugen_mlps(self.model):
            mlp.fuse_in_eval, mlp.compile_fused = self.fused, self.compiled

    def field(self, samples):
        self._mode()
        return find_field(self.model)[1](samples)

    def render(self, cameras):
        self._mode()
        return self.model.get_outputs_for_camera(cameras)["rgb"]


def family_configs(family: str, full_size: bool) -> dict[str, object]:
    """``{"eugen", "dense"[, "narrowed_dense"]}`` trainer configs of a method family."""
    if family == "siren":  # no narrowed twin: SIREN's EUGen layers match the dense parameter count
        from eugen_nerf.methods import siren

        configs = {"eugen": siren.eugen_siren.config, "dense": siren.dense_siren.config}
        if not full_size:
            for config in configs.values():
                config.pipeline.model.num_coarse_samples = config.pipeline.model.num_importance_samples = 32
        return configs
    configs = variants(family, full_size)
    return {
        "eugen": configs["eugen"][1],
        "dense": configs["dense"][1],
        "narrowed_dense": configs["narrowed"][1],
    }


def bench_family(family: str, scene: Path, device: str, args) -> dict[str, object]:
    configs = family_configs(family, args.full_size)
    torch.manual_seed(0)
    eugen_model, cameras = build(configs["eugen"], scene, device)
    models = {
        "dense": build(configs["dense"], scene, device)[0],
        "eugen_unfused": eugen_model,
        "eugen_fused": eugen_model,
    }
    runners = {
        "dense": Variant(models["dense"], fused=True),
        "eugen_unfused": Variant(eugen_model, fused=False),
        "eugen_fused": Variant(eugen_model, fused=True),
    }
    if "narrowed_dense" in configs:
        models["narrowed_dense"] = build(configs["narrowed_dense"], scene, device)[0]
        runners["narrowed_dense"] = Variant(models["narrowed_dense"], fused=True)
    if args.compile:
        compiled_model = copy.deepcopy(eugen_model)
        models["eugen_fused_compiled"] = compiled_model
        runners["eugen_fused_compiled"] = Variant(compiled_model, fused=True, compiled=True)

    samples = random_ray_samples(eugen_model.scene_box.aabb, args.points, torch.device(device))
    views = cameras[: args.views]
    with torch.no_grad():
        field_t = benchmark_interleaved(
            {k: (lambda r=r: r.field(samples)) for k, r in runners.items()}, device, args.warmup, args.repeats
        )
        render_t = benchmark_interleaved(
            {
                k: (lambda r=r: [r.render(views[i : i + 1]) for i in range(len(views))])
                for k, r in runners.items()
            },
            device,
            args.warmup,
            args.repeats,
        )
        fused_rgb = runners["eugen_fused"].render(views[0:1])
        unfused_rgb = runners["eugen_unfused"].render(views[0:1])

    dense_macs = mlp_macs(models["dense"], fused=False)
    rows = {}
    for name, runner in runners.items():
        macs = mlp_macs(runner.model, fused=runner.fused)
        field_speedup = field_t["dense"].median / field_t[name].median
        rows[name] = {
            "field_points_per_second": args.points / field_t[name].median,
            "render_fps": len(views) / render_t[name].median,
            "field_speedup": field_speedup,
            "render_speedup": render_t["dense"].median / render_t[name].median,
            "mlp_macs_per_point": macs,
            "mac_ratio": dense_macs / macs,
            "field_speedup_over_mac_ratio": field_speedup / (dense_macs / macs),
            "parameters": count_parameters(runner.model),
        }
        print(
            f"[{family}/{device}] {name:22s} field {rows[name]['field_speedup']:5.2f}x  "
            f"render {rows[name]['render_speedup']:5.2f}x  MAC ratio {rows[name]['mac_ratio']:5.2f}x",
            flush=True,
        )
    fused = rows["eugen_fused"]
    return {
        "methods": {name: config.method_name for name, config in configs.items()},
        "resolution": [int(views[0].height), int(views[0].width)],
        "views": len(views),
        "max_abs_rgb_diff_fused": (fused_rgb - unfused_rgb).abs().max().item(),
        "variants": rows,
        "goals": {
            "field_speedup": {
                "goal": GOALS["field_speedup"],
                "measured": fused["field_speedup"],
                "met": fused["field_speedup"] >= GOALS["field_speedup"],
            },
            "render_speedup": {
                "goal": GOALS["render_speedup"],
                "measured": fused["render_speedup"],
                "met": fused["render_speedup"] >= GOALS["render_speedup"],
            },
            "speedup_over_mac_ratio": {
                "goal": GOALS["speedup_over_mac_ratio"],
                "measured": fused["field_speedup_over_mac_ratio"],
                "met": fused["field_speedup_over_mac_ratio"] >= GOALS["speedup_over_mac_ratio"],
            },
        },
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [
        (f"{fam}\n{dev}", data) for dev, fams in report["devices"].items() for fam, data in fams.items()
    ]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(dict.fromkeys(name for _, data in entries for name in data["variants"]))
    width = 0.8 / len(names)
    for ax, key, title in [
        (axes[0], "field_speedup", "field points/s vs dense"),
        (axes[1], "render_speedup", "render FPS vs dense"),
    ]:
        for j, name in enumerate(names):
            ax.bar(
                [i + (j - (len(names) - 1) / 2) * width for i in range(len(entries))],
                [data["variants"].get(name, {}).get(key, 0.0) for _, data in entries],
                width=width,
                label=name,
            )
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(entries)), [label for label, _ in entries])
        ax.set_title(title)
        ax.set_ylabel("speedup over the dense twin")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


@dataclass
class BenchInference:
    scene: Path = Path("scenes/bunny64")
    """the scene whose test cameras are rendered."""
    families: list[Literal["nerf", "nerfacto", "zipnerf", "siren"]] = field(
        default_factory=lambda: ["nerf", "nerfacto", "siren"]
    )
    """method families (heads) to measure."""
    points: int = 16384
    """field points per timed forward"""
    views: int = 2
    """test views per timed render"""
    warmup: int = 1
    """untimed warm-up rounds before the timed repeats."""
    repeats: int = 5
    """timed repeats of every measurement (the median is reported)."""
    compile: bool = False
    """also time the torch.compile'd fused form"""
    full_size: bool = False
    """the methods' default sizes, not the CPU ones"""
    out: Path = Path("benchmarks/inference/inference.json")
    """the JSON written (merged with the heads measured before; the plot goes beside it as .png)."""


def main() -> None:
    args = tyro.cli(BenchInference, description=__doc__)
    if not args.families:
        usage_error("eugen-bench inference", "--families needs at least one family")

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    command = command_line()
    report = {
        "command": command,
        "scene": str(args.scene),
        "size": "full" if args.full_size else "small-cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "goals": GOALS,
        "devices": {
            d: {f: {"command": command, **bench_family(f, args.scene, d, args)} for f in args.families}
            for d in devices
        },
    }
    # heads not run here stay as measured before, each with the command that measured it
    report = write_report(args.out, report, [("devices", d) for d in ("cpu", "cuda")])
    plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
