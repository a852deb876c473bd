"""SIREN with EUGen layers: initialisation, parameter groups, merged inference, and the image fitter."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import imageio.v3 as iio
import pytest
import torch

from eugen_nerf.fields.siren import (
    SIREN_OMEGA_0,
    SirenEUGenSpec,
    siren_mlp,
    siren_param_groups,
    siren_parameters,
)
from eugen_nerf.inputs.errors import InputError
from eugen_nerf.layers.baselines import LowRankLinear
from eugen_nerf.siren.fit_image import FitImageConfig, build_siren, fit, main
from eugen_nerf.siren.image import from_signed, load_image, pixel_grid, to_signed

HIDDEN = ("dense", "eugen", "eugen")


pytestmark = pytest.mark.usefixtures("one_thread")
SPEC = SirenEUGenSpec(num_features=32)


def test_siren_initialisation_and_structure() -> None:
    mlp = siren_mlp(2, 64, 3, HIDDEN, SPEC)
    first, dense_hidden, output = mlp.layers[0], mlp.layers[1], mlp.layers[-1]
    assert first.weight.abs().max() <= 1.0 / 2
    bound = math.sqrt(6.0 / 64) / SIREN_OMEGA_0
    assert dense_hidden.weight.abs().max() <= bound and output.weight.abs().max() <= bound
    assert [type(layer).__name__ for layer in mlp.layers] == [
        "Linear",
        "Linear",
        "EUGenLinear",
        "EUGenLinear",
        "Linear",
    ]
    eugen = mlp.layers[2]
    assert (
        eugen.feature_map == "sin"
        and eugen.projection_scale == SPEC.projection_scale
        and eugen.trainable_projections
    )
    assert sum(p.numel() for p in mlp.parameters()) == siren_parameters(2, 64, 3, HIDDEN, SPEC)
    x = torch.rand(8, 2) * 2 - 1
    assert torch.allclose(mlp(x), mlp.layers[-1](_hidden(mlp, x)), atol=1e-5)


def _hidden(mlp, x):
    """Reference forward: sine layers by hand, EUGen layers as they are."""
    h = torch.sin(SIREN_OMEGA_0 * mlp.layers[0](x))
    h = torch.sin(SIREN_OMEGA_0 * mlp.layers[1](h))
    return mlp.layers[3](mlp.layers[2](h))


@torch.no_grad()
def test_eugen_sine_layer_keeps_sine_statistics() -> None:
    """At initialisation an EUGen sine layer's output has a sine layer's variance (1/2)."""
    torch.manual_seed(0)
    mlp = siren_mlp(2, 256, 1, ("eugen",) * 3, SirenEUGenSpec(num_features=256))
    h = torch.sin(SIREN_OMEGA_0 * mlp.layers[0](torch.rand(4096, 2) * 2 - 1))
    for layer in mlp.layers[1:4]:
        h = layer(h)
        assert 0.3 < float(h.var()) < 0.7


def test_equal_parameter_default_and_param_groups() -> None:
    dense = siren_parameters(2, 256, 1, ("dense",) * 3, SirenEUGenSpec())
    eugen = siren_parameters(2, 256, 1, ("eugen",) * 3, SirenEUGenSpec())
    assert abs(dense - eugen) / dense < 0.01  # the default EUGen SIREN matches the dense one's size
    mlp = siren_mlp(2, 32, 1, HIDDEN, SPEC)
    groups = siren_param_groups(mlp, 1e-4, SPEC)
    assert [g["lr"] for g in groups] == [1e-4, pytest.approx(1e-4 * SPEC.projection_lr_scale)]
    assert sum(len(g["params"]) for g in groups) == len(list(mlp.parameters()))
    assert (
        all(isinstance(p, torch.nn.Parameter) for p in groups[1]["params"]) and len(groups[1]["params"]) == 2
    )


def test_merged_inference_matches_training_form() -> None:
    mlp = siren_mlp(2, 64, 3, ("eugen",) * 3, SPEC)
    x = torch.rand(100, 2) * 2 - 1
    expected = mlp(x)
    mlp.eval()
    with torch.no_grad():
        assert torch.allclose(mlp(x), expected, atol=1e-4)


def test_image_helpers() -> None:
    image = load_image("camera", 16)
    assert image.shape == (16, 16, 1) and 0.0 <= image.min() and image.max() <= 1.0
    grid = pixel_grid(4, 3)
    assert grid.shape == (12, 2) and grid[0].tolist() == [-1.0, -1.0] and grid[-1].tolist() == [1.0, 1.0]
    values = torch.rand(5)
    assert torch.allclose(from_signed(to_signed(values)), values)
    with pytest.raises(ValueError, match="not_an_image"):
        load_image("not_an_image", 8)


@pytest.mark.parametrize("layers", ["dense", "eugen", "lowrank", "snnk"])
def test_fit_psnr_rises(layers: str) -> None:
    config = FitImageConfig(layers=layers, width=48, size=24)
    target = torch.from_numpy(load_image("camera", 24))
    result = fit(
        build_siren(config, 1), target, steps=40, lr=1e-4, log_every=10, eugen=config.eugen, progress=False
    )
    psnrs = [value for _, value in result.history]
    assert psnrs[-1] > psnrs[0] + 5.0, psnrs
    assert all(b >= a - 0.5 for a, b in itertools.pairwise(psnrs)), psnrs
    assert result.final_psnr > psnrs[0] + 5.0 and result.pixels_per_second > 0


def recorded_rates(monkeypatch: pytest.MonkeyPatch) -> list[list[float]]:
    """Every Adam step from now on appends its groups' learning rates to the returned list."""
    seen: list[list[float]] = []
    original = torch.optim.Adam.step

    def recording_step(self, *args, **kwargs):
        seen.append([group["lr"] for group in self.param_groups])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", recording_step)
    return seen


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_fit_learning_rate_schedule(monkeypatch: pytest.MonkeyPatch, schedule: str) -> None:
    """Cosine decay takes every parameter group (G's larger rate included) down to about 1% by the last step."""
    seen = recorded_rates(monkeypatch)
    target = torch.from_numpy(load_image("camera", 12))
    fit(
        siren_mlp(2, 16, 1, HIDDEN, SPEC),
        target,
        steps=20,
        lr=1e-3,
        log_every=10,
        eugen=SPEC,
        progress=False,
        lr_schedule=schedule,
    )
    assert len(seen) == 20 and seen[0] == pytest.approx([1e-3, 1e-3 * SPEC.projection_lr_scale])
    if schedule == "constant":
        assert all(lrs == seen[0] for lrs in seen)
    else:
        assert all(b[0] < a[0] and b[1] < a[1] for a, b in itertools.pairwise(seen))
        at_last_step = 0.01 + 0.99 * 0.5 * (1 + math.cos(math.pi * 19 / 20))  # the rate the 20th step runs at
        assert [last / first for last, first in zip(seen[-1], seen[0])] == pytest.approx([at_last_step] * 2)
    with pytest.raises(ValueError, match="lr-schedule"):
        fit(
            siren_mlp(2, 16, 1, HIDDEN, SPEC),
            target,
            steps=2,
            lr=1e-3,
            log_every=1,
            eugen=SPEC,
            progress=False,
            lr_schedule="linear",
        )
    with pytest.raises(ValueError, match="steps"):
        fit(
            siren_mlp(2, 16, 1, HIDDEN, SPEC),
            target,
            steps=0,
            lr=1e-3,
            log_every=1,
            eugen=SPEC,
            progress=False,
            lr_schedule="cosine",
        )


