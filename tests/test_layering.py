"""The package's floors: nothing imports upward (every import of the package's own modules, top-level or
inside a function, is read from the source with ``ast``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "eugen_nerf"
# Each subpackage, and what of ours it may import (itself always). Ground floor first.
ALLOWED = {
    "extensions": set(),
    "inputs": set(),
    "layers": set(),
    "eval": {"inputs"},
    "scenes": {"inputs"},
    "fields": {"layers", "inputs"},
    "isdf": {"layers", "inputs", "eval", "scenes", "fields"},
    "siren": {"layers", "inputs", "eval", "scenes", "fields"},
    "distill": {"layers", "inputs", "eval", "extensions"},
    "viewer": {"layers", "inputs", "eval"},
    "export": {"layers", "inputs", "eval", "fields", "models"},
    "models": {"layers", "inputs", "eval", "scenes", "fields", "isdf", "extensions"},
    # bench sits at the top beside methods: its suites train, distil and export whatever they measure
    "bench": {
        "inputs",
        "layers",
        "eval",
        "scenes",
        "fields",
        "isdf",
        "siren",
        "methods",
        "distill",
        "export",
    },
    "methods": {"layers", "inputs", "eval", "scenes", "fields", "isdf", "siren", "models", "extensions"},
}


def own_imports(path: Path) -> set[str]:
    """The subpackages of ``eugen_nerf`` that ``path`` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [node.module]
            if isinstance(node, ast.ImportFrom) and node.module
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        for name in names:
            parts = name.split(".")
            if parts[0] == "eugen_nerf" and len(parts) > 1:
                found.add(parts[1])
    return found


def unit_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


@pytest.mark.parametrize("unit", sorted(ALLOWED))
def test_no_import_runs_up_the_floors(unit):
    files = list((PACKAGE / unit).rglob("*.py")) if (PACKAGE / unit).is_dir() else [PACKAGE / f"{unit}.py"]
    assert files, unit
    wrong = {
        f"{p.relative_to(PACKAGE)} imports {name}"
        for p in files
        for name in own_imports(p) - ALLOWED[unit] - {unit}
    }
    assert not wrong, sorted(wrong)


def test_every_subpackage_has_a_floor():
    units = {unit_of(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert units <= set(ALLOWED), units - set(ALLOWED)
