"""Non-finite values stop a run with a message naming where they appeared (never a silent NaN image or metric).

Where a step can be skipped (a training step), the user chooses: ``abort`` (default) or ``skip``.
"""

from __future__ import annotations

from typing import Literal

import torch

from eugen_nerf.inputs.errors import NumericalError

OnNonFinite = Literal["abort", "skip"]


def count_non_finite(tensor: torch.Tensor) -> int:
    return int((~torch.isfinite(tensor.detach())).sum())


def check_finite(tensor: torch.Tensor, where: str) -> None:
    """:class:`NumericalError` naming ``where`` when ``tensor`` holds NaN or infinite values."""
    bad = count_non_finite(tensor)
    if bad:
        raise NumericalError(f"{where}: {bad} of {tensor.numel()} values are NaN or infinite")


def check_losses(losses: dict[str, torch.Tensor], step: int) -> str | None:
    """The name of the first non-finite loss at ``step`` (``None`` when all are finite)."""
    for name, value in losses.items():
        if not bool(torch.isfinite(value.detach()).all()):
            return name
    return None


def non_finite_loss(name: str, value: torch.Tensor, step: int) -> NumericalError:
    return NumericalError(
        f"step {step}: loss '{name}' is {float(value.detach().float().flatten()[0])} (non-finite); "
        "stopped before the optimiser step (lower the learning rate, or pass --on-non-finite skip)"
    )
