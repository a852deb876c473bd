"""Run ``bpy_render.py`` in a headless Blender: find the program, write the job, follow its progress.

Frames are written one by one under temporary names and renamed, and frames already on disk are skipped,
so a rerun of an interrupted job continues where it stopped.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from eugen_nerf.inputs.errors import InputError

SCRIPT = Path(__file__).with_name("bpy_render.py")
APT_HINT = (
    "install the Debian package `blender` (sudo apt-get install blender, or bash scripts/setup.sh --scenes)"
)


def find_blender() -> str:
    """Path of the ``blender`` program ($EUGEN_BLENDER overrides), or one line saying how to install it."""
    program = os.environ.get("EUGEN_BLENDER") or shutil.which("blender")
    if not program:
        raise InputError(f"Blender is not installed: {APT_HINT}")
    return program


def blender_version(program: str) -> str:
    """``Blender 3.4.1`` (the first line of ``blender --version``)."""
    result = subprocess.run([program, "--version"], capture_output=True, text=True, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("Blender")]
    if result.returncode != 0 or not lines:
        raise InputError(f"{program} --version failed (exit {result.returncode}): {APT_HINT}")
    return lines[0].strip()


def blender_command(program: str, job_path: Path, *more_scripts: Path) -> list[str]:
    """The headless Blender command line that runs ``bpy_render.py`` (then ``more_scripts``) on a job file."""
    scripts = [arg for script in (SCRIPT, *more_scripts) for arg in ("--python", str(script))]
    return [
        program,
        "-b",
        "--factory-startup",
        "-noaudio",
        "--python-exit-code",
        "1",
        *scripts,
        "--",
        str(job_path),
    ]


@dataclass(frozen=True)
class JobTiming:
    """What one Blender run cost: frames rendered (not skipped), wall-clock and CPU seconds."""

    frames: int
    wall_seconds: float
    cpu_seconds: float


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_job(program: str, job: dict[str, Any], job_path: Path, label: str, quiet: bool = False) -> JobTiming:
    """Render every frame of ``job`` not yet on disk; returns what it cost.

    ``job_path``'s folder must hold the job's assets. Blender's own log goes to ``job_path`` + ``.log``;
    its tail is quoted if Blender fails.
    """
    job_path.write_text(json.dumps(job))
    command = blender_command(program, job_path)
    log_path = job_path.with_suffix(".log")
    tail: deque[str] = deque(maxlen=15)
    rendered = 0
    start, cpu = time.time(), _children_cpu()
    columns: Sequence[Any] = (
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, disable=quiet, transient=False) as progress, open(log_path, "a") as log:
        task = progress.add_task(label, total=len(job["frames"]))
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        try:
            for line in process.stdout:
                log.write(line)
                tail.append(line.rstrip())
                if line.startswith("EUGEN-FRAME "):
                    status = line.split(maxsplit=2)[1]
                    if status == "skip":  # no time spent: keep it out of the time-left estimate
                        progress.update(task, total=progress.tasks[0].total - 1)
                    else:
                        rendered += 1
                        progress.advance(task)
            code = process.wait()
        except BaseException:
            process.terminate()
            process.wait()
            raise
    if code != 0:
        quoted = " | ".join(line for line in tail if line and not line.startswith("Fra:"))[-600:]
        raise RuntimeError(f"Blender failed (exit {code}, log {log_path}): {quoted}")
    return JobTiming(rendered, time.time() - start, _children_cpu() - cpu)
