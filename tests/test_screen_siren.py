"""``scripts/screen_siren.py``: each screen changes the shipped EUGen SIREN in the one way it names, and the
screens' JSON keeps what ran before (figures in docs/siren-isdf.md come from it)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from functools import partial

import pytest
import torch
from _scripts import ROOT, run_main
from test_sine_basis import WIDE

from eugen_nerf.eval.size import count_parameters  # frozen projections are buffers: not counted
from eugen_nerf.layers import EUGenLinear
from eugen_nerf.siren.image import load_image, pixel_grid

sys.path.insert(0, str(ROOT / "scripts"))
from screen_siren import (
    SCREENS,
    GainedSine,
    ProductSine,
    ScreenSiren,
    SineBasisWeights,
    frozen_layers,
    run_screen,
    screened_network,
    stored_parameters,
    tuned_dense,
)

from eugen_nerf.siren.fit_image import FitImageConfig, fit, main

SHIPPED_PARAMETERS = 50_049  # the dense SIREN's count at width 128, which the shipped network matches


@pytest.fixture(scope="module")
def coords():
    return pixel_grid(16, 16)


def test_the_unchanged_network_is_the_shipped_one_and_has_two_frozen_layers():
    model, _, lr = screened_network(None, seed=1, channels=1)
    assert count_parameters(model) == SHIPPED_PARAMETERS and lr == 3e-3
    assert frozen_layers(model) == [2, 3]  # the first EUGen layer learns its G; the last is the readout


@pytest.mark.parametrize(
    "name, extra",
    [
        ("readout", 3 * 128),
        ("products", 0),
        ("products-half-frequency", 0),
        ("norm", 0),
        ("gain", 2 * 128),
        ("input-features", -451),  # h = 63 keeps it under the dense count
        ("input-features-full-rate", -451),
        ("dense-start", 0),
        ("dense-start-unrotated", 0),
        ("wide", -64),  # the wide variant's own count
        ("wide-a-rate-0.7", -64),
        ("wide-sine-basis", -64),
        ("wide-sine-basis-0.5", -64),
        ("input-features-sine-basis", -451),
        ("mid-sine-basis", -268),  # h = 96, m = 170: the most sine units under the dense count at that h
    ],
)
def test_each_screen_costs_the_parameters_it_says_and_starts_finite(name, extra, coords):
    model, _, _ = screened_network(name, seed=1, channels=1)
    assert stored_parameters(model) == SHIPPED_PARAMETERS + extra
    model.eval()  # unfused: the wrappers have no merged form
    with torch.no_grad():
        out = model(coords)
    assert out.shape == (coords.shape[0], 1) and torch.isfinite(out).all()


def test_the_gain_starts_as_the_shipped_network_and_products_do_not(coords):
    shipped, _, _ = screened_network(None, seed=1, channels=1)
    gained, _, _ = screened_network("gain", seed=1, channels=1)
    product, _, _ = screened_network("products", seed=1, channels=1)
    assert all(isinstance(gained.layers[i], GainedSine) for i in (2, 3))
    assert all(isinstance(product.layers[i], ProductSine) for i in (2, 3))
    shipped.train(), gained.train(), product.train()
    with torch.no_grad():
        torch.testing.assert_close(gained(coords), shipped(coords))
        assert not torch.allclose(product(coords), shipped(coords))


def test_the_input_features_screen_makes_every_layer_eugen_with_only_the_input_g_learned(coords):
    model, spec, _ = screened_network("input-features", seed=1, channels=1)
    assert all(isinstance(layer, EUGenLinear) for layer in model.layers)
    assert [layer.trainable_projections for layer in model.layers] == [True, False, False, False]
    assert [layer.num_features for layer in model.layers] == [256] * 4 and model.layer_width == 63
    assert not any(model.applies_activation(i) for i in range(4))  # each EUGen layer carries its sine
    assert spec.weight_lr_scale == 0.5
    assert screened_network("input-features-full-rate", seed=1, channels=1)[1].weight_lr_scale == 1.0
    first = model.layers[0].projections
    assert first[:, :2].abs().max() <= 15.0 and first[:, 2].abs().max() <= 30.0 / 2**0.5  # SIREN's x ω₀


def test_the_dense_start_computes_the_dense_siren_of_its_seed(coords):
    model, _, lr = screened_network("dense-start", seed=2, channels=1)
    dense, other = tuned_dense(seed=2, channels=1), tuned_dense(seed=1, channels=1)
    with torch.no_grad():
        torch.testing.assert_close(model(coords), dense(coords), atol=1e-5, rtol=0)
        assert not torch.allclose(model(coords), other(coords), atol=1e-3)
    assert lr == 3e-3 and count_parameters(model) == count_parameters(dense)


def test_with_an_unrotated_g_the_dense_start_takes_the_dense_sirens_steps(monkeypatch):
    """The diagnostic's premise: with each frozen ``G`` ω₀ times a signed permutation (no rotation), Adam on ``A``
    is Adam on the dense ``W`` (once ε, which weighs more on the learned ``G``, is taken out), so the two fits
    coincide; with the shipped orthogonal ``G`` they part."""
    monkeypatch.setattr(torch.optim, "Adam", partial(torch.optim.Adam, eps=1e-30))
    target = torch.rand(16, 16, 1)
    fits = {}
    for name in ("dense-start", "dense-start-unrotated"):
        model, spec, lr = screened_network(name, seed=1, channels=1)
        fits[name] = fit(model, target, 4, lr, 4, spec, progress=False).reconstruction
    dense = tuned_dense(seed=1, channels=1)
    dense_fit = fit(dense, target, 4, lr, 4, spec, progress=False).reconstruction
    unrotated = screened_network("dense-start-unrotated", seed=1, channels=1)[0]
    g = unrotated.layers[2].projections
    assert ((g != 0).sum(dim=1) == 1).all() and set(g.abs().unique().tolist()) == {0.0, 30.0}
    assert abs(fits["dense-start-unrotated"] - dense_fit).max() < 1e-4
    assert abs(fits["dense-start"] - dense_fit).max() > 1e-3


@pytest.mark.parametrize("name, rate", [("wide-sine-basis", 1.0), ("wide-sine-basis-0.5", 0.5)])
def test_the_sine_basis_holds_g_a_for_training_and_computes_the_wide_variant(name, rate, coords):
    """``V = G A / ω`` for each layer a frozen ``G`` reads (not the readout), the same function at the start,
    and a step on ``V``'s entries moves ``G A`` by ``rate`` times its projection onto ``G``'s columns."""
    model, spec, _ = screened_network(name, seed=1, channels=1)
    wide, _, _ = screened_network("wide-a-rate-0.7", seed=1, channels=1)
    assert [isinstance(m, SineBasisWeights) for m in model.layers] == [False, True, True, False]
    assert spec.weight_lr_scale == 1.0
    with torch.no_grad():
        torch.testing.assert_close(model(coords), wide(coords), atol=1e-5, rtol=0)
    layer, after = model.layers[2], model.layers[3]
    g = after.projections[:, : after.in_features].double()
    assert layer.sine_weight.shape == (256, 256) and layer.training_only == 256 * 256 + 256 - 64 * 256 - 64
    step = torch.randn(256, 256, dtype=torch.float64)
    a = layer.back.double() @ layer.sine_weight.double()
    moved = layer.back.double() @ (layer.sine_weight.double() + step)
    projection = g @ torch.linalg.pinv(g)
    torch.testing.assert_close(g @ (moved - a), 30.0 * rate * projection @ step, atol=1e-4, rtol=1e-4)


def test_the_input_features_in_the_sine_basis_start_as_the_input_features_screen(coords):
    """Every ``A`` a frozen ``G`` reads is held in the sine basis, the input layer's too (which then loses the
    dense layer's sine after it: an EUGen layer outputs ``A f + c``), and the function is unchanged."""
    model, _, _ = screened_network("input-features-sine-basis", seed=1, channels=1)
    plain, _, _ = screened_network("input-features-full-rate", seed=1, channels=1)
    assert [isinstance(m, SineBasisWeights) for m in model.layers] == [True, True, True, False]
    assert not any(model.applies_activation(i) for i in range(len(model.layers)))
    with torch.no_grad():
        torch.testing.assert_close(model(coords), plain(coords), atol=1e-5, rtol=0)


