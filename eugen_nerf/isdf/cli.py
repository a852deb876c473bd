"""``eugen-isdf``: train an iSDF map (dense or EUGen) from an RGB-D scene's ordered stream and evaluate it.

Writes ``<output>/field.pt`` (field weights and config), ``mesh.ply`` (marching cubes) and ``metrics.json``
(training time, inference time, SDF error, Chamfer distance, F-scores).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

import torch
import tyro
from rich.console import Console

from eugen_nerf.eval.timing import benchmark
from eugen_nerf.fields.isdf import ISDFField
from eugen_nerf.inputs.errors import InputError, NumericalError, one_line_errors
from eugen_nerf.inputs.options import (
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    check_options,
    fraction,
    integer_at_least,
    non_negative,
    parse_command_line,
    positive,
    resolve_device,
)
from eugen_nerf.inputs.outputs import refuse_existing, staged_directory
from eugen_nerf.isdf.evaluate import EvaluationConfig, evaluate_field
from eugen_nerf.isdf.frames import load_stream
from eugen_nerf.isdf.trainer import StreamingConfig, StreamingTrainer, TrainingLog
from eugen_nerf.scenes import SHIPPED_SCENES_DIR, SceneError

CONSOLE = Console()


@dataclass
class ISDFCommand:
    """Train iSDF online from the ordered depth frames of --data, then evaluate against its mesh.ply.
    (ns-train eugen-isdf trains the same field as a nerfstudio method, from random batches of depth rays.)"""

    data: Annotated[Path, tyro.conf.arg(help_behavior_hint="(default: the shipped scenes/bunny_rgbd)")] = (
        SHIPPED_SCENES_DIR / "bunny_rgbd"
    )
    """RGB-D scene folder (transforms.json with depth_file_path per frame, and a ground-truth mesh)."""
    output: Path = Path("outputs/isdf")
    """Folder for field.pt, mesh.ply and metrics.json (written in a staging folder, swapped in when complete)."""
    overwrite: bool = False
    """Replace a run already in --output (it stays untouched until the new one is complete)."""
    layers: Literal["dense", "eugen"] = "eugen"
    """dense: iSDF's MLP; eugen: its hidden layers (--train.sdf.eugen.layers) are EUGen."""
    train: StreamingConfig = field(default_factory=StreamingConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, otherwise CPU."""


def with_layers(config: StreamingConfig, layers: str) -> StreamingConfig:
    """``config`` with its field made dense (no EUGen layer) when ``layers == "dense"``."""
    if layers == "eugen":
        return config
    return replace(config, sdf=replace(config.sdf, eugen=replace(config.sdf.eugen, layers=())))


def inference_seconds(field: ISDFField, device: torch.device, num_points: int = 65536) -> float:
    """Median seconds to evaluate the SDF (eval mode: EUGen layers run fused) at ``num_points`` points."""
    field.eval()
    points = torch.rand(num_points, 3, device=device) * 2.0 - 1.0
    with torch.no_grad():
        return benchmark(lambda: field(points), device, warmup=2, repeats=5).median


OPTION_RULES = {
    "train.frame_stride": POSITIVE_INT,
    "train.steps_per_frame": POSITIVE_INT,
    "train.rays_per_frame": POSITIVE_INT,
    "train.lr": positive,
    "train.weight_decay": non_negative,
    "train.sampling.num_stratified": POSITIVE_INT,
    "train.sampling.num_surface": NON_NEGATIVE_INT,
    "train.sampling.surface_std": non_negative,
    "train.sampling.near": lambda name, value: value is None or non_negative(name, value),
    "train.sampling.far": lambda name, value: value is None or positive(name, value),
    "train.keyframes.window_size": POSITIVE_INT,
    "train.keyframes.pixel_ratio": fraction,
    "train.keyframes.depth_threshold": positive,
    "train.keyframes.rays": POSITIVE_INT,
    "train.loss.trunc_distance": positive,
    "evaluation.num_rays": POSITIVE_INT,
    "evaluation.samples_per_ray": POSITIVE_INT,
    "evaluation.mesh_resolution": integer_at_least(8),
    "evaluation.num_mesh_points": POSITIVE_INT,
    "evaluation.thresholds": lambda name, value: all(positive(name, item) is None for item in value),
    "evaluation.free_space_band": positive,
    "evaluation.crop_margin": lambda name, value: value is None or non_negative(name, value),
}
"""Option values checked before anything is loaded (flags as typed: ``--train.frame-stride``)."""


def check_command(command: ISDFCommand) -> None:
    """Every option value, the output folder and the scene, before any training (nothing is written)."""
    check_options(command, OPTION_RULES)
    near, far = command.train.sampling.near, command.train.sampling.far
    if near is not None and far is not None and far <= near:
        raise InputError(
            f"--train.sampling.far ({command.train.sampling.far}) must exceed "
            f"--train.sampling.near ({command.train.sampling.near})"
        )
    refuse_existing(command.output, command.overwrite, "--output", "an eugen-isdf run", marker="metrics.json")


def run(command: ISDFCommand, progress: bool = True) -> dict[str, float]:
    check_command(command)
    device = resolve_device(command.device)
    scene, frames = load_stream(command.data)
    if scene.mesh_path is None:
        raise SceneError(
            f"{command.data}: the scene has no ground-truth mesh (scene.json 'ground_truth_mesh')"
        )
    if not scene.mesh_path.is_file():  # before training: the evaluation after it needs the mesh
        raise SceneError(f"{command.data}: its ground-truth mesh {scene.mesh_path} does not exist")
    config = with_layers(command.train, command.layers)
    trainer = StreamingTrainer(config, scene, frames, device)
    log: TrainingLog = trainer.run(progress=progress)
    field = trainer.field.eval()
    with staged_directory(command.output) as staging:
        metrics = write_results(command, config, scene, frames, field, log, device, staging)
    return metrics


def write_results(command, config, scene, frames, field, log, device, staging: Path) -> dict[str, float]:
    """Evaluate the trained field and write its files into ``staging`` (swapped in by the caller)."""
    metrics = evaluate_field(
        lambda points: field(points),
        scene.mesh_path,
        frames,
        scene.intrinsics,
        scene.height,
        scene.width,
        command.evaluation,
        device,
        export_to=staging / "mesh.ply",
        mesh_optional=True,  # a field without a surface (yet) keeps its SDF metrics and says why there is no mesh
    )
    metrics.update(
        train_seconds=log.train_seconds,
        steps=log.steps,
        num_keyframes=len(log.keyframes),
        first_loss=log.losses[0],
        final_loss=sum(log.losses[-10:]) / len(log.losses[-10:]),
        inference_seconds_64k_points=inference_seconds(field, device),
        num_parameters=sum(p.numel() for p in field.parameters()),
    )
    for name in ("sdf_error", "chamfer"):
        if isinstance(metrics.get(name), float) and not math.isfinite(metrics[name]):
            raise NumericalError(
                f"evaluation: metric '{name}' is {metrics[name]} (the field gives non-finite SDF)"
            )
    torch.save({"field": field.state_dict(), "field_config": asdict(config.sdf)}, staging / "field.pt")
    (staging / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def entrypoint() -> None:
    command = parse_command_line(ISDFCommand, "eugen-isdf")
    with one_line_errors("eugen-isdf"):
        metrics = run(command)
    for name, value in metrics.items():
        CONSOLE.print(f"{name:32s} {value:.5g}" if isinstance(value, float) else f"{name:32s} {value}")
    mesh = "" if metrics.get("mesh_reason") else "mesh.ply, "
    CONSOLE.print(f"wrote {command.output}/{mesh}metrics.json, field.pt")
