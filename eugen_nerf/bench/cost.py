"""What a suite's training cost, read from the report it published.

The protocol is budgeted in CPU-hours and spread over working sessions, so each suite's cost is part of its
result. Training the fields (teachers included) dominates it; distilling, scoring, timing and rendering are
not counted. A report records its runs' training in one of three ways:

* a curve (``validation_curve`` of a run, a seed's entry, or a teacher's ``history``) is a list of chunks
  ``{step, train_seconds, cpu_seconds_per_step}`` (``train_seconds`` cumulative wall seconds). A chunk costs
  its CPU seconds per step times its steps (on one thread, without the time spent waiting for
  the core); a chunk that kept no CPU record, its wall seconds; one that kept no time at all (a resumed chunk
  that timed nothing, steps trained before the curve began), its steps at the run's median cost a step,
  counted as estimated;
* a report that sums its runs itself (``cost.train_cpu_seconds_all_runs``, iSDF's online trainer) is read
  as it is;
* runs recorded as ``seconds_per_step`` of the report's ``steps`` (the photo capture, the bunny Zip-NeRF
  tables) cost their product, in wall seconds.

A run can serve two suites (a teacher trained by ``distill-zipnerf`` is ``fields-unbounded``'s dense twin;
``fields-seeds`` trains in ``fields``' folder):
each run has an identity (its curve), so the index counts it under the first suite that holds it.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

CURVE_KEYS = ("validation_curve", "history")
"""The keys under which a report keeps a run's training curve."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True)
class RunCost:
    """One training run's cost: ``seconds`` (CPU seconds, or wall seconds for its ``wall_chunks``), its chunks,
    and ``identity``, the same for the same run wherever a report holds it (None where it cannot be told)."""

    seconds: float
    chunks: int = 1
    wall_chunks: int = 0
    estimated_chunks: int = 0
    identity: str | None = None


@dataclass(frozen=True)
class TrainingCost:
    """The runs of a suite (a results folder), and the runs it shares with a suite counted before it."""

    runs: list[RunCost]
    shared: dict[str, int] = field(default_factory=dict)
    """Folder -> how many of this suite's runs are counted there."""

    @property
    def seconds(self) -> float:
        return sum(run.seconds for run in self.runs)

    def describe(self) -> str:
        """One line for the results index."""
        chunks = sum(r.chunks for r in self.runs)
        wall = sum(r.wall_chunks for r in self.runs)
        estimated = sum(r.estimated_chunks for r in self.runs)
        runs = f"{len(self.runs)} run{'s' * (len(self.runs) != 1)}"
        notes = []
        if wall and wall + estimated == chunks:
            line = f"Training cost: {self.seconds / 3600:.1f} hours over {runs}, wall clock"
            notes.append("no CPU-time record")
        else:
            line = f"Training cost: {self.seconds / 3600:.1f} CPU-hours over {runs}"
            if wall:
                notes.append(
                    f"{wall} of {chunks} chunks counted at {'its' if wall == 1 else 'their'} wall time"
                )
        if estimated:
            notes.append(
                f"{estimated} of {chunks} chunks kept no time: estimated at the run's median cost a step"
            )
        line += f" ({'; '.join(notes)})." if notes else "."
        for folder, count in self.shared.items():
            line += f" It uses {count} run{'s' * (count != 1)} trained and counted under `{folder}`."
        return line


def curve_cost(curve: list[dict[str, Any]]) -> RunCost:
    """The cost of one training curve (chunks in step order, ``train_seconds`` cumulative)."""
    seconds, wall_chunks, estimated, unknown_steps, step, wall = 0.0, 0, 0, 0, 0, 0.0
    cpu_rates, wall_rates = [], []
    for chunk in curve:
        steps, now, cpu = chunk["step"] - step, chunk.get("train_seconds"), chunk.get("cpu_seconds_per_step")
        if _number(cpu):
            seconds += cpu * steps
            cpu_rates.append(cpu)
        elif now is not None and now > wall and steps > 0:
            seconds += now - wall
            wall_chunks += 1
            wall_rates.append((now - wall) / steps)
        else:  # no time recorded for these steps
            unknown_steps += max(steps, 0)
            estimated += 1
        step, wall = chunk["step"], now if now is not None else wall
    rates = cpu_rates or wall_rates
    if unknown_steps and rates:
        seconds += unknown_steps * statistics.median(rates)
    return RunCost(seconds, len(curve), wall_chunks, estimated, json.dumps(curve, sort_keys=True))


def _curves(node: Any):
    """Every training curve under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if (
                key in CURVE_KEYS
                and isinstance(value, list)
                and value
                and all(isinstance(c, dict) and "step" in c for c in value)
            ):
                yield value
            else:
                yield from _curves(value)
    elif isinstance(node, list):
        for item in node:
            yield from _curves(item)


def _timed_runs(node: Any):
    """Every ``seconds_per_step`` of a run under ``node``."""
    if isinstance(node, dict):
        if _number(node.get("seconds_per_step")):
            yield node["seconds_per_step"]
        for value in node.values():
            yield from _timed_runs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _timed_runs(item)


def run_costs(report: Any) -> list[RunCost]:
    """What each training run of ``report`` (a suite's JSON) cost; empty for a suite that trains nothing."""
    if not isinstance(report, dict):
        return []
    summed = report.get("cost")
    if isinstance(summed, dict) and _number(summed.get("train_cpu_seconds_all_runs")):
        runs = summed.get("runs") or 1
        return [RunCost(summed["train_cpu_seconds_all_runs"] / runs) for _ in range(runs)]
    curves = list(_curves(report))
    if curves:
        return [curve_cost(curve) for curve in curves]
    if _number(report.get("steps")):
        return [
            RunCost(per_step * report["steps"], wall_chunks=1) for per_step in _timed_runs(report.get("runs"))
        ]
    return []
