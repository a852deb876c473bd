"""EUGen Zip-NeRF against its dense twin: quality at three test resolutions, render and field speed.

Trains ``dense-zipnerf`` and ``eugen-zipnerf`` at the same steps, rays per step and seeds (CPU-sized grids,
below), then:

- multiscale quality: every test view rendered at full resolution and with the camera downscaled by 2 and
  4 (``Cameras.rescale_output_resolution``, which is what nerfstudio's ``downscale_factor`` does to the
  intrinsics), against the full-resolution ground truth area-averaged to that size (how multiscale Blender
  is made): anti-aliasing shows at the coarse scales;
- speed, timed side by side in one process (``benchmark_interleaved``; every output checked finite): render
  time of all test views at full resolution, and field throughput (the NeRF field's forward on the NeRF
  samples of one test view), dense twin against EUGen fused; the MLP-only share is reported too, because
  on a CPU the torch hash grid, read six times per frustum, costs more than the MLPs.

Writes the JSON report given by ``--output`` and its plot beside it (``.png``).

    eugen-bench zipnerf                                             # the protocol's setting
    python -m eugen_nerf.bench.suites.zipnerf --steps 2 --scene scenes/bunny32 --output /tmp/zip.json  # smoke

A run already trained for ``--steps`` in ``--work-dir`` is reused (its training time is read from the
``bench_train.json`` written beside its ``config.yml``), so seeds can be added, or an interrupted benchmark
resumed, without training again; ``--retrain`` trains everything afresh. ``--methods`` trains one twin alone:
runs of one method can train in separate processes on the same ``--work-dir``, and a last run with both
twins reuses them and times the speed.
"""

from __future__ import annotations

import copy
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import tyro
from nerfstudio.engine.trainer import TrainerConfig

from eugen_nerf.bench.merge import publish_json
from eugen_nerf.bench.provenance import provenance
from eugen_nerf.bench.seeds import mean_and_std, paired_gap
from eugen_nerf.bench.suites import command_line
from eugen_nerf.bench.suites.methods import small_zipnerf  # the CPU preset
from eugen_nerf.bench.training import cached_for_checkpoint, train_in_process
from eugen_nerf.eval.evaluate import score_test_views
from eugen_nerf.eval.runs import final_rgb, load_run
from eugen_nerf.eval.timing import benchmark_interleaved
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.layers import EUGenMLP
from eugen_nerf.layers.eugen import FeatureMap
from eugen_nerf.methods import zipnerf as zipnerf_methods

SCALES = (1, 2, 4)
GOAL_SPEEDUP = 1.25
GOAL_PSNR_DB = 0.1
METHODS = ("dense-zipnerf", "eugen-zipnerf")


def configs(rays: int, seed: int, feature_map: FeatureMap | None = None) -> dict[str, TrainerConfig]:
    """The twins at the same rays per step, samples per ray and seed; ``feature_map`` replaces
    ``eugen-zipnerf``'s own."""
    out = {
        "dense-zipnerf": copy.deepcopy(zipnerf_methods.dense_zipnerf.config),
        "eugen-zipnerf": copy.deepcopy(zipnerf_methods.eugen_zipnerf.config),
    }
    if feature_map is not None:
        out["eugen-zipnerf"].pipeline.model.eugen.feature_map = feature_map
    small_zipnerf(out["dense-zipnerf"])
    small_zipnerf(out["eugen-zipnerf"])
    for config in out.values():
        config.pipeline.datamanager.train_num_rays_per_batch = rays
        config.pipeline.model.num_proposal_samples_per_ray = (64, 32)
        config.pipeline.model.num_nerf_samples_per_ray = 32
        config.machine.seed = seed
    return out


def multiscale_quality(config_path: Path) -> dict[str, dict[str, float]]:
    """Mean test metrics per downscale factor (kept beside the run's checkpoint, read back on a rerun)."""
    return cached_for_checkpoint(
        config_path, "bench_multiscale.json", lambda: render_multiscale(config_path), scales=list(SCALES)
    )


def render_multiscale(config_path: Path) -> dict[str, dict[str, float]]:
    run = load_run(config_path)
    result = {}
    for scale in SCALES:
        scored = score_test_views(run.pipeline, warmup=0, downscale=scale, label=f"{run.name} 1/{scale}")
        result[f"1/{scale}"] = scored.means()
    return result


