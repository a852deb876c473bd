"""Zip-NeRF's multisampling of conical frustums, the scale-aware weights of hash-grid features, and its
direction encoding.

A pixel sees a cone, and one sample interval ``[t0, t1]`` of its ray is a conical frustum. Zip-NeRF
replaces the frustum by six points in a hexagonal pattern, spiralling along the interval, whose mean and
covariance match the frustum's (Barron et al. 2023, section 2), each blurred by an isotropic Gaussian of
standard deviation ``std_scale * radius * t / sqrt(2)``. Features of a grid level whose cells are much smaller
than that blur average to zero, so Zip-NeRF multiplies them by ``erf(1 / sqrt(8 sigma^2 n^2))`` (``n`` the
level's resolution): 1 for a frustum much smaller than a cell, falling toward 0 as the frustum grows.

Pure torch functions; :class:`~eugen_nerf.fields.zipnerf.ZipNeRFField` puts them together.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

NUM_MULTISAMPLES = 6
"""Points per frustum (Zip-NeRF's hexagonal pattern)."""
_ANGLES = torch.tensor([0, 2, 4, 3, 5, 1], dtype=torch.float32) * (math.pi / 3)
"""Angles of the six points around the ray: two interleaved triangles."""


def pixel_radius(pixel_area: Tensor) -> Tensor:
    """Base radius of a pixel's cone at distance 1 (mip-NeRF: the pixel's width times 2/sqrt(12)).

    nerfstudio's ``pixel_area`` is the pixel's area at distance 1 along a unit direction.
    """
    return pixel_area.clamp_min(0).sqrt() * (2.0 / math.sqrt(12.0))


def _unexpanded(x: Tensor) -> Tensor:
    """``x`` with every broadcast (stride-0) dimension but the last narrowed to size 1: the same values, which
    broadcasting expands again, computed once (nerfstudio's ray samples expand each ray's origin, direction
    and pixel area over its samples)."""
    for dim in range(x.dim() - 1):
        if x.stride(dim) == 0 and x.shape[dim] > 1:
            x = x.narrow(dim, 0, 1)
    return x


def _orthonormal_basis(directions: Tensor) -> tuple[Tensor, Tensor]:
    """Two unit vectors perpendicular to each (unit) direction and to each other, deterministic."""
    helper = torch.zeros_like(directions)
    use_x = directions[..., 2].abs() > 0.9
    helper[..., 0] = use_x.to(directions.dtype)
    helper[..., 2] = (~use_x).to(directions.dtype)
    first = torch.nn.functional.normalize(torch.cross(directions, helper, dim=-1), dim=-1)
    second = torch.cross(directions, first, dim=-1)
    return first, second


def frustum_multisamples(
    origins: Tensor,
    directions: Tensor,
    starts: Tensor,
    ends: Tensor,
    radii: Tensor,
    randomize: bool,
    std_scale: float = 0.5,
) -> tuple[Tensor, Tensor]:
    """Zip-NeRF's six multisamples of each conical frustum.

    Args:
        origins, directions: ``[..., 3]`` ray origins and unit directions.
        starts, ends: ``[..., 1]`` the interval along the ray.
        radii: ``[..., 1]`` cone radius at distance 1 (:func:`pixel_radius`).
        randomize: rotate and flip each pattern at random (training); otherwise rotate every other interval
            by 30 degrees and flip it (deterministic, for evaluation).
        std_scale: the points' isotropic blur relative to the cone's radius at their distance.

    Returns:
        means ``[..., 6, 3]`` and isotropic standard deviations ``[..., 6]``. The means are a view of a
        coordinate-major ``[3, ..., 6]`` tensor: each coordinate is computed over all samples in one pass (the
        per-ray origin, direction and basis broadcast along a long inner loop, where a last dimension of 3
        made every pass several times slower), and the hash grid reads its points coordinate-major anyway.
    """
    origins, directions, radii = _unexpanded(origins), _unexpanded(directions), _unexpanded(radii)
    t0, t1 = starts, ends
    t_mid = (t0 + t1) / 2
    t_half = (t1 - t0) / 2
    j = torch.arange(NUM_MULTISAMPLES, device=starts.device, dtype=starts.dtype)
    spread = ((t_half**2 - t_mid**2) ** 2 + 4 * t_mid**4).sqrt()
    # [..., 6]
    t = t0 + t_half / (t_half**2 + 3 * t_mid**2).clamp_min(1e-12) * (
        t1**2 + 2 * t_mid**2 + 3 / math.sqrt(7) * (2 * j / 5 - 1) * spread
    )
    angles = _ANGLES.to(device=starts.device, dtype=starts.dtype).expand(t.shape)
    if randomize:
        flip = torch.rand(t.shape[:-1] + (1,), device=t.device) > 0.5
        angles = angles + 2 * math.pi * torch.rand(t.shape[:-1] + (1,), device=t.device, dtype=t.dtype)
        angles = torch.where(flip, angles, 5 * math.pi / 3 - angles)
    else:
        shape = t.shape[:-1]
        if len(shape) == 0:
            odd = torch.zeros((), dtype=torch.bool, device=t.device)
        else:
            odd = (torch.arange(shape[-1], device=t.device) % 2 == 1).expand(shape)
        odd = odd[..., None]
        angles = torch.where(odd, 5 * math.pi / 3 - (angles + math.pi / 6), angles)
    radial = radii * t / math.sqrt(2.0)  # [..., 6]
    first, second = _orthonormal_basis(directions)
    across, up = radial * torch.cos(angles), radial * torch.sin(angles)
    means = torch.stack(
        [
            origins[..., axis, None]
            + directions[..., axis, None] * t
            + first[..., axis, None] * across
            + second[..., axis, None] * up
            for axis in range(3)
        ]
    )  # [3, ..., 6]
    stds = std_scale * radial
    return means.movedim(0, -1), stds


def contract_gaussians(means: Tensor, stds: Tensor) -> tuple[Tensor, Tensor]:
    """mip-NeRF 360's (L2) scene contraction of isotropic Gaussians into the ball of radius 2.

    Means are contracted; a standard deviation is scaled by the contraction's volume change at the mean,
    ``det(J)^(1/3)`` (Zip-NeRF linearises the contraction the same way, keeping the blur isotropic).
    """
    # the norm from the three coordinates: ``means`` is often a view with its last axis strided (as
    # frustum_multisamples returns it), where a reduction over that axis is several times slower
    radius = (means[..., 0] ** 2 + means[..., 1] ** 2 + means[..., 2] ** 2).clamp_min(1e-24).sqrt()[..., None]
    outside = radius > 1
    contracted = torch.where(outside, (2 - 1 / radius) * means / radius, means)
    # Jacobian outside the unit ball: radial 1/r^2, tangential (2 - 1/r)/r (twice).
    r = radius.squeeze(-1)
    scale = ((1 / r**2) * ((2 - 1 / r) / r) ** 2).clamp_min(1e-30) ** (1.0 / 3.0)
    return contracted, torch.where(outside.squeeze(-1), stds * scale, stds)


def level_weights(stds: Tensor, resolutions: Tensor) -> Tensor:
    """Zip-NeRF's feature down-weighting ``erf(1 / sqrt(8 sigma^2 n^2))`` per grid level.

    Args:
        stds: ``[...]`` blur in the grid's ``[-1, 1]`` coordinates (the reference implementation's convention).
        resolutions: ``[L]`` cells per axis of each level.

    Returns:
        ``[..., L]`` weights in (0, 1]: 1 for a blur much smaller than a cell, toward 0 as it grows.
    """
    squared = (8 * stds.square())[..., None] * resolutions.square()  # the one [..., L] buffer
    if stds.requires_grad or resolutions.requires_grad:
        return torch.erf(torch.rsqrt(squared + 1e-12))
    # blurs come from the rays' geometry (no gradient): the passes run in place on that buffer
    return squared.add_(1e-12).rsqrt_().erf_()


def encode_directions(directions: Tensor, frequencies: int = 4) -> Tensor:
    """Zip-NeRF's direction encoding ``[d, sin(2^i d), cos(2^i d)]``, ``i < frequencies`` (27 channels at 4)."""
    scales = 2.0 ** torch.arange(frequencies, device=directions.device, dtype=directions.dtype)
    scaled = (directions[..., None, :] * scales[:, None]).flatten(-2)
    return torch.cat([directions, torch.sin(scaled), torch.cos(scaled)], dim=-1)
