"""Projections taken from a dense layer's own units (``eugen_nerf.layers.alignment``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from eugen_nerf.layers import EUGenLinear, pivoted_units, unit_projections


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
        torch.testing.assert_close(features[:, (order - 1) * 4: order * 4], z.detach() ** order, rtol=1e-4, atol=1e-5)


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
