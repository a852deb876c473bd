"""Rays from depth frames, iSDF's samples along them, and the SDF bounds the depth gives those samples.

Along a ray whose depth measures a surface at distance ``D``, iSDF draws the surface point itself,
Gaussian samples around it, and stratified samples from the near plane to a little behind it. Every
sample gets a *bound* on its signed distance from the batch's measured surface points (iSDF's "pc"
bound, its default): the distance to the nearest measured surface point is an upper bound of ``|sdf|``,
negative for samples behind their ray's surface. Rays that measured nothing (depth 0, background) see
free space up to the far plane; iSDF drops them, here they add stratified free-space samples (their bound
is the same distance), which keeps empty space empty around an object.

Distances are metres along normalised ray directions throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.isdf.frames import DepthFrame

NO_SURFACE_BOUND = 1e3
"""Bound of every sample when the batch has no measured surface point (pure free space)."""


@dataclass
class SamplingConfig:
    """Samples per ray (iSDF: 19 stratified + 8 around the surface + the surface point)."""

    num_stratified: int = 19
    """Samples spread evenly (jittered) from the near plane to just behind the measured surface."""
    num_surface: int = 8
    """Samples drawn around the measured surface (normal, std ``surface-std``)."""
    surface_std: float = 0.05
    """Std of the samples around the measured surface (iSDF 0.1 m in rooms; the object spans 2 units)."""
    behind_surface: float = 0.05
    """Stratified samples reach this far behind the surface (iSDF ``dist_behind_surf``)."""
    near: float | None = None
    """Where stratified samples start (metres); None: the scene's ``near`` in its scene.json, else 2.0."""
    far: float | None = None
    """Where free-space samples end on rays that measured nothing; None: the scene's ``far``, else 6.0."""

    def for_scene(self, metadata: dict) -> SamplingConfig:
        """This config with ``near``/``far`` left unset taken from the scene (``scene.json``'s ``near`` and
        ``far``: a room is sampled from 5 cm, an object seen from 4 m away from 2 m)."""
        near = self.near if self.near is not None else float(metadata.get("near", 2.0))
        far = self.far if self.far is not None else float(metadata.get("far", 6.0))
        if far <= near:
            raise InputError(
                f"the sampling range is empty: near {near} and far {far} (--train.sampling.near, --train.sampling.far)"
            )
        return replace(self, near=near, far=far)

    @property
    def samples_per_ray(self) -> int:
        return 1 + self.num_surface + self.num_stratified


@dataclass
class RayBatch:
    """Rays ``o + t d`` with unit ``d``; ``depth`` is the measured surface distance ``t`` (0: none)."""

    origins: Tensor
    directions: Tensor
    depth: Tensor

    @property
    def hit(self) -> Tensor:
        return self.depth > 0


def camera_directions(intrinsics: Tensor, height: int, width: int) -> Tensor:
    """``(H, W, 3)`` camera-frame ray directions with z = -1 (OpenGL), pixel centres at ``+0.5``."""
    v, u = torch.meshgrid(torch.arange(height) + 0.5, torch.arange(width) + 0.5, indexing="ij")
    fx, fy, cx, cy = intrinsics[0, 0], intrinsics[1, 1], intrinsics[0, 2], intrinsics[1, 2]
    return torch.stack([(u - cx) / fx, -(v - cy) / fy, -torch.ones_like(u)], dim=-1).float()


def frame_rays(
    frames: Sequence[DepthFrame], directions: Tensor, rays_per_frame: int, generator: torch.Generator
) -> RayBatch:
    """``rays_per_frame`` uniformly drawn pixels of each frame, as world rays with their measured depth."""
    height, width = directions.shape[:2]
    poses = torch.stack([frame.camera_to_world for frame in frames])  # (F, 4, 4)
    pixels = torch.randint(0, height * width, (len(frames), rays_per_frame), generator=generator)
    camera = directions.reshape(-1, 3)[pixels]  # (F, R, 3)
    z = torch.stack([frame.depth.reshape(-1)[p] for frame, p in zip(frames, pixels)])  # (F, R) z-depth
    world = torch.einsum("fij,frj->fri", poses[:, :3, :3], camera)
    norm = world.norm(dim=-1)
    return RayBatch(
        origins=poses[:, None, :3, 3].expand_as(world).reshape(-1, 3),
        directions=(world / norm[..., None]).reshape(-1, 3),
        depth=(z * norm).reshape(-1),  # z-depth -> distance along the ray (|d_camera| has z = 1)
    )


def stratified(start: Tensor, end: Tensor, bins: int, generator: torch.Generator) -> Tensor:
    """``(R, bins)`` sorted samples, one uniform draw in each of ``bins`` equal bins of ``[start, end]``."""
    edges = torch.arange(bins, device=start.device) / bins
    jitter = torch.rand(start.shape[0], bins, generator=generator).to(start.device) / bins
    return start + (edges + jitter) * (end - start)


def sample_distances(rays: RayBatch, config: SamplingConfig, generator: torch.Generator) -> Tensor:
    """``(R, S)`` distances along each ray: ``[surface, around surface, stratified]`` for measured rays,
    all stratified over ``[near, far]`` for rays that measured nothing."""
    hit = rays.hit[:, None]
    depth = rays.depth[:, None]
    near = torch.full_like(depth, config.near)
    noise = torch.randn(depth.shape[0], config.num_surface, generator=generator).to(depth.device)
    measured = torch.cat(
        [
            depth,
            (depth + noise * config.surface_std).clamp(min=config.near),
            stratified(near, depth + config.behind_surface, config.num_stratified, generator),
        ],
        dim=1,
    )
    free = stratified(near, torch.full_like(depth, config.far), config.samples_per_ray, generator)
    return torch.where(hit, measured, free)


def sample_points(rays: RayBatch, distances: Tensor) -> Tensor:
    """``(R, S, 3)`` points ``o + t d``."""
    return rays.origins[:, None] + distances[..., None] * rays.directions[:, None]


def render_depth(distances: Tensor, sdf: Tensor) -> Tensor:
    """``(R,)`` depth of each ray from the SDF at its samples ``(R, S)`` sorted by distance (iSDF's
    ``sdf_render_depth``): the first sample inside the surface, moved back by its SDF; 0 where no sample is
    inside."""
    inside = sdf < 0
    order = torch.arange(sdf.shape[1], 0, -1, device=sdf.device)  # the first inside sample scores highest
    first = (inside * order).argmax(dim=1, keepdim=True)
    depth = (distances.gather(1, first) + sdf.gather(1, first))[:, 0]
    return torch.where(inside.any(dim=1), depth, torch.zeros_like(depth))


def pc_bounds(rays: RayBatch, distances: Tensor, points: Tensor, chunk: int = 8192) -> Tensor:
    """``(R, S)`` iSDF "pc" bounds: distance to the nearest measured surface point of the batch,
    negative behind the sample's own measured surface."""
    surface = rays.origins[rays.hit] + rays.depth[rays.hit, None] * rays.directions[rays.hit]
    flat = points.reshape(-1, 3)
    if surface.shape[0] == 0:
        return torch.full(distances.shape, NO_SURFACE_BOUND, device=points.device)
    nearest = torch.cat([torch.cdist(part, surface).min(dim=1).values for part in flat.split(chunk)])
    bounds = nearest.reshape(distances.shape).clamp(max=NO_SURFACE_BOUND)
    behind = rays.hit[:, None] & (distances > rays.depth[:, None])
    return torch.where(behind, -bounds, bounds)
