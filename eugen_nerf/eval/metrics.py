"""Image metrics (PSNR, SSIM, LPIPS) and geometry metrics (SDF error, Chamfer, F-score).

Image functions take float images in [0, 1], either one ``(H, W, C)`` image or an ``(N, C, H, W)``
batch, and return one value per image (shape ``(N,)``, ``(1,)`` for a single image). Only the RGB
channels are scored.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure

from eugen_nerf.eval.lpips import LPIPS_MIN_SIZE, shared_lpips

PSNR_MAX_DB = 100.0
"""PSNR cap: identical images (MSE 0) score 100 dB instead of inf, so means, stds and JSON stay finite."""


def as_nchw(image: Tensor) -> Tensor:
    """``(H, W, C)`` -> ``(1, C, H, W)``; ``(N, C, H, W)`` is returned unchanged. Keeps RGB only."""
    if image.ndim == 3:
        image = image.permute(2, 0, 1)[None]
    if image.ndim != 4:
        raise ValueError(
            f"expected an (H, W, C) image or an (N, C, H, W) batch, got shape {tuple(image.shape)}"
        )
    return image[:, :3].float()


def _pair(pred: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    pred, target = as_nchw(pred), as_nchw(target)
    if pred.shape != target.shape:
        raise ValueError(f"prediction {tuple(pred.shape)} and target {tuple(target.shape)} differ in shape")
    return pred, target


def psnr(pred: Tensor, target: Tensor) -> Tensor:
    """Per-image PSNR in dB for data range 1, capped at :data:`PSNR_MAX_DB`."""
    pred, target = _pair(pred, target)
    value = peak_signal_noise_ratio(pred, target, data_range=1.0, reduction="none", dim=(1, 2, 3))
    return value.clamp(max=PSNR_MAX_DB)


def ssim(pred: Tensor, target: Tensor) -> Tensor:
    """Per-image SSIM (Gaussian window 11, sigma 1.5, data range 1), as nerfstudio computes it."""
    pred, target = _pair(pred, target)
    return structural_similarity_index_measure(pred, target, data_range=1.0, reduction="none")


def lpips(pred: Tensor, target: Tensor) -> Tensor:
    """Per-image LPIPS (AlexNet, v0.1) on images in [0, 1], mapped to [-1, 1] as the original does.

    Raises :class:`~eugen_nerf.eval.lpips_weights.LPIPSWeightsError` when the offline weights are missing
    and ``ValueError`` for images smaller than :data:`~eugen_nerf.eval.lpips.LPIPS_MIN_SIZE`.
    """
    pred, target = _pair(pred, target)
    if min(pred.shape[-2:]) < LPIPS_MIN_SIZE:
        raise ValueError(
            f"LPIPS needs images of at least {LPIPS_MIN_SIZE}x{LPIPS_MIN_SIZE}, got {tuple(pred.shape[-2:])}"
        )
    with torch.no_grad():
        return shared_lpips().to(pred.device)(pred * 2 - 1, target * 2 - 1)


def sdf_error(pred: Tensor, gt: Tensor) -> Tensor:
    """Mean absolute SDF error ``mean |pred - gt|`` over matching query points."""
    if pred.shape != gt.shape:
        raise ValueError(
            f"predicted SDF {tuple(pred.shape)} and ground truth {tuple(gt.shape)} differ in shape"
        )
    return (pred - gt).abs().mean()


def _nearest_distances(points_a: Tensor, points_b: Tensor, chunk: int = 4096) -> tuple[Tensor, Tensor]:
    """For each point of ``a`` the distance to its nearest point of ``b``, and vice versa (chunked cdist)."""
    a_to_b = torch.cat([torch.cdist(part, points_b).min(dim=1).values for part in points_a.split(chunk)])
    b_to_a = torch.cat([torch.cdist(part, points_a).min(dim=1).values for part in points_b.split(chunk)])
    return a_to_b, b_to_a


def _f_score(a_to_b: Tensor, b_to_a: Tensor, threshold: float) -> Tensor:
    precision = (a_to_b < threshold).float().mean()
    recall = (b_to_a < threshold).float().mean()
    denom = precision + recall
    return torch.where(denom > 0, 2 * precision * recall / denom.clamp(min=1e-12), torch.zeros_like(denom))


def chamfer_and_f_scores(
    points_a: Tensor, points_b: Tensor, thresholds: Sequence[float]
) -> tuple[Tensor, list[Tensor]]:
    """:func:`chamfer_distance` and :func:`f_score` at each threshold from one nearest-neighbour pass."""
    a_to_b, b_to_a = _nearest_distances(points_a.float(), points_b.float())
    return a_to_b.mean() + b_to_a.mean(), [_f_score(a_to_b, b_to_a, t) for t in thresholds]


def chamfer_distance(points_a: Tensor, points_b: Tensor) -> Tensor:
    """Symmetric Chamfer distance: mean nearest-neighbour distance a->b plus b->a (not squared), ``(P, 3)``."""
    return chamfer_and_f_scores(points_a, points_b, ())[0]


def f_score(points_a: Tensor, points_b: Tensor, threshold: float) -> Tensor:
    """F-score at ``threshold``: harmonic mean of precision (a within threshold of b) and recall (b of a).

    ``points_a`` is the prediction, ``points_b`` the ground truth; 0 when neither matches.
    """
    return chamfer_and_f_scores(points_a, points_b, (threshold,))[1][0]
