"""``eugen-fit-image --sine-basis``: the EUGen SIREN trained with ``A`` held as ``V = G A / ω`` computes the same
function, stores ``A`` when done, and steps differently from the plain basis."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from eugen_nerf.fields.siren import SIREN_OMEGA_0, SirenEUGenSpec
from eugen_nerf.inputs.errors import InputError
from eugen_nerf.layers import EUGenLinear
from eugen_nerf.siren.fit_image import FitImageConfig, build_siren, fit, main
from eugen_nerf.siren.image import load_image, pixel_grid
from eugen_nerf.siren.sine_basis import SineBasisWeights, hold_in_sine_basis, store_weights

pytestmark = pytest.mark.usefixtures("one_thread")

# the wide EUGen SIREN of the README (h = w/2, m = 2w, started as SIREN), at a test's size
WIDE = SirenEUGenSpec(
    num_features=32,
    trainable_projections=False,
    projection="orthogonal",
    learn_first_projections=True,
    readout=True,
    init="siren",
    projection_scale=SIREN_OMEGA_0,
    projection_lr_scale=30.0,
)
CONFIG = FitImageConfig(layers="eugen", width=8, size=16, eugen=WIDE, lr=3e-3, lr_schedule="cosine")


def wide_network():
    return build_siren(CONFIG, out_dim=1).double()


def test_holding_a_in_the_sine_basis_keeps_the_function_and_storing_it_back_keeps_it_again() -> None:
    model, plain = wide_network(), wide_network()
    x = pixel_grid(16, 16).double()
    assert hold_in_sine_basis(model, SIREN_OMEGA_0) == 2  # the layers read by the two frozen G
    assert [isinstance(m, SineBasisWeights) for m in model.layers] == [False, True, True, False]
    assert model.layers[1].sine_weight.shape == (32, 32)  # V is m × m while A is h × m
    with torch.no_grad():
        torch.testing.assert_close(model(x), plain(x), atol=1e-9, rtol=0)
        for layer in model.layers:  # any V: storing writes the A that computes it
            if isinstance(layer, SineBasisWeights):
                layer.sine_weight.add_(0.01 * torch.randn_like(layer.sine_weight))
        moved = model(x)
    store_weights(model)
    assert all(isinstance(m, (torch.nn.Linear, EUGenLinear)) for m in model.layers)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in plain.parameters())
    with torch.no_grad():
        torch.testing.assert_close(model(x), moved, atol=1e-9, rtol=0)
        assert (model(x) - plain(x)).abs().max() > 1e-4


def test_a_step_on_v_moves_g_a_by_its_projection_onto_g_columns() -> None:
    model = wide_network()
    after = model.layers[2]
    hold_in_sine_basis(model, SIREN_OMEGA_0, rate=0.5)
    layer = model.layers[1]
    g = after.projections[:, : after.in_features].double()
    step = torch.randn_like(layer.sine_weight)
    a = layer.back @ layer.sine_weight
    moved = layer.back @ (layer.sine_weight + step)
    projection = g @ torch.linalg.pinv(g)
    torch.testing.assert_close(g @ (moved - a), SIREN_OMEGA_0 * 0.5 * projection @ step, atol=1e-6, rtol=1e-6)


def test_fit_in_the_sine_basis_learns_stores_a_and_differs_from_the_plain_basis() -> None:
    target = torch.from_numpy(load_image("camera", 16))
    results = {}
    for basis in (False, True):
        model = build_siren(CONFIG, out_dim=1)
        results[basis] = fit(model, target, 30, 3e-3, 10, WIDE, progress=False, sine_basis=basis)
        assert not any(isinstance(m, SineBasisWeights) for m in model.layers)
    plain, sine = results[False], results[True]
    assert sine.history[-1][1] > sine.history[0][1] + 3.0  # it learns
    assert sine.num_parameters == plain.num_parameters  # what is stored is A
    assert abs(sine.final_psnr - plain.final_psnr) > 1e-3  # Adam steps in another basis


def test_the_sine_basis_refuses_a_network_without_frozen_projections(tmp_path: Path) -> None:
    for layers, spec in (("dense", SirenEUGenSpec()), ("eugen", SirenEUGenSpec(num_features=8))):
        config = replace(CONFIG, output=tmp_path / "fit", layers=layers, eugen=spec, steps=2, sine_basis=True)
        with pytest.raises(InputError, match="--sine-basis needs"):
            main(config)
        assert not (tmp_path / "fit").exists()