def speed(dense_path: Path, eugen_path: Path, repeats: int, views: int = 0) -> dict[str, object]:
    """Render and field throughput of the two Zip-NeRF runs, timed in turn in one process (render: the first
    ``views`` test views, all when 0)."""
    runs = {"dense": load_run(dense_path), "eugen": load_run(eugen_path)}
    for run in runs.values():
        run.pipeline.model.eval()
    cameras = runs["dense"].pipeline.datamanager.eval_dataset.cameras.to(runs["dense"].pipeline.device)
    if views:
        cameras = cameras[:views]
    pixels = sum(int(cameras[i].width) * int(cameras[i].height) for i in range(len(cameras)))

    def render_all(model):
        return [final_rgb(model.get_outputs_for_camera(cameras[i : i + 1])) for i in range(len(cameras))]

    bundle = cameras[0:1].generate_rays(camera_indices=0).flatten()
    with torch.no_grad():
        model = runs["dense"].pipeline.model
        samples, _, _ = model.proposal_sampler(model.collider(bundle), density_fns=model.density_fns)
        features = model.field.grid(*model.field.unit_gaussians(samples)[:2]).reshape(
            -1, model.field.grid.get_out_dim()
        )
        directions = torch.randn(features.shape[0], 27)
    num_samples = features.shape[0]

    def mlps(field):
        h = field.density_mlp(features)
        return field.view_mlp(torch.cat([h, directions], dim=-1))

    with torch.no_grad():
        timings = benchmark_interleaved(
            {
                **{f"render_{k}": (lambda m=r.pipeline.model: render_all(m)) for k, r in runs.items()},
                **{f"field_{k}": (lambda f=r.pipeline.model.field: f(samples)) for k, r in runs.items()},
                **{f"mlp_{k}": (lambda f=r.pipeline.model.field: mlps(f)) for k, r in runs.items()},
            },
            runs["dense"].pipeline.device,
            warmup=1,
            repeats=repeats,
        )
    out: dict[str, object] = {
        "test_pixels": pixels,
        "field_samples": num_samples,
        "repeats": repeats,
        "render_views": len(cameras),
        "fused": all(
            m.fuse_in_eval for m in runs["eugen"].pipeline.model.modules() if isinstance(m, EUGenMLP)
        ),
    }
    for kind, count in (("render", pixels), ("field", num_samples), ("mlp", num_samples)):
        dense, eugen = timings[f"{kind}_dense"].median, timings[f"{kind}_eugen"].median
        out[kind] = {"dense_per_sec": count / dense, "eugen_per_sec": count / eugen, "speedup": dense / eugen}
    return out


