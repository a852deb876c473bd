"""Evaluation of trained fields: image metrics with offline LPIPS, honest speed, size (``eugen-eval``).

``install_offline_lpips()`` and ``allow_numpy_checkpoints()`` make stock nerfstudio commands work
offline under torch >= 2.6; call them before nerfstudio builds a model or loads a checkpoint.
"""

from __future__ import annotations

import importlib

__all__ = ["allow_numpy_checkpoints", "install_offline_lpips"]
_HOMES = {"allow_numpy_checkpoints": "checkpoints", "install_offline_lpips": "lpips"}


def __getattr__(name: str):
    """Import the two helpers on first use, so that ``eugen_nerf.eval.timing`` needs torch alone (the CUDA
    benchmark runs where torchmetrics is not installed)."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"eugen_nerf.eval.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
