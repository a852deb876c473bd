"""Run a command's ``__main__`` inside the test process, as ``subprocess.run`` would report it.

A subprocess spends 10-30 s here importing torch and nerfstudio's method registry before it prints the one
line a bad-input test is about; in the test process those imports are already loaded, so the same check
costs milliseconds. Tests that need a separate process (signals, stock ``ns-*`` entry points, isolation of
global state) keep ``subprocess``.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_main(target: str, *args: object, module: bool = True) -> Ran:
    """Run the console-script ``entrypoint()`` of the module ``target`` with ``args`` as its command line; its
    exit status, stdout and stderr are captured, ``sys.argv``/``sys.path`` restored. (``module`` stays for the
    callers that name it: every target is a package module.)"""
    if not module:
        raise ValueError("run_main runs package modules only (module=True)")
    out, err = io.StringIO(), io.StringIO()
    argv, path_before = sys.argv, list(sys.path)
    sys.argv = [target, *map(str, args)]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            # what the console script calls (runpy would re-run an imported module's body)
            importlib.import_module(target).entrypoint()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        sys.argv, sys.path[:] = argv, path_before
    return Ran(code, out.getvalue(), err.getvalue())


def run_command(args: list, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a command in its own process (warnings silenced, its exit status returned, not raised)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
