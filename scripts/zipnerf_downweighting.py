#!/usr/bin/env python
"""Does Zip-NeRF's hash-level down-weighting cost a run at a resolution it never trained at? (issue 15)

Scores a trained ``dense-zipnerf`` / ``eugen-zipnerf`` run on test views rendered with the camera downscaled
by ``--downscale`` (as ``scripts/bench_zipnerf.py`` does), once as trained and once with every hash level at
full weight (``level_weights`` forced to 1). A large gain without the down-weighting says the field never
learnt the coarse footprints: it was trained at one scale.

    python scripts/zipnerf_downweighting.py outputs/bench_zipnerf/seed0/dense-zipnerf/bunny128/dense-zipnerf/bench
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import tyro

import eugen_nerf.fields.zipnerf as zipnerf_field
from eugen_nerf.eval.evaluate import score_test_views
from eugen_nerf.eval.runs import load_run
from eugen_nerf.methods import zipnerf as _methods  # noqa: F401  (registers the methods, offline loading)


@dataclass
class Args:
    run: tyro.conf.Positional[Path]
    """a Zip-NeRF run directory (or its config.yml)"""
    downscale: int = 4
    """camera downscale factor of the test renders"""
    views: int = 4
    """first test views scored"""


def main() -> None:
    args = tyro.cli(Args, description=__doc__)
    run = load_run(args.run)
    views = list(range(min(args.views, len(run.pipeline.datamanager.eval_dataset))))
    trained = score_test_views(
        run.pipeline, views, warmup=0, downscale=args.downscale, label="as trained"
    ).means()
    original = zipnerf_field.level_weights
    zipnerf_field.level_weights = lambda stds, resolutions: torch.ones_like(original(stds, resolutions))
    try:
        flat = score_test_views(
            run.pipeline, views, warmup=0, downscale=args.downscale, label="full weights"
        ).means()
    finally:
        zipnerf_field.level_weights = original
    print(
        f"1/{args.downscale}, test views {views}: PSNR {trained['psnr']:.2f} dB as trained, "
        f"{flat['psnr']:.2f} dB with every hash level at full weight"
    )


if __name__ == "__main__":
    main()