def test_the_mid_screen_sits_between_the_shipped_and_the_wide_network_in_the_sine_basis(coords):
    """``h = 96`` and ``m = 170`` a layer, the frozen ``G`` 170 × 96 (tall, so ``V = G A / ω`` is 170 × 170); on
    a colour image it stays under the dense SIREN's count too."""
    model, _, _ = screened_network("mid-sine-basis", seed=1, channels=1)
    assert model.layer_width == 96 and [m.layer.num_features for m in model.layers[1:3]] == [170, 170]
    assert [isinstance(m, SineBasisWeights) for m in model.layers] == [False, True, True, False]
    assert model.layers[2].sine_weight.shape == (170, 170)
    colour, _, _ = screened_network("mid-sine-basis", seed=1, channels=3)
    assert stored_parameters(colour) <= 50_307


def test_the_norm_screen_feeds_the_norm_entry_to_the_frozen_layers_only():
    model, _, _ = screened_network("norm", seed=1, channels=1)
    uses_norm = [
        i for i, layer in enumerate(model.layers) if isinstance(layer, EUGenLinear) and layer.use_norm
    ]
    assert uses_norm == [2, 3]


def test_a_run_writes_each_screen_and_keeps_the_earlier_ones_of_the_same_setting(tmp_path):
    out = tmp_path / "screens"
    for name in ("gain", "norm"):
        ran = run_main("screen_siren.py", "--size", "16", "--steps", "2", "--screens", name, "--output", out)
        assert ran.returncode == 0, ran.stderr
    data = json.loads((out / "screens.json").read_text())
    assert set(data["screens"]) == {"gain", "norm"} and data["seed"] == 1
    for screen in data["screens"].values():
        assert screen["history"][-1][0] == 2 and screen["final_psnr"] > 0
    assert (out / "pictures" / "gain.png").is_file() and (out / "pictures" / "norm.png").is_file()
    ran = run_main(
        "screen_siren.py", "--size", "16", "--steps", "2", "--seed", "2", "--screens", "gain", "--output", out
    )
    assert ran.returncode == 0, ran.stderr
    data = json.loads((out / "screens.json").read_text())  # another seed's run replaces, never mixes
    assert set(data["screens"]) == {"gain"} and data["seed"] == 2


