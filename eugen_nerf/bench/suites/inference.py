"""Inference of every head at realistic resolutions: field points/s, render FPS and render memory, dense vs
EUGen fused vs EUGen unfused vs the dense twin narrowed to EUGen's parameter count.

Every head with an EUGen twin is measured (NeRF, Zip-NeRF, the nerfacto-style head, SIREN; the iSDF head's
speed is the ``isdf`` suite's: its field is an SDF, not a radiance field). The models are built from the
registered method configurations (the small CPU sizes, or ``--full-size``) with their initial weights: the
cost of a render is the model's shapes and sample counts, not its weights, and quality against the dense
twin is what the training suites measure. EUGen fused is the method as it renders: its merged form, trained
as such where the method trains merged (``eugen-nerf``'s trunk) and fused from its layers otherwise; EUGen
unfused is its layers trained apart and run layer by layer. The fused form is checked to render the same image
as the unfused one (``max_abs_rgb_diff_fused``, on the layer-by-layer model).

Per head and variant:

* field points per second (``Field.forward`` on random points, as in ``eugen-eval``) and MLP
  multiply-accumulates per point;
* render FPS of the scene's test views at every ``--sizes`` width (the cameras' intrinsics rescaled with
  ``Cameras.rescale_output_resolution``), whole views rendered;
* render FPS at ``--extrapolate-size`` **extrapolated** from timed ray batches (``--rows`` rows through the
  middle of the view at that size): seconds per ray times the view's pixels. Each measured size also records
  what the ray batches predict for it, so the extrapolation can be judged;
* the ceiling of EUGen's speed-up: the dense twin timed beside them with the MLPs that hold EUGen layers in the
  EUGen method made free (returning zeros at no cost), in field points and in ray batches (``ceiling``; with
  each MLP's share of the dense field's and render's time). EUGen replaces MLPs only: encodings, samplers and
  compositing cost what they cost;
* render memory of one test view at every measured size, each model in a fresh process
  (:func:`eugen_nerf.eval.memory.render_memory`: the resident set's growth on the CPU, the CUDA allocator's on
  CUDA), and its ratio to the dense twin's.

Timings are side by side: the variants alternate inside every repeat (``benchmark_interleaved``), so load from
other processes hits them alike. On the CPU they count this process's CPU seconds by default (``--clock cpu``):
run on one thread, time spent waiting for the core is not counted, but other processes still slow a render
through the shared caches and memory (on a 2-core machine, up to about twice the CPU seconds beside two
training jobs), so published timings are taken with nothing else running; CUDA is timed by the wall clock; every timed output is checked finite, and a report holding a non-finite
figure is refused. The report is written after every measurement and a rerun with the same setting continues
where it stopped (heads measured with another setting are measured again). The smaller size is measured for
every head before the larger one, so an interrupted run still covers every head (:func:`tasks`).

    eugen-bench inference
    python -m eugen_nerf.bench.suites.inference --scene scenes/shiny128 --sizes 200 400
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
import tyro
import yaml

from eugen_nerf.bench.index import load
from eugen_nerf.bench.merge import write_report
from eugen_nerf.bench.provenance import provenance
from eugen_nerf.bench.suites import command_line
from eugen_nerf.bench.suites.methods import variants  # the EUGen / dense / narrowed configs of each family
from eugen_nerf.eval.field_speed import find_field, random_ray_samples
from eugen_nerf.eval.memory import build_untrained, render_memory, view_at_size
from eugen_nerf.eval.runs import final_rgb
from eugen_nerf.eval.size import count_parameters
from eugen_nerf.eval.timing import NonFiniteOutput, benchmark_interleaved, check_finite
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.layers import EUGenMLP, MergedMLP

FAMILIES = ("nerf", "zipnerf", "nerfacto", "siren")
CEILING = "dense_without_eugen_mlps"
MEMORY_ORDER = ("dense", "eugen_fused", "eugen_unfused", "narrowed_dense")
LABELS = {"nerf": "NeRF", "zipnerf": "Zip-NeRF", "nerfacto": "nerfacto-style", "siren": "SIREN"}
RENDER_GOALS = {"nerf": 1.5, "zipnerf": 1.25, "nerfacto": 1.5, "siren": 1.5}
"""EUGen fused render FPS over the dense twin's, per head, at the largest measured size."""
GOALS = {"render_speedup": RENDER_GOALS, "render_memory_ratio": 0.8, "field_speedup": 2.0}
"""``render_memory_ratio``: EUGen fused render memory over the dense twin's, at most (the paper: up to 30%
less); ``field_speedup``: EUGen fused field points/s over the dense twin's, at least."""


