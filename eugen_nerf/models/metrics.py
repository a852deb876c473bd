"""Image metrics of our models: PSNR, SSIM, and LPIPS only where it can be computed.

Stock models build a torchmetrics LPIPS in ``populate_modules``, which downloads its backbone. Ours build
nothing: the metrics are :mod:`eugen_nerf.eval.metrics`, and LPIPS is left out (with the reason logged
once) when the offline weights are not installed or the images are too small for it.
"""

from __future__ import annotations

import functools
import logging

from torch import Tensor

from eugen_nerf.eval import metrics
from eugen_nerf.eval.lpips import lpips_unavailable_reason

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def _lpips_reason(image_size: tuple[int, int]) -> str | None:
    reason = lpips_unavailable_reason(image_size)
    if reason is not None:
        logger.warning("LPIPS left out of the metrics: %s", reason)
    return reason


def psnr(gt: Tensor, pred: Tensor) -> float:
    """PSNR of ``(H, W, 3)`` images in [0, 1]."""
    return float(metrics.psnr(pred.clamp(0.0, 1.0), gt))


def image_metrics(gt: Tensor, pred: Tensor) -> dict[str, float]:
    """``psnr``, ``ssim`` (and ``lpips`` when available) of one ``(H, W, 3)`` image in [0, 1]."""
    pred = pred.clamp(0.0, 1.0)
    values = {"psnr": float(metrics.psnr(pred, gt)), "ssim": float(metrics.ssim(pred, gt))}
    if _lpips_reason(tuple(gt.shape[:2])) is None:
        values["lpips"] = float(metrics.lpips(pred, gt))
    return values
