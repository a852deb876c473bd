"""Interruptions: SIGINT (Ctrl-C) and SIGTERM at a random (seeded) moment of a real run.

``ns-train eugen-nerfacto`` saves a checkpoint every step; once at least one exists it is interrupted. It must
stop promptly with one line and exit status 130, every ``step-*.ckpt`` left must load, and nothing else (a temporary file from a save that was
cut short) may be left in ``nerfstudio_models``, where nerfstudio takes every file name for a checkpoint.

``eugen-distill --overwrite`` over a previous complete run is interrupted while it captures: the previous run
must stay byte-identical, nothing that looks like a complete run may appear, and rerunning the same command
must resume and finish.

Scene generation is covered by ``tests/test_scenes.py::test_interrupted_render_leaves_nothing_that_looks_complete``.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCENE = REPO / "scenes" / "bunny32"
TEACHER = REPO / "teachers" / "bunny64" / "dense-nerf" / "shipped"
BIN = Path(sys.executable).parent
CHECKPOINT = re.compile(r"step-(\d{9})\.ckpt")
PROMPT_S = 15.0
"""How long a run may take to stop after the signal (a step and a save take well under a second here)."""

TINY_ZIPNERF = [
    "--pipeline.datamanager.train-num-rays-per-batch",
    "64",
    "--pipeline.model.num-proposal-samples-per-ray",
    "16",
    "8",
    "--pipeline.model.num-nerf-samples-per-ray",
    "8",
    "--pipeline.model.log2-hashmap-size",
    "12",
    "--pipeline.model.max-res",
    "64",
    "--steps-per-eval-batch",
    "1000000",
    "--steps-per-eval-image",
    "1000000",
    "--steps-per-eval-all-images",
    "1000000",
]
TINY_DISTILL = [
    "--layers",
    "field_coarse.trunk.layers.[1-3]",
    "field_fine.trunk.layers.[1-3]",
    "--width-fraction",
    "None",
    "--eugen.num-features",
    "16",
    "--eugen.degree",
    "1",
    "--refine-steps",
    "0",
    "--image-fraction",
    "0.1",
    "--resolution-scale",
    "0.25",
    "--batch-rays",
    "32",
    "--pair-fraction",
    "0.5",
    "--ridge",
    "1e-6",
    "--no-evaluate",
]


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def sigint_as_in_a_terminal() -> None:
    """Ctrl-C's default in the child. A suite started in the background (``make test-slow &``, ``nohup``)
    runs with SIGINT ignored, as POSIX shells start background jobs, and every child inherits that: the runs
    would then rightly ignore the test's SIGINT (every SIGINT case failed so, their SIGTERM twins passed)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        preexec_fn=sigint_as_in_a_terminal,  # noqa: PLW1509 - resets one signal
    )


