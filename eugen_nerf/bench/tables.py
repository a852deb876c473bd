"""README results tables generated from ``benchmarks/*.json`` (spec: ``configs/bench/tables.yaml``).

A table in the README sits between ``<!-- bench-table: NAME -->`` and ``<!-- /bench-table -->``; its rows
come from the spec, every figure read from a JSON file by key path, so no figure is copied by hand and a
test checks the README against the JSON. A cell is either literal text or a mapping::

    {file: benchmarks/distill_paper.json, key: measured.fps_ratio, fmt: "{:.2f}×"}
    {file: ..., key: met.fps_ratio, map: {true: "yes", false: "**no**"}}

A table can also take one row per entry of a JSON mapping (``rows_from``), with ``@name`` for the key.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List

import yaml

from eugen_nerf.inputs.errors import InputError

MARKER = re.compile(r"(<!-- bench-table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /bench-table -->)", re.S)


class Tables:
    def __init__(self, spec_path: Path, root: Path) -> None:
        if not spec_path.is_file():
            raise InputError(f"table spec {spec_path} does not exist")
        self.spec_path, self.root = spec_path, root
        spec = yaml.safe_load(spec_path.read_text()) or {}
        self.tables: Dict[str, dict] = spec.get("tables") or {}
        self._json: Dict[Path, Any] = {}

    def read(self, file: str) -> Any:
        path = self.root / file
        if path not in self._json:
            if not path.is_file():
                raise InputError(f"{self.spec_path}: {file} does not exist (run its eugen-bench suite first)")
            self._json[path] = json.loads(path.read_text())
        return self._json[path]

    @staticmethod
    def lookup(data: Any, key: str, where: str) -> Any:
        for part in key.split("."):
            if isinstance(data, dict) and part in data:
                data = data[part]
            elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
                data = data[int(part)]
            else:
                raise InputError(f"{where}: key {key!r} not found (at {part!r})")
        return data

    def cell(self, cell: Any, where: str, entry: Any = None, name: str = "") -> str:
        if not isinstance(cell, dict):
            return str(cell)
        if cell.get("key") == "@name":
            value: Any = name
        elif "file" in cell:
            value = self.lookup(self.read(cell["file"]), cell["key"], f"{where} ({cell['file']})")
        else:
            value = self.lookup(entry, cell["key"], where)
        if "map" in cell:
            return str(cell["map"].get(value, value))
        return cell.get("fmt", "{}").format(value)

    def render(self, name: str) -> str:
        if name not in self.tables:
            raise InputError(f"{self.spec_path}: no table named {name!r}")
        table = self.tables[name]
        where = f"{self.spec_path}: table {name!r}"
        lines = ["| " + " | ".join(table["header"]) + " |", "|" + "---|" * len(table["header"])]
        rows: List[List[str]] = [[self.cell(c, where) for c in row] for row in table.get("rows", [])]
        if "rows_from" in table:
            source = table["rows_from"]
            entries = self.lookup(self.read(source["file"]), source["key"], where)
            rows += [[self.cell(c, where, entry, entry_name) for c in source["columns"]]
                     for entry_name, entry in entries.items()]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return "\n".join(lines) + "\n"

    def update(self, readme: Path, check: bool = False) -> List[str]:
        """Regenerate every marked table of ``readme``; with ``check``, write nothing and return the names of
        the tables that differ from the JSON."""
        text = readme.read_text()
        stale: List[str] = []

        def replace(match: re.Match) -> str:
            body = self.render(match["name"])
            if body != match["body"]:
                stale.append(match["name"])
            return match.group(1) + body + match.group(4)

        new = MARKER.sub(replace, text)
        if not check and new != text:
            readme.write_text(new)
        return stale

    def names_in(self, readme: Path) -> List[str]:
        return [m["name"] for m in MARKER.finditer(readme.read_text())]
