"""AlexNet-LPIPS on the offline weights, and an offline drop-in for torchmetrics' LPIPS metric.

:class:`AlexLPIPS` is the computation graph of the original ``lpips.LPIPS(net="alex", version="0.1")``
(scaling layer, AlexNet relu1..relu5, unit-normalised feature differences, 1x1 linear heads, spatial
mean) with the same module names, so the original state dict loads into it unchanged.

Stock nerfstudio models build ``torchmetrics.image.lpip.LearnedPerceptualImagePatchSimilarity`` in
``populate_modules``, which downloads torchvision's AlexNet and fails offline.
:func:`install_offline_lpips` swaps that class for :class:`OfflineLPIPSMetric` before the models import it,
and only when the converted weights are present: otherwise stock behaviour is untouched.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections import OrderedDict
from typing import Literal

import torch
from torch import Tensor, nn

from eugen_nerf.eval.lpips_weights import ALEXNET_CHANNELS, LPIPSWeightsError, load_lpips_weights

logger = logging.getLogger(__name__)

LPIPS_MIN_SIZE = 31
"""Smallest image side AlexNet-LPIPS accepts (relu5 needs at least one pixel after two 3x3/2 pools)."""


class _LinearHead(nn.Module):
    """1x1 convolution to one channel; ``model.0`` is the (inactive in eval) dropout of the original."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Dropout(), nn.Conv2d(channels, 1, 1, bias=False))

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x)


def _alexnet_slices() -> nn.ModuleDict:
    """torchvision's ``alexnet().features`` cut after each ReLU, keeping its layer indices as names."""
    c = ALEXNET_CHANNELS
    layers = {
        "slice1": {"0": nn.Conv2d(3, c[0], 11, stride=4, padding=2), "1": nn.ReLU()},
        "slice2": {"2": nn.MaxPool2d(3, 2), "3": nn.Conv2d(c[0], c[1], 5, padding=2), "4": nn.ReLU()},
        "slice3": {"5": nn.MaxPool2d(3, 2), "6": nn.Conv2d(c[1], c[2], 3, padding=1), "7": nn.ReLU()},
        "slice4": {"8": nn.Conv2d(c[2], c[3], 3, padding=1), "9": nn.ReLU()},
        "slice5": {"10": nn.Conv2d(c[3], c[4], 3, padding=1), "11": nn.ReLU()},
    }
    return nn.ModuleDict({name: nn.Sequential(OrderedDict(mods)) for name, mods in layers.items()})


class AlexLPIPS(nn.Module):
    """LPIPS v0.1 with the AlexNet backbone; inputs NCHW in [-1, 1], output one distance per image."""

    shift: Tensor
    scale: Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer(
            "shift", torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1), persistent=False
        )
        self.register_buffer("scale", torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1), persistent=False)
        self.net = _alexnet_slices()
        for k, channels in enumerate(ALEXNET_CHANNELS):
            self.add_module(f"lin{k}", _LinearHead(channels))
        self.requires_grad_(False)
        self.eval()

    @classmethod
    def pretrained(cls) -> AlexLPIPS:
        """Build with the offline weights; raises :class:`LPIPSWeightsError` when they are missing."""
        module = cls()
        module.load_state_dict(load_lpips_weights(), strict=True)
        return module

    def features(self, x: Tensor) -> list[Tensor]:
        """AlexNet relu1..relu5 activations of a scaled image batch."""
        feats = []
        for block in self.net.values():
            x = block(x)
            feats.append(x)
        return feats

    def forward(self, img0: Tensor, img1: Tensor) -> Tensor:
        """LPIPS distance between two NCHW batches in [-1, 1]; returns shape ``(N,)``."""
        feats0 = self.features((img0 - self.shift) / self.scale)
        feats1 = self.features((img1 - self.shift) / self.scale)
        dist = img0.new_zeros(img0.shape[0])
        heads = (self.lin0, self.lin1, self.lin2, self.lin3, self.lin4)
        for f0, f1, lin in zip(feats0, feats1, heads):
            diff = (_unit_normalize(f0) - _unit_normalize(f1)) ** 2
            dist = dist + lin(diff).mean(dim=(1, 2, 3))
        return dist


