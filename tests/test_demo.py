"""`make demo`'s script: it refuses a missing teacher in one line, and (slow suite) runs end to end on the small
shipped teacher, ending on the comparison report and the side-by-side picture."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import imageio.v3 as iio
import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "scripts" / "demo.sh"


def run_demo(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(DEMO)],
        env={**os.environ, "DEMO_OUT": str(tmp_path / "demo"), **env},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )


def test_demo_refuses_a_missing_teacher_in_one_line(tmp_path):
    done = run_demo(tmp_path, TEACHER=str(tmp_path / "nowhere"))
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"[demo] no teacher at {tmp_path / 'nowhere'} (its config.yml is missing)"
    ]
    assert not (tmp_path / "demo").exists()


@pytest.mark.slow
def test_demo_runs_end_to_end_on_the_small_teacher(tmp_path):
    done = run_demo(
        tmp_path,
        TEACHER="teachers/bunny64/dense-nerf/shipped",
        DEMO_VIEWS="1",
        DEMO_DISTILL_ARGS="--refine-steps 5 --max-rays 1024",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "demo" / "report.json").read_text())
    teacher, student = report["runs"]
    assert (teacher["name"], student["name"]) == ("dense teacher", "EUGen student")
    assert teacher["speed"]["render_speedup"] == 1.0 and student["speed"]["render_speedup"] > 0
    assert student["size"]["render_memory_bytes"] > 0 and student["metrics"]["psnr"]["mean"] > 15
    picture = iio.imread(tmp_path / "demo" / "side_by_side.png")
    assert picture.shape[0] >= 384 and picture.shape[1] == 4 * picture.shape[0]
    assert f"{tmp_path / 'demo' / 'side_by_side.png'}" in done.stdout


def test_the_shipped_student_was_distilled_from_the_demo_teacher_with_the_defaults():
    """The demo compares the default teacher with the student shipped beside it: that student must be the
    teacher's, made by eugen-distill's defaults (no option given), and hold EUGen layers."""
    import torch

    from eugen_nerf.distill.options import DistillOptions

    teacher = ROOT / "teachers" / "shiny128" / "dense-nerf" / "paper"
    student = ROOT / "teachers" / "shiny128" / "dense-nerf" / "paper-student"
    assert f"TEACHER=${{TEACHER:-{teacher.relative_to(ROOT)}}}" in DEMO.read_text()
    report = json.loads((student / "distill_report.json").read_text())
    assert report["teacher_run"] == str((teacher / "config.yml").relative_to(ROOT))
    defaults = DistillOptions(teacher=teacher, output_dir=student)  # validated and completed on creation
    assert {k: report["options"][k] for k in defaults.capture_fingerprint()} == json.loads(
        json.dumps(defaults.capture_fingerprint())
    )
    (checkpoint,) = (student / "nerfstudio_models").glob("step-*.ckpt")
    state = torch.load(checkpoint, map_location="cpu", weights_only=False)["pipeline"]
    assert any(key.endswith(".projections") for key in state), "the student holds no EUGen layer"