def plot(report: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    means = report["mean_over_seeds"]
    width = 0.8 / len(means)
    for offset, method in enumerate(means):
        values = [means[method][f"1/{s}"]["psnr"] for s in SCALES]
        spread = [
            report.get("std_over_seeds", {}).get(method, {}).get(f"1/{s}", {}).get("psnr", 0.0)
            for s in SCALES
        ]
        left.bar(
            [i + width * (offset - (len(means) - 1) / 2) for i in range(len(SCALES))],
            values,
            width=width,
            label=method,
            yerr=spread,
            capsize=3,
        )
    left.set_xticks(range(len(SCALES)), [f"1/{s}" for s in SCALES])
    left.set_ylabel("test PSNR (dB)")
    left.set_xlabel("test resolution (Zip-NeRF: trained on 1/1, 1/2, 1/4 rays from the images)", fontsize=8)
    psnrs = [v[f"1/{s}"]["psnr"] for v in means.values() for s in SCALES]
    left.set_ylim(min(psnrs) - 2, max(psnrs) + 7)  # room for the legend above the bars
    left.legend(fontsize=7, loc="upper left", ncol=2)
    speeds = report["speed"]
    if speeds:
        kinds = ["render", "field", "mlp"]
        right.bar(kinds, [speeds[k]["speedup"] for k in kinds], color="tab:green")
        right.axhline(1.0, color="k", lw=0.8)
        right.axhline(GOAL_SPEEDUP, color="tab:red", ls="--", lw=0.8, label=f"goal {GOAL_SPEEDUP}x")
        right.set_ylabel("eugen-zipnerf / dense-zipnerf throughput")
        right.legend(fontsize=8)
    else:
        right.set_axis_off()
        right.text(0.5, 0.5, "speed not timed (one Zip-NeRF twin only)", ha="center", va="center")
    seeds = len(report["seeds"])
    fig.suptitle(
        f"Zip-NeRF on {Path(report['scene']).name}, {report['steps']} steps, "
        f"{seeds} seed{'s' if seeds > 1 else ''} (mean ± std), EUGen {report.get('eugen_feature_map', 'relu')} map, "
        f"{report['device']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@dataclass
class BenchZipNeRF:
    scene: Path = Path("scenes/bunny128")
    """the scene every run trains on and is evaluated on."""
    steps: int = 400
    """training steps of every run."""
    rays: int = 256
    """rays per training step, every method"""
    seeds: list[int] = field(default_factory=lambda: [0])
    """training seeds (each trains both twins; speed is timed on the first)."""
    repeats: int = 3
    """timed repeats of each speed measurement"""
    speed_views: int = 0
    """test views rendered for the render timing (0: all; on a CPU a 128x128 view takes about 30 s)"""
    work_dir: Path = Path("outputs/bench/zipnerf")
    """where the training runs go (seed<N>/<method>); finished ones are reused."""
    output: Path = Path("benchmarks/zipnerf/zipnerf.json")
    """the JSON written (the plot goes beside it as .png)."""
    retrain: bool = False
    """train every run afresh (otherwise finished ones are reused)"""
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    """the methods trained (default: both twins; speed and the gaps need both)."""
    feature_map: FeatureMap | None = None
    """EUGen's feature map for eugen-zipnerf (default: the method's own). A map given trains into its own run
    folder, seed<N>/eugen-zipnerf_feature-map<map>, so the default's runs in the same --work-dir are kept."""


def twin_goals(gaps: dict[str, dict[str, object]], speeds: dict[str, dict[str, float]]) -> dict[str, bool]:
    """The goals for the twins: EUGen loses at most 0.1 dB against its dense twin at full resolution
    (the mean of the per-seed gaps; EUGen ahead loses nothing) and renders and evaluates its field >= 1.25x."""
    return {
        "eugen_within_0.1_db_of_dense": -gaps["1/1"]["mean_db"] <= GOAL_PSNR_DB,
        "eugen_render_speedup_ge_1.25": speeds["render"]["speedup"] >= GOAL_SPEEDUP,
        "eugen_field_speedup_ge_1.25": speeds["field"]["speedup"] >= GOAL_SPEEDUP,
    }


def main() -> None:
    args = tyro.cli(BenchZipNeRF, description=__doc__)
    if args.steps < 1 or args.rays < 1 or args.repeats < 1 or args.speed_views < 0:
        usage_error("eugen-bench zipnerf", "--steps, --rays and --repeats must be >= 1, --speed-views >= 0")
    if not args.seeds:
        usage_error("eugen-bench zipnerf", "--seeds needs at least one seed")
    if not (args.scene / "transforms.json").is_file():
        usage_error("eugen-bench zipnerf", f"--scene {args.scene}: not a scene folder (no transforms.json)")
    unknown = sorted(set(args.methods) - set(METHODS))
    if unknown or not args.methods:
        usage_error("eugen-bench zipnerf", f"--methods {unknown or '(none)'}: choose among {list(METHODS)}")

    runs: dict[str, dict[str, object]] = {}
    paths: dict[int, dict[str, Path]] = {}
    for seed in args.seeds:
        paths[seed] = {}
        for name, config in configs(args.rays, seed, args.feature_map).items():
            if name not in args.methods:
                continue
            folder = (
                name
                if args.feature_map is None or name != "eugen-zipnerf"
                else f"{name}_feature-map{args.feature_map}"
            )
            print(f"[zipnerf] seed {seed}: {folder}, {args.steps} steps", flush=True)
            path, seconds_per_step = train_in_process(
                config, args.scene, args.steps, args.work_dir / f"seed{seed}" / folder, reuse=not args.retrain
            )
            paths[seed][name] = path
            runs.setdefault(name, {})[str(seed)] = {
                "seconds_per_step": seconds_per_step,
                "multiscale": multiscale_quality(path),
            }
    means: dict[str, dict[str, dict[str, float]]] = {}
    spread: dict[str, dict[str, dict[str, float]]] = {}  # population std over seeds (0 for one seed)
    for name, seeds in runs.items():
        for scale in SCALES:
            key = f"1/{scale}"
            mean, std = mean_and_std([s["multiscale"][key] for s in seeds.values()])
            means.setdefault(name, {})[key], spread.setdefault(name, {})[key] = mean, std
    goals: dict[str, bool] = {}
    speeds = None
    gaps: dict[str, dict[str, object]] = {}  # EUGen minus dense: mean and std of the per-seed gaps, per scale
    if {"dense-zipnerf", "eugen-zipnerf"} <= set(args.methods):
        first = args.seeds[0]
        print("[zipnerf] timing dense-zipnerf and eugen-zipnerf side by side", flush=True)
        speeds = speed(
            paths[first]["dense-zipnerf"], paths[first]["eugen-zipnerf"], args.repeats, args.speed_views
        )
        for key in (f"1/{scale}" for scale in SCALES):
            psnr = {
                name: {seed: run["multiscale"][key]["psnr"] for seed, run in runs[name].items()}
                for name in ("eugen-zipnerf", "dense-zipnerf")
            }
            gap = paired_gap(psnr["eugen-zipnerf"], psnr["dense-zipnerf"])
            gaps[key] = {"mean_db": gap["mean"], "std_db": gap["std"], "per_seed_db": gap["per_seed"]}
        goals.update(twin_goals(gaps, speeds))
    report = {
        "scene": str(args.scene),
        "steps": args.steps,
        "rays_per_step": args.rays,
        "seeds": args.seeds,
        "eugen_feature_map": args.feature_map
        or zipnerf_methods.eugen_zipnerf.config.pipeline.model.eugen.feature_map,
        "device": "cuda"
        if torch.cuda.is_available()
        else f"cpu ({platform.processor() or platform.machine()})",
        "torch_threads": torch.get_num_threads(),
        "command": command_line(),
        "provenance": provenance(args.scene),
        "runs": runs,
        "mean_over_seeds": means,
        "std_over_seeds": spread,
        "speed": speeds,
        "eugen_minus_dense": gaps,
        "goals": goals,
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    publish_json(args.output, report)
    plot(report, args.output.with_suffix(".png"))
    print(json.dumps({"mean_over_seeds": means, "speed": speeds, "goals": report["goals"]}, indent=2))


if __name__ == "__main__":
    main()
