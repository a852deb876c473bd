"""Multiscale training rays made from the full-resolution training images (mip-NeRF's multiscale protocol).

An anti-aliased field (Zip-NeRF's scale-weighted hash grid) learns what a pixel's footprint looks like only
from footprints it was trained on: trained at one resolution, its coarse grid-level weights at 1/4 resolution
are values it never saw, and its renders at that scale come out worse than with the down-weighting switched
off. Mip-NeRF and Zip-NeRF train their multiscale models on copies of the
images downscaled 2x, 4x, ...; this module makes those rays on the fly from the same full-resolution images,
so no data is added: a ray at scale ``s`` goes through the centre of an ``s x s`` block of pixels, with the
camera's intrinsics divided by ``s`` (its pixel area ``s^2`` times larger), and its target is the block's
area average (alpha-premultiplied for RGBA images, so that the background blend of the average is the
average of the blends).

Pure torch plus nerfstudio's :class:`~nerfstudio.cameras.cameras.Cameras`; the datamanager uses it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from nerfstudio.cameras.cameras import Cameras
from torch import Tensor


def check_scales(scales: Sequence[int]) -> tuple[int, ...]:
    """Integer scales >= 1, without repeats, 1 first; one clear error otherwise."""
    scales = tuple(scales)
    if not scales or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in scales):
        raise ValueError(f"train-scales must be integers >= 1 (1 is full resolution), got {scales!r}")
    if len(set(scales)) != len(scales):
        raise ValueError(f"train-scales has a repeated scale: {scales!r}")
    return tuple(sorted(scales))


def stacked_scaled_cameras(cameras: Cameras, scales: Sequence[int]) -> Cameras:
    """The cameras once per scale, scale ``k``'s copy with its resolution divided by ``scales[k]``.

    Camera ``c`` at scale index ``k`` is entry ``k * len(cameras) + c`` of the result. Intrinsics are divided by
    the scale as ``Cameras.rescale_output_resolution`` does; the size keeps whole blocks only (``w // s``).
    """

    def stack(value, divide: bool = False):
        return None if value is None else torch.cat([value / s if divide else value for s in scales])

    return Cameras(
        camera_to_worlds=stack(cameras.camera_to_worlds),
        fx=stack(cameras.fx, divide=True),
        fy=stack(cameras.fy, divide=True),
        cx=stack(cameras.cx, divide=True),
        cy=stack(cameras.cy, divide=True),
        width=torch.cat([cameras.width // s for s in scales]),
        height=torch.cat([cameras.height // s for s in scales]),
        distortion_params=stack(cameras.distortion_params),
        camera_type=stack(cameras.camera_type),
        times=stack(cameras.times),
    )


def block_average(
    images: Tensor | list[Tensor], positions: Tensor, rows: Tensor, cols: Tensor, scale: int
) -> Tensor:
    """Area average of the ``scale x scale`` blocks with top-left pixels ``(rows, cols)``.

    Args:
        images: ``[B, H, W, C]`` (or a list of ``[H, W, C]``), float or uint8.
        positions, rows, cols: ``[N]`` image positions in ``images`` and block corners.
        scale: the block's side.

    Returns:
        ``[N, C]`` float averages; for ``C = 4`` (RGBA) the colour is averaged premultiplied by alpha.
    """
    offsets = torch.arange(scale, device=rows.device)
    ys = (rows[:, None, None] + offsets[None, :, None]).expand(-1, scale, scale).reshape(-1)
    xs = (cols[:, None, None] + offsets[None, None, :]).expand(-1, scale, scale).reshape(-1)
    cs = positions[:, None].expand(-1, scale * scale).reshape(-1)
    if isinstance(images, Tensor):
        pixels = images[cs, ys, xs]
    else:
        # images of different sizes: one gather per image
        pixels = torch.empty((len(cs), images[0].shape[-1]), dtype=images[0].dtype, device=images[0].device)
        for c in cs.unique().tolist():
            rows_of_c = cs == c
            pixels[rows_of_c] = images[c][ys[rows_of_c], xs[rows_of_c]]
    pixels = pixels.float() if pixels.is_floating_point() else pixels.float() / 255.0
    pixels = pixels.reshape(len(rows), scale * scale, -1)
    if pixels.shape[-1] != 4:
        return pixels.mean(dim=1)
    alpha = pixels[..., 3:].mean(dim=1)
    colour = (pixels[..., :3] * pixels[..., 3:]).mean(dim=1) / alpha.clamp_min(1e-8)
    return torch.cat([torch.where(alpha > 0, colour, pixels[..., :3].mean(dim=1)), alpha], dim=-1)


def assign_scales(count: int, num_scales: int, generator: torch.Generator | None = None) -> Tensor:
    """Scale index of each of ``count`` rays: as even a split as the count allows, in random order."""
    scale_index = torch.arange(count) % num_scales
    return scale_index[torch.randperm(count, generator=generator)]
