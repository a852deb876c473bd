"""Installing the plugin changes nothing it was not asked to change.

nerfstudio imports every method entry point (ours too) in any ``ns-*`` command, so importing them must leave
the warnings filters alone, and replace torchmetrics' LPIPS only when the offline weights exist.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings

from eugen_nerf.eval.lpips_weights import weights_path
from eugen_nerf.scenes.quiet import INDEXING_WARNING, quiet_camera_indexing

PROBE = r"""
import json, sys, warnings
import torchmetrics.image.lpip as lpip
stock = lpip.LearnedPerceptualImagePatchSimilarity
callers = []  # modules that add a warnings filter while the entry points are imported
for name in ("filterwarnings", "simplefilter"):
    def recording(*args, _original=getattr(warnings, name), **kwargs):
        callers.append(sys._getframe(1).f_globals.get("__name__", "?"))
        return _original(*args, **kwargs)
    setattr(warnings, name, recording)
from importlib.metadata import entry_points
methods = {ep.name: ep.load() for ep in entry_points(group="nerfstudio.method_configs")}  # as ns-* does
import torchmetrics.image
after = lpip.LearnedPerceptualImagePatchSimilarity
print(json.dumps({
    "ours_loaded": "eugen-nerf" in methods,
    "our_filters": [c for c in callers if c.startswith("eugen_nerf")],
    "indexing_filtered": any("non-tuple" in str(getattr(f[1], "pattern", "")) for f in warnings.filters),
    "lpips_is_stock": after is stock and torchmetrics.image.LearnedPerceptualImagePatchSimilarity is stock,
    "lpips_class": after.__module__ + "." + after.__name__,
}))
"""


def probe(cache: str | None) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": ""}
    if cache is not None:
        env["EUGEN_NERF_CACHE"] = cache
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_without_converted_weights_stock_lpips_and_filters_are_untouched(tmp_path):
    report = probe(str(tmp_path / "empty-cache"))
    assert report["ours_loaded"]
    assert report["our_filters"] == [] and not report["indexing_filtered"]
    assert report["lpips_is_stock"], report["lpips_class"]


def test_offline_lpips_stands_in_only_with_converted_weights(tmp_path, monkeypatch):
    from torchmetrics.image import lpip

    from eugen_nerf.eval import lpips as lpips_module
    from eugen_nerf.eval.lpips_weights import setup_lpips_weights

    class Stock:  # stands for torchmetrics' own class
        pass

    monkeypatch.setattr(lpip, "LearnedPerceptualImagePatchSimilarity", Stock)
    monkeypatch.setenv("EUGEN_NERF_CACHE", str(tmp_path / "empty-cache"))
    lpips_module.shared_lpips.cache_clear()
    try:
        assert lpips_module.install_offline_lpips() is False
        assert lpip.LearnedPerceptualImagePatchSimilarity is Stock
        monkeypatch.delenv("EUGEN_NERF_CACHE")
        lpips_module.shared_lpips.cache_clear()
        setup_lpips_weights()  # as in test_eval_lpips: converted once, instant afterwards
        assert weights_path().is_file()
        assert lpips_module.install_offline_lpips() is True
        assert lpip.LearnedPerceptualImagePatchSimilarity is lpips_module.OfflineLPIPSMetric
    finally:
        lpips_module.shared_lpips.cache_clear()


def test_quiet_camera_indexing_is_scoped_to_its_block():
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with quiet_camera_indexing():
            warnings.warn(f"{INDEXING_WARNING} is deprecated", UserWarning)
            warnings.warn("another warning", UserWarning)
        warnings.warn(f"{INDEXING_WARNING} is deprecated", UserWarning)
    assert [str(w.message) for w in caught] == ["another warning", f"{INDEXING_WARNING} is deprecated"]
    assert list(warnings.filters) == before


def test_nan_lpips_always_comes_with_a_reason(tmp_path, monkeypatch, caplog):
    """Our models leave LPIPS out with a logged reason instead of reporting NaN."""
    import logging

    import torch

    from eugen_nerf.eval import lpips as lpips_module
    from eugen_nerf.models import metrics

    monkeypatch.setenv("EUGEN_NERF_CACHE", str(tmp_path / "empty"))
    lpips_module.shared_lpips.cache_clear()
    metrics._lpips_reason.cache_clear()
    try:
        assert "setup-lpips" in lpips_module.lpips_unavailable_reason()
        with caplog.at_level(logging.WARNING):
            values = metrics.image_metrics(torch.rand(40, 40, 3), torch.rand(40, 40, 3))
        assert "lpips" not in values and not any(math.isnan(v) for v in values.values())
        assert any("setup-lpips" in r.message for r in caplog.records)
    finally:
        lpips_module.shared_lpips.cache_clear()
        metrics._lpips_reason.cache_clear()
