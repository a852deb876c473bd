"""Closed-form solve of one layer (spec section 3) with the ridge chosen on held-out pairs, and the paper's
optional refinement of ``G`` and ``A`` by gradient descent on the same layer loss.

The fit is ``Aᵀ = (FᵀF + λI)⁻¹ FᵀY`` with the intercept solved for, from the training statistics.
R² is reported on the held-out pairs, pooled over outputs (``1 - Σ residual / Σ variance``): per-output
R² is meaningless for outputs that barely vary (dead ReLU units), the pooled one is not.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from eugen_nerf.distill.capture import LayerEquations
from eugen_nerf.inputs.numerics import check_finite
from eugen_nerf.layers import LowRankLinear, order_rows, tie_order_gradients_


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
    projections: Tensor | None = None
    """Refined ``G`` (``None``: the layer's seeded projections)."""
    r2_heldout_closed_form: float | None = None
    """Held-out R² before the refinement (``None`` when not refined). When the refinement was kept, both R²
    are measured on the refinement's held-out rows; otherwise both are the closed form's."""

    def state_dict(self) -> dict[str, object]:
        return dict(vars(self))

    @classmethod
    def from_state_dict(cls, state: dict[str, object]) -> LayerFit:
        return cls(**state)

    def summary(self) -> dict[str, object]:
        """JSON-ready description (no tensors)."""
        return {key: value for key, value in vars(self).items() if not isinstance(value, Tensor)}


def solve_layer(eq: LayerEquations, ridges: Sequence[float]) -> LayerFit:
    """Solve with each ridge on the training pairs; keep the best held-out R². A low-rank layer's solution is
    reduced to its rank first (reduced-rank regression), so the ridge is chosen for what the layer can hold."""
    rank = eq.layer.rank if isinstance(eq.layer, LowRankLinear) else None
    best = None
    for ridge in ridges:
        solution = eq.train.solve(ridge)
        if rank is not None:
            solution = eq.train.reduce_rank(solution, rank)
        score = eq.heldout.pooled_r2(solution.weight, solution.bias)
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
        r2_train=eq.train.pooled_r2(solution.weight, solution.bias),
        pairs_train=int(eq.train.count),
        pairs_heldout=int(eq.heldout.count),
    )


def rows_r2(layer, inputs: Tensor, targets: Tensor) -> float:
    """Pooled R² of ``layer`` on rows (as :meth:`NormalEquations.pooled_r2` on statistics)."""
    with torch.no_grad():
        residual = (layer(inputs) - targets).square().sum()
        total = (targets - targets.mean(0)).square().sum().clamp_min(torch.finfo(targets.dtype).tiny)
    return float(1 - residual / total)


def refine_layer(
    eq: LayerEquations, fit: LayerFit, steps: int, lr: float, seed: int, batch_rows: int = 4096
) -> LayerFit:
    """Train ``G``, ``A`` and ``c`` of the layer from the closed-form solution for ``steps`` Adam steps on the
    kept rows (mean squared error, cosine-decayed ``lr``); keep the result only if the held-out rows fit
    better than they did in closed form."""
    inputs, targets = eq.rows.tensors()
    held_inputs, held_targets = eq.heldout_rows.tensors()
    layer = copy.deepcopy(eq.layer).float().cpu().train()
    with torch.no_grad():
        layer.weight.copy_(fit.weight)
        layer.bias.copy_(fit.bias)
    before = rows_r2(layer, held_inputs, held_targets)
    rows = order_rows(layer)  # the teacher's units in every order: refined, they stay one projection
    optimizer = torch.optim.Adam(layer.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps, eta_min=lr * 0.01)
    generator = torch.Generator().manual_seed(seed)
    with torch.enable_grad():
        for _ in range(steps):
            pick = torch.randint(inputs.shape[0], (min(batch_rows, inputs.shape[0]),), generator=generator)
            loss = (layer(inputs[pick]) - targets[pick]).square().mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            tie_order_gradients_(layer, rows)
            optimizer.step()
            schedule.step()
    layer.eval()
    after = rows_r2(layer, held_inputs, held_targets)
    check_finite(layer.weight.detach(), f"layer {eq.ref.path}: refined matrix A")
    check_finite(layer.projections.detach(), f"layer {eq.ref.path}: refined projections G")
    if not after > before:
        return LayerFit(
            **{
                **vars(fit),
                "projections": eq.layer.projections.detach().clone(),
                "r2_heldout_closed_form": fit.r2_heldout,
            }
        )
    dtype = fit.weight.dtype
    # both on the held-out rows
    return LayerFit(
        **{
            **vars(fit),
            "weight": layer.weight.detach().to(dtype),
            "bias": layer.bias.detach().to(dtype),
            "projections": layer.projections.detach().clone(),
            "r2_heldout": after,
            "r2_heldout_closed_form": before,
        }
    )