def _unit_normalize(x: Tensor, eps: float = 1e-10) -> Tensor:
    """Normalise feature vectors along channels, as the original (eps outside the sqrt)."""
    return x / (torch.sqrt(torch.sum(x**2, dim=1, keepdim=True)) + eps)


@functools.lru_cache(maxsize=1)
def shared_lpips() -> AlexLPIPS:
    """One pretrained :class:`AlexLPIPS` per process (raises :class:`LPIPSWeightsError` if unavailable)."""
    return AlexLPIPS.pretrained()


def lpips_unavailable_reason(image_size: tuple[int, int] | None = None) -> str | None:
    """Why LPIPS cannot be computed (``None`` when it can), for images of ``image_size`` (H, W) if given."""
    try:
        shared_lpips()
    except LPIPSWeightsError as err:
        return str(err)
    if image_size is not None and min(image_size) < LPIPS_MIN_SIZE:
        return f"test images are smaller than LPIPS's minimum of {LPIPS_MIN_SIZE}x{LPIPS_MIN_SIZE} pixels"
    return None


class OfflineLPIPSMetric(nn.Module):
    """Drop-in for ``torchmetrics.image.lpip.LearnedPerceptualImagePatchSimilarity`` (AlexNet only).

    Called as ``metric(img1, img2)`` on NCHW batches (in [0, 1] with ``normalize=True``, else [-1, 1])
    and returns the batch mean (or sum / per-image values). The network is kept out of the module tree:
    it adds no parameters or checkpoint entries to the model holding the metric, and loading a checkpoint
    cannot overwrite the pretrained weights. Without weights (or for images below
    :data:`LPIPS_MIN_SIZE`), construction still succeeds and calls return NaN, logging the reason once.
    """

    def __init__(
        self,
        net_type: Literal["alex"] = "alex",
        reduction: Literal["mean", "sum", "none"] | None = "mean",
        normalize: bool = False,
        **_metric_kwargs: object,
    ) -> None:
        super().__init__()
        if net_type != "alex":
            raise ValueError(f"offline LPIPS supports net_type='alex' only, got {net_type!r}")
        self.reduction = reduction
        self.normalize = normalize
        self._warned = False

    def forward(self, img1: Tensor, img2: Tensor) -> Tensor:
        reason = lpips_unavailable_reason()
        if reason is None and min(img1.shape[-2:]) < LPIPS_MIN_SIZE:
            reason = f"images of {tuple(img1.shape[-2:])} are below the {LPIPS_MIN_SIZE}-pixel minimum"
        if reason is not None:
            if not self._warned:
                logger.warning("LPIPS reported as NaN: %s", reason)
                self._warned = True
            return img1.new_full(() if self.reduction in ("mean", "sum") else img1.shape[:1], float("nan"))
        if self.normalize:
            img1, img2 = img1 * 2 - 1, img2 * 2 - 1
        with torch.no_grad():
            scores = shared_lpips().to(img1.device)(img1.float(), img2.float())
        if self.reduction == "mean":
            return scores.mean()
        if self.reduction == "sum":
            return scores.sum()
        return scores


def install_offline_lpips() -> bool:
    """Make ``torchmetrics.image.lpip.LearnedPerceptualImagePatchSimilarity`` the offline drop-in, but only
    when the converted weights load; returns whether it is installed.

    Without the weights (``eugen-eval setup-lpips`` not run) torchmetrics is left exactly as it is, so stock
    models keep their stock LPIPS (which downloads its backbone) and nothing ever reports a silent NaN.
    nerfstudio's models import the class inside ``populate_modules`` (``from torchmetrics.image.lpip
    import ...``), so replacing the attribute on torchmetrics' modules covers every stock model, and any
    module that already bound the name at import time is patched too. Idempotent.
    """
    import torchmetrics.image.lpip

    original = torchmetrics.image.lpip.LearnedPerceptualImagePatchSimilarity
    if original is OfflineLPIPSMetric:
        return True
    reason = lpips_unavailable_reason()
    if reason is not None:
        logger.debug("offline LPIPS not installed: %s", reason)
        return False
    for module in list(sys.modules.values()):
        if getattr(module, "__dict__", {}).get("LearnedPerceptualImagePatchSimilarity") is original:
            module.LearnedPerceptualImagePatchSimilarity = OfflineLPIPSMetric  # type: ignore[attr-defined]
    return True