def test_warmup_cosine_rises_linearly_then_follows_the_cosine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the first 5% of the steps every group's rate rises linearly (G's larger one too), then it is the
    cosine schedule's, step for step."""
    seen = recorded_rates(monkeypatch)
    target = torch.from_numpy(load_image("camera", 12))
    for schedule in ("cosine", "warmup-cosine"):
        fit(
            siren_mlp(2, 16, 1, HIDDEN, SPEC),
            target,
            steps=60,
            lr=1e-3,
            log_every=30,
            eugen=SPEC,
            progress=False,
            lr_schedule=schedule,
        )
    cosine, warm = seen[:60], seen[60:]
    assert len(warm) == 60 and round(0.05 * 60) == 3  # three warm-up steps
    for step, share in enumerate((1 / 3, 2 / 3)):
        assert warm[step] == pytest.approx([rate * share for rate in cosine[step]])
    flat = [[rate for rates in run[2:] for rate in rates] for run in (warm, cosine)]
    assert flat[0] == pytest.approx(flat[1])
    assert warm[0][1] / warm[0][0] == pytest.approx(SPEC.projection_lr_scale)


def test_fit_image_command_writes_outputs(tmp_path: Path) -> None:
    config = FitImageConfig(output=tmp_path / "fit", layers="eugen", size=16, width=32, steps=5, log_every=2)
    result = main(config)
    image = iio.imread(tmp_path / "fit" / "reconstruction.png")
    assert image.shape == (16, 16) and image.dtype.name == "uint8"
    history = json.loads((tmp_path / "fit" / "history.json").read_text())
    assert [step for step, _ in history["history"]] == [1, 2, 4, 5]
    assert history["final_psnr"] == pytest.approx(result.final_psnr)
    # an earlier fit stays unless --overwrite is given
    with pytest.raises(InputError, match="--overwrite"):
        main(config)
    assert json.loads((tmp_path / "fit" / "history.json").read_text()) == history
    main(replace(config, overwrite=True, steps=2))
    assert json.loads((tmp_path / "fit" / "history.json").read_text())["history"][-1][0] == 2


