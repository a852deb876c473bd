"""The benchmark protocol: which suites exist, what each runs, with which flags, and what it writes.

A protocol file (``configs/bench/cpu.yaml``, ``configs/bench/cuda.yaml``) maps suite names to

* ``script``: the script under ``scripts/`` that measures (each times its variants side by side in one run);
* ``args`` / ``quick_args``: its flags for the full protocol and for ``--quick`` (a smoke run a test can afford);
* ``outputs``: the ``benchmarks/*.json`` files it writes (``--quick`` writes under ``--quick-dir`` instead);
* ``needs``: paths that must exist first (scenes, teachers).

It is checked whole before anything runs: a missing key, an unknown suite, a script or a needed path that does
not exist is one :class:`~eugen_nerf.inputs.errors.InputError` naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import yaml

from eugen_nerf.inputs.errors import InputError

REQUIRED = ("script", "args", "quick_args", "outputs")


@dataclass(frozen=True)
class Suite:
    name: str
    script: Path
    args: Tuple[str, ...]
    quick_args: Tuple[str, ...]
    outputs: Tuple[Path, ...]
    needs: Tuple[Path, ...]
    description: str


@dataclass(frozen=True)
class Protocol:
    path: Path
    device: str
    suites: Dict[str, Suite]

    def select(self, names: List[str]) -> List[Suite]:
        """The suites named (all, in file order, when none is), or an error naming the unknown ones."""
        unknown = [n for n in names if n not in self.suites]
        if unknown:
            raise InputError(f"unknown suite(s) {', '.join(map(repr, unknown))} in {self.path}; "
                             f"known: {', '.join(self.suites)}")
        return [self.suites[n] for n in (names or list(self.suites))]


def _strings(value, where: str) -> Tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise InputError(f"{where} must be a list of strings")
    return tuple(str(v) for v in value)


def load_protocol(path: Path, root: Path) -> Protocol:
    """Read and check ``path``; paths in it are relative to the repository ``root``."""
    if not path.is_file():
        raise InputError(f"protocol file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise InputError(f"{path} is not valid YAML: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("suites"), dict) or not data["suites"]:
        raise InputError(f"{path} must have a 'suites' mapping with at least one suite")
    device = data.get("device", "cpu")
    if device not in ("cpu", "cuda"):
        raise InputError(f"{path}: device must be 'cpu' or 'cuda', got {device!r}")
    suites = {}
    for name, entry in data["suites"].items():
        where = f"{path}: suite {name!r}"
        if not isinstance(entry, dict):
            raise InputError(f"{where} must be a mapping")
        missing = [key for key in REQUIRED if key not in entry]
        if missing:
            raise InputError(f"{where} is missing the key(s) {', '.join(missing)}")
        script = root / entry["script"]
        if not script.is_file():
            raise InputError(f"{where}: script {entry['script']} does not exist")
        needs = tuple(Path(p) for p in _strings(entry.get("needs", []), f"{where}: needs"))
        for need in needs:
            if not (root / need).exists():
                raise InputError(f"{where}: needs {need}, which does not exist")
        suites[name] = Suite(
            name=name, script=script, args=_strings(entry["args"], f"{where}: args"),
            quick_args=_strings(entry["quick_args"], f"{where}: quick_args"),
            outputs=tuple(Path(p) for p in _strings(entry["outputs"], f"{where}: outputs")),
            needs=needs, description=str(entry.get("description", "")),
        )
    return Protocol(path, device, suites)
