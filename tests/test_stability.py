"""Stacked EUGen layers stay finite and O(1): at initialisation, under autocast, and while training.

An all-EUGen 8x256 trunk is the hardest case for a product of projections: without a scaling that divides by
the input's scale, k = 3 outputs NaN at initialisation and k = 2 reaches inf by layers 5-7 for inputs of RMS
1.5 (the polynomial scaling below). Every scaling the methods train with is checked here: ``linear`` and
``unit`` (the layer's), and ``projected`` without the norm entry (what ``eugen-nerf`` and ``eugen-zipnerf``
train merged).
"""

import itertools
import json

import pytest
import torch
from torch import nn

from eugen_nerf.layers import EUGenMLP, EUGenSpec

CONFIGS = list(itertools.product([1, 2, 3], [16, 32, 64]))  # (degree k, features m)


def _trunk(degree, num_features, scaling="linear", width=256):
    use_norm = scaling != "projected"  # projected: the merged-training setting, no norm entry
    return EUGenMLP(
        in_dim=width,
        num_layers=8,
        layer_width=width,
        layer_types="eugen",
        eugen=EUGenSpec(num_features=num_features, degree=degree, scaling=scaling, use_norm=use_norm),
    )


def _rms(t):
    return t.float().square().mean().sqrt().item()


@pytest.mark.parametrize("degree, num_features", CONFIGS)
@pytest.mark.parametrize("scaling", ["unit", "linear", "projected"])
def test_all_eugen_trunk_is_finite_and_order_one_at_initialisation(degree, num_features, scaling, one_thread):
    torch.manual_seed(0)
    trunk = _trunk(degree, num_features, scaling)
    for input_rms in (1.0, 1.5, 10.0):
        x = torch.randn(256, 256) * input_rms
        for autocast in (False, True):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                y = trunk(x)
            assert torch.isfinite(y).all(), (input_rms, autocast)
            # O(1) whatever the input scale: unit is bounded, linear grows at most like the input.
            assert 1e-4 < _rms(y) < 10 * (1 if scaling == "unit" else input_rms), (
                input_rms,
                autocast,
                _rms(y),
            )


def test_polynomial_scaling_is_what_overflowed():
    """The theorem's homogeneous form, stacked, is a degree-k^L polynomial of the input: it overflows."""
    torch.manual_seed(0)
    y = _trunk(3, 32, "polynomial")(torch.randn(64, 256) * 1.5)
    assert not torch.isfinite(y).all() or _rms(y) > 1e6


@pytest.mark.parametrize("degree, num_features", CONFIGS)
@pytest.mark.parametrize("scaling", ["linear", "projected"])
def test_all_eugen_trunk_trains_with_finite_gradients(degree, num_features, scaling, one_thread):
    """A few Adam steps in fp32 and under bf16 autocast: loss, gradients and outputs stay finite."""
    for autocast in (False, True):
        torch.manual_seed(1)
        trunk = nn.Sequential(_trunk(degree, num_features, scaling, width=64), nn.Linear(64, 3))
        optimizer = torch.optim.Adam(trunk.parameters(), lr=1e-2)
        x, target = torch.randn(128, 64) * 1.5, torch.rand(128, 3)
        for _ in range(5):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = (trunk(x).float() - target).square().mean()
            optimizer.zero_grad()
            loss.backward()
            assert torch.isfinite(loss)
            assert all(torch.isfinite(p.grad).all() for p in trunk.parameters() if p.grad is not None)
            optimizer.step()
        trunk.eval()
        with torch.no_grad():
            assert torch.isfinite(trunk(x)).all()  # the fused form too


def test_the_stability_suite_judges_each_scaling_with_the_layers_it_ships_with(tmp_path, monkeypatch):
    """The suite's projected rows use the heads' layers (identity map, no norm entry); a non-finite run of a
    scaling the layers are built with fails the summary, the polynomial one's are counted, not judged."""
    from eugen_nerf.bench.suites import stability

    assert stability.layer_spec(32, 2, "projected").feature_map == "identity"
    assert not stability.layer_spec(32, 2, "projected").use_norm
    assert stability.layer_spec(32, 2, "linear").use_norm

    def fake_run(kind, m, k, scaling, precision, device, steps, data):
        bad = scaling == "polynomial" and k > 1 or scaling == broken_scaling and (m, k) == (16, 3)
        return {
            "kind": kind,
            "m": m,
            "k": k,
            "scaling": scaling,
            "precision": precision,
            "finite_at_init": not bad,
            "finite_through_training": True,
        }

    monkeypatch.setattr(stability, "run", fake_run)
    monkeypatch.setattr(stability, "plot", lambda rows, path: None)
    monkeypatch.setattr(stability, "target", lambda device: None)
    for broken_scaling, all_finite in (("none", True), ("projected", False)):
        out = tmp_path / broken_scaling / "stability.json"
        argv = [
            "--steps",
            "1",
            "--scalings",
            "linear",
            "projected",
            "polynomial",
            "projected",
            "--output",
            str(out),
        ]
        monkeypatch.setattr("sys.argv", ["stability", *argv])
        stability.main()
        summary = json.loads(out.read_text())["summary"]
        assert summary["default_scalings_all_finite"] is all_finite
        assert summary["runs_by_scaling"] == {"linear": 18, "projected": 18, "polynomial": 18}
        assert summary["non_finite_by_scaling"]["projected"] == (0 if all_finite else 2)
        assert summary["polynomial_non_finite"] == 12