def test_siren_fused_form_equals_the_training_form():
    """EUGen sine layers merge like any EUGen layer: eval mode must give the same image."""
    from eugen_nerf.fields.siren import siren_mlp

    torch.manual_seed(0)
    mlp = siren_mlp(2, 64, 3, hidden_types=("eugen", "eugen", "dense"), eugen=SPEC).double().eval()
    x = torch.rand(500, 2, dtype=torch.float64) * 2 - 1
    with torch.no_grad():
        fused, unfused = mlp(x), mlp.forward_unfused(x)
    assert ((fused - unfused).norm() / unfused.norm()).item() < 1e-5


PARITY = SirenEUGenSpec(
    num_features=32,
    trainable_projections=False,
    projection="orthogonal",
    learn_first_projections=True,
    readout=True,
    weight_lr_scale=10.0,
    projection_lr_scale=10.0,
)


@pytest.mark.parametrize("hidden", [("eugen",) * 3, ("dense", "eugen", "eugen"), ("eugen", "eugen", "dense")])
def test_parity_layout_learns_the_first_g_reads_out_from_the_last_a_and_merges_exactly(hidden) -> None:
    """``learn-first-projections``: only the first EUGen layer's ``G`` is a parameter (the frozen draw of its
    seed, so nothing else changes); ``readout``: a last hidden EUGen layer writes the output itself (no
    separate linear layer). The counted parameters are the built ones, and the merged form computes the same
    function."""
    mlp = siren_mlp(2, 32, 3, hidden, PARITY)
    eugen = [index for index, layer in enumerate(mlp.layers) if hasattr(layer, "projections")]
    assert [mlp.layers[i].trainable_projections for i in eugen] == [True] + [False] * (len(eugen) - 1)
    frozen = siren_mlp(2, 32, 3, hidden, replace(PARITY, learn_first_projections=False))
    first = eugen[0]
    torch.testing.assert_close(mlp.layers[first].projections.detach(), frozen.layers[first].projections)
    readout = hidden[-1] == "eugen"
    assert len(mlp.layers) == len(hidden) + (1 if readout else 2)
    assert mlp.layers[-1].out_features == 3 and (hasattr(mlp.layers[-1], "projections") == readout)
    assert sum(p.numel() for p in mlp.parameters()) == siren_parameters(2, 32, 3, hidden, PARITY)
    assert f"layers.{first}.projections" in mlp.state_dict()  # the learned G is saved with the model
    x = torch.rand(64, 2) * 2 - 1
    expected = mlp(x)
    mlp.eval()
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), expected, atol=1e-4, rtol=1e-4)


