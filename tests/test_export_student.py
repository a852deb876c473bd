"""The shipped paper-sized teacher and its default eugen-distill student, exported: the reference renderer
equals nerfstudio on every test view, the page renders a test camera as the reference does, the student's
export is the smaller; the built wheel carries the web viewer. Slow: a distillation, two 8x256 exports and
SwiftShader renders of them."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from test_export import psnr
from test_web_viewer import page_on, page_render

from eugen_nerf.export import format as fmt
from eugen_nerf.export.field import load_export
from eugen_nerf.export.render import Sampling, render_view

REPO = Path(__file__).resolve().parents[1]
TEACHER = REPO / "teachers" / "bunny64" / "dense-nerf" / "paper"
BIN = Path(sys.executable).parent

# the fixture distils the paper-sized teacher and exports both: minutes on busy cores
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def run(args: list[str]) -> None:
    done = subprocess.run(args, check=False, capture_output=True, text=True, cwd=REPO, timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """``(run, export)`` of the teacher and its default student."""
    root = tmp_path_factory.mktemp("paper")
    student = root / "student"
    run([str(BIN / "eugen-distill"), "--teacher", str(TEACHER), "--output-dir", str(student)])
    runs = {"teacher": TEACHER, "student": student}
    for name, path in runs.items():
        run([str(BIN / "eugen-export"), str(path), "--output", str(root / f"{name}-export")])
    return {name: (path, root / f"{name}-export") for name, path in runs.items()}


def test_reference_equals_nerfstudio_on_every_test_view(exported):
    from eugen_nerf.eval.runs import final_rgb, load_run

    for name, (run_path, export_path) in exported.items():
        loaded = load_run(run_path, device="cpu")
        field = load_export(export_path, device="cpu")
        cameras = loaded.pipeline.datamanager.eval_dataset.cameras
        for view in range(len(cameras)):
            with torch.no_grad():
                expected = final_rgb(loaded.model.get_outputs_for_camera(cameras[view : view + 1])).clamp(
                    0, 1
                )
            got = render_view(field, view, Sampling(kind="nerfstudio"))
            assert psnr(got, expected) >= 40, f"{name} view {view}: {psnr(got, expected):.1f} dB"
    sizes = {name: (path / fmt.FILE_NAME).stat().st_size for name, (_, path) in exported.items()}
    assert sizes["student"] <= sizes["teacher"], sizes


def test_page_renders_the_student_as_the_reference(exported):
    _, export_path = exported["student"]
    with page_on([export_path]) as browser:
        page, _ = page_render(browser, camera=2, width=32, height=32, samples=128)
    reference = render_view(load_export(export_path, device="cpu"), 2, Sampling(samples=128), 32, 32)
    assert psnr(page, reference) >= 30, f"{psnr(page, reference):.1f} dB"


def test_wheel_ships_the_web_viewer(tmp_path):
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            ".",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
        ]
    )
    wheel = zipfile.ZipFile(next(tmp_path.glob("eugen_nerf-*.whl")))
    for page_file in (REPO / "viewer").iterdir():
        shipped = wheel.read(f"eugen_nerf/export/viewer/{page_file.name}")
        assert shipped == page_file.read_bytes(), page_file.name
    entry_points = wheel.read(next(n for n in wheel.namelist() if n.endswith("entry_points.txt"))).decode()
    assert "eugen-export = eugen_nerf.export.cli:entrypoint" in entry_points
