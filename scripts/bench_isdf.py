"""Benchmark (not a test): streaming iSDF on ``scenes/bunny_rgbd``, dense vs EUGen vs narrowed dense.

Every variant consumes the same ordered stream with the same seed in one process; then:

* training time: the whole online run (steps + keyframe decisions), and the median time of one training
  step (forward, SDF gradient, double backward, optimiser) on a fixed batch after warm-up;
* inference time: median time to evaluate the SDF at 65,536 points in eval mode (EUGen layers merged);
* SDF error (mean |error| on measured surface points and observed free space, see
  :mod:`eugen_nerf.isdf.evaluate`), Chamfer distance and F-score of the marching-cubes mesh.

Goals reported against (the paper's iSDF claims): inference >= 1.25x and training >= 1.05x faster than
dense at an SDF error within 5% of dense. Writes ``benchmarks/isdf.json`` and ``benchmarks/isdf.png``.

    .venv/bin/python scripts/bench_isdf.py
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import matplotlib
import torch
import tyro

from eugen_nerf.eval.timing import benchmark
from eugen_nerf.fields.isdf import ISDFField, ISDFFieldConfig, dense_isdf_config
from eugen_nerf.isdf.cli import inference_seconds
from eugen_nerf.isdf.evaluate import EvaluationConfig, evaluate_field
from eugen_nerf.isdf.frames import load_stream
from eugen_nerf.isdf.trainer import StreamingConfig, StreamingTrainer
from eugen_nerf.scenes import SHIPPED_SCENES_DIR

matplotlib.use("Agg")
import matplotlib.pyplot as plt


@dataclass
class BenchISDF:
    data: Path = SHIPPED_SCENES_DIR / "bunny_rgbd"
    output: Path = Path("benchmarks")
    mesh_dir: Path = Path("outputs/bench_isdf")
    """Where the marching-cubes meshes of the variants are exported."""
    frame_stride: int = 5
    steps_per_frame: int = 8
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    threads: int = 1
    """torch CPU threads (1 keeps timings comparable on a shared machine)."""


def parameters(config: ISDFFieldConfig) -> int:
    return sum(p.numel() for p in ISDFField(config).parameters())


def narrowed(target: int) -> ISDFFieldConfig:
    """The dense iSDF MLP narrowed to about ``target`` parameters."""
    width = min(range(8, 257), key=lambda w: abs(parameters(dense_isdf_config(w)) - target))
    return dense_isdf_config(width)


def variants() -> dict[str, ISDFFieldConfig]:
    eugen = ISDFFieldConfig()
    return {
        "dense (iSDF, 256 wide)": dense_isdf_config(),
        "eugen (layers 1-3, m=32, k=2, relu)": eugen,
        "narrowed dense (= eugen params)": narrowed(parameters(eugen)),
    }


def macs_per_point(field_: ISDFField) -> int:
    """Multiply-accumulates per point of the MLP as it runs at inference (merged form when EUGen)."""
    mlp = field_.mlp
    return mlp.fused().macs_per_point() if mlp.has_eugen else mlp.macs_per_point()


def step_seconds(trainer: StreamingTrainer) -> float:
    """Median seconds of one training step on a fixed window (after warm-up)."""
    window = list(range(0, len(trainer.frames), len(trainer.frames) // trainer.config.keyframes.window_size))
    window = window[: trainer.config.keyframes.window_size]
    state = {k: v.clone() for k, v in trainer.field.state_dict().items()}
    seconds = benchmark(lambda: trainer.step(window), trainer.device, warmup=2, repeats=7).median
    trainer.field.load_state_dict(state)  # timing steps must not change the evaluated field
    return seconds


def run_variant(name: str, sdf: ISDFFieldConfig, config: BenchISDF) -> dict:
    device = torch.device("cpu")
    scene, frames = load_stream(config.data)
    stream = StreamingConfig(sdf=sdf, frame_stride=config.frame_stride, steps_per_frame=config.steps_per_frame)
    trainer = StreamingTrainer(stream, scene, frames, device)
    log = trainer.run(progress=False)
    field_ = trainer.field.eval()
    metrics = evaluate_field(
        lambda points: field_(points), scene.mesh_path, frames, scene.intrinsics, scene.height, scene.width,
        config.evaluation, device, export_to=config.mesh_dir / f"{name.split()[0]}_{sdf.width}.ply",
    )
    return {
        "name": name,
        "width": sdf.width,
        "eugen_layers": list(sdf.eugen.layers),
        "eugen": asdict(sdf.eugen),
        "parameters": sum(p.numel() for p in field_.parameters()),
        "inference_macs_per_point": macs_per_point(field_),
        "stream_train_seconds": log.train_seconds,
        "steps": log.steps,
        "keyframes": len(log.keyframes),
        "losses": log.losses,
        "train_step_seconds": step_seconds(trainer),
        "inference_seconds_64k": inference_seconds(field_, device),
        **metrics,
    }


def plot(results: list[dict], path: Path) -> None:
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    names = [r["name"] for r in results]
    for ax, key, label in [
        (axes[0], "train_step_seconds", "training step (s, median)"),
        (axes[1], "inference_seconds_64k", "inference, 65k points (s, median)"),
        (axes[2], "sdf_error", "SDF error (mean |error|)"),
        (axes[3], "chamfer", "Chamfer distance"),
    ]:
        ax.barh(range(len(results)), [r[key] for r in results])
        ax.set_yticks(range(len(results)), names if ax is axes[0] else [""] * len(results), fontsize=8)
        ax.set_title(label)
    fig.suptitle("streaming iSDF on bunny_rgbd (CPU, 1 thread)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(config: BenchISDF) -> None:
    torch.set_num_threads(config.threads)
    results = []
    for name, sdf in variants().items():
        results.append(run_variant(name, sdf, config))
        r = results[-1]
        print(f"{name:48s} {r['parameters']:7d} params  step {r['train_step_seconds']:.3f}s  "
              f"infer {r['inference_seconds_64k']:.3f}s  SDF err {r['sdf_error']:.4f}  Chamfer {r['chamfer']:.4f}  "
              f"F@0.02 {r['f_score@0.02']:.3f}", flush=True)
    dense, eugen = results[0], results[1]
    goal = {
        "goal": "inference >= 1.25x, training >= 1.05x faster than dense, SDF error within 5% of dense",
        "inference_speedup": dense["inference_seconds_64k"] / eugen["inference_seconds_64k"],
        "training_step_speedup": dense["train_step_seconds"] / eugen["train_step_seconds"],
        "stream_training_speedup": dense["stream_train_seconds"] / eugen["stream_train_seconds"],
        "sdf_error_ratio": eugen["sdf_error"] / dense["sdf_error"],
        "chamfer_ratio": eugen["chamfer"] / dense["chamfer"],
    }
    goal["met"] = (goal["inference_speedup"] >= 1.25 and goal["training_step_speedup"] >= 1.05
                   and goal["sdf_error_ratio"] <= 1.05)
    config.output.mkdir(parents=True, exist_ok=True)
    payload = {"config": json.loads(json.dumps(asdict(config), default=str)), "device": "cpu", "goal": goal,
               "results": results}
    (config.output / "isdf.json").write_text(json.dumps(payload, indent=2))
    plot(results, config.output / "isdf.png")
    print(json.dumps(goal, indent=2))


if __name__ == "__main__":
    main(tyro.cli(BenchISDF))
