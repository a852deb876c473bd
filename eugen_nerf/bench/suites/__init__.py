"""The benchmark suites ``eugen-bench`` runs, one module each, each runnable as
``python -m eugen_nerf.bench.suites.NAME --help``.

Every suite times its variants side by side in one process against the dense baseline, checks that what it
times is finite, and writes a JSON report (with the command line that produced it) and a plot.
"""

from __future__ import annotations

import shlex
import sys


def command_line() -> str:
    """How this process was started, as a command to rerun: ``python -m eugen_nerf.bench.suites.NAME FLAGS``."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    start = f"-m {spec.name}" if spec is not None and spec.name else shlex.quote(sys.argv[0])
    return f"python {start} {shlex.join(sys.argv[1:])}".rstrip()
