"""Results tables generated from the suites' JSON (spec: ``eugen_nerf/bench/protocols/tables.yaml``).

The tables live in the README and in ``docs/benchmarks.md`` of a checkout (:func:`documents`), each table in
exactly one of them, between ``<!-- bench-table: NAME -->`` and ``<!-- /bench-table -->``. Its rows come from the
spec, every figure read from a JSON file by key path, so no figure is copied by hand and a test checks the
documents against the JSON. A cell is either literal text or a mapping::

    {file: benchmarks/distill/distill.json, key: measured.fps_ratio, fmt: "{:.2f}×"}
    {file: ..., key: met.fps_ratio, map: {true: "yes", false: "**no**"}}   (a list of keys: each mapped, joined)

A table can also take one row per entry of a JSON mapping or list (``rows_from``: one source, or a list of
them, each with its ``columns``), with ``@name`` for the entry's key (or index) and ``@label`` for the
source's ``label``; ``@file.KEY`` reads KEY from the source's own file (so sources of one layout can share their ``columns``). A source's ``where: {field: value}`` keeps the matching entries only; a column's
``join: {field: value}`` with ``same: [fields]`` reads its ``key`` from the sibling entry that has those field
values and the same ``same`` fields as the row's entry (a pivot: one row per setting, one column per variant).
A cell's ``key`` may be a list, formatted together (``fmt: "{0:.2f} ({1:.2f}×)"``); in a key read from a
``file`` (or ``@file.``), ``{name}`` stands for the row's entry name and ``{label}`` for its source's label; ``default`` is the text (or another cell) of a cell whose key is absent or null (a measurement
not taken yet); without one, such a null cell reads "not yet measured" (an absent key is an error). A list
value reads as its items joined by commas; ``scale`` multiplies numbers before they are formatted (bytes shown as
GB with ``scale: 1.0e-9``). A key's path may index a list (``results.0.fps``). A cell may read its key from
several reports (``files: [a.json, b.json]``, one a scene) and reduce them to one figure (``reduce: mean``,
``geomean``, ``min`` or ``max``); a cell given as a list is its pieces (text or cells) joined::

    {files: [benchmarks/fields/fields.json, benchmarks/fields-thin/fields.json], key: goals.speedup, reduce: geomean}

A ``verdict`` cell judges a row's figures against its goal: each check reads one figure as a cell does and names
the part of the goal it tests; the cell reads "met", or "**missed**:" and the parts missed::

    {verdict: [{file: benchmarks/nerf/nerf.json, key: goals.fps_speedup, at_least: 1.5, name: speed}, ...]}
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.inputs.outputs import atomic_write_bytes

DOCUMENTS = ("README.md", "docs/benchmarks.md")
"""Where generated tables sit: the README's headline table, every other one on the benchmarks page. Markers in
other pages are not read."""
NOT_MEASURED = "not yet measured"
"""A cell whose figure the JSON records as null and whose spec gives no ``default``."""

MARKER = re.compile(
    r"(<!-- bench-table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /bench-table -->)", re.DOTALL
)


def documents(root: Path) -> list[Path]:
    """The Markdown files under ``root`` that hold generated tables (those that exist), README first."""
    return [root / name for name in DOCUMENTS if (root / name).is_file()]


REDUCTIONS = {
    "mean": lambda values: sum(values) / len(values),
    "geomean": lambda values: math.prod(values) ** (1 / len(values)),
    "min": min,
    "max": max,
}
"""How a ``files`` cell reduces its reports' figures to one: differences average (``mean``), ratios multiply
(``geomean``), and a goal every report must meet reads the worst (``min``, ``max``)."""


def reduce_values(how: str | None, values: list, where: str) -> float:
    """``values`` (one a report) reduced by the named :data:`REDUCTIONS` entry."""
    if how not in REDUCTIONS:
        raise InputError(f"{where}: a cell over several files needs reduce: one of {', '.join(REDUCTIONS)}")
    if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise InputError(f"{where}: reduce {how} needs numbers, got {values}")
    if how == "geomean" and min(values) <= 0:
        raise InputError(f"{where}: reduce geomean needs positive ratios, got {values}")
    return REDUCTIONS[how](values)


class Tables:
    def __init__(self, spec_path: Path, root: Path) -> None:
        if not spec_path.is_file():
            raise InputError(f"table spec {spec_path} does not exist")
        self.spec_path, self.root = spec_path, root
        spec = yaml.safe_load(spec_path.read_text()) or {}
        self.tables: dict[str, dict] = spec.get("tables") or {}
        self._json: dict[Path, Any] = {}

    def read(self, file: str) -> Any:
        path = self.root / file
        if path not in self._json:
            if not path.is_file():
                raise InputError(f"{self.spec_path}: {file} does not exist (run its eugen-bench suite first)")
            self._json[path] = json.loads(path.read_text())
        return self._json[path]

    @staticmethod
    def lookup(data: Any, key: str, where: str) -> Any:
        """``data`` at the dotted path ``key``; a JSON key that itself holds dots (``within_0.1_db``) is matched
        whole, longest first."""
        parts = key.split(".")
        while parts:
            for n in range(len(parts), 0, -1):
                name = ".".join(parts[:n])
                if isinstance(data, dict) and name in data:
                    data = data[name]
                    break
                if n == 1 and isinstance(data, list) and name.isdigit() and int(name) < len(data):
                    data = data[int(name)]
                    break
            else:
                raise InputError(f"{where}: key {key!r} not found (at {parts[0]!r})")
            parts = parts[n:]
        return data

    def value(self, cell: dict, key: str, where: str, entry: Any, name: str, source: dict) -> Any:
        if "file" in cell or "files" in cell or key.startswith("@file."):  # {name} and {label} filled in
            key = key.replace("{name}", name).replace("{label}", str(source.get("label", "")))
        if "files" in cell:  # one figure of several reports (scenes), reduced to one
            values = [self.lookup(self.read(file), key, f"{where} ({file})") for file in cell["files"]]
            return None if None in values else reduce_values(cell.get("reduce"), values, where)
        if key == "@name":
            return name
        if key == "@label":
            return source.get("label", "")
        if key.startswith("@file."):
            return self.lookup(self.read(source["file"]), key[len("@file.") :], f"{where} ({source['file']})")
        if "file" in cell:
            return self.lookup(self.read(cell["file"]), key, f"{where} ({cell['file']})")
        if "join" in cell:
            wanted = {**cell["join"], **{field: entry.get(field) for field in cell.get("same", ())}}
            siblings = self.entries({**source, "where": None}, where).values()
            matches = [e for e in siblings if all(e.get(f) == v for f, v in wanted.items())]
            if len(matches) != 1:
                raise InputError(f"{where}: join {wanted} matches {len(matches)} entries, not one")
            entry = matches[0]
        return self.lookup(entry, key, where)

    def verdict(self, checks: list[dict], where: str) -> str:
        """The verdict text: "met" when every check's figure is within its bound, else "**missed**:" and the
        names of the checks missed; "not yet measured" while a figure is null."""
        missed = []
        for check in checks:
            bounds = [b for b in ("at_least", "at_most") if b in check]
            if len(bounds) != 1 or "name" not in check or not ("file" in check or "files" in check):
                raise InputError(
                    f"{where}: a verdict check needs a name, a file (or files) and one of at_least, at_most: {check}"
                )
            value = self.value(check, check["key"], where, None, "", {})
            if value is None:
                return NOT_MEASURED
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(
                    f"{where}: verdict check {check['name']!r} needs a finite number, got {value!r}"
                )
            bound = check[bounds[0]]
            if value < bound if bounds[0] == "at_least" else value > bound:
                missed.append(check["name"])
        return "**missed**: " + ", ".join(missed) if missed else "met"

    def cell(
        self, cell: Any, where: str, entry: Any = None, name: str = "", source: dict | None = None
    ) -> str:
        if isinstance(cell, list):  # pieces of one cell (figures of several reports in one sentence)
            return "".join(self.cell(piece, where, entry, name, source) for piece in cell)
        if not isinstance(cell, dict):
            return str(cell)
        if "verdict" in cell:
            return self.verdict(cell["verdict"], where)
        keys = cell["key"] if isinstance(cell["key"], list) else [cell["key"]]
        try:
            values = [self.value(cell, key, where, entry, name, source or {}) for key in keys]
        except InputError:
            if "default" not in cell:
                raise
            values = None
        if values is None or None in values:  # absent, or recorded as not measured (null) yet
            if "default" not in cell:
                return NOT_MEASURED
            fallback = cell["default"]  # text, or another cell (a one-seed row has a PSNR but no spread)
            return (
                self.cell(fallback, where, entry, name, source)
                if isinstance(fallback, (dict, list))
                else str(fallback)
            )
        nonfinite = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
        if nonfinite:  # a NaN would print as "nan" and pass every comparison of a verdict
            raise InputError(f"{where}: {keys} holds a non-finite value {nonfinite[0]!r}: not published")
        # a list (seeds) reads as "0, 1, 2"
        values = [", ".join(map(str, v)) if isinstance(v, list) else v for v in values]
        if "scale" in cell:
            values = [
                v * cell["scale"] if isinstance(v, (int, float)) and not isinstance(v, bool) else v
                for v in values
            ]
        if "map" in cell:  # every value mapped (yes/no flags), then formatted together
            values = [cell["map"].get(value, value) for value in values]
            return cell.get("fmt", "; ".join(["{}"] * len(values))).format(*values)
        return cell.get("fmt", "{}").format(*values)

    def entries(self, source: dict, where: str) -> dict[str, Any]:
        """The entries of a ``rows_from`` source, by key (a list's by index), filtered by its ``where``."""
        data = self.lookup(self.read(source["file"]), source["key"], where)
        items = data.items() if isinstance(data, dict) else ((str(i), e) for i, e in enumerate(data))
        wanted = source.get("where") or {}
        return {
            name: e
            for name, e in items
            if all(isinstance(e, dict) and e.get(f) == v for f, v in wanted.items())
        }

    def render(self, name: str) -> str:
        if name not in self.tables:
            raise InputError(f"{self.spec_path}: no table named {name!r}")
        table = self.tables[name]
        where = f"{self.spec_path}: table {name!r}"
        lines = ["| " + " | ".join(table["header"]) + " |", "|" + "---|" * len(table["header"])]
        rows: list[list[str]] = []
        sources = table.get("rows_from") or []
        for source in sources if isinstance(sources, list) else [sources]:
            rows += [
                [self.cell(c, where, entry, entry_name, source) for c in source["columns"]]
                for entry_name, entry in self.entries(source, where).items()
            ]
        rows += [[self.cell(c, where) for c in row] for row in table.get("rows", [])]  # totals last
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines) + "\n"

    def rendered(self, document: Path) -> tuple[str, list[str]]:
        """``document``'s text with every marked table regenerated, and the names of the tables that
        differ from the JSON."""
        stale: list[str] = []

        def replace(match: re.Match) -> str:
            body = self.render(match["name"])
            if body != match["body"]:
                stale.append(match["name"])
            return match.group(1) + body + match.group(4)

        return MARKER.sub(replace, document.read_text()), stale

    def names_in(self, document: Path) -> list[str]:
        return [m["name"] for m in MARKER.finditer(document.read_text())]

    def update_documents(self, paths: list[Path], check: bool = False) -> list[str]:
        """:meth:`update` for each of ``paths``; each spec'd table must sit in exactly one of them and every
        marked table must be spec'd, else one error naming them (a table moved between pages is not lost)."""
        names = [name for path in paths for name in self.names_in(path)]
        unknown = sorted({name for name in names if name not in self.tables})
        missing = sorted(set(self.tables) - set(names))
        twice = sorted({name for name in names if names.count(name) > 1})
        if unknown or missing or twice:
            raise InputError(
                f"{self.spec_path}: tables marked but not spec'd {unknown}, spec'd but in no "
                f"document {missing}, marked twice {twice} (in {', '.join(map(str, paths))})"
            )
        # every document rendered before any is written: a table that cannot be rendered changes none
        results = [(path, *self.rendered(path)) for path in paths]
        if not check:
            for path, text, stale in results:
                if stale:
                    atomic_write_bytes(path, text.encode())
        return [name for _, _, stale in results for name in stale]
