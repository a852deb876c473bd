"""eugen-bench: run the benchmark suites and regenerate the results tables.

    eugen-bench --list                      # the suites of the protocol, with what each needs
    eugen-bench nerf zipnerf                # run two suites: benchmarks/nerf/, benchmarks/zipnerf/
    eugen-bench layers --quick              # smoke run at small sizes, under --quick-dir
    eugen-bench --device cuda layers        # the CUDA protocol
    eugen-bench --tables                    # in a checkout: regenerate the tables and benchmarks/README.md
    eugen-bench --tables --check            # exit 1 if a table or the index differs from the JSON

Each suite times its variants side by side in one process against the dense baseline and checks that what
it times is finite. It writes its JSON and plot into --output-dir/SUITE with command.txt (the command and
the machine); rerunning a suite reuses the training runs it finished under --work-dir and continues the
others (on Ctrl-C or SIGTERM a suite training nerfstudio methods saves the last finished step). Scenes and teachers are read from
--scenes and --teachers. Bad input (an unknown suite, a missing scene, --device cuda without
CUDA) is one line, before anything is written.
"""

from __future__ import annotations

import builtins
import shlex
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import tyro

from eugen_nerf.bench.index import load, update_index, write_command
from eugen_nerf.bench.protocol import PROTOCOLS, Places, Suite, load_protocol
from eugen_nerf.bench.tables import Tables, documents
from eugen_nerf.inputs.errors import InputError, one_line_errors, report
from eugen_nerf.inputs.options import parse_command_line, resolve_device

TABLE_SPEC = PROTOCOLS / "tables.yaml"


@dataclass
class BenchArgs:
    """Run benchmark suites (all when none is named) and regenerate the results tables."""

    suites: Annotated[builtins.list[str], tyro.conf.Positional, tyro.conf.arg(metavar="SUITE ...")] = field(
        default_factory=list
    )
    """Suite names from the protocol (see --list); none: every suite of the protocol (many CPU-hours)."""
    device: Literal["cpu", "cuda"] = "cpu"
    """Which protocol: the CPU one or the CUDA one."""
    protocol: Path | None = None
    """A protocol file instead of the device's."""
    output_dir: Annotated[Path | None, tyro.conf.arg(help_behavior_hint="")] = None
    """Where each suite writes its results (a folder per suite) and the index page README.md (default: benchmarks,
    which the tables read; with --device cuda, benchmarks/cuda-protocol, so that GPU figures never replace the CPU
    ones under the CPU's labels)."""
    work_dir: Annotated[Path | None, tyro.conf.arg(help_behavior_hint="")] = None
    """Where suites keep their training runs (a folder per suite, or shared with the suite a protocol entry's
    ``work`` names); a rerun reuses the finished ones (default: outputs/bench; with --device cuda,
    outputs/bench-cuda)."""
    scenes: Path = Path("scenes")
    """The folder holding the scenes the suites read."""
    teachers: Path = Path("teachers")
    """The folder holding the distillation teachers."""
    quick: bool = False
    """Smoke run: small sizes, everything written under --quick-dir, no table touched."""
    quick_dir: Path = Path("outputs/bench-quick")
    """Where --quick runs write (results and training runs)."""
    list: bool = False
    """List the suites and exit."""
    tables: bool = False
    """Only regenerate the tables of README.md and docs/benchmarks.md and the index page from the JSON."""
    check: bool = False
    """With --tables: write nothing, exit 1 if a table or the index page differs from the JSON."""
    root: Path = Path(".")
    """With --tables: the checkout whose README.md, docs/benchmarks.md and benchmarks/ are read."""


def places(args: BenchArgs) -> Places:
    if args.quick:
        return Places(args.quick_dir, args.quick_dir / "work", args.scenes, args.teachers)
    cuda = args.device == "cuda"
    output_dir = args.output_dir or Path("benchmarks/cuda-protocol" if cuda else "benchmarks")
    work_dir = args.work_dir or Path("outputs/bench-cuda" if cuda else "outputs/bench")
    return Places(output_dir, work_dir, args.scenes, args.teachers)