def test_param_groups_are_named_and_the_weight_group_exists_only_when_scaled() -> None:
    mlp = siren_mlp(2, 32, 1, ("eugen",) * 3, PARITY)
    groups = siren_param_groups(mlp, 1e-3, PARITY)
    assert [(g["name"], g["lr"]) for g in groups] == [
        ("fields", 1e-3),
        ("weights", pytest.approx(1e-2)),
        ("projections", pytest.approx(1e-2)),
    ]
    assert len(groups[1]["params"]) == 6 and len(groups[2]["params"]) == 1  # A and c of three layers; one G
    assert sum(len(g["params"]) for g in groups) == len(list(mlp.parameters()))
    plain = siren_param_groups(mlp, 1e-3, replace(PARITY, weight_lr_scale=1.0))
    assert [g["name"] for g in plain] == ["fields", "projections"]
    with pytest.raises(ValueError, match="weight-lr-scale"):
        replace(PARITY, weight_lr_scale=0.0).validate()


@pytest.mark.parametrize("degree, shared", [(2, True), (2, False), (3, False)])
def test_parameter_count_follows_the_projection_matrices_the_layers_build(degree, shared) -> None:
    """Unshared projections give order ``i`` its own ``i`` matrices (``k(k+1)/2`` in all), shared ones ``k``."""
    spec = SirenEUGenSpec(num_features=4, degree=degree, shared_projections=shared)
    for learn_first in (False, True):
        chosen = replace(spec, trainable_projections=not learn_first, learn_first_projections=learn_first)
        mlp = siren_mlp(2, 8, 3, ("eugen",) * 3, chosen)
        assert sum(p.numel() for p in mlp.parameters()) == siren_parameters(2, 8, 3, ("eugen",) * 3, chosen)


@torch.no_grad()
def test_siren_init_starts_every_sine_unit_as_the_dense_siren_does() -> None:
    """``init="siren"`` with ω = ω₀: the parity SIREN's sine pre-activations ``G (A h + c)`` have the dense
    SIREN's spread layer by layer (the parity variant's ``init="eugen"`` ones are wider), the frozen ``G``
    have no constant column (so no offset but ``c``, and ``c`` stays at SIREN's bias bound), the learned ``G``
    sits inside ω₀ times SIREN's bounds."""
    parity = replace(PARITY, num_features=256)
    spec = replace(
        parity, init="siren", projection_scale=SIREN_OMEGA_0, projection_lr_scale=30.0, weight_lr_scale=1.0
    )
    x = pixel_grid(64, 64)

    def spreads(mlp) -> list[float]:
        h, out = torch.sin(SIREN_OMEGA_0 * mlp.layers[0](x)), []
        for layer in mlp.layers[1:4]:
            if hasattr(layer, "projections"):
                pre = layer.projections_of(h)
                h = layer(h)
            else:
                pre = SIREN_OMEGA_0 * layer(h)
                h = torch.sin(pre)
            out.append(float(pre.std()))
        return out

    torch.manual_seed(0)
    dense = spreads(siren_mlp(2, 256, 1, ("dense",) * 3))
    torch.manual_seed(0)
    started = siren_mlp(2, 256, 1, ("eugen",) * 3, spec)
    eugen_spreads = spreads(started)  # dense SIREN's sine layers 2-4 against the EUGen layers' projections
    torch.manual_seed(0)
    default = spreads(siren_mlp(2, 256, 1, ("eugen",) * 3, parity))  # init "eugen", ω = 3
    for ours, theirs, old in zip(eugen_spreads, dense, default):
        assert abs(ours / theirs - 1) < 0.15 and old / theirs > 1.1
    first, *frozen = [layer for layer in started.layers if hasattr(layer, "projections")]
    assert first.projections[:, :256].abs().max() <= math.sqrt(6.0 / 256)  # ω₀ times SIREN's hidden weights
    offsets = first.projections[:, 256].abs()
    assert offsets.max() <= SIREN_OMEGA_0 / 16 and offsets.max() > 1  # ω₀ times SIREN's bias
    for layer in frozen:
        assert not layer.trainable_projections and bool((layer.projections[:, 256] == 0).all())
    for layer in (first, frozen[0]):  # the biases before a frozen G: SIREN's bias bound, no shift added
        assert layer.bias.abs().max() <= 1 / 16