def wait_for(condition, process: subprocess.Popen, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            raise AssertionError(
                f"run ended (status {process.returncode}) before the interruption:\n"
                + log.read_text()[-3000:]
            )
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError("run made no progress:\n" + log.read_text()[-3000:])
        time.sleep(0.02)


def interrupt(process: subprocess.Popen, signum: int, delay: float, log: Path) -> float:
    """Send ``signum`` after ``delay`` seconds; the seconds the process then took to exit."""
    time.sleep(delay)
    assert process.poll() is None, "run ended before the interruption:\n" + log.read_text()[-3000:]
    process.send_signal(signum)
    sent = time.monotonic()
    try:
        process.wait(timeout=PROMPT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(
            f"still running {PROMPT_S:.0f} s after {signal.Signals(signum).name}:\n" + log.read_text()[-3000:]
        ) from None
    return time.monotonic() - sent


def assert_checkpoints_complete(directory: Path) -> list[int]:
    """Every file in ``directory`` is a ``step-*.ckpt`` that loads (no leftover temporary file); the steps."""
    names = sorted(os.listdir(directory))
    assert names and all(CHECKPOINT.fullmatch(name) for name in names), names
    # how nerfstudio's Trainer (--load-dir, resuming) and eval_setup pick the latest checkpoint: every name parses
    steps = sorted(int(x[x.find("-") + 1 : x.find(".")]) for x in names)
    for name in names:
        loaded = torch.load(directory / name, map_location="cpu", weights_only=False)
        assert loaded["step"] == int(CHECKPOINT.fullmatch(name).group(1)) and loaded["pipeline"], name
    return steps


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, seed", [(signal.SIGINT, 17), (signal.SIGTERM, 18)], ids=["SIGINT", "SIGTERM"]
)
def test_interrupted_training_leaves_only_complete_checkpoints(signum: int, seed: int, tmp_path: Path):
    log = tmp_path / "ns-train.log"
    process = start(
        [
            str(BIN / "ns-train"),
            "eugen-nerfacto",
            "--data",
            str(SCENE),
            "--output-dir",
            str(tmp_path / "out"),
            "--timestamp",
            "run",
            "--max-num-iterations",
            "100000",
            "--steps-per-save",
            "1",
            "--vis",
            "tensorboard",
            *TINY_ZIPNERF,
        ],
        tmp_path,
        log,
    )
    checkpoints = tmp_path / "out" / "bunny32" / "eugen-nerfacto" / "run" / "nerfstudio_models"
    wait_for(lambda: any(checkpoints.glob("step-*.ckpt")), process, log)
    seconds = interrupt(process, signum, random.Random(seed).uniform(0.0, 1.5), log)

    text = log.read_text()
    assert process.returncode == 130, text[-3000:]
    assert seconds < PROMPT_S
    assert "Traceback" not in text, text[-3000:]
    name = signal.Signals(signum).name
    (line,) = [line for line in text.splitlines() if line.startswith("ns-train: interrupted")]
    assert line.startswith(f"ns-train: interrupted ({name}) at step ") and "--load-dir" in line, text[-3000:]
    steps = assert_checkpoints_complete(checkpoints)
    # the last finished step is saved on the way out (the line names it), not only the last periodic save
    (saved,) = re.findall(r"saved step (\d+) as ", line)
    assert steps[-1] == int(saved) == int(re.findall(r"at step (\d+);", line)[0]) >= 1, line
    leftovers = [p for p in (tmp_path / "out").rglob("*") if p.is_file() and "partial" in p.name]
    assert not leftovers, leftovers


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, seed", [(signal.SIGINT, 27), (signal.SIGTERM, 28)], ids=["SIGINT", "SIGTERM"]
)
def test_interrupted_distill_overwrite_keeps_the_previous_run_and_resumes(
    signum: int, seed: int, tmp_path: Path
):
    out = tmp_path / "student"
    shutil.copytree(TEACHER, out)  # a previous complete run in --output-dir
    before = read_tree(out)
    args = [
        sys.executable,
        "-m",
        "eugen_nerf.distill.cli",
        "--teacher",
        str(TEACHER),
        "--output-dir",
        str(out),
        "--overwrite",
        *TINY_DISTILL,
    ]
    staging = tmp_path / ".student.partial"
    log = tmp_path / "distill.log"
    process = start(args, REPO, log)  # the shipped teacher names its scene relative to the repository
    wait_for(lambda: any((staging / ".distill_state").glob("*.pt")), process, log)
    seconds = interrupt(process, signum, random.Random(seed).uniform(0.0, 0.5), log)

    text = log.read_text()
    assert process.returncode == 130, text[-3000:]
    assert seconds < PROMPT_S
    assert "Traceback" not in text, text[-3000:]
    assert "eugen-distill: interrupted" in text, text[-3000:]
    assert read_tree(out) == before, "the previous run was changed by the interrupted --overwrite"
    # the staging directory is resumable state, never something that looks like a complete run
    assert not (staging / "config.yml").exists() and not list(staging.glob("nerfstudio_models/step-*.ckpt"))

    log = tmp_path / "resume.log"
    resumed = start(args, REPO, log)
    assert resumed.wait(timeout=300) == 0, log.read_text()[-3000:]
    assert "resuming from" in log.read_text()
    assert not staging.exists()
    assert (out / "config.yml").exists() and "distill_report.json" in os.listdir(out)
    assert_checkpoints_complete(out / "nerfstudio_models")


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, seed", [(signal.SIGINT, 37), (signal.SIGTERM, 38)], ids=["SIGINT", "SIGTERM"]
)
def test_interrupted_evaluation_keeps_the_previous_report(signum: int, seed: int, tmp_path: Path):
    report = tmp_path / "report.json"
    report.write_text('{"previous": "report"}\n')
    log = tmp_path / "eugen-eval.log"
    # slow to render: the signal lands mid-evaluation
    paper = REPO / "teachers" / "bunny64" / "dense-nerf" / "paper"
    process = start(
        [
            str(BIN / "eugen-eval"),
            "--load-config",
            str(paper / "config.yml"),
            "--output",
            str(report),
            "--plots",
            str(tmp_path / "plots"),
        ],
        REPO,
        log,
    )
    # the framing line marks a loaded run (this teacher's datamanager frames nothing: "No framing ...")
    loaded = ("Framing from the data", "No framing from the datamanager")
    wait_for(lambda: any(line in log.read_text() for line in loaded), process, log)
    interrupt(process, signum, random.Random(seed).uniform(0.5, 3.0), log)
    text = log.read_text()
    assert process.returncode == 130, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert report.read_text() == '{"previous": "report"}\n'  # never half of a new report
    assert not [p for p in tmp_path.rglob("*partial*")], list(tmp_path.rglob("*"))
