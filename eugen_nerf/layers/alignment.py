"""Projections taken from a trained dense layer's own units, for distilling that layer.

Random Gaussian ``G`` is what makes an EUGen layer an unbiased estimate of a *polynomial* dense layer.
A ReLU layer ``ReLU(Wx + b)`` is not one, and the distilled layer must reproduce the kink with a
degree-``k`` polynomial of its features. Random projections spread that effort over random directions of
``x⁺``; the teacher's own rows ``w⁺_s = [w_s; b_s; 0]`` put it where the units are: with every order's
rows set to the same ``w⁺_s``, order ``i`` carries ``z_s^i`` (times ``rms(x⁺)^{1-i}`` under the layer's
``linear`` scaling), a per-unit polynomial of the teacher's own pre-activation ``z_s = w_sᵀx + b_s``.

Which ``m`` units: the ones a pivoted Cholesky factorisation of the pre-activations' centred Gram matrix
picks first, i.e. those whose pre-activations are, greedily, the least linearly predictable from the ones
already chosen (the column order of a pivoted QR of the pre-activation matrix, from its Gram alone, so it
can be accumulated over batches).

Why ``relu``, ``polynomial`` scaling and no norm entry go with it: with the ReLU map, order 1 *is* the
teacher's activation ``ReLU(z_s)`` for the chosen units, so the closed form starts from the teacher's own
features (on a trained NeRF teacher it renders far closer to the teacher than a seeded Gaussian ``G``, and
closer than the same units with the identity map). The norm entry of a unit row is 0, and ``polynomial``
scaling needs no ``‖x‖``, so a merged chain step carries no norm rows, and the fused form projects once for
every order (:func:`order_rows`): the layer costs ``m`` projection rows, not ``2·k·m``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from eugen_nerf.layers.eugen import EUGenLinear


def pivoted_units(gram: Tensor, count: int) -> Tensor:
    """Indices of the first ``count`` pivots of a pivoted Cholesky factorisation of ``gram`` (``l x l``,
    symmetric positive semi-definite): greedily, the column with the largest variance left unexplained by
    the columns already chosen. Returns ``min(count, l)`` distinct indices."""
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1]:
        raise ValueError(f"gram must be a square matrix, got shape {tuple(gram.shape)}")
    size = gram.shape[0]
    count = min(int(count), size)
    gram = gram.double()
    residual = gram.diagonal().clone()
    factor = torch.zeros(size, count, dtype=torch.float64, device=gram.device)
    chosen = torch.zeros(size, dtype=torch.bool, device=gram.device)
    picks = []
    for i in range(count):
        pivot = int(torch.where(chosen, torch.full_like(residual, -float("inf")), residual).argmax())
        picks.append(pivot)
        chosen[pivot] = True
        left = residual[pivot]
        if left > 1e-12 * gram.diagonal().max().clamp_min(1e-300):
            column = (gram[:, pivot] - factor[:, :i] @ factor[pivot, :i]) / left.sqrt()
            factor[:, i] = column
            residual = (residual - column.square()).clamp_min(0)
    return torch.tensor(picks, dtype=torch.long)


def unit_projections(layer: EUGenLinear, dense: nn.Linear, units: Tensor, pair_shift: int = 0) -> Tensor:
    """The projections of ``layer`` with the rows of ``dense``'s ``units`` in every order's matrix.

    Rows are ``w⁺_s / ‖w⁺_s‖`` times the layer's ``projection_scale``, the norm of a seeded Gaussian row, so
    each factor stays O(1) as the layer's scaling expects. When ``m`` exceeds the number of units, the rows
    beyond them keep the layer's seeded draw. With ``pair_shift`` s > 0, order ``i``'s rows are order 1's
    moved ``(i - 1)·s`` places down (cyclically), so with s = 1 (``eugen-distill --projections
    teacher-pairs``) feature ``j`` of order 2 is ``z_j · z_{j-1}``: the product of a unit with the unit
    pivoted just before it, where s = 0 (the same rows in every order) gives ``z_j²``. The rows are still the
    ``m`` units' (:func:`order_rows`), so the fused form projects them once either way. On a trained NeRF
    teacher, pairs reproduced the teacher's render more closely than powers.
    """
    if dense.in_features != layer.in_features:
        raise ValueError(f"dense layer has {dense.in_features} inputs, the EUGen layer {layer.in_features}")
    units = torch.as_tensor(units, dtype=torch.long).reshape(-1)[: layer.num_features]
    if units.numel() and (units.min() < 0 or units.max() >= dense.out_features):
        raise ValueError(f"units must index the dense layer's {dense.out_features} outputs")
    weight = dense.weight.detach().double().cpu()
    bias = (
        dense.bias.detach().double().cpu()
        if dense.bias is not None
        else torch.zeros(dense.out_features, dtype=torch.float64)
    )
    rows = torch.cat([weight, bias[:, None]], dim=1)[units]
    if layer.use_norm:
        rows = torch.cat([rows, torch.zeros(rows.shape[0], 1, dtype=torch.float64)], dim=1)
    rows = rows / rows.norm(dim=1, keepdim=True).clamp_min(1e-12) * layer.projection_scale
    projections = layer.projections.detach().double().cpu().clone()
    projections = projections.view(layer.num_projection_matrices, layer.num_features, layer.augmented_dim)
    projections[:, : rows.shape[0]] = rows
    if pair_shift:
        if not layer.shared_projections:
            raise ValueError("pairs of units need one projection matrix per order (shared_projections)")
        for order in range(1, layer.degree):
            projections[order] = projections[0].roll(order * pair_shift, 0)
    return projections.reshape(-1, layer.augmented_dim).to(layer.projections)


def order_rows(layer: EUGenLinear) -> Tensor | None:
    """``(k, m)`` indices when every order's projection rows are rows of the first order's (the teacher's
    units, as :func:`unit_projections` makes them: row ``j`` of order ``i`` is order 1's row
    ``order_rows[i, j]``), else None (a seeded ``G``). The fused form then projects onto the ``m`` first-order
    rows once."""
    if not layer.shared_projections or layer.degree < 2:
        return None
    blocks = layer.projections.detach().view(layer.degree, layer.num_features, -1)
    rows = [torch.arange(layer.num_features, device=blocks.device)]
    for order in range(1, layer.degree):
        if torch.equal(blocks[order], blocks[0]):
            rows.append(rows[0])
            continue
        same = (blocks[order][:, None, :] == blocks[0][None, :, :]).all(-1)  # [j, r]: order's row j is row r
        if not bool(same.any(1).all()):
            return None
        rows.append(same.int().argmax(1))
    return torch.stack(rows)


def tie_order_gradients_(layer: EUGenLinear, rows: Tensor | None) -> None:
    """Give every copy of a first-order row (``rows``, from :func:`order_rows`) the sum of its copies'
    gradients, so rows that start equal get equal optimiser updates and the orders stay one projection while
    ``G`` is trained. Nothing to do when ``rows`` is None."""
    grad = layer.projections.grad
    if grad is None or rows is None:
        return
    blocks = grad.view(layer.degree, layer.num_features, -1)
    total = torch.zeros_like(blocks[0])
    for order in range(layer.degree):
        total.index_add_(0, rows[order].to(total.device), blocks[order])
    for order in range(layer.degree):
        blocks[order].copy_(total[rows[order].to(total.device)])
