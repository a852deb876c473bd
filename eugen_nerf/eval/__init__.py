"""Evaluation of trained fields: image metrics with offline LPIPS, honest speed, size (``eugen-eval``).

``install_offline_lpips()`` and ``allow_numpy_checkpoints()`` make stock nerfstudio commands work
offline under torch >= 2.6; call them before nerfstudio builds a model or loads a checkpoint.
"""

from eugen_nerf.eval.checkpoints import allow_numpy_checkpoints
from eugen_nerf.eval.lpips import install_offline_lpips

__all__ = ["allow_numpy_checkpoints", "install_offline_lpips"]
