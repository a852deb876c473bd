"""Which rays a distillation renders: a seeded subset of the training cameras at a reduced resolution.

The rays are cut into fixed batches; a batch is the unit of progress, of resumption and of the split
across processes (rank ``r`` of ``w`` takes batches ``r, r + w, ...``). Every random choice made
while a batch renders draws from a generator seeded by the batch index alone, so the pairs a batch
contributes do not depend on which process renders it, or on whether the run was resumed.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import List

import torch
from nerfstudio.cameras.cameras import Cameras
from nerfstudio.cameras.rays import RayBundle


@dataclass
class RaySet:
    """The sampled rays, flat, and the training-camera indices they come from."""

    rays: RayBundle
    camera_indices: List[int]
    batch_rays: int

    @property
    def num_batches(self) -> int:
        return math.ceil(len(self.rays) / self.batch_rays)

    def batch(self, index: int, device: torch.device) -> RayBundle:
        start = index * self.batch_rays
        return self.rays[start : start + self.batch_rays].to(device)


def choose_cameras(num_cameras: int, fraction: float, seed: int) -> List[int]:
    """``ceil(fraction * n)`` distinct camera indices, seeded, in increasing order."""
    count = max(1, math.ceil(fraction * num_cameras))
    generator = torch.Generator().manual_seed(seed)
    return sorted(torch.randperm(num_cameras, generator=generator)[:count].tolist())


def camera_rays(cameras: Cameras, indices: List[int], resolution_scale: float) -> RayBundle:
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


def sample_rays(cameras: Cameras, image_fraction: float, resolution_scale: float, batch_rays: int,
                seed: int) -> RaySet:
    """The distillation's rays: a seeded ``image_fraction`` of ``cameras`` at ``resolution_scale``."""
    indices = choose_cameras(len(cameras), image_fraction, seed)
    return RaySet(camera_rays(cameras, indices, resolution_scale), indices, batch_rays)


def batch_generator(seed: int, batch_index: int) -> torch.Generator:
    """The generator of every random draw made while batch ``batch_index`` renders."""
    return torch.Generator().manual_seed(seed * 1_000_003 + batch_index)