def eugen_mlps(model: torch.nn.Module) -> list[EUGenMLP]:
    return [m for m in model.modules() if isinstance(m, EUGenMLP)]


def mlp_macs(model: torch.nn.Module, fused: bool) -> int:
    """MACs per field point of the field's MLPs (encodings and hash grids excluded); an MLP trained merged
    (:class:`~eugen_nerf.layers.MergedMLP`) runs its merged form either way. Merged, a NeRF field whose heads
    absorb its trunk's last EUGen layer (``fold_heads``) counts the trunk and colour head so folded."""
    _, field = find_field(model)
    folded = field.fold_heads() if fused and hasattr(field, "fold_heads") else None
    if folded is not None:
        return folded[0].macs_per_point() + folded[2].macs_per_point()
    layered = sum(
        m.fused().macs_per_point() if fused and m.has_eugen else m.macs_per_point() for m in eugen_mlps(field)
    )
    return layered + sum(m.macs_per_point() for m in field.modules() if isinstance(m, MergedMLP))


def layer_spec(config):
    """The spec a method configuration's EUGen layers are built from: SIREN's trunk takes its own
    (``siren``; of ``eugen`` it reads only the seed), every other head ``eugen``."""
    model = config.pipeline.model
    return getattr(model, "siren", None) or model.eugen


def trains_merged(config) -> bool:
    """Whether a method configuration's EUGen layers train (and so render) in their merged form."""
    eugen = layer_spec(config)
    return bool(getattr(eugen, "merged_training", getattr(eugen, "train_merged", False)))


class Variant:
    """A model with a fixed inference mode: each call switches it into that mode first."""

    def __init__(self, model, fused: bool, compiled: bool = False) -> None:
        self.model, self.fused, self.compiled = model, fused, compiled

    def _mode(self) -> None:
        for mlp in eugen_mlps(self.model):
            mlp.fuse_in_eval, mlp.compile_fused = self.fused, self.compiled

    def field(self, samples):
        self._mode()
        return find_field(self.model)[1](samples)

    def render(self, camera) -> torch.Tensor:
        """One whole view (a one-camera batch)."""
        self._mode()
        return final_rgb(self.model.get_outputs_for_camera(camera))

    def rays(self, bundle) -> torch.Tensor:
        """A ``(rows, width)`` ray bundle, rendered as a view is (in the model's eval chunks)."""
        self._mode()
        return final_rgb(self.model.get_outputs_for_camera_ray_bundle(bundle))


def eugen_mlp_paths(model: torch.nn.Module) -> list[str]:
    """Where ``model`` holds MLPs with EUGen layers (merged or layer by layer), as ``get_submodule`` paths."""
    return [
        path
        for path, module in model.named_modules()
        if isinstance(module, MergedMLP) or (isinstance(module, EUGenMLP) and module.has_eugen)
    ]


class WithoutMLPs(Variant):
    """A model whose MLPs at ``paths`` cost nothing during each call (each returns zeros of its output's
    shape): the dense twin so is what a render would cost were EUGen's MLPs free, the ceiling of the speed-up
    EUGen can bring to a head whose other parts (encodings, samplers, compositing) it leaves as they are."""

    def __init__(self, model, paths: list[str]) -> None:
        super().__init__(model, fused=True)
        self.mlps = [model.get_submodule(path) for path in paths]

    @contextmanager
    def _free(self):
        for mlp in self.mlps:
            mlp.forward = lambda x, m=mlp: x.new_zeros(*x.shape[:-1], m.out_dim)
            mlp.forward_concat = lambda parts, m=mlp: parts[0].new_zeros(*parts[0].shape[:-1], m.out_dim)
        try:
            yield
        finally:
            for mlp in self.mlps:
                del mlp.forward, mlp.forward_concat

    def field(self, samples):
        with self._free():
            return super().field(samples)

    def rays(self, bundle) -> torch.Tensor:
        with self._free():
            return super().rays(bundle)


