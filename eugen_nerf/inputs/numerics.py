"""Non-finite values stop a run with a message naming where they appeared (never a silent NaN image or metric).

Where a step can be skipped (a training step), the user chooses: ``abort`` (default) or ``skip``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def cpu_denormals_flushed(device: str | torch.device) -> Iterator[None]:
    """On the CPU, flush denormal floats to zero inside the block, then return to PyTorch's default (kept).

    Late in training many gradients fall below float32's smallest normal number (about 1.2e-38). x86 CPUs
    compute with such denormals many times slower than with normal numbers, so a trained field's backward
    pass gets severalfold slower than a fresh one's; flushed to zero, they change nothing a float32 model can
    represent. GPUs flush already, so elsewhere this does nothing. The mode is the calling thread's.
    """
    if torch.device(device).type != "cpu" or not torch.set_flush_denormal(True):
        yield
        return
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
