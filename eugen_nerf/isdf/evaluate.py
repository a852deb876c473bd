"""Evaluation of an SDF field against the ground-truth mesh: SDF error, Chamfer distance, F-score.

**SDF error** is measured where the ground truth is exact whatever the mesh's topology: at the measured
surface points of the trajectory (true SDF ≈ 0) and at points in the observed free space within
``free_space_band`` in front of them along the camera rays (true SDF = their distance to the mesh, positive
because the camera saw through them). open3d's *signed* distance is not used: the bunny mesh is open at its
base, so its inside/outside test is unreliable, while the unsigned distance is exact.

**Mesh quality**: the marching-cubes mesh and the ground-truth mesh are both sampled uniformly (area
weighted); Chamfer distance is the symmetric mean nearest-neighbour distance, F-score the harmonic mean of
precision and recall at ``threshold`` (default 0.02, 1% of the unit-sphere object's diameter; 0.05 is
reported too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import open3d as o3d
import torch
from torch import Tensor

from eugen_nerf.eval.evaluate import EvalSettings, stats
from eugen_nerf.eval.metrics import chamfer_and_f_scores, sdf_error
from eugen_nerf.eval.timing import benchmark
from eugen_nerf.isdf.frames import DepthFrame, load_stream
from eugen_nerf.isdf.mesh import SDFFunction, export_mesh, extract_mesh
from eugen_nerf.isdf.sampling import camera_directions, frame_rays
from eugen_nerf.scenes.validate import SceneError


@dataclass
class EvaluationConfig:
    num_rays: int = 4000
    """Evaluation rays, at most: each frame offers 4x its share of random pixels, and up to this many of those
    that measured a depth are kept (fewer where most pixels see nothing, e.g. an object on an empty
    background)."""
    samples_per_ray: int = 4
    """Free-space samples per ray (plus the surface point)."""
    free_space_band: float = 0.3
    """Free-space samples lie up to this far in front of the measured surface."""
    mesh_resolution: int = 64
    """Marching-cubes grid over [-1.1, 1.1]³."""
    num_mesh_points: int = 20000
    """Points sampled on each mesh (reconstructed and true) for Chamfer distance and F-scores."""
    thresholds: Sequence[float] = (0.02, 0.05)
    """Distances (scene units) of the F-scores, ``f_score@t``; the first is also the headline F-score."""
    seed: int = 1234
    """Seed of the mesh-point and SDF-evaluation samples (the same points for every run compared)."""
    crop_margin: float | None = None
    """Score only the reconstructed mesh inside the ground-truth mesh's bounding box grown by this much (None:
    all of the marching-cubes box). In a room no ray reaches behind the walls, so the field there is
    unconstrained and its surfaces would swamp Chamfer and F-score."""


class GroundTruth:
    """Exact distances to a triangle mesh (open3d ray-casting scene)."""

    def __init__(self, mesh_path: Path) -> None:
        self.mesh = o3d.io.read_triangle_mesh(str(mesh_path))
        if len(self.mesh.triangles) == 0:
            raise SceneError(f"{mesh_path}: the ground-truth mesh has no triangles (or no such file)")
        self.scene = o3d.t.geometry.RaycastingScene()
        self.scene.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(self.mesh))

    def distance(self, points: Tensor) -> Tensor:
        query = o3d.core.Tensor(points.detach().cpu().numpy().astype(np.float32))
        return torch.from_numpy(self.scene.compute_distance(query).numpy()).to(points)


def evaluation_points(
    frames: Sequence[DepthFrame], intrinsics: np.ndarray, height: int, width: int, config: EvaluationConfig
) -> tuple[Tensor, Tensor]:
    """Measured surface points ``(N, 3)`` and free-space points in front of them ``(N·S, 3)``."""
    generator = torch.Generator().manual_seed(config.seed)
    directions = camera_directions(torch.from_numpy(intrinsics), height, width)
    rays = frame_rays(frames, directions, max(1, 4 * config.num_rays // len(frames)), generator)
    hit = torch.nonzero(rays.hit).squeeze(1)
    hit = hit[torch.randperm(hit.shape[0], generator=generator)[: config.num_rays]]
    origins, dirs, depth = rays.origins[hit], rays.directions[hit], rays.depth[hit, None]
    surface = origins + depth * dirs
    offsets = torch.rand(hit.shape[0], config.samples_per_ray, generator=generator) * config.free_space_band
    free = (origins[:, None] + (depth - offsets)[..., None] * dirs[:, None]).reshape(-1, 3)
    return surface, free


def sample_surface(mesh: o3d.geometry.TriangleMesh, count: int, seed: int) -> Tensor:
    o3d.utility.random.seed(seed)
    return torch.from_numpy(np.asarray(mesh.sample_points_uniformly(count).points)).float()


@torch.no_grad()
def evaluate_sdf(
    sdf: SDFFunction, ground_truth: GroundTruth, surface: Tensor, free: Tensor, device: torch.device
) -> dict[str, float]:
    """Mean |SDF error| on surface points, on free-space points, and on both together."""
    predicted = {
        name: sdf(points.to(device)).reshape(-1).cpu()
        for name, points in (("surface", surface), ("free", free))
    }
    truth = {"surface": ground_truth.distance(surface), "free": ground_truth.distance(free)}
    both_pred = torch.cat([predicted["surface"], predicted["free"]])
    both_true = torch.cat([truth["surface"], truth["free"]])
    return {
        "sdf_error": float(sdf_error(both_pred, both_true)),
        "sdf_error_surface": float(sdf_error(predicted["surface"], truth["surface"])),
        "sdf_error_free_space": float(sdf_error(predicted["free"], truth["free"])),
        "free_space_sign_accuracy": float((predicted["free"] > 0).float().mean()),
    }


def evaluate_mesh(
    mesh: o3d.geometry.TriangleMesh, ground_truth: GroundTruth, config: EvaluationConfig
) -> dict[str, float]:
    """Chamfer distance and F-scores of a reconstructed mesh against the ground-truth mesh (the reconstruction
    cropped to the ground truth's box with ``crop_margin`` when set)."""
    if config.crop_margin is not None:
        box = ground_truth.mesh.get_axis_aligned_bounding_box()
        margin = np.full(3, config.crop_margin)
        mesh = mesh.crop(o3d.geometry.AxisAlignedBoundingBox(box.min_bound - margin, box.max_bound + margin))
        if len(mesh.triangles) == 0:
            raise ValueError("the reconstructed mesh has no triangle inside the ground truth's box")
    predicted = sample_surface(mesh, config.num_mesh_points, config.seed)
    truth = sample_surface(ground_truth.mesh, config.num_mesh_points, config.seed + 1)
    chamfer, f_scores = chamfer_and_f_scores(predicted, truth, config.thresholds)
    metrics = {"chamfer": float(chamfer)}
    for threshold, value in zip(config.thresholds, f_scores):
        metrics[f"f_score@{threshold:g}"] = float(value)
    return metrics


def evaluate_field(
    sdf: SDFFunction,
    mesh_path: Path,
    frames: Sequence[DepthFrame],
    intrinsics: np.ndarray,
    height: int,
    width: int,
    config: EvaluationConfig,
    device: torch.device,
    export_to: Path | None = None,
    mesh_optional: bool = False,
) -> dict[str, float | str | None]:
    """SDF error and mesh metrics of ``sdf`` against the mesh at ``mesh_path``; exports the mesh if asked.

    With ``mesh_optional``, a field with no surface yet (no zero crossing) gives the SDF metrics and a
    ``mesh_reason`` instead of raising.
    """
    ground_truth = GroundTruth(mesh_path)
    surface, free = evaluation_points(frames, intrinsics, height, width, config)
    metrics = evaluate_sdf(sdf, ground_truth, surface, free, device)
    try:
        mesh = extract_mesh(sdf, resolution=config.mesh_resolution, device=device)
        metrics.update(evaluate_mesh(mesh, ground_truth, config))
    except ValueError as error:  # no zero crossing, or nothing of it inside the cropped box
        if not mesh_optional:
            raise
        return {**metrics, "mesh_reason": str(error)}
    if export_to is not None:
        export_mesh(mesh, export_to)
    return {**metrics, "mesh_reason": None} if mesh_optional else metrics


def evaluate_geometry_run(model, scene_dir: Path, cameras, settings: EvalSettings) -> dict[str, object]:
    """SDF error, Chamfer and F-score of an iSDF run against its scene's ground-truth mesh (``eugen-eval``).

    The same evaluation as ``eugen-isdf`` (:func:`evaluate_field`): one value per run, reported in
    the ``{mean, std, per_view}`` form of the other metrics with a single entry; Chamfer and F-score are
    null, with ``mesh_reason``, when the field has no surface to mesh yet. Speed: SDF queries per second
    and depth-render FPS on the test cameras.
    """
    device = model.device
    scene, frames = load_stream(scene_dir)
    config = EvaluationConfig()
    field = model.field.eval()
    with torch.no_grad():
        values = evaluate_field(
            field,
            scene.mesh_path,
            frames,
            scene.intrinsics,
            scene.height,
            scene.width,
            config,
            torch.device(device),
            mesh_optional=True,
        )
    mesh_reason = values["mesh_reason"]
    threshold = config.thresholds[0]
    points = torch.rand(settings.field_points, 3, device=device) * 2 - 1
    with torch.no_grad():
        field_time = benchmark(lambda: field(points), device, settings.warmup, settings.repeats)
    cameras = cameras.to(device)
    views = list(range(len(cameras)))[: settings.max_views]
    render_time = benchmark(
        lambda: [model.get_outputs_for_camera(cameras[i : i + 1]) for i in views],
        device,
        settings.warmup,
        settings.repeats,
    )
    return {
        "metrics": {
            "sdf_error": stats([values["sdf_error"]]),
            "chamfer": stats([values["chamfer"]]) if mesh_reason is None else None,
            "f_score": stats([values[f"f_score@{threshold:g}"]]) if mesh_reason is None else None,
            "f_score_threshold": threshold,
            "mesh_reason": mesh_reason,
        },
        "speed": {
            "render_fps": len(views) / render_time.median,
            "field_points_per_second": settings.field_points / field_time.median,
            "field_module": "field",
            "resolution": [int(cameras[0].width), int(cameras[0].height)],
        },
    }
