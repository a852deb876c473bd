"""Projections taken from a dense layer's own units (``eugen_nerf.layers.alignment``)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from eugen_nerf.layers import (
    EUGenLinear,
    EUGenMLP,
    EUGenSpec,
    order_rows,
    pivoted_units,
    tie_order_gradients_,
    unit_projections,
)


def test_pivots_never_pick_a_copy_before_an_independent_unit():
    generator = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(500, generator=generator) * s for s in (3.0, 2.0, 1.0))
    z = torch.stack([a, b, 2 * a, c, a + b], dim=1)  # units 2 and 4 are combinations of 0 and 1
    z = z - z.mean(0)
    order = pivoted_units(z.T @ z, 5).tolist()
    assert order[0] == 2  # the largest variance first (2a)
    assert order[1] in (1, 4)  # then b's variance, which b and a + b both hold beyond a
    assert order[2] == 3, "the independent unit c was ranked below a combination of the chosen ones"
    assert sorted(order) == [0, 1, 2, 3, 4]
    assert pivoted_units(z.T @ z, 9).numel() == 5  # no more units than there are


def test_each_order_carries_the_chosen_units_pre_activation_to_its_power():
    torch.manual_seed(0)
    dense = nn.Linear(6, 10)
    layer = EUGenLinear(6, 10, num_features=4, degree=3, scaling="polynomial")
    units = torch.tensor([7, 2, 5, 0])
    with torch.no_grad():
        layer.projections.copy_(unit_projections(layer, dense, units))
    x = torch.randn(50, 6)
    norms = torch.cat([dense.weight, dense.bias[:, None]], 1)[units].norm(dim=1)
    z = dense(x)[:, units] / norms  # unit rows: each factor is the unit's pre-activation over its row norm
    features = layer.features(x).detach()
    for order in range(1, 4):
        torch.testing.assert_close(
            features[:, (order - 1) * 4 : order * 4], z.detach() ** order, rtol=1e-4, atol=1e-5
        )


def test_rows_beyond_the_units_keep_the_seeded_draw():
    dense = nn.Linear(5, 3)
    layer = EUGenLinear(5, 3, num_features=6, degree=2)
    seeded = layer.projections.clone().view(2, 6, -1)
    aligned = unit_projections(layer, dense, pivoted_units(torch.eye(3), 6)).view(2, 6, -1)
    torch.testing.assert_close(aligned[:, 3:], seeded[:, 3:])
    assert not torch.allclose(aligned[:, :3], seeded[:, :3])
    torch.testing.assert_close(aligned[:, :3].norm(dim=-1), torch.ones(2, 3))


def test_mismatched_layers_and_units_are_refused():
    layer = EUGenLinear(5, 3, num_features=2)
    with pytest.raises(ValueError, match="inputs"):
        unit_projections(layer, nn.Linear(4, 3), torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="index"):
        unit_projections(layer, nn.Linear(5, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match="square"):
        pivoted_units(torch.ones(2, 3), 1)


def _unit_trunk(scaling: str, use_norm: bool, degree: int = 2, pairs: bool = False) -> EUGenMLP:
    """A trunk whose layers 1, 2 (a merged chain) and 4 (after the skip) have the teacher's units in every
    order, as ``eugen-distill --projections teacher`` (``teacher-pairs`` with ``pairs``) builds them."""
    torch.manual_seed(0)
    spec = EUGenSpec(
        num_features=8,
        degree=degree,
        feature_map="relu",
        scaling=scaling,
        use_norm=use_norm,
        trainable_projections=True,
    )
    mlp = EUGenMLP(
        in_dim=12,
        num_layers=6,
        layer_width=32,
        out_dim=4,
        skip_connections=(4,),
        layer_types=["dense", "eugen", "eugen", "dense", "eugen", "dense"],
        eugen=spec,
    )
    with torch.no_grad():
        for index in (1, 2, 4):
            layer = mlp.layers[index]
            dense = nn.Linear(layer.in_features, 32)
            layer.projections.copy_(
                unit_projections(layer, dense, torch.arange(3, 11), pair_shift=int(pairs))
            )
    return mlp.double().eval()


@pytest.mark.parametrize("scaling, use_norm", [("linear", True), ("polynomial", False), ("unit", True)])
@pytest.mark.parametrize("degree", [2, 3])
@pytest.mark.parametrize("pairs", [False, True])
def test_fused_form_projects_repeated_orders_once_and_equals_the_unfused_form(
    scaling, use_norm, degree, pairs
):
    mlp = _unit_trunk(scaling, use_norm, degree, pairs)
    for i in (1, 2, 4):  # powers: every order is order 1's rows; pairs: order i is them i - 1 places down
        rows = order_rows(mlp.layers[i])
        assert rows is not None and rows.shape == (degree, 8)
        for order in range(degree):
            assert rows[order].tolist() == torch.arange(8).roll(order if pairs else 0).tolist()
    x = torch.randn(300, 12, dtype=torch.float64)
    with torch.no_grad():
        fused, unfused = mlp(x), mlp.forward_unfused(x)
        steps = mlp.fused().steps
    for i in (1, 2, 4):
        assert steps[i].factors is not None and steps[i].weight.shape[0] == 8 + steps[i].norm_rows
    assert steps[0].factors is None and steps[3].factors is None
    if pairs and not use_norm:  # order 2 of feature j is ReLU(z_j * z_(j-1)), not of z_j squared
        layer, h = mlp.layers[1], torch.randn(5, 32, dtype=torch.float64)
        z = torch.cat([h, torch.ones(5, 1, dtype=torch.float64)], 1) @ layer.projections[:8].T
        torch.testing.assert_close(layer.features(h)[:, 8:16], torch.relu(z * z.roll(1, 1)))
    assert ((fused - unfused).norm() / unfused.norm()).item() < 1e-10
    with torch.enable_grad():  # the out-of-place path (autograd on) computes the same
        grad_path = mlp(x.requires_grad_(True))
    torch.testing.assert_close(grad_path.detach(), fused)


def test_seeded_orders_do_not_repeat():
    layer = EUGenLinear(12, 16, num_features=8, degree=2)
    assert order_rows(layer) is None
    assert order_rows(EUGenLinear(12, 16, num_features=8, degree=1)) is None


@pytest.mark.parametrize("pairs", [False, True])
def test_tied_gradients_keep_repeated_orders_one_projection_under_adam(pairs):
    torch.manual_seed(0)
    mlp = _unit_trunk("linear", True, pairs=pairs)
    layer = mlp.layers[1].float().train()
    rows = order_rows(layer)
    x, target = torch.randn(256, 32), torch.randn(256, 32)
    for tie in (True, False):
        trained = copy.deepcopy(layer)
        optimizer = torch.optim.Adam(trained.parameters(), lr=1e-2)
        for _ in range(5):
            optimizer.zero_grad()
            (trained(x) - target).square().mean().backward()
            if tie:
                tie_order_gradients_(trained, rows)
            optimizer.step()
        assert not torch.equal(trained.projections, layer.projections)  # G was trained
        kept = order_rows(trained)
        assert (kept is not None and torch.equal(kept, rows)) == tie


def test_projected_scaling_with_repeated_teacher_rows_fuses_exactly():
    """Order 2 repeating some of order 1's rows (not a permutation of them): the projected scaling's rms is
    over all k*m rows, so the fused form projects every order instead of the m first-order rows."""
    from eugen_nerf.layers import EUGenMLP, EUGenSpec

    torch.manual_seed(0)
    spec = EUGenSpec(num_features=8, degree=2, scaling="projected", use_norm=False)
    mlp = EUGenMLP(6, 3, 16, 4, layer_types=("dense", "eugen", "dense"), eugen=spec).double().eval()
    layer = mlp.layers[1]
    with torch.no_grad():
        blocks = layer.projections.view(2, 8, -1)
        blocks[1] = blocks[0][torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])]
    x = torch.randn(64, 6, dtype=torch.float64)
    torch.testing.assert_close(mlp(x), mlp.forward_unfused(x))