def family_configs(family: str, full_size: bool) -> dict[str, object]:
    """``{"eugen", "dense"[, "narrowed_dense"]}`` trainer configs of a method family."""
    if family == "siren":  # no narrowed twin: SIREN's EUGen layers match the dense parameter count
        from eugen_nerf.methods import siren

        configs = {"eugen": siren.eugen_siren.config, "dense": siren.dense_siren.config}
        configs = {name: copy.deepcopy(config) for name, config in configs.items()}
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


def variant_configs(family: str, full_size: bool) -> dict[str, object]:
    """The configuration each measured variant is built from; ``eugen_unfused`` is EUGen's with its layers
    trained apart (``train_merged`` False where the method has the knob) and fused inference off: the layer-by-
    layer form, whose A and G a run trained that way holds and renders with when not fused."""
    configs = family_configs(family, full_size)
    unfused = copy.deepcopy(configs["eugen"])
    spec = layer_spec(unfused)
    if hasattr(spec, "train_merged"):
        spec.train_merged = False
    spec.fused_inference = False
    out = {"dense": configs["dense"], "eugen_fused": configs["eugen"], "eugen_unfused": unfused}
    if "narrowed_dense" in configs:
        out["narrowed_dense"] = configs["narrowed_dense"]
    return out


def extrapolate(seconds: float, rays: int, width: int, height: int) -> dict[str, object]:
    """A whole view's render time from a timed batch of ``rays`` rays: seconds per ray times its pixels."""
    if not (rays > 0 and width > 0 and height > 0 and math.isfinite(seconds) and seconds > 0):
        raise NonFiniteOutput(f"cannot extrapolate from {seconds} s for {rays} rays to {width}x{height}")
    per_ray = seconds / rays
    return {
        "kind": "extrapolated",
        "rays_timed": rays,
        "seconds_per_ray": per_ray,
        "seconds": per_ray * width * height,
        "fps": 1.0 / (per_ray * width * height),
    }


