"""Streaming iSDF on an RGB-D scene (``--data``, default ``scenes/bunny_rgbd``), EUGen against the dense field and the
reviewers' baselines, over several seeds.

Every variant consumes the same ordered stream in one process, once per seed (the seed sets the
initialisation, the ray samples and the EUGen projections). Variants:

* the dense iSDF field (256 wide) and EUGen (``--eugen.*``, default: the shipped ``eugen-isdf`` layers);
* the reviewers' baselines on the same layers at EUGen's parameter count: low-rank and SNNK;
* the dense field narrowed to EUGen's parameter count, and narrowed to EUGen's inference speed (the width
  whose untrained field times closest to EUGen's, measured side by side);
* with ``--front``: dense at more widths and EUGen at more ``m``, for the quality/speed front.

Measured: SDF error (mean |error| on measured surface points and observed free space, see
:mod:`eugen_nerf.isdf.evaluate`), Chamfer distance and F-score of the marching-cubes mesh (mean ± std over
seeds); inference time (SDF at 65,536 points, eval mode, EUGen merged) of the first seed's trained fields,
timed side by side (``benchmark_interleaved``, every output checked finite); the median time of one
training step on a fixed window; the whole online run.

Goals (from the paper's iSDF claims): inference >= 1.25x and training >= 1.05x faster than dense at an SDF
error within 5% of dense. Writes ``isdf.json`` and ``isdf.png`` (SDF error against inference throughput,
with std bars) into ``--output``.

    eugen-bench isdf                                                # the protocol's setting
    python -m eugen_nerf.bench.suites.isdf --seeds 0 --steps-per-frame 1 --output /tmp/isdf   # smoke
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import matplotlib
import torch
import tyro

from eugen_nerf.bench.seeds import mean_and_std
from eugen_nerf.bench.suites import command_line
from eugen_nerf.eval.timing import benchmark, benchmark_interleaved, closest_in_time
from eugen_nerf.fields.isdf import ISDFEUGenConfig, ISDFField, ISDFFieldConfig, dense_isdf_config
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.inputs.outputs import file_stem
from eugen_nerf.isdf.evaluate import EvaluationConfig, evaluate_field
from eugen_nerf.isdf.frames import load_stream
from eugen_nerf.isdf.trainer import StreamingConfig, StreamingTrainer

matplotlib.use("Agg")
import matplotlib.pyplot as plt

INFERENCE_POINTS = 65536
QUALITY_KEYS = (
    "sdf_error",
    "sdf_error_surface",
    "sdf_error_free_space",
    "free_space_sign_accuracy",
    "chamfer",
    "f_score@0.02",
    "f_score@0.05",
)
FRONT_WIDTHS = (64, 96, 128, 192)
FRONT_FEATURES = (16, 32, 64, 128)
FRONT_HIGHER_DEGREE = (32, 64)
"""m of the front's EUGen variants one degree above ``--eugen.degree``."""


