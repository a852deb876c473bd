"""What a suite's training cost, read from the report it published.

The protocol is budgeted in CPU-hours and spread over working sessions, so each suite's cost is part of its
result. Training dominates it, and every training suite keeps its runs' curves in its report:

* a curve (``validation_curve`` of a run, a seed's entry, or a teacher's ``history``) is a list of 500-step
  chunks ``{step, train_seconds, cpu_seconds_per_step}``: a chunk costs its CPU seconds per step times its
  steps (on one thread, the run's cost alone on a core whatever else ran), or, where a chunk kept no CPU
  record, the wall seconds it took (cumulative ``train_seconds``: a chunk that kept neither is counted
  in the next);
* a report that sums its runs itself (``cost.train_cpu_seconds_all_runs``, iSDF's online trainer) is read
  as it is;
* a run recorded as ``seconds_per_step`` of the report's ``steps`` (the photo capture) costs their product,
  in wall seconds.

Scoring, timing and rendering are not counted: they are a small part next to training, and a suite's timed
invocation records its own ``wall_seconds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CURVE_KEYS = ("validation_curve", "history")
"""The keys under which a report keeps a run's training curve."""


@dataclass(frozen=True)
class TrainingCost:
    seconds: float
    """CPU seconds, or wall seconds for the chunks that kept no CPU record."""
    runs: int
    chunks: int
    wall_chunks: int
    """Chunks (or runs) counted at their wall seconds."""

    def describe(self) -> str:
        """One line for the results index."""
        runs = f"{self.runs} run{'s' * (self.runs != 1)}"
        hours = self.seconds / 3600
        if self.chunks and self.wall_chunks == self.chunks:
            return f"Training cost: {hours:.1f} hours over {runs}, wall clock (no CPU-time record)."
        line = f"Training cost: {hours:.1f} CPU-hours over {runs}"
        if self.wall_chunks:
            its = "its" if self.wall_chunks == 1 else "their"
            line += f" ({self.wall_chunks} of {self.chunks} chunks counted at {its} wall time: no CPU-time record)"
        return line + "."


def curve_cost(curve: list[dict[str, Any]]) -> tuple[float, int, int]:
    """``(seconds, chunks, wall_chunks)`` of one training curve (chunks in step order, cumulative
    ``train_seconds``)."""
    seconds, wall_chunks, step, wall = 0.0, 0, 0, 0.0
    for chunk in curve:
        steps = chunk["step"] - step
        now = chunk.get("train_seconds")
        if chunk.get("cpu_seconds_per_step"):
            seconds += chunk["cpu_seconds_per_step"] * steps
        else:  # its wall seconds (a chunk that kept none is in the next one's)
            seconds += now - wall if now is not None else 0.0
            wall_chunks += 1
        step, wall = chunk["step"], now if now is not None else wall
    return seconds, len(curve), wall_chunks


def _curves(node: Any):
    """Every training curve under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CURVE_KEYS and isinstance(value, list) and value and all("step" in c for c in value):
                yield value
            else:
                yield from _curves(value)
    elif isinstance(node, list):
        for item in node:
            yield from _curves(item)


def training_cost(report: Any) -> TrainingCost | None:
    """What the runs of ``report`` (a suite's JSON) cost to train; None for a suite that trains nothing."""
    if not isinstance(report, dict):
        return None
    summed = report.get("cost")
    if isinstance(summed, dict) and summed.get("train_cpu_seconds_all_runs") is not None:
        return TrainingCost(summed["train_cpu_seconds_all_runs"], summed.get("runs", 0), 0, 0)
    curves = list(_curves(report))
    if curves:
        costs = [curve_cost(curve) for curve in curves]
        return TrainingCost(
            sum(c[0] for c in costs), len(curves), sum(c[1] for c in costs), sum(c[2] for c in costs)
        )
    runs = report.get("runs")
    if isinstance(runs, dict) and isinstance(report.get("steps"), int):
        timed = [
            r["seconds_per_step"] for r in runs.values() if isinstance(r, dict) and r.get("seconds_per_step")
        ]
        if timed:
            return TrainingCost(sum(timed) * report["steps"], len(timed), len(timed), len(timed))
    return None
