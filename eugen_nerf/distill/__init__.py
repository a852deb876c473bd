"""Closed-form distillation of a trained nerfstudio field into EUGen layers (spec section 3)."""

from eugen_nerf.distill.options import DistillError, DistillInterrupted, DistillOptions

__all__ = ["DistillError", "DistillInterrupted", "DistillOptions"]