def test_a_learning_rate_given_is_the_runs_and_part_of_its_setting(tmp_path):
    out = tmp_path / "screens"
    short = ("screen_siren.py", "--size", "16", "--steps", "2", "--output", out)
    ran = run_main(*short, "--lr", "1e-3", "--screens", "gain")
    assert ran.returncode == 0, ran.stderr
    data = json.loads((out / "screens.json").read_text())
    assert data["lr"] == 1e-3 and data["screens"]["gain"]["lr"] == 1e-3
    ran = run_main(*short, "--screens", "norm")
    data = json.loads((out / "screens.json").read_text())  # each screen's own rate: another setting
    assert set(data["screens"]) == {"norm"} and data["lr"] is None and data["screens"]["norm"]["lr"] == 3e-3
    bad = run_main("screen_siren.py", "--lr", "0", "--output", tmp_path / "x")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "screen_siren: error: --lr must be positive, got 0.0"
    ]
    assert not (tmp_path / "x").exists()


def test_an_unknown_screen_is_one_line_before_anything_is_written(tmp_path):
    ran = run_main("screen_siren.py", "--screens", "wider", "--output", tmp_path / "x")
    assert ran.returncode == 2
    assert ran.stderr.strip().splitlines() == [
        f"screen_siren: error: unknown screen(s) wider; choose from {', '.join(SCREENS)}"
    ]
    assert not (tmp_path / "x").exists()


def test_a_colour_image_keeps_the_wide_variant_at_the_dense_count_with_one_sine_unit_fewer():
    """On a colour image the output layer reads 3 × m: ``m = 255`` keeps the wide variant at most the dense
    SIREN's 50,307 parameters (and within 1% of it), where ``m = 256`` would exceed it."""
    dense = tuned_dense(seed=0, channels=3)
    fits, _, _ = screened_network("wide-sine-basis", seed=0, channels=3, num_features=255)
    over, _, _ = screened_network("wide-sine-basis", seed=0, channels=3)
    assert count_parameters(dense) == 50_307
    assert 0.99 * 50_307 <= stored_parameters(fits) <= 50_307 < stored_parameters(over)
    assert [m.layer.num_features for m in fits.layers[1:3]] == [255, 255]


def test_the_wide_sine_basis_screen_is_the_package_option_at_seed_0(tmp_path):
    """``eugen-fit-image --width 64 --eugen.num-features 256 --sine-basis`` (with the shipped network's flags)
    fits exactly what the screen fits at seed 0 (later seeds draw their projections as ``bench_siren`` does,
    apart), and its stored, merged network renders what was trained."""
    target = torch.from_numpy(load_image("camera", 16))
    setting = ScreenSiren(output=tmp_path / "screen", seed=0, size=16, steps=6, log_every=3)
    screen = run_screen("wide-sine-basis", setting, target)
    spec = replace(WIDE, num_features=256)  # the shipped network's flags
    config = FitImageConfig(layers="eugen", width=64, size=16, steps=6, lr=3e-3, lr_schedule="cosine")
    package = main(replace(config, output=tmp_path / "fit", eugen=spec, sine_basis=True, log_every=3))
    assert package.history == [tuple(entry) for entry in screen["history"]]
    assert package.final_psnr == pytest.approx(screen["final_psnr"], abs=1e-4)
    assert package.num_parameters == screen["parameters"] == 49_985
