"""iSDF's loss: SDF bounds (free-space and near-surface terms) plus an eikonal regulariser.

For a sample with bound ``b`` (an upper bound of its distance to the surface, negative behind it):

* free space (``b > trunc``): ``max(relu(sdf - b), exp(-β·sdf) - 1)``: stay under the bound, and
  be pushed away from negative values;
* near the surface (``|b| ≤ trunc``): ``trunc_weight · |sdf - b|``, the bound is nearly the SDF there;
* eikonal: ``|‖∇sdf‖ - 1|`` away from the surface (``b > eikonal_distance``); without it the free-space
  term is satisfied by ``sdf ≡ 0``.

The weights are iSDF's; the distances are halved for an object in the unit sphere (iSDF's are for rooms).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class ISDFLossConfig:
    trunc_distance: float = 0.05
    """Samples with bounds below this are near-surface (iSDF: 0.1 m)."""
    trunc_weight: float = 5.384
    """Weight of the near-surface samples' loss against the free-space term (iSDF's)."""
    free_space_factor: float = 5.0
    """β of the free-space term ``exp(-β·sdf) - 1``."""
    eikonal_weight: float = 0.268
    """Weight of the eikonal term ``| ||∇sdf|| - 1 |`` (iSDF's)."""
    eikonal_distance: float = 0.05
    """The eikonal term applies to samples with bounds above this (iSDF: 0.1 m)."""


def sdf_loss(sdf: Tensor, bounds: Tensor, config: ISDFLossConfig) -> Tensor:
    """Per-sample bound loss (same shape as ``sdf``)."""
    free_space = torch.maximum(torch.relu(sdf - bounds), torch.exp(-config.free_space_factor * sdf) - 1.0)
    near_surface = config.trunc_weight * (sdf - bounds).abs()
    return torch.where(bounds > config.trunc_distance, free_space, near_surface)


def eikonal_loss(gradient: Tensor, bounds: Tensor, config: ISDFLossConfig) -> Tensor:
    """Per-sample eikonal term ``|‖∇sdf‖ - 1|`` where ``bounds > eikonal_distance``."""
    error = (gradient.norm(dim=-1) - 1.0).abs()
    return torch.where(bounds > config.eikonal_distance, error, torch.zeros_like(error))


def isdf_losses(sdf: Tensor, gradient: Tensor, bounds: Tensor, config: ISDFLossConfig) -> dict[str, Tensor]:
    """Per-sample ``sdf`` and weighted ``eikonal`` losses for ``sdf (...)``, ``gradient (..., 3)``, ``bounds (...)``."""
    return {
        "sdf": sdf_loss(sdf, bounds, config),
        "eikonal": config.eikonal_weight * eikonal_loss(gradient, bounds, config),
    }
