"""Benchmark summary (not a test): one distillation recipe over several seeds, against the issue's goals.

``bench_distill.py`` runs one seed per suite; this reads one output per seed, checks that they ran the same
recipe (every command option but the seed and the output paths), and writes each seed's measurements, their
mean ± population std (``eugen_nerf.bench.seeds``, as every suite reports seeds), and whether each goal is met
on the mean and at every seed.

    python scripts/summarize_distill.py benchmarks/A.json benchmarks/A_seed1.json benchmarks/A_seed2.json \\
        --output benchmarks/A_seeds.json
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

from eugen_nerf.bench.seeds import mean_and_std
from eugen_nerf.inputs.errors import usage_error

PER_RUN = ("seed", "output", "student_dir")
"""Command options that may differ between the seeds of one recipe."""

HIGHER_IS_BETTER = ("psnr_ratio_closed_form", "psnr_ratio_finetuned", "fps_ratio")
"""Goals met at or above their value; the others (seconds) at or below."""


@dataclass
class SummarizeDistill:
    runs: tyro.conf.Positional[tuple[Path, ...]]
    """bench_distill.py outputs, one per seed, of the same recipe."""
    output: Path
    """the summary JSON to write."""


def read_run(path: Path) -> dict:
    if not path.is_file():
        usage_error("summarize_distill", f"{path} does not exist (run its eugen-bench suite first)")
    payload = json.loads(path.read_text())
    if not {"command", "measured", "goals"} <= payload.keys():
        usage_error("summarize_distill", f"{path} is not a bench_distill.py output")
    return payload


def met(goal: str, value: float, target: float) -> bool:
    return value >= target if goal in HIGHER_IS_BETTER else value <= target


def summarize(runs: list[dict]) -> dict:
    recipe = {key: value for key, value in runs[0]["command"].items() if key not in PER_RUN}
    for run in runs[1:]:
        other = {key: value for key, value in run["command"].items() if key not in PER_RUN}
        differing = sorted(key for key in recipe.keys() | other.keys() if recipe.get(key) != other.get(key))
        if differing:
            raise ValueError(f"the runs are not one recipe: they differ in {', '.join(differing)}")
    seeds = [run["command"]["seed"] for run in runs]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"two runs share a seed: {seeds}")
    goals = runs[0]["goals"]
    measured = [run["measured"] for run in runs]
    mean, std = mean_and_std(measured)
    psnr = mean_and_std(
        [
            {
                "teacher": run["report"]["teacher"]["psnr"],
                "closed_form": run["report"]["student_closed_form"]["psnr"],
                "finetuned": run["report"]["student"]["psnr"],
            }
            for run in runs
        ]
    )
    return {
        "recipe": recipe,
        "seeds": seeds,
        "per_seed": {str(seed): run["measured"] for seed, run in zip(seeds, runs)},
        "mean": mean,
        "std": std,
        "psnr_db": {"mean": psnr[0], "std": psnr[1]},
        "goals": goals,
        "met_on_mean": {goal: met(goal, mean[goal], target) for goal, target in goals.items()},
        "met_at_every_seed": {
            goal: all(met(goal, m[goal], target) for m in measured) for goal, target in goals.items()
        },
    }


def main(config: SummarizeDistill) -> None:
    if len(config.runs) < 2:
        usage_error("summarize_distill", "give at least two runs (one per seed)")
    runs = [read_run(path) for path in config.runs]
    try:
        summary = summarize(runs)
    except ValueError as error:
        usage_error("summarize_distill", str(error))
    summary = {
        "command": shlex.join(["python", "scripts/summarize_distill.py", *sys.argv[1:]]),
        "runs": [str(path) for path in config.runs],
        **summary,
    }
    config.output.parent.mkdir(parents=True, exist_ok=True)
    config.output.write_text(json.dumps(summary, indent=2) + "\n")
    for goal, target in summary["goals"].items():
        mean, std = summary["mean"][goal], summary["std"][goal]
        print(
            f"{goal}: {mean:.4g} ± {std:.2g} (goal {target:g}; met on the mean: "
            f"{summary['met_on_mean'][goal]}, at every seed: {summary['met_at_every_seed'][goal]})"
        )


if __name__ == "__main__":
    main(tyro.cli(SummarizeDistill))