@torch.no_grad()
def test_siren_init_scales_hidden_weights_by_omega_0_over_omega_and_leaves_the_readout_as_siren() -> None:
    spec = replace(PARITY, num_features=32, init="siren", projection_scale=3.0)
    mlp = siren_mlp(2, 32, 1, ("eugen",) * 2, spec)
    hidden, readout = mlp.layers[1], mlp.layers[2]
    bound = math.sqrt(6.0 / 32) / SIREN_OMEGA_0
    assert bound < hidden.weight.abs().max() <= 10 * bound  # ω₀/ω = 10 times SIREN's
    assert readout.weight.abs().max() <= bound  # SIREN's linear output layer


def test_siren_init_survives_a_checkpoint_and_refuses_layouts_it_does_not_start() -> None:
    """The frozen ``G`` come back from their seeds without the constant column, so a loaded network computes
    what was saved; every other layout is refused in one line (``validate`` and ``siren_mlp``)."""
    spec = replace(PARITY, init="siren", projection_scale=SIREN_OMEGA_0)
    torch.manual_seed(0)
    saved = siren_mlp(2, 32, 1, ("eugen",) * 3, spec)
    torch.manual_seed(1)
    loaded = siren_mlp(2, 32, 1, ("eugen",) * 3, spec)
    loaded.load_state_dict(saved.state_dict())
    x = torch.rand(64, 2) * 2 - 1
    torch.testing.assert_close(loaded(x), saved(x))
    for change in (
        {"trainable_projections": True},
        {"readout": False},
        {"learn_first_projections": False},
        {"degree": 2},
        {"use_norm": True},
        {"scaling": "linear"},
    ):
        with pytest.raises(ValueError, match="eugen.init 'siren' starts the parity layout only"):
            replace(spec, **change)
    with pytest.raises(ValueError, match="eugen.init 'siren' needs every hidden layer EUGen"):
        siren_mlp(2, 32, 1, ("eugen", "dense", "eugen"), spec)
    with pytest.raises(ValueError, match="eugen.init"):
        replace(spec, init="xavier")


@pytest.mark.parametrize(
    "kind, spec",
    [
        ("lowrank", SirenEUGenSpec(num_features=8, lowrank_rank=4)),
        ("lowrank", SirenEUGenSpec(num_features=8)),  # rank from EUGen's parameter count
        ("snnk", SirenEUGenSpec(num_features=8, trainable_projections=False)),
        ("snnk", SirenEUGenSpec(num_features=8)),
    ],
)
def test_baseline_layers_build_count_their_parameters_start_at_sine_scale_and_fuse_exactly(kind, spec):
    """The reviewers' baselines as SIREN hidden layers: parameters as :func:`siren_parameters` counts them
    (what the benchmark matches), a low-rank layer's ``U V x`` at SIREN's pre-activation scale, finite
    gradients, and the merged eval form equal to the training form."""
    torch.manual_seed(0)
    mlp = siren_mlp(2, 16, 3, (kind,) * 3, spec)
    trainable = sum(p.numel() for p in mlp.parameters() if p.requires_grad)
    assert trainable == siren_parameters(2, 16, 3, (kind,) * 3, spec)
    if kind == "lowrank":
        layer = mlp.layers[1]
        assert isinstance(layer, LowRankLinear) and layer.rank == (spec.lowrank_rank or 4)
        wide = siren_mlp(2, 256, 3, (kind,) * 3, replace(spec, lowrank_rank=64))
        h = torch.sin(SIREN_OMEGA_0 * wide.layers[0](torch.rand(4096, 2) * 2 - 1))
        pre = wide.layers[1](h) - wide.layers[1].bias
        dense = siren_mlp(2, 256, 3, ("dense",) * 3).layers[1]
        ratio = pre.std() / (h @ dense.weight.T).std()
        assert 0.8 < float(ratio) < 1.25, float(ratio)  # the variance SIREN's hidden W x has
    x = torch.rand(256, 2) * 2 - 1
    out = mlp(x)
    out.square().mean().backward()
    assert torch.isfinite(out).all()
    assert all(torch.isfinite(p.grad).all() for p in mlp.parameters() if p.grad is not None)
    mlp.eval()
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), out.detach(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="SIREN hidden layer type must be one of"):
        siren_mlp(2, 16, 3, ("conv",) * 3, spec)
