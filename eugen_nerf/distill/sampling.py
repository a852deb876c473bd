"""Which rays a distillation renders: a seeded subset of the training cameras at a reduced resolution.

The rays are cut into fixed batches; a batch is the unit of progress, of resumption and of the split
across processes (rank ``r`` of ``w`` takes batches ``r, r + w, ...``). Every random choice made
while a batch renders draws from a generator seeded by the batch index alone, so the pairs a batch
contributes do not depend on which process renders it, or on whether the run was resumed.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, fields

import torch
from nerfstudio.cameras.cameras import Cameras
from nerfstudio.cameras.rays import RayBundle


@dataclass
class RaySet:
    """The sampled rays, flat, and the training-camera indices they come from."""

    rays: RayBundle
    camera_indices: list[int]
    batch_rays: int
    resolution_scale: float = 1.0
    """The scale the cameras were rendered at (``--resolution-scale``, lowered by ``--max-rays``)."""

    @property
    def num_batches(self) -> int:
        return math.ceil(len(self.rays) / self.batch_rays)

    def batch(self, index: int, device: torch.device) -> RayBundle:
        start = index * self.batch_rays
        return self.rays[start : start + self.batch_rays].to(device)

    def heldout_cameras(self, fraction: float, seed: int) -> list[int]:
        """A seeded ``fraction`` (at least one) of the sampled cameras whose rays never enter a fit: R² and the
        ridge are judged on views the fit has not seen. Empty when only one camera was sampled."""
        if len(self.camera_indices) < 2:
            return []
        count = min(len(self.camera_indices) - 1, max(1, round(fraction * len(self.camera_indices))))
        picks = torch.randperm(
            len(self.camera_indices), generator=torch.Generator().manual_seed(seed + 104729)
        )
        return sorted(self.camera_indices[i] for i in picks[:count].tolist())

    def heldout_mask(self, index: int, cameras: list[int]) -> torch.Tensor:
        """Per ray of batch ``index``: does it come from one of ``cameras``?"""
        start = index * self.batch_rays
        owners = self.rays.camera_indices[start : start + self.batch_rays].reshape(-1)
        return torch.isin(owners, torch.tensor(cameras, dtype=owners.dtype))


def choose_cameras(num_cameras: int, fraction: float, seed: int) -> list[int]:
    """``ceil(fraction * n)`` distinct camera indices, seeded, in increasing order."""
    count = max(1, math.ceil(fraction * num_cameras))
    generator = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(num_cameras, generator=generator)[:count].tolist())


def camera_rays(cameras: Cameras, indices: list[int], resolution_scale: float) -> RayBundle:
    """Every pixel ray of ``cameras[indices]`` rescaled by ``resolution_scale``, flat, in camera order.

    ``camera_indices`` of the rays are the original training indices (appearance embeddings use them).
    """
    subset = copy.deepcopy(cameras[torch.tensor(indices)])
    if resolution_scale != 1:
        subset.rescale_output_resolution(resolution_scale)
    coords, owners = [], []
    for i in range(len(indices)):
        grid = subset.get_image_coords(index=(i,)).reshape(-1, 2)
        coords.append(grid)
        owners.append(torch.full((grid.shape[0], 1), i, dtype=torch.long))
    local = torch.cat(owners)
    rays = subset.generate_rays(camera_indices=local, coords=torch.cat(coords))
    rays.camera_indices = torch.tensor(indices, dtype=torch.long)[local]
    return rays


class PixelRays:
    """Every pixel ray of ``cameras[indices]`` at full resolution, in :func:`camera_rays`' order, then the rays of
    ``extra``: indexed like a flat :class:`RayBundle` (``pool[pick]``) but generated only when drawn, so that a
    fine-tune can draw from every pixel of a large capture (100 cameras at 800² are 64 million rays) in the
    memory of one batch."""

    def __init__(self, cameras: Cameras, indices: list[int], extra: RayBundle | None = None):
        self.cameras = copy.deepcopy(cameras[torch.tensor(indices)])
        self.indices = torch.tensor(indices, dtype=torch.long)
        self.widths = self.cameras.width.reshape(-1).long()
        sizes = self.widths * self.cameras.height.reshape(-1).long()
        self.starts = torch.cumsum(sizes, 0) - sizes
        self.pixels = int(sizes.sum())
        self.extra = extra

    def __len__(self) -> int:
        return self.pixels + (len(self.extra) if self.extra is not None else 0)

    def __getitem__(self, pick: torch.Tensor) -> RayBundle:
        pick = torch.as_tensor(pick, dtype=torch.long).reshape(-1)
        from_extra = pick >= self.pixels
        pixel = pick[~from_extra]
        local = torch.searchsorted(self.starts, pixel, right=True) - 1
        offset, width = pixel - self.starts[local], self.widths[local]
        coords = torch.stack([offset // width, offset % width], dim=-1).float() + 0.5  # (y, x), pixel centres
        rays = self.cameras.generate_rays(camera_indices=local[:, None], coords=coords)
        rays.camera_indices = self.indices[local][:, None]
        if not from_extra.any():
            return rays
        order = torch.cat([torch.nonzero(~from_extra).reshape(-1), torch.nonzero(from_extra).reshape(-1)])
        return cat_rays(rays, self.extra[pick[from_extra] - self.pixels])[torch.argsort(order)]


def capped_scale(
    cameras: Cameras, indices: list[int], resolution_scale: float, max_rays: int | None
) -> float:
    """``resolution_scale``, lowered where ``cameras[indices]`` would give more than ``max_rays`` pixel rays
    at it (so that one default samples a 64-pixel object scene fully and a capture of 800² photographs
    sparsely); as given when ``max_rays`` is None."""
    index = torch.tensor(indices)
    sizes = cameras.width[index].double() * cameras.height[index].double()
    pixels = float(sizes.sum()) * resolution_scale**2
    if max_rays is None or pixels <= max_rays:
        return resolution_scale
    return resolution_scale * math.sqrt(max_rays / pixels)


def sample_rays(
    cameras: Cameras,
    image_fraction: float,
    resolution_scale: float,
    batch_rays: int,
    seed: int,
    max_rays: int | None = None,
) -> RaySet:
    """The distillation's rays: a seeded ``image_fraction`` of ``cameras`` at ``resolution_scale`` (lowered to
    about ``max_rays`` rays, see :func:`capped_scale`)."""
    indices = choose_cameras(len(cameras), image_fraction, seed)
    scale = capped_scale(cameras, indices, resolution_scale, max_rays)
    return RaySet(camera_rays(cameras, indices, scale), indices, batch_rays, scale)


def batch_generator(seed: int, batch_index: int) -> torch.Generator:
    """The generator of every random draw made while batch ``batch_index`` renders."""
    return torch.Generator().manual_seed(seed * 1_000_003 + batch_index)


def novel_cameras(
    cameras: Cameras,
    count: int,
    seed: int,
    max_angle_deg: float = 4.0,
    sources: list[int] | None = None,
) -> tuple[Cameras, torch.Tensor]:
    """``count`` cameras near the training ones, and the training camera each came from (seeded): a random
    training camera each (one of ``sources``, default any), moved by up to half the median spacing of the
    training cameras and turned by up to ``max_angle_deg``.

    The teacher renders them for the fine-tune: views between the training ones, where a student that
    only matched the training rays would show what it never saw. Works for any camera layout (orbits,
    forward-facing captures, walks) because the moves are relative to the cameras' own spacing.
    """
    generator = torch.Generator().manual_seed(seed * 7919 + 17)
    if sources is None:
        picks = torch.randint(len(cameras), (count,), generator=generator)
    else:
        picks = torch.tensor(sources)[torch.randint(len(sources), (count,), generator=generator)]
    novel = copy.deepcopy(cameras[picks])
    c2w = novel.camera_to_worlds.clone()  # (count, 3, 4)
    centres = cameras.camera_to_worlds[:, :, 3]
    spacing = torch.cdist(centres, centres)
    spacing.fill_diagonal_(float("inf"))
    step = float(spacing.min(dim=1).values.median()) if len(cameras) > 1 else 0.0
    direction = torch.nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
    c2w[:, :, 3] += direction * step * 0.5 * torch.rand(count, 1, generator=generator)
    axis = torch.nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
    angle = math.radians(max_angle_deg) * torch.rand(count, generator=generator)
    c2w[:, :, :3] = _rotation(axis, angle) @ c2w[:, :, :3]
    novel.camera_to_worlds = c2w
    return novel, picks


def _rotation(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues: rotation matrices ``(n, 3, 3)`` about unit ``axis`` ``(n, 3)`` by ``angle`` ``(n,)``."""
    x, y, z = axis.unbind(-1)
    zero = torch.zeros_like(x)
    k = torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], dim=-1).reshape(-1, 3, 3)
    s, c = angle.sin()[:, None, None], angle.cos()[:, None, None]
    return torch.eye(3).expand_as(k) + s * k + (1 - c) * (k @ k)


def novel_rays(
    cameras: Cameras, count: int, resolution_scale: float, seed: int, sources: list[int] | None = None
) -> RayBundle:
    """Every pixel ray of :func:`novel_cameras` (moved from ``sources``); ``camera_indices`` name the training
    camera each was moved from (appearance embeddings look them up)."""
    novel, picks = novel_cameras(cameras, count, seed, sources=sources)
    rays = camera_rays(novel, list(range(count)), resolution_scale)
    rays.camera_indices = picks[rays.camera_indices.reshape(-1)].reshape(rays.camera_indices.shape)
    return rays


def cat_rays(first: RayBundle, second: RayBundle) -> RayBundle:
    """The rays of ``first`` then those of ``second`` (flat bundles; every field, metadata included)."""

    def cat(a, b):
        if isinstance(a, dict):
            return {key: torch.cat([value, b[key]]) for key, value in a.items()}
        return None if a is None else torch.cat([a, b])

    return RayBundle(
        **{f.name: cat(getattr(first, f.name), getattr(second, f.name)) for f in fields(RayBundle)}
    )
