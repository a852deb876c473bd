"""The benchmark protocol: which suites exist, what each runs, with which flags, and what it writes.

A protocol file (package data: ``eugen_nerf/bench/protocols/cpu.yaml``, ``cuda.yaml``) maps suite names to

* ``module``: the suite's module under :mod:`eugen_nerf.bench.suites` (each times its variants side by side
  in one run against the dense baseline);
* ``args`` / ``quick_args``: its flags for the full protocol and for ``--quick`` (a smoke run a test can
  afford);
* ``outputs``: the files it writes into its output folder (``benchmarks/<suite>/`` by default);
* ``needs`` (optional): the scenes or teachers its flags name, each with how to make it;
* ``setting`` (optional): the scene, resolution, steps and seeds in words, for the index page;
* ``work`` (optional): the suite whose training folder it shares (its runs are reused, not trained again).

In the flags, ``{out}`` is the suite's output folder, ``{work}`` its folder for training runs (or that of the
suite its ``work`` names; reused by a rerun, so an interrupted suite continues where it stopped),
``{scenes}`` and ``{teachers}`` the folders the user points ``eugen-bench`` at. The file is checked whole before anything runs: a missing key, an unknown
suite or module, or a needed path that does not exist is one :class:`~eugen_nerf.inputs.errors.InputError`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import yaml

from eugen_nerf.inputs.errors import InputError

PROTOCOLS = Path(__file__).resolve().parent / "protocols"
"""The protocols shipped with the package (one per device) and the tables spec."""
SUITES = "eugen_nerf.bench.suites"
REQUIRED = ("module", "args", "quick_args", "outputs")


@dataclass(frozen=True)
class Places:
    """Where a run reads and writes: the values of ``{out}``, ``{work}``, ``{scenes}`` and ``{teachers}``."""

    output_dir: Path
    work_dir: Path
    scenes: Path
    teachers: Path

    def fill(self, text: str, suite: str, work: str | None = None) -> str:
        """``text`` with the places of ``suite`` filled in (``{work}``: the training folder of ``work``,
        by default the suite's own)."""
        return (
            text.replace("{out}", str(self.output_dir / suite))
            .replace("{work}", str(self.work_dir / (work or suite)))
            .replace("{scenes}", str(self.scenes))
            .replace("{teachers}", str(self.teachers))
        )


@dataclass(frozen=True)
class Suite:
    name: str
    module: str
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    outputs: tuple[str, ...]
    needs: dict[str, str]
    description: str
    setting: str
    work: str = ""
    """The suite whose training folder ``{work}`` names (empty: this suite's own)."""

    def fill(self, places: Places, text: str) -> str:
        return places.fill(text, self.name, self.work or None)

    def command(self, places: Places, quick: bool = False) -> list[str]:
        """``python -m <module> <flags>`` with the places filled in."""
        flags = self.quick_args if quick else self.args
        return ["-m", f"{SUITES}.{self.module}", *(self.fill(places, a) for a in flags)]

    def missing(self, places: Places, quick: bool = False) -> str | None:
        """One line naming the first path that the command reads (a ``needs`` entry among its flags) and
        that does not exist, with how to make it."""
        flags = self.command(places, quick)
        for need, makes in self.needs.items():
            path = self.fill(places, need)
            if path in flags and not Path(path).exists():
                return f"suite {self.name!r} needs {path}, which does not exist; {self.fill(places, makes)}"
        return None


@dataclass(frozen=True)
class Protocol:
    path: Path
    device: str
    suites: dict[str, Suite]

    def select(self, names: list[str]) -> list[Suite]:
        """The suites named (all, in file order, when none is), or an error naming the unknown ones."""
        unknown = [n for n in names if n not in self.suites]
        if unknown:
            raise InputError(
                f"unknown suite(s) {', '.join(map(repr, unknown))}; known: {', '.join(self.suites)}"
            )
        return [self.suites[n] for n in (names or list(self.suites))]


def _strings(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise InputError(f"{where} must be a list of strings")
    return tuple(str(v) for v in value)


def load_protocol(path: Path) -> Protocol:
    """Read and check the protocol at ``path``."""
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
        if importlib.util.find_spec(f"{SUITES}.{entry['module']}") is None:
            raise InputError(f"{where}: module {SUITES}.{entry['module']} does not exist")
        needs = entry.get("needs") or {}
        if not isinstance(needs, dict) or not all(isinstance(v, str) for v in needs.values()):
            raise InputError(f"{where}: needs must map each path to how to make it")
        suites[name] = Suite(
            name=name,
            module=str(entry["module"]),
            args=_strings(entry["args"], f"{where}: args"),
            quick_args=_strings(entry["quick_args"], f"{where}: quick_args"),
            outputs=_strings(entry["outputs"], f"{where}: outputs"),
            needs={str(k): v for k, v in needs.items()},
            description=str(entry.get("description", "")),
            setting=str(entry.get("setting", "")),
            work=str(entry.get("work") or ""),
        )
    for name, suite in suites.items():
        if suite.work and (suite.work not in suites or suite.work == name or suites[suite.work].work):
            raise InputError(
                f"{path}: suite {name!r}: work must name another suite of this protocol that has its own "
                f"training folder, got {suite.work!r}"
            )
    return Protocol(path, device, suites)
