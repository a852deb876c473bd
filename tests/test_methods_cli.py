"""Integration tests: the stock nerfstudio CLIs drive our methods on the tiny shipped scene, on CPU.

``ns-train`` runs a few dozen iterations in a subprocess (TensorBoard logging), then ``ns-eval`` writes
its JSON. We assert that the training loss fell and that the JSON has the metric keys.
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import pytest
from _scripts import run_command as run
from _tiny import CLI_SIZES

REPO = Path(__file__).resolve().parents[1]
SCENE = REPO / "scenes" / "bunny32"
BIN = Path(sys.executable).parent
ITERATIONS = 40

# Tiny sizes so that a run takes seconds per dozen iterations on two CPU cores; NeRF's paper rate is too slow
# for 40 tiny steps.
TINY = {**CLI_SIZES, "nerf": [*CLI_SIZES["nerf"], "--optimizers.fields.optimizer.lr", "5e-3"]}


def train_losses(run_dir: Path) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = glob.glob(str(run_dir / "events.out.tfevents.*"))
    accumulator = EventAccumulator(events)
    accumulator.Reload()
    return [event.value for event in accumulator.Scalars("Train Loss")]


@pytest.mark.skipif(not (SCENE / "transforms.json").exists(), reason="shipped scene bunny32 missing")
@pytest.mark.parametrize(
    "method, family",
    # the dense twin shares every code path but the layers with eugen-nerf: slow suite only (keeps the default fast);
    # ns-train eugen-nerfacto runs in the default suite through tests/test_colour.py, so its ns-eval round trip is slow
    [
        ("eugen-nerf", "nerf"),
        pytest.param("eugen-nerfacto", "nerfacto", marks=pytest.mark.slow),
        pytest.param("dense-nerf", "nerf", marks=pytest.mark.slow),
    ],
)
def test_ns_train_then_ns_eval(method: str, family: str, tmp_path: Path):
    trained = run(
        [
            str(BIN / "ns-train"),
            method,
            "--data",
            str(SCENE),
            "--output-dir",
            str(tmp_path / "out"),
            "--max-num-iterations",
            str(ITERATIONS),
            "--logging.steps-per-log",
            "5",
            "--vis",
            "tensorboard",
            *TINY[family],
        ],
        cwd=tmp_path,
    )
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    (config,) = (tmp_path / "out").glob(f"bunny32/{method}/*/config.yml")

    losses = train_losses(config.parent)
    assert len(losses) >= 5
    assert sum(losses[-2:]) / 2 < 0.95 * sum(losses[:2]) / 2, f"loss did not fall: {losses}"

    metrics_path = tmp_path / "eval.json"
    evaluated = run(
        [str(BIN / "ns-eval"), "--load-config", str(config), "--output-path", str(metrics_path)], cwd=tmp_path
    )
    assert evaluated.returncode == 0, evaluated.stdout[-3000:] + evaluated.stderr[-3000:]
    report = json.loads(metrics_path.read_text())
    assert report["method_name"] == method
    results = report["results"]
    assert {"psnr", "ssim", "fps", "num_rays_per_sec"} <= set(results)
    assert 5.0 < results["psnr"] < 60.0 and 0.0 < results["ssim"] <= 1.0 and results["fps"] > 0

    from eugen_nerf.eval.lpips import lpips_unavailable_reason

    assert ("lpips" in results) == (lpips_unavailable_reason() is None)
