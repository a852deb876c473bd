"""The benchmark protocol: which suites exist, what each runs, with which flags, and what it writes.

A protocol file (``configs/bench/cpu.yaml``, ``configs/bench/cuda.yaml``) maps suite names to

* ``script``: the script under ``scripts/`` that measures (each times its variants side by side in one run);
* ``args`` / ``quick_args``: its flags for the full protocol and for ``--quick`` (a smoke run a test can afford);
* ``outputs``: the ``benchmarks/*.json`` files it writes (``--quick`` writes under ``--quick-dir`` instead);
* ``needs``: paths that must exist first (scenes, teachers);
* ``seeds`` (optional): one suite per seed instead of near-copies. ``{seed}`` in the flags and outputs is
  the seed and ``{seed_suffix}`` is ``_seed<N>``; the suite of seed N is named ``<name>-seed<N>``. Seed 0
  keeps the bare name and an empty suffix, the repository's convention for a first run that later seeds
  repeat. A name holding ``{seed}`` (``siren-256-snnk-seed{seed}``) is filled in instead: the later seeds of a
  first run whose own suite measured more (several rates or variants) than its repeats do.

It is checked whole before anything runs: a missing key, an unknown suite, a script or a needed path that does
not exist is one :class:`~eugen_nerf.inputs.errors.InputError` naming the file and the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from eugen_nerf.inputs.errors import InputError

REQUIRED = ("script", "args", "quick_args", "outputs")
SEED_FIELDS = ("args", "quick_args", "outputs", "description")


@dataclass(frozen=True)
class Suite:
    name: str
    script: Path
    args: tuple[str, ...]
    quick_args: tuple[str, ...]
    outputs: tuple[Path, ...]
    needs: tuple[Path, ...]
    description: str


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
                f"unknown suite(s) {', '.join(map(repr, unknown))} in {self.path}; "
                f"known: {', '.join(self.suites)}"
            )
        return [self.suites[n] for n in (names or list(self.suites))]


def _strings(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise InputError(f"{where} must be a list of strings")
    return tuple(str(v) for v in value)


def _per_seed(name: str, entry: dict, where: str) -> dict[str, dict]:
    """``entry`` itself, or one entry per seed of its ``seeds`` list, ``{seed}``/``{seed_suffix}`` filled in.

    ``str.replace``, not ``str.format``: ``{quick_dir}`` is filled in later, by the runner.
    """
    if "seeds" not in entry:
        return {name: entry}
    seeds = entry["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and s >= 0 for s in seeds):
        raise InputError(f"{where}: seeds must be a list of integers >= 0")
    if len(set(seeds)) != len(seeds):
        raise InputError(f"{where}: seeds lists a seed twice")

    def fill(value, seed: int):
        suffix = "" if seed == 0 else f"_seed{seed}"
        if isinstance(value, list):
            return [fill(v, seed) for v in value]
        return str(value).replace("{seed}", str(seed)).replace("{seed_suffix}", suffix)

    expanded = {}
    for seed in seeds:
        copy = {k: v for k, v in entry.items() if k != "seeds"}
        copy.update({k: fill(entry[k], seed) for k in SEED_FIELDS if k in entry})
        named = fill(name, seed) if "{seed}" in name else name if seed == 0 else f"{name}-seed{seed}"
        expanded[named] = copy
    return expanded


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
    entries: dict[str, dict] = {}
    for name, entry in data["suites"].items():
        where = f"{path}: suite {name!r}"
        if not isinstance(entry, dict):
            raise InputError(f"{where} must be a mapping")
        for seeded, seeded_entry in _per_seed(name, entry, where).items():
            if seeded in entries:
                raise InputError(
                    f"{where}: the suite {seeded!r} is defined twice (a suite with seeds: [N] "
                    "also defines <its name>-seedN)"
                )
            entries[seeded] = seeded_entry
    suites = {}
    for name, entry in entries.items():
        where = f"{path}: suite {name!r}"
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
            name=name,
            script=script,
            args=_strings(entry["args"], f"{where}: args"),
            quick_args=_strings(entry["quick_args"], f"{where}: quick_args"),
            outputs=tuple(Path(p) for p in _strings(entry["outputs"], f"{where}: outputs")),
            needs=needs,
            description=str(entry.get("description", "")),
        )
    return Protocol(path, device, suites)
