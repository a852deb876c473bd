"""Image metrics of our models: PSNR, SSIM, and LPIPS only when its offline weights exist.

Stock models build a torchmetrics LPIPS in ``populate_modules``, which downloads its backbone. Ours build
nothing: LPIPS comes from :mod:`eugen_nerf.eval.lpips` at evaluation time, and is left out of the metrics
(with the reason logged once) when the weights are not installed.
"""

from __future__ import annotations

import functools
import logging
from typing import Dict

import torch
from torch import Tensor
from torchmetrics.functional import peak_signal_noise_ratio, structural_similarity_index_measure

from eugen_nerf.eval.lpips import lpips_unavailable_reason, shared_lpips

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def _lpips_available() -> bool:
    reason = lpips_unavailable_reason()
    if reason is not None:
        logger.warning("LPIPS left out of the metrics: %s", reason)
    return reason is None


def psnr(gt: Tensor, pred: Tensor) -> float:
    """PSNR of ``(H, W, 3)`` images in [0, 1]."""
    return float(peak_signal_noise_ratio(pred.clamp(0.0, 1.0), gt, data_range=1.0))


def image_metrics(gt: Tensor, pred: Tensor) -> Dict[str, float]:
    """``psnr``, ``ssim`` (and ``lpips`` when available) of one ``(H, W, 3)`` image in [0, 1]."""
    gt_nchw = torch.moveaxis(gt, -1, 0)[None]
    pred_nchw = torch.moveaxis(pred, -1, 0)[None].clamp(0.0, 1.0)
    metrics = {
        "psnr": psnr(gt, pred),
        "ssim": float(structural_similarity_index_measure(pred_nchw, gt_nchw, data_range=1.0)),
    }
    if _lpips_available():
        lpips = shared_lpips().to(gt.device)
        with torch.no_grad():
            metrics["lpips"] = float(lpips(gt_nchw.float() * 2 - 1, pred_nchw.float() * 2 - 1).mean())
    return metrics
