"""Write a benchmark report without losing the sections an earlier run measured.

``bench_methods --families zipnerf`` measures one family; its rows belong in ``benchmarks/methods.json``
beside the families measured by earlier runs, each family carrying the command that produced it. So a suite
replaces only the entries it produced under a section (a key path to a mapping) and keeps the others.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eugen_nerf.eval.timing import NonFiniteOutput
from eugen_nerf.inputs.errors import NumericalError
from eugen_nerf.inputs.outputs import atomic_write_bytes


def merge_report(path: Path, report: dict[str, Any], sections: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``report``, with every entry of the ``sections`` of the report already at ``path`` that this run did
    not produce kept (an unreadable or absent file keeps nothing). Top-level keys are this run's."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return report
    for section in sections:
        old, new = earlier, report
        for key in section:
            old = old.get(key) if isinstance(old, dict) else None
            new = new.setdefault(key, {})
        if isinstance(old, dict):
            for name, entry in old.items():
                new.setdefault(name, entry)
    return report


def write_report(
    path: Path, report: dict[str, Any], sections: Sequence[Sequence[str]] = ()
) -> dict[str, Any]:
    """Merge (see :func:`merge_report`) and write ``report`` (:func:`publish_json`: a truncated report would lose
    every section kept from earlier runs); returns what was written."""
    merged = merge_report(path, report, sections)
    publish_json(path, merged)
    return merged


def publish_json(path: Path, report: dict[str, Any], default: Any = None) -> None:
    """Write a suite's report as JSON (``default``: as :func:`json.dumps`'s): refused, with the figure's path, where
    it holds an inf or NaN (:func:`refuse_non_finite`); renamed into place, so a stop while it is written leaves
    the report before it whole."""
    refuse_non_finite(report)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, allow_nan=False, default=default) + "\n"
    atomic_write_bytes(path, text.encode())


def non_finite_figures(data: object, where: str = "report") -> list[str]:
    """Where ``data`` (nested dicts and lists) holds an inf or NaN, as ``where.key[index]`` paths: a report
    holding one is not published."""
    if isinstance(data, float):
        return [] if math.isfinite(data) else [where]
    if isinstance(data, dict):
        return [p for key, value in data.items() for p in non_finite_figures(value, f"{where}.{key}")]
    if isinstance(data, list):
        return [p for index, value in enumerate(data) for p in non_finite_figures(value, f"{where}[{index}]")]
    return []


class NonFiniteReport(NonFiniteOutput, NumericalError):
    """A figure about to be published is inf or NaN (a :class:`NumericalError` too: uncaught, one line)."""


def refuse_non_finite(data: object, where: str = "report") -> None:
    """Raise :class:`NonFiniteReport` naming the first figure in ``data`` that is inf or NaN: a report holding
    one is not written."""
    bad = non_finite_figures(data, where)
    if bad:
        raise NonFiniteReport(f"{bad[0]} is not finite; the report is not written")