def middle_rows(camera, rows: int):
    """``rows`` rows of rays through the middle of ``camera``'s view, as a ``(rows, width)`` bundle."""
    from eugen_nerf.scenes.quiet import quiet_camera_indexing

    with quiet_camera_indexing():
        bundle = camera.generate_rays(camera_indices=0, keep_shape=True)
    height = bundle.shape[0]
    top = max((height - rows) // 2, 0)
    return bundle[top : top + rows]


class Head:
    """The variants of one head, built once per measurement, each run in its fixed inference mode."""

    def __init__(self, family: str, args: BenchInference, device: str) -> None:
        self.configs = variant_configs(family, args.full_size)
        self.models = {}
        self.runners = {}
        for name, config in self.configs.items():
            if name == "eugen_unfused" and not trains_merged(self.configs["eugen_fused"]):
                # the same weights as the fused variant, run layer by layer
                self.runners[name] = Variant(self.models["eugen_fused"], fused=False)
                continue
            self.models[name], self.cameras = build_untrained(config, args.scene, device)
            self.runners[name] = Variant(self.models[name], fused=name != "eugen_unfused")
        if args.compile:
            self.runners["eugen_fused_compiled"] = Variant(
                copy.deepcopy(self.models["eugen_fused"]), fused=True, compiled=True
            )

    @property
    def layered(self) -> torch.nn.Module:
        """The EUGen model that runs layer by layer or fused (the merged form's source when EUGen trains
        merged): the fused and unfused renders of it must agree."""
        return self.models.get("eugen_unfused", self.models["eugen_fused"])


def timed(
    runners: dict[str, Variant], call, device: str, warmup: int, repeats: int, clock: str = "wall"
) -> dict[str, float]:
    """Median seconds of ``call(runner)`` per variant, side by side, on ``clock`` (the wall clock on CUDA
    whatever it says); every timed output checked finite."""

    def run(name: str, runner: Variant):
        out = call(runner)
        check_finite(out, name)
        return out

    with torch.no_grad():
        timings = benchmark_interleaved(
            {name: (lambda n=name, r=runner: run(n, r)) for name, runner in runners.items()},
            device,
            warmup,
            repeats,
            clock=clock if torch.device(device).type == "cpu" else "wall",
        )
    return {name: timing.median for name, timing in timings.items()}


def measure_speed(family: str, args, device: str) -> dict[str, object]:
    """Field points/s, MACs, parameters and the ray batches' seconds per ray at ``--extrapolate-size``."""
    head = Head(family, args, device)
    runners = head.runners
    paths = eugen_mlp_paths(head.models["eugen_fused"])
    # timed beside the variants: the dense twin with the MLPs EUGen replaces made free
    timed_runners = {**runners, CEILING: WithoutMLPs(head.models["dense"], paths)}
    samples = random_ray_samples(head.models["eugen_fused"].scene_box.aabb, args.points, torch.device(device))
    field_s = timed(timed_runners, lambda r: r.field(samples), device, args.warmup, args.repeats, args.clock)
    camera = view_at_size(head.cameras, 0, args.extrapolate_size)
    width, height = int(camera.width.flatten()[0]), int(camera.height.flatten()[0])
    bundle = middle_rows(camera, args.rows)
    rays_s = timed(timed_runners, lambda r: r.rays(bundle), device, args.warmup, args.repeats, args.clock)
    with torch.no_grad():
        view = view_at_size(head.cameras, 0, 32)  # the same image either way: a small view shows it
        layered = head.layered
        diff = (Variant(layered, fused=True).render(view) - Variant(layered, fused=False).render(view)).abs()
        diff = diff.max().item()
    dense_macs = mlp_macs(head.models["dense"], fused=False)
    rows = {}
    for name, runner in runners.items():
        macs = mlp_macs(runner.model, fused=runner.fused)
        speedup = field_s["dense"] / field_s[name]
        extrapolated = extrapolate(rays_s[name], len(bundle), width, height)
        rows[name] = {
            "field_points_per_second": args.points / field_s[name],
            "field_speedup": speedup,
            "mlp_macs_per_point": macs,
            "mac_ratio": dense_macs / macs,
            "field_speedup_over_mac_ratio": speedup / (dense_macs / macs),
            "parameters": count_parameters(runner.model),
            "render": {
                str(args.extrapolate_size): {
                    **extrapolated,
                    "speedup": rays_s["dense"] / rays_s[name],
                    "resolution": [height, width],
                }
            },
        }
    return {
        "methods": {name: config.method_name for name, config in head.configs.items()},
        "max_abs_rgb_diff_fused": diff,
        "variants": rows,
        "ceiling": {
            "mlps": paths,
            "what": "the dense twin with these MLPs returning zeros at no cost: EUGen's speed-up were they free",
            "field_speedup": field_s["dense"] / field_s[CEILING],
            "render_speedup_extrapolated": rays_s["dense"] / rays_s[CEILING],
            "mlp_share_of_dense_field": 1.0 - field_s[CEILING] / field_s["dense"],
            "mlp_share_of_dense_render": 1.0 - rays_s[CEILING] / rays_s["dense"],
        },
    }


def measure_renders(family: str, size: int, args, device: str) -> dict[str, dict[str, object]]:
    """Whole-view render FPS of ``--views`` test views ``size`` pixels wide, per variant (each variant warmed
    up on an 8-pixel view: a whole view takes seconds, so ``--view-repeats`` is small)."""
    head = Head(family, args, device)
    views = [view_at_size(head.cameras, i, size) for i in range(min(args.views, len(head.cameras)))]
    small = view_at_size(head.cameras, 0, 8)
    if args.warmup:
        timed(head.runners, lambda r: r.render(small), device, 0, args.warmup, args.clock)
    seconds = timed(
        head.runners, lambda r: [r.render(view) for view in views], device, 0, args.view_repeats, args.clock
    )
    height = int(views[0].height.flatten()[0])
    return {
        name: {
            "kind": "measured",
            "views": len(views),
            "resolution": [height, size],
            "seconds": s / len(views),
            "fps": len(views) / s,
            "speedup": seconds["dense"] / s,
        }
        for name, s in seconds.items()
    }


def measure_memory(config, args, size: int, device: str) -> dict[str, object]:
    """Render memory of test view 0, ``size`` pixels wide, of ``config`` built untrained, in a fresh process."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yml"
        path.write_text(yaml.dump(config))
        return render_memory(path, 0, size=size, scene=args.scene, device=device)


def summarise(family: str, entry: dict, args) -> dict[str, object]:
    """The head's goals, read at the largest size measured so far (``None`` while nothing is)."""
    fused, dense = entry["variants"]["eugen_fused"], entry["variants"]["dense"]
    rendered = [s for s in args.sizes if str(s) in fused.get("render", {})]
    remembered = [
        s for s in args.sizes if str(s) in fused.get("memory", {}) and str(s) in dense.get("memory", {})
    ]
    render = fused["render"][str(max(rendered))]["speedup"] if rendered else None
    extrapolated = fused["render"].get(str(args.extrapolate_size), {}).get("speedup")
    memory = fused["memory"][str(max(remembered))]["ratio_to_dense"] if remembered else None

    def goal(value, target, at_least: bool, size=None):
        met = None if value is None else (value >= target if at_least else value <= target)
        return {"goal": target, "measured": value, "met": met, **({"size": size} if size else {})}

    return {
        "render_speedup": goal(render, RENDER_GOALS[family], True, max(rendered) if rendered else None),
        "render_speedup_extrapolated": goal(extrapolated, RENDER_GOALS[family], True, args.extrapolate_size),
        "render_memory_ratio": goal(
            memory, GOALS["render_memory_ratio"], False, max(remembered) if remembered else None
        ),
        "field_speedup": goal(fused.get("field_speedup"), GOALS["field_speedup"], True),
    }


def plot(report: dict, path: Path) -> None:
    """Each variant over the dense twin, per head: render FPS at every size (the extrapolated one hatched),
    render memory at every measured size and field points/s; the goals dotted red; "not measured" where a
    measurement is not in yet."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    setting = report["setting"]
    sizes = [str(s) for s in setting["sizes"]]
    extrapolated = str(setting["extrapolate_size"])
    heads = [(dev, fam, data) for dev, fams in report["devices"].items() for fam, data in fams.items()]
    names = [n for n in ("eugen_fused", "eugen_unfused", "narrowed_dense", "eugen_fused_compiled")]
    names = [n for n in names if any(n in d["variants"] for _, _, d in heads)]
    panels = [("render", s, f"render FPS, {s}×{s} px") for s in sizes]
    panels += [
        (
            "render",
            extrapolated,
            f"render FPS, {extrapolated}×{extrapolated} px, extrapolated from ray batches",
        )
    ]
    panels += [("memory", s, f"render memory, {s}×{s} px (fresh process)") for s in sizes]
    panels += [("field", None, "field points/s")]
    columns = len(sizes) + 1
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 4.2 * rows), squeeze=False)
    width = 0.8 / max(len(names), 1)
    colours = dict(zip(names, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for ax, (kind, size, title) in zip(axes.flat, panels):
        measured = False
        for j, name in enumerate(names):
            for i, (_, _, data) in enumerate(heads):
                row = data["variants"].get(name, {})
                if kind == "field":
                    value = row.get("field_speedup")
                else:
                    cell = row.get(kind, {}).get(size) or {}
                    value = cell.get("speedup" if kind == "render" else "ratio_to_dense")
                if value is None:
                    continue
                measured = True
                x = i + (j - (len(names) - 1) / 2) * width
                hatch = "//" if kind == "render" and size == extrapolated else None
                ax.bar(x, value, width=width, color=colours[name], hatch=hatch)
                ax.text(x, value, f"{value:.2f}", ha="center", va="bottom", fontsize=7)
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1)
        if kind in ("memory", "field"):
            goal = GOALS["render_memory_ratio" if kind == "memory" else "field_speedup"]
            ax.axhline(goal, color="r", linestyle=":", linewidth=1.2)
        elif kind == "render":
            for i, (_, family, _) in enumerate(heads):
                ax.plot(
                    [i - 0.45, i + 0.45], [RENDER_GOALS[family]] * 2, color="r", linestyle=":", linewidth=1.2
                )
        if not measured:
            ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center", va="center", color="0.4")
        ax.set_xticks(
            range(len(heads)),
            [f"{LABELS[fam]}" + (f"\n{dev}" if dev != "cpu" else "") for dev, fam, _ in heads],
        )
        ax.set_xlim(-0.6, len(heads) - 0.4)
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel("variant / dense twin")
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    from matplotlib.patches import Patch

    handles = [Patch(color=colours[name], label=name.replace("_", " ")) for name in names]
    fig.legend(handles=handles, loc="upper right", fontsize=8, ncol=max(len(handles), 1))
    fig.suptitle(
        f"{setting['scene']} test view, initial weights, CPU sizes, {setting['threads']} thread(s), "
        f"{setting.get('clock', 'wall')} clock: "
        "each variant over its dense twin (red dotted: goals; hatched: extrapolated)",
        fontsize=10,
        x=0.02,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass
class BenchInference:
    scene: Path = Path("scenes/shiny128")
    """the scene whose test cameras are rendered (and whose scene box the models are set up on)."""
    families: list[Literal["nerf", "zipnerf", "nerfacto", "siren"]] = field(
        default_factory=lambda: list(FAMILIES)
    )
    """heads to measure."""
    sizes: list[int] = field(default_factory=lambda: [200, 400])
    """widths in pixels at which whole test views are rendered, timed and their memory measured."""
    extrapolate_size: int = 800
    """width whose render FPS is extrapolated from timed ray batches (seconds per ray times its pixels)."""
    rows: int = 8
    """rows of rays through the middle of the extrapolated view timed as one ray batch."""
    points: int = 16384
    """field points per timed field forward."""
    views: int = 1
    """test views per timed render."""
    warmup: int = 1
    """untimed warm-up rounds before the timed repeats."""
    repeats: int = 3
    """timed repeats of the field and ray-batch measurements (the median is reported)."""
    view_repeats: int = 1
    """timed repeats of the whole-view renders (the median is reported)."""
    memory_variants: list[Literal["dense", "eugen_fused", "eugen_unfused", "narrowed_dense"]] = field(
        default_factory=lambda: list(MEMORY_ORDER)
    )
    """variants whose render memory is measured (each in a fresh process, at every size)."""
    compile: bool = False
    """also time the torch.compile'd fused form (its memory is not measured)."""
    full_size: bool = False
    """the methods' default sizes, not the CPU ones."""
    out: Path = Path("benchmarks/inference/inference.json")
    """the JSON written (with its plot beside it as .png); a rerun with the same setting continues it."""
    report_only: bool = False
    """measure nothing: rewrite the report's derived figures and its plot from the measurements in --out."""
    clock: Literal["cpu", "wall"] = "cpu"
    """what the CPU timings count: cpu, this process's CPU seconds (with OMP_NUM_THREADS=1, waiting for the core is
    not counted; other jobs still slow it through shared caches and memory), or wall, elapsed seconds (meaningful only on an idle
    machine). CUDA is always timed by the wall clock. A report timed with the other clock keeps its memory
    figures and has its timings measured again."""
    forget: list[str] = field(default_factory=list)
    """measure nothing: remove these measurements from --out, each HEAD/PART with PART one of speed (field
    points/s and the extrapolated render's ray batches), renders (the whole-view renders) or memory; the same
    command without --forget then measures them again (e.g. a timing taken while the machine was loaded)."""


def tasks(
    args: BenchInference, heads: dict[str, dict] | None = None
) -> list[tuple[str, int, str, str | None]]:
    """``(task, size, head, variant)`` in the order measured, so that an interrupted run has the most to show:
    each size is measured whole before the next, larger one; at each size the render memory of dense and
    EUGen fused (the goal's pair; a fresh process's memory does not depend on the machine's load) of every
    head, then the memory of the other variants, then the timed renders of every head. The field and
    ray-batch timings of every head come before all of them; once they are in (``heads``, a device's
    measurements), each group runs its quickest renders first, as the ray batches predict them."""
    first = [name for name in args.memory_variants if name in ("dense", "eugen_fused")]
    others = [name for name in args.memory_variants if name not in first]

    def per_ray(family: str, names: list[str] | None) -> float:
        rows = ((heads or {}).get(family) or {}).get("variants", {})
        times = [
            row.get("render", {}).get(str(args.extrapolate_size), {}).get("seconds_per_ray")
            for name, row in rows.items()
            if names is None or name in names
        ]
        return sum(t for t in times if t is not None)

    def quickest_first(
        group: list[tuple[str, int, str, str | None]],
    ) -> list[tuple[str, int, str, str | None]]:
        return sorted(group, key=lambda t: per_ray(t[2], None if t[3] is None else [t[3]]))  # stable

    out = []
    for size in args.sizes:
        out += quickest_first([("memory", size, family, name) for family in args.families for name in first])
        out += quickest_first([("memory", size, family, name) for name in others for family in args.families])
        out += quickest_first([("render", size, family, None) for family in args.families])
    return out


PARTS = ("speed", "renders", "memory")
"""What ``--forget`` removes of a head: ``speed`` the field and ray-batch timings (:func:`measure_speed`),
``renders`` the whole-view renders, ``memory`` the render memory."""
SPEED_FIGURES = (
    "field_points_per_second",
    "field_speedup",
    "mlp_macs_per_point",
    "mac_ratio",
    "field_speedup_over_mac_ratio",
    "parameters",
)


def parse_forget(items: list[str], families: tuple[str, ...] = FAMILIES) -> list[tuple[str, str]]:
    """``[(head, part)]`` of ``--forget``'s ``HEAD/PART`` items; a ValueError saying which item is wrong."""
    out = []
    for item in items:
        head, _, part = item.partition("/")
        if head not in families or part not in PARTS:
            raise ValueError(
                f"--forget {item}: give HEAD/PART with HEAD one of {', '.join(families)} "
                f"and PART one of {', '.join(PARTS)}"
            )
        out.append((head, part))
    return out


def forget(heads: dict[str, dict], items: list[tuple[str, str]], extrapolate_size: int) -> list[str]:
    """Remove the ``(head, part)`` measurements from a device's ``heads`` (what :func:`parse_forget` returns);
    the figures derived from them go with them. Returns what was removed, as ``head/part`` lines."""
    removed = []
    for head, part in items:
        entry = heads.get(head)
        if not entry or "variants" not in entry:
            continue
        for row in entry["variants"].values():
            if part == "speed":
                for key in SPEED_FIGURES:
                    row.pop(key, None)
                row["render"].pop(str(extrapolate_size), None)
            elif part == "renders":
                row["render"] = {k: c for k, c in row["render"].items() if c.get("kind") != "measured"}
            else:
                row.pop("memory", None)
        if part == "speed":
            entry.pop("max_abs_rgb_diff_fused", None)
            entry.pop("ceiling", None)
        removed.append(f"{head}/{part}")
    return removed


def has_speed(entry: dict | None) -> bool:
    """Whether a head's field and ray-batch timings are in (every variant's, and the ceiling's)."""
    rows = (entry or {}).get("variants")
    return (
        bool(rows) and all("field_points_per_second" in row for row in rows.values()) and "ceiling" in entry
    )


def with_speed(entry: dict | None, measured: dict, command: str) -> dict:
    """A head's entry with the timings of :func:`measure_speed` (``measured``), keeping the whole-view renders
    and the memory already measured."""
    entry = dict(entry or {})
    for name, row in measured["variants"].items():
        old = entry.get("variants", {}).get(name, {})
        row["render"] = {**old.get("render", {}), **row["render"]}
        if "memory" in old:
            row["memory"] = old["memory"]
    return {**entry, "command": command, **measured}


def setting_of(args: BenchInference) -> dict[str, object]:
    """What the figures depend on; a report made with another setting is measured again, not continued."""
    keys = (
        "sizes",
        "extrapolate_size",
        "rows",
        "points",
        "views",
        "warmup",
        "repeats",
        "view_repeats",
        "compile",
        "full_size",
        "clock",
    )
    setting = {key: value for key, value in asdict(args).items() if key in keys}
    return {"scene": str(args.scene), **setting, "threads": torch.get_num_threads()}


def earlier_heads(path: Path, setting: dict) -> dict[str, dict]:
    """The heads of the report at ``path`` measured with ``setting`` (per device), else nothing."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    old = earlier.get("setting")
    if old is not None and old != setting and {**old, "clock": setting["clock"]} == setting:
        print(
            f"[inference] {path} was timed with the {old.get('clock', 'wall')} clock: timing again",
            flush=True,
        )
        heads = earlier.get("devices", {})
        for device_heads in heads.values():
            forget(
                device_heads,
                [(h, p) for h in device_heads for p in ("speed", "renders")],
                setting["extrapolate_size"],
            )
        return heads
    if old != setting:
        if earlier:
            print(f"[inference] {path} was measured with another setting; measuring again", flush=True)
        return {}
    return earlier.get("devices", {})


def finish_head(family: str, entry: dict, args: BenchInference) -> None:
    """The figures derived from a head's measurements: what the ray batches predict for each measured size,
    memory in MB and as a ratio to the dense twin's, the goals and whether every measurement is in."""
    rows = entry["variants"]
    for row in rows.values():
        per_ray = row["render"].get(str(args.extrapolate_size), {}).get("seconds_per_ray")
        for size, cell in row["render"].items():
            if cell["kind"] == "measured" and per_ray is not None:
                cell["fps_predicted_from_rays"] = 1.0 / (
                    per_ray * cell["resolution"][0] * cell["resolution"][1]
                )
        for size, cell in row.get("memory", {}).items():
            cell["megabytes"] = cell["bytes"] / 1e6
            dense = rows["dense"].get("memory", {}).get(size)
            if dense and dense["bytes"] > 0:
                cell["ratio_to_dense"] = cell["bytes"] / dense["bytes"]
    entry["goals"] = summarise(family, entry, args)
    sizes = [str(s) for s in args.sizes] + [str(args.extrapolate_size)]
    entry["complete"] = all(s in row["render"] for s in sizes for row in rows.values()) and all(
        str(s) in rows[n].get("memory", {}) for s in args.sizes for n in args.memory_variants if n in rows
    )


def main() -> None:
    args = tyro.cli(BenchInference, description=__doc__)
    if not args.families:
        usage_error("eugen-bench inference", "--families needs at least one head")
    if not args.sizes or min(args.sizes) < 1 or args.extrapolate_size < 1 or args.rows < 1:
        usage_error("eugen-bench inference", "--sizes, --extrapolate-size and --rows need positive values")
    if not args.scene.is_dir():
        usage_error(
            "eugen-bench inference", f"the scene {args.scene} does not exist (make it with eugen-scenes)"
        )
    args.sizes = sorted(set(args.sizes))
    try:
        forgotten = parse_forget(args.forget)
    except ValueError as error:
        usage_error("eugen-bench inference", str(error))
    if forgotten and args.report_only:
        usage_error("eugen-bench inference", "--forget and --report-only are two separate runs: give one")

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    command = command_line()
    setting = setting_of(args)
    results = earlier_heads(args.out, setting)
    if (args.report_only or forgotten) and not results:
        option = "--report-only" if args.report_only else "--forget"
        usage_error("eugen-bench inference", f"{option}: {args.out} holds no measurements of this setting")
    report = {
        "suite": "inference",
        "command": command,
        "setting": setting,
        "size": "full" if args.full_size else "small-cpu",
        "goals": GOALS,
        "devices": results,
    }

    if args.report_only or forgotten:  # the figures stay those of the run that measured them
        earlier = json.loads(args.out.read_text())
        report.update(command=earlier.get("command", command), provenance=earlier.get("provenance"))

    def save() -> None:
        if not (args.report_only or forgotten):
            report["provenance"] = provenance(args.scene)
        for heads in results.values():
            for family, entry in heads.items():
                finish_head(family, entry, args)
        wanted = [(d, f) for d in devices for f in args.families]
        report["complete"] = all(results.get(d, {}).get(f, {}).get("complete") for d, f in wanted)
        write_report(args.out, report)  # refuses a non-finite figure
        plot(report, args.out.with_suffix(".png"))

    if args.report_only:
        save()
        print(f"rewrote {args.out} and {args.out.with_suffix('.png')} from its measurements")
        return
    if forgotten:
        removed = [
            line for heads in results.values() for line in forget(heads, forgotten, args.extrapolate_size)
        ]
        save()
        print(
            f"removed {', '.join(removed) or 'nothing'} from {args.out}; the same command without --forget "
            "measures them again"
        )
        return
    for device in devices:
        heads = results.setdefault(device, {})
        for family in args.families:  # the quick figures of every head first
            entry = heads.get(family)
            if not has_speed(entry):
                print(f"[inference/{device}] {family}: field points/s and ray batches", flush=True)
                heads[family] = with_speed(entry, measure_speed(family, args, device), command)
                save()
        for task, size, family, name in tasks(args, heads):
            rows = heads[family]["variants"]
            if task == "render" and any(str(size) not in row["render"] for row in rows.values()):
                print(f"[inference/{device}] {family}: whole views at {size} px", flush=True)
                load_average = round(load(), 2)
                for variant, cell in measure_renders(family, size, args, device).items():
                    rows[variant]["render"][str(size)] = {**cell, "load_average": load_average}
                save()
            elif task == "memory" and name in rows and str(size) not in rows[name].get("memory", {}):
                print(f"[inference/{device}] {family}: render memory of {name} at {size} px", flush=True)
                measured = measure_memory(variant_configs(family, args.full_size)[name], args, size, device)
                rows[name].setdefault("memory", {})[str(size)] = {
                    "bytes": measured["render_memory_bytes"],
                    "kind": measured["render_memory_kind"],
                    "resolution": measured["resolution"],
                }
                save()
    save()
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
