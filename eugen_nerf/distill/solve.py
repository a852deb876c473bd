"""Closed-form solve of one layer (spec section 3) with the ridge chosen on held-out pairs.

The fit is ``Aᵀ = (FᵀF + λI)⁻¹ FᵀY`` with the intercept solved for, from the training statistics.
R² is reported on the held-out pairs, pooled over outputs (``1 - Σ residual / Σ variance``): per-output
R² is meaningless for outputs that barely vary (dead ReLU units), the pooled one is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Sequence

import torch
from torch import Tensor

from eugen_nerf.distill.capture import LayerEquations
from eugen_nerf.layers import NormalEquations
from eugen_nerf.inputs.numerics import check_finite


@dataclass
class LayerFit:
    """The fitted ``A``, ``c`` of one layer and how well they fit."""

    path: str
    weight: Tensor
    bias: Tensor
    ridge: float
    r2_heldout: float
    r2_train: float
    pairs_train: int
    pairs_heldout: int

    def state_dict(self) -> Dict[str, object]:
        return dict(vars(self))

    @classmethod
    def from_state_dict(cls, state: Dict[str, object]) -> "LayerFit":
        return cls(**state)

    def summary(self) -> Dict[str, object]:
        """JSON-ready description (no tensors)."""
        return {key: value for key, value in vars(self).items() if not isinstance(value, Tensor)}


def pooled_r2(equations: NormalEquations, weight: Tensor, bias: Tensor) -> float:
    """``1 - Σ_k residual_k / Σ_k variance_k`` on the pairs accumulated in ``equations``."""
    if equations.count < 2:
        return float("nan")
    per_output = equations.r2(weight, bias)
    total = equations.target_sq_sum - equations.target_sum.square() / equations.count
    total = total.clamp_min(torch.finfo(total.dtype).tiny)
    return float(1 - ((1 - per_output) * total).sum() / total.sum())


def solve_layer(eq: LayerEquations, ridges: Sequence[float]) -> LayerFit:
    """Solve with each ridge on the training pairs; keep the best held-out R²."""
    best = None
    for ridge in ridges:
        solution = eq.train.solve(ridge)
        score = pooled_r2(eq.heldout, solution.weight, solution.bias)
        if best is None or score > best[0] or (math.isnan(best[0]) and not math.isnan(score)):
            best = (score, solution)
    score, solution = best
    check_finite(solution.weight, f"layer {eq.ref.path}: fitted matrix A (ridge {solution.ridge:g})")
    check_finite(solution.bias, f"layer {eq.ref.path}: fitted bias c (ridge {solution.ridge:g})")
    return LayerFit(
        path=eq.ref.path,
        weight=solution.weight,
        bias=solution.bias,
        ridge=solution.ridge,
        r2_heldout=score,
        r2_train=pooled_r2(eq.train, solution.weight, solution.bias),
        pairs_train=int(eq.train.count),
        pairs_heldout=int(eq.heldout.count),
    )
