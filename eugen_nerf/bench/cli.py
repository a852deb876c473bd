"""``eugen-bench``: run benchmark suites from the protocol and regenerate the results tables (README, docs/).

    eugen-bench --list                          # the suites of the protocol
    eugen-bench distill ablate-distill          # run two suites (full protocol), then regenerate the tables
    eugen-bench layers --quick                  # smoke run: small sizes, output under --quick-dir
    eugen-bench --tables                        # only regenerate the tables from benchmarks/*.json
    eugen-bench --tables --check                # exit 1 if a table differs from the JSON
    eugen-bench --device cuda                   # the CUDA protocol (configs/bench/cuda.yaml)

Every suite times its variants side by side in one run against the dense baseline and checks that what
it times is finite; the numbers land in ``benchmarks/*.json`` and the tables (README, docs/) are regenerated
from them. Bad input (an unknown suite, a protocol with a missing key or a missing scene, ``--device
cuda`` without CUDA) is one line, before anything is written.
"""

from __future__ import annotations

import builtins
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import tyro

from eugen_nerf.bench.protocol import load_protocol
from eugen_nerf.bench.tables import Tables, documents
from eugen_nerf.inputs.errors import InputError, one_line_errors, report

ROOT = Path.cwd()


@dataclass
class BenchArgs:
    """Run benchmark suites (all when none is named) and regenerate the results tables."""

    suites: Annotated[builtins.list[str], tyro.conf.Positional, tyro.conf.arg(metavar="SUITE ...")] = field(
        default_factory=list
    )
    """Suite names from the protocol (see --list)."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Which protocol: configs/bench/cpu.yaml or configs/bench/cuda.yaml."""
    protocol: Path | None = None
    """A protocol file instead of the device's."""
    quick: bool = False
    """Smoke run: each suite's quick_args, outputs under --quick-dir, tables untouched."""
    quick_dir: Path = Path("outputs/bench-quick")
    """Where --quick runs write ({quick_dir} in quick_args)."""
    list: bool = False
    """List the suites and exit."""
    tables: bool = False
    """Only regenerate the tables of README.md and docs/*.md from benchmarks/*.json (no suite runs)."""
    check: bool = False
    """With --tables: write nothing, exit 1 if a table differs from the JSON."""
    table_spec: Path = Path("configs/bench/tables.yaml")


def run(args: BenchArgs) -> int:
    root = ROOT
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available here (use --device cpu)")
    tables = Tables(root / args.table_spec, root)  # a broken table spec fails before hours of measuring
    pages = documents(root)
    if args.tables:
        stale = tables.update_documents(pages, check=args.check)
        if args.check:
            print("the tables match the JSON" if not stale else f"tables differ from the JSON: {stale}")
            return 1 if stale else 0
        names = ", ".join(str(page.relative_to(root)) for page in pages)
        print(f"regenerated {len(tables.tables)} table(s) in {names}")
        return 0
    protocol = load_protocol(args.protocol or root / "configs" / "bench" / f"{args.device}.yaml", root)
    suites = protocol.select(args.suites)
    if args.list:
        for suite in protocol.suites.values():
            print(
                f"{suite.name:18s} {suite.script.relative_to(root)}  ->  {', '.join(map(str, suite.outputs))}"
                f"\n{'':18s} {suite.description}"
            )
        return 0
    for suite in suites:
        flags = [a.format(quick_dir=args.quick_dir) for a in (suite.quick_args if args.quick else suite.args)]
        if args.quick:
            args.quick_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, str(suite.script), *flags]
        print(f"== {suite.name}: {' '.join(command[1:])}", flush=True)
        code = subprocess.call(command, cwd=root)
        if code:
            print(f"eugen-bench: suite {suite.name!r} failed (exit {code}); no table was touched", flush=True)
            return code
    if not args.quick:
        tables.update_documents(pages)
        print("regenerated the tables in README.md and docs/")
    return 0


def entrypoint() -> None:
    with one_line_errors("eugen-bench"):
        args = tyro.cli(BenchArgs, prog="eugen-bench", description=__doc__)
        try:
            code = run(args)
        except InputError as err:
            report("eugen-bench", err)
            code = 2
    sys.exit(code)


if __name__ == "__main__":
    entrypoint()