def regenerate(root: Path, protocol, check: bool) -> list[str]:
    """Regenerate (or with ``check`` compare) the tables of the checkout at ``root`` and its index page;
    the names of what differs from the JSON."""
    root = root.resolve()
    if not (root / "README.md").is_file():
        raise InputError(f"--tables: {root} is not a checkout of eugen-nerf (no README.md); pass --root")
    tables = Tables(TABLE_SPEC, root)
    stale = tables.update_documents(documents(root), check=check)
    if (root / "benchmarks").is_dir() and update_index(protocol, root / "benchmarks", check=check):
        stale.append("benchmarks/README.md")
    return stale


def run_suite(suite: Suite, args: BenchArgs, where: Places) -> int:
    command = suite.command(where, quick=args.quick)
    # the suite makes its folder when it writes: a running suite leaves no empty folder behind
    out = where.output_dir / suite.name
    print(f"== {suite.name}: python {shlex.join(command)}", flush=True)
    load_at_start = load()
    code = subprocess.call([sys.executable, *command])
    if code:
        print(
            f"eugen-bench: suite {suite.name!r} failed (exit {code}); no table was touched",
            file=sys.stderr,
            flush=True,
        )
        return code
    rerun = " ".join(
        ["eugen-bench", suite.name]
        + (["--device", args.device] if args.device != "cpu" else [])
        + (["--quick"] if args.quick else [])
    )
    out.mkdir(parents=True, exist_ok=True)
    write_command(out, suite.name, command, rerun, load_at_start)
    return 0


def run(args: BenchArgs) -> int:
    given = [flag for flag, value in (("--check", args.check), ("--root", args.root != Path("."))) if value]
    if given and not args.tables:  # without --tables, eugen-bench would run every suite
        raise InputError(f"{given[0]} works with --tables: eugen-bench --tables {given[0]} ...")
    if args.tables and args.suites:  # the tables are regenerated whole: a suite's name would be ignored
        raise InputError(
            f"--tables regenerates every table; leave out the suite name(s) {' '.join(args.suites)}"
        )
    placed = [
        flag for flag, value in (("--output-dir", args.output_dir), ("--work-dir", args.work_dir)) if value
    ]
    if args.quick and placed:  # --quick writes under --quick-dir only
        raise InputError(f"--quick writes under --quick-dir; {placed[0]} is for full runs")
    resolve_device(args.device)  # --device cuda without CUDA: one line, before any suite runs
    protocol = load_protocol(args.protocol or PROTOCOLS / f"{args.device}.yaml")
    if args.tables:
        stale = regenerate(args.root, protocol, args.check)
        if args.check:
            print("the tables match the JSON" if not stale else f"tables differ from the JSON: {stale}")
            return 1 if stale else 0
        print(
            f"regenerated the tables of {args.root / 'README.md'}, {args.root / 'docs/benchmarks.md'} and the index"
        )
        return 0
    suites = protocol.select(args.suites)
    where = places(args)
    if args.list:
        width = max(len(name) for name in protocol.suites) + 2
        columns = max(shutil.get_terminal_size().columns, width + 40)
        for suite in protocol.suites.values():
            needs = ", ".join(suite.fill(where, n) for n in suite.needs)
            setting = f"setting: {suite.setting}{f'; reads {needs}' if needs else ''}"
            for text, first in ((suite.description, f"{suite.name:{width}s}"), (setting, " " * width)):
                print(textwrap.fill(text, columns, initial_indent=first, subsequent_indent=" " * width))
        return 0
    problems = [line for line in (suite.missing(where, args.quick) for suite in suites) if line]
    if problems:
        raise InputError(problems[0])
    for suite in suites:
        code = run_suite(suite, args, where)
        if code:
            return code
    if not args.quick:
        update_index(protocol, where.output_dir)
        print(
            f"wrote {where.output_dir / 'README.md'}; `eugen-bench --tables` in a checkout regenerates the tables"
        )
    return 0


def entrypoint() -> None:
    with one_line_errors("eugen-bench"):
        args = parse_command_line(BenchArgs, "eugen-bench", description=__doc__)
        try:
            code = run(args)
        except InputError as err:
            report("eugen-bench", err)
            code = 2
    sys.exit(code)


if __name__ == "__main__":
    entrypoint()
