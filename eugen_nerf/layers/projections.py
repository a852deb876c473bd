"""Random projection matrices drawn from a seed.

Frozen EUGen projections are never stored in checkpoints: they are regenerated from
``(seed, shape, kind)`` on the CPU with a private generator, so the same seed gives the same
matrix on every device and every run.
"""

from __future__ import annotations

from typing import Literal

import torch

ProjectionKind = Literal["gaussian", "orthogonal"]
PROJECTION_KINDS = ("gaussian", "orthogonal")


def gaussian_projections(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """Rows i.i.d. N(0, I): the setting of the unbiasedness theorem."""
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64)


def orthogonal_projections(rows: int, cols: int, generator: torch.Generator) -> torch.Tensor:
    """Block-orthogonal rows with chi-distributed norms.

    Each block of ``cols`` rows is a Haar-random orthonormal basis; rows are rescaled by the norm
    of an independent Gaussian vector, so every row is marginally N(0, I) (estimates stay unbiased)
    while rows inside a block are exactly orthogonal (lower variance).
    """
    blocks = []
    for start in range(0, rows, cols):
        gaussian = torch.randn(cols, cols, generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(gaussian)
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)  # make the QR draw Haar-distributed
        blocks.append(q.T[: min(cols, rows - start)])
    norms = torch.randn(rows, cols, generator=generator, dtype=torch.float64).norm(dim=1, keepdim=True)
    return torch.cat(blocks, dim=0) * norms


def draw_projections(
    num_matrices: int,
    rows: int,
    cols: int,
    seed: int,
    kind: ProjectionKind = "gaussian",
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Deterministic stack of ``num_matrices`` independent ``rows x cols`` projections for ``seed``.

    Matrices are drawn one after the other (never as slices of one orthogonal block), so the
    factors ``G_1 x, G_2 x, ...`` multiplied inside one EUGen feature are independent, as the
    unbiasedness argument needs. Always drawn in float64 on the CPU (the same draws on every machine), then
    cast to the requested dtype (float32 unless told).
    """
    if kind not in PROJECTION_KINDS:
        raise ValueError(f"projection must be one of {PROJECTION_KINDS}, got {kind!r}")
    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    draw = gaussian_projections if kind == "gaussian" else orthogonal_projections
    return torch.stack([draw(rows, cols, generator) for _ in range(num_matrices)]).to(dtype)
