"""Quality over training seeds: the one mean and spread every benchmark suite reports."""

from __future__ import annotations

import copy
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the summaries import this module: nerfstudio's trainer takes seconds to import
    from nerfstudio.engine.trainer import TrainerConfig


def mean_and_std(
    runs: Sequence[Mapping[str, float]], keys: Iterable[str] | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """Mean and population std (0 for one run) of each metric over ``runs`` (one mapping per seed); ``keys``
    defaults to the first run's metrics. Runs missing a metric (LPIPS without weights) are left out of it."""
    if not runs:
        raise ValueError("mean_and_std needs at least one run")
    means, spread = {}, {}
    for key in keys if keys is not None else runs[0]:
        values = [run[key] for run in runs if run.get(key) is not None]
        if values:
            means[key], spread[key] = statistics.fmean(values), statistics.pstdev(values)
    return means, spread


def paired_gap(values: Mapping[int | str, float], reference: Mapping[int | str, float]) -> dict | None:
    """``values - reference`` seed by seed, over the seeds both have: the mean and population std of the
    per-seed gaps (what a seed's draw does to both runs cancels), and the gaps by seed; None if no seed is
    shared."""
    gaps = {str(seed): values[seed] - reference[seed] for seed in reference if seed in values}
    if not gaps:
        return None
    mean, std = mean_and_std([{"gap": gap} for gap in gaps.values()], ("gap",))
    return {"mean": mean["gap"], "std": std["gap"], "per_seed": gaps}


def with_seed(config: TrainerConfig, seed: int) -> TrainerConfig:
    """``config`` trained at ``seed``: nerfstudio's machine seed, and the EUGen projections' seed."""
    config = copy.deepcopy(config)
    config.machine.seed = seed
    eugen = getattr(config.pipeline.model, "eugen", None)
    if eugen is not None:
        eugen.seed = seed
    return config