@dataclass
class BenchISDF:
    data: Path = Path("scenes/bunny_rgbd")
    """The RGB-D scene streamed (ordered frames with depth)."""
    output: Path = Path("benchmarks/isdf")
    """Folder of isdf.json and isdf.png."""
    mesh_dir: Path = Path("outputs/bench/isdf")
    """Where the marching-cubes meshes of the first seed are exported."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    frame_stride: int = 5
    steps_per_frame: int = 8
    eugen: ISDFEUGenConfig = field(default_factory=ISDFEUGenConfig)
    """The EUGen variant measured (its seed is replaced by each run's seed)."""
    front: bool = False
    """Also dense at widths 64-192 and EUGen at m = 16-128 (and one degree higher at m = 32, 64): the
    quality/speed front."""
    front_seeds: list[int] = field(default_factory=lambda: [0])
    """Seeds of the front's extra variants (the first of ``--seeds`` should be among them: it is timed)."""
    baselines: bool = True
    """Also the reviewers' baselines (low-rank, SNNK, dense narrowed to EUGen's parameters and speed); off for a
    longer run of the dense field and EUGen alone."""
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    threads: int = 1
    """torch CPU threads (1 keeps timings comparable on a shared machine)."""
    repeats: int = 7
    """Timed repeats of each speed measurement."""


def parameters(config: ISDFFieldConfig) -> int:
    return sum(p.numel() for p in ISDFField(config).parameters())


def narrowed_to_parameters(target: int) -> ISDFFieldConfig:
    """The dense iSDF MLP narrowed to about ``target`` parameters."""
    width = min(range(8, 257), key=lambda w: abs(parameters(dense_isdf_config(w)) - target))
    return dense_isdf_config(width)


def inference_fn(field_: ISDFField, points: torch.Tensor):
    field_.eval()

    def run():
        with torch.no_grad():
            return field_(points)

    return run


def narrowed_to_speed(eugen: ISDFFieldConfig, repeats: int) -> ISDFFieldConfig:
    """The dense width whose (untrained) field infers closest to EUGen's, timed side by side.

    Untrained weights time like trained ones here: the cost is the matrix shapes, not the values.
    """
    torch.manual_seed(0)
    points = torch.rand(INFERENCE_POINTS, 3) * 2.0 - 1.0
    widths = list(range(16, 257, 16))
    width, _ = closest_in_time(
        inference_fn(ISDFField(eugen), points),
        {str(w): inference_fn(ISDFField(dense_isdf_config(w)), points) for w in widths},
        "cpu",
        warmup=1,
        repeats=repeats,
    )
    return dense_isdf_config(int(width))


def describe(spec: ISDFEUGenConfig) -> str:
    layers = ",".join(str(i) for i in spec.layers)
    if spec.layer_type != "eugen":
        return f"{spec.layer_type} (layers {layers}, EUGen's parameters)"
    extra = "" if not spec.trainable_projections else ", trainable G"
    return f"eugen (layers {layers}, m={spec.num_features}, k={spec.degree}, {spec.feature_map}{extra})"


def variants(config: BenchISDF) -> dict[str, tuple[ISDFFieldConfig, list[int]]]:
    """Name -> (field config, seeds); the first is the dense reference, the second the EUGen variant under
    test; the front's extra variants train at ``--front-seeds``."""
    eugen = ISDFFieldConfig(eugen=config.eugen)
    out = {
        "dense (iSDF, 256 wide)": dense_isdf_config(),
        describe(config.eugen): eugen,
    }
    if config.baselines:
        for kind in ("lowrank", "snnk"):
            spec = replace(config.eugen, layer_type=kind, feature_map="relu")
            out[describe(spec)] = ISDFFieldConfig(eugen=spec)
        by_params = narrowed_to_parameters(parameters(eugen))
        out[f"dense narrowed to EUGen's parameters (width {by_params.width})"] = by_params
        by_speed = narrowed_to_speed(eugen, config.repeats)
        out[f"dense narrowed to EUGen's speed (width {by_speed.width})"] = by_speed
    out = {name: (sdf, list(config.seeds)) for name, sdf in out.items()}
    if config.front:
        for width in FRONT_WIDTHS:
            out.setdefault(f"dense (width {width})", (dense_isdf_config(width), list(config.front_seeds)))
        for m in FRONT_FEATURES:
            spec = replace(config.eugen, num_features=m)
            out.setdefault(describe(spec), (ISDFFieldConfig(eugen=spec), list(config.front_seeds)))
        for m in FRONT_HIGHER_DEGREE:
            spec = replace(config.eugen, num_features=m, degree=config.eugen.degree + 1)
            spec.validate()
            out.setdefault(describe(spec), (ISDFFieldConfig(eugen=spec), list(config.front_seeds)))
    return out


def macs_per_point(field_: ISDFField) -> int:
    """Multiply-accumulates per point of the MLP as it runs at inference (merged form when EUGen)."""
    mlp = field_.mlp
    return mlp.fused().macs_per_point() if mlp.has_eugen else mlp.macs_per_point()


def step_seconds(trainer: StreamingTrainer, repeats: int) -> float:
    """Median seconds of one training step on a fixed window (after warm-up)."""
    window = list(range(0, len(trainer.frames), len(trainer.frames) // trainer.config.keyframes.window_size))
    window = window[: trainer.config.keyframes.window_size]
    state = {k: v.clone() for k, v in trainer.field.state_dict().items()}
    seconds = benchmark(lambda: trainer.step(window), trainer.device, warmup=2, repeats=repeats).median
    trainer.field.load_state_dict(state)  # timing steps must not change the evaluated field
    return seconds


def train(
    name: str, sdf: ISDFFieldConfig, seed: int, config: BenchISDF, stream_data
) -> tuple[StreamingTrainer, dict]:
    """Stream the scene (``load_stream``'s scene and frames) into a fresh field at ``seed``; evaluate it (meshes
    exported for the first seed, named after the variant)."""
    device = torch.device("cpu")
    scene, frames = stream_data
    sdf = replace(sdf, eugen=replace(sdf.eugen, seed=seed))
    stream = StreamingConfig(
        sdf=sdf, frame_stride=config.frame_stride, steps_per_frame=config.steps_per_frame, seed=seed
    )
    trainer = StreamingTrainer(stream, scene, frames, device)
    log = trainer.run(progress=False)
    field_ = trainer.field.eval()
    export = None
    if seed == config.seeds[0]:  # meshes of the first seed (the timed one)
        export = config.mesh_dir / (file_stem(name) + ".ply")
    metrics = evaluate_field(
        lambda points: field_(points),
        scene.mesh_path,
        frames,
        scene.intrinsics,
        scene.height,
        scene.width,
        config.evaluation,
        device,
        export_to=export,
    )
    return trainer, {
        "seed": seed,
        "stream_train_seconds": log.train_seconds,
        "steps": log.steps,
        "keyframes": len(log.keyframes),
        "final_loss": statistics.fmean(log.losses[-8:]),
        **{k: metrics[k] for k in QUALITY_KEYS},
    }


def plot(results: list[dict], path: Path, title: str) -> None:
    fig, (front, bars) = plt.subplots(1, 2, figsize=(14, 6.5))
    for index, r in enumerate(results):
        kind = r["name"].split(" ")[0]
        marker = {"dense": "s", "eugen": "o", "lowrank": "^", "snnk": "v"}.get(kind, "x")
        front.errorbar(
            r["inference_points_per_second"] / 1e6,
            r["mean"]["sdf_error"],
            yerr=r["std"]["sdf_error"],
            marker=marker,
            capsize=3,
            linestyle="none",
            color=plt.cm.tab20(index % 20),
            label=f"{r['name']} [seeds {', '.join(map(str, r['seeds']))}]",
        )
    front.set_xscale("log")
    front.set_xlabel("inference (million points / s, fused, 1 thread; log scale)")
    front.set_ylabel("SDF error (mean |error|, mean ± std over seeds)")
    fig.legend(*front.get_legend_handles_labels(), fontsize=7, loc="lower center", ncol=3, frameon=False)
    front.set_title("quality / speed front (lower right is better)")
    names = [r["name"] for r in results]
    bars.barh(
        range(len(results)),
        [r["mean"]["sdf_error"] for r in results],
        xerr=[r["std"]["sdf_error"] for r in results],
    )
    bars.set_yticks(range(len(results)), names, fontsize=7)
    bars.set_xlabel("SDF error")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.savefig(path, dpi=110)


def main(config: BenchISDF) -> None:
    if not config.seeds or not config.front_seeds:
        usage_error("eugen-bench isdf", "--seeds and --front-seeds need at least one seed")
    if config.frame_stride < 1 or config.steps_per_frame < 1 or config.repeats < 1:
        usage_error("eugen-bench isdf", "--frame-stride, --steps-per-frame and --repeats must be >= 1")
    torch.set_num_threads(config.threads)
    chosen = variants(config)
    stream_data = load_stream(config.data)
    results: list[dict] = []
    first_trainers: dict[str, StreamingTrainer] = {}
    for name, (sdf, seeds) in chosen.items():
        runs = []
        for seed in seeds:
            trainer, run = train(name, sdf, seed, config, stream_data)
            runs.append(run)
            if seed == seeds[0]:
                first_trainers[name] = trainer
            print(
                f"{name:52s} seed {seed}  SDF err {run['sdf_error']:.4f}  Chamfer {run['chamfer']:.4f}  "
                f"F@0.02 {run['f_score@0.02']:.3f}",
                flush=True,
            )
        means, spread = mean_and_std(runs, QUALITY_KEYS + ("final_loss",))
        field_ = first_trainers[name].field
        results.append(
            {
                "name": name,
                "width": sdf.width,
                "eugen_layers": list(sdf.eugen.layers),
                "eugen": asdict(sdf.eugen),
                "parameters": sum(p.numel() for p in field_.parameters()),
                "inference_macs_per_point": macs_per_point(field_),
                "seeds": seeds,
                "runs": runs,
                "mean": means,
                "std": spread,
            }
        )
    print("[isdf] timing inference side by side", flush=True)
    torch.manual_seed(0)
    points = torch.rand(INFERENCE_POINTS, 3) * 2.0 - 1.0
    timings = benchmark_interleaved(
        {n: inference_fn(t.field, points) for n, t in first_trainers.items()},
        "cpu",
        warmup=1,
        repeats=config.repeats,
    )
    for r in results:
        r["inference_seconds_64k"] = timings[r["name"]].median
        r["inference_points_per_second"] = INFERENCE_POINTS / timings[r["name"]].median
        r["train_step_seconds"] = step_seconds(first_trainers[r["name"]], config.repeats)
    dense, eugen = results[0], results[1]
    for r in results:
        r["inference_speedup"] = dense["inference_seconds_64k"] / r["inference_seconds_64k"]
        r["sdf_error_ratio"] = r["mean"]["sdf_error"] / dense["mean"]["sdf_error"]
    goal = {
        "goal": "inference >= 1.25x, training >= 1.05x faster than dense, SDF error within 5% of dense",
        "eugen": eugen["name"],
        "inference_speedup": eugen["inference_speedup"],
        "training_step_speedup": dense["train_step_seconds"] / eugen["train_step_seconds"],
        "sdf_error_ratio": eugen["sdf_error_ratio"],
        "chamfer_ratio": eugen["mean"]["chamfer"] / dense["mean"]["chamfer"],
        "inference_macs_ratio": dense["inference_macs_per_point"] / eugen["inference_macs_per_point"],
    }
    goal["speed_met"] = goal["inference_speedup"] >= 1.25 and goal["training_step_speedup"] >= 1.05
    goal["quality_met"] = goal["sdf_error_ratio"] <= 1.05
    goal["met"] = goal["speed_met"] and goal["quality_met"]
    config.output.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": command_line(),
        "config": json.loads(json.dumps(asdict(config), default=str)),
        "device": "cpu",
        "threads": config.threads,
        "seeds": config.seeds,
        "goal": goal,
        "results": results,
    }
    (config.output / "isdf.json").write_text(json.dumps(payload, indent=2) + "\n")
    plot(
        results,
        config.output / "isdf.png",
        f"streaming iSDF on {config.data.name}, {len(config.seeds)} seeds"
        f"{' (front: seed ' + ', '.join(map(str, config.front_seeds)) + ')' if config.front else ''}, "
        f"{eugen['runs'][0]['steps']} steps (CPU)",
    )
    print(json.dumps(goal, indent=2))


if __name__ == "__main__":
    main(tyro.cli(BenchISDF, description=__doc__))
