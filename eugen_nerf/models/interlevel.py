"""Zip-NeRF's anti-aliased interlevel loss: proposal histograms must bound the NeRF's, after a blur.

mip-NeRF 360's interlevel loss compares step functions directly, so it is discontinuous in the distance
along the ray and aliases in depth ("z-aliasing"). Zip-NeRF blurs each proposal's density (a step
function) with a box filter of half-width ``pulse_width`` (in normalised ray distance), which makes it
piecewise linear, integrates it exactly onto the NeRF's intervals, and penalises the NeRF weights that
exceed the result: ``sum(max(0, w - w_blurred)^2 / (w + eps))``. Gradients reach the proposals only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from nerfstudio.cameras.rays import RaySamples
from torch import Tensor

EPS = torch.finfo(torch.float32).eps


def blur_step_function(x: Tensor, y: Tensor, radius: float) -> tuple[Tensor, Tensor]:
    """Convolve the step function with edges ``x [..., n+1]`` and values ``y [..., n]`` with a box of
    half-width ``radius`` (unit area). Returns the resulting piecewise-linear function's knots and values."""
    knots, order = torch.sort(torch.cat([x - radius, x + radius], dim=-1), dim=-1)
    zero = torch.zeros_like(y[..., :1])
    jumps = (torch.cat([y, zero], dim=-1) - torch.cat([zero, y], dim=-1)) / (2 * radius)
    slope_changes = torch.cat([jumps, -jumps], dim=-1).take_along_dim(order[..., :-1], dim=-1)
    values = torch.cumsum((knots[..., 1:] - knots[..., :-1]) * torch.cumsum(slope_changes, dim=-1), dim=-1)
    return knots, torch.cat([torch.zeros_like(values[..., :1]), values.clamp_min(0)], dim=-1)


def integrate_linear_spline(queries: Tensor, knots: Tensor, values: Tensor) -> Tensor:
    """The integral from ``knots[0]`` to each (sorted) query of the piecewise-linear ``(knots, values)``."""
    areas = 0.5 * (values[..., 1:] + values[..., :-1]) * (knots[..., 1:] - knots[..., :-1])
    cumulative = torch.cat([torch.zeros_like(areas[..., :1]), torch.cumsum(areas, dim=-1)], dim=-1)
    right = torch.searchsorted(knots.contiguous(), queries.contiguous(), right=True).clamp(
        1, knots.shape[-1] - 1
    )
    left = right - 1
    x0, x1 = knots.take_along_dim(left, -1), knots.take_along_dim(right, -1)
    y0, y1 = values.take_along_dim(left, -1), values.take_along_dim(right, -1)
    width = (x1 - x0).clamp_min(EPS)
    offset = ((queries - x0) / width).clamp(0, 1)
    value_at = y0 + (y1 - y0) * offset
    return cumulative.take_along_dim(left, -1) + offset * width * (y0 + value_at) / 2


def ray_edges(ray_samples: RaySamples) -> Tensor:
    """The samples' interval edges in normalised ray distance, ``[rays, n+1]``."""
    assert ray_samples.spacing_starts is not None and ray_samples.spacing_ends is not None
    return torch.cat([ray_samples.spacing_starts[..., 0], ray_samples.spacing_ends[..., -1:, 0]], dim=-1)


def anti_aliased_interlevel_loss(
    weights_list: list[Tensor], ray_samples_list: list[RaySamples], pulse_widths: Sequence[float]
) -> Tensor:
    """Zip-NeRF's interlevel loss; the last entries of the lists are the NeRF's, the others the proposals'."""
    nerf_edges = ray_edges(ray_samples_list[-1]).detach()
    nerf_weights = weights_list[-1][..., 0].detach()
    loss = nerf_weights.new_zeros(())
    for samples, weights, width in zip(ray_samples_list[:-1], weights_list[:-1], pulse_widths):
        edges = ray_edges(samples)
        density = weights[..., 0] / (edges[..., 1:] - edges[..., :-1]).clamp_min(EPS)
        knots, values = blur_step_function(edges, density, width)
        resampled = torch.diff(integrate_linear_spline(nerf_edges, knots, values), dim=-1)
        excess = (nerf_weights - resampled).clamp_min(0) ** 2 / (nerf_weights + EPS)
        loss = loss + excess.sum(dim=-1).mean()
    return loss
