"""The export suite (``eugen-bench export``): bad values are one line before anything is written, its reports
are continued by a rerun and keep the keys the README's table reads, and (slow) its quick mode measures the
page in headless Chromium end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from _browser import chromium  # noqa: F401 (a fixture, used by name)
from _scripts import run_command, run_main
from PIL import Image

from eugen_nerf.bench.protocol import PROTOCOLS, Places, load_protocol
from eugen_nerf.bench.suites.export import (
    BenchExport,
    Results,
    add_frame,
    check,
    exported,
    finite_ms,
    forget_other_exports,
    frame_plan,
    frame_size,
    frame_time_ratio,
    frames_done,
    psnr,
    screenshot_due,
    student_run,
    summarise_views,
)
from eugen_nerf.bench.tables import Tables
from eugen_nerf.inputs.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
TEACHER = ROOT / "teachers" / "bunny64" / "dense-nerf" / "shipped"


def args(tmp_path: Path, **changes) -> BenchExport:
    values = dict(teacher=TEACHER, work_dir=tmp_path / "w", output=tmp_path / "o", parts=("reference",))
    return BenchExport(**{**values, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"samples": 0}, "--samples must be at least 1, got 0"),
        ({"repeats": 0}, "--repeats must be at least 1"),
        ({"size": -2}, "--size must be at least 1"),
        ({"camera": -1}, "must not be negative"),
        ({"views": 0}, "--views must be at least 1"),
        ({"parts": ("reference", "reference")}, "at most once"),
        ({"teacher": Path("/no/such/run")}, "--teacher /no/such/run: no config.yml there"),
        ({"student": Path("/no/such/run")}, "leave --student out to distil one"),
        ({"parts": ("zipnerf",), "zipnerf_scene": Path("/no/scene")}, "make it with: eugen-scenes render"),
        (
            {"parts": ("zipnerf-distilled",), "zipnerf_teacher": Path("/no/run")},
            "--zipnerf-teacher /no/run: no config.yml there",
        ),
    ],
)
def test_values_the_suite_cannot_use_are_one_clear_error(tmp_path, changes, message):
    with pytest.raises(InputError, match=message.replace("-", r"\-").replace(".", r"\.")):
        check(args(tmp_path, **changes))


def test_bad_input_on_the_command_line_is_one_line_and_writes_nothing(tmp_path):
    ran = run_main(
        "eugen_nerf.bench.suites.export",
        *("--teacher", tmp_path / "none", "--work-dir", tmp_path / "w", "--output", tmp_path / "o"),
    )
    assert ran.returncode == 2
    expected = f"--teacher {tmp_path / 'none'}: no config.yml there; give a trained NeRF run's folder"
    assert ran.stderr.strip().splitlines() == [f"eugen-bench export: error: {expected}"]
    assert not any(tmp_path.iterdir())


def test_a_report_is_rewritten_whole_and_read_back_by_a_rerun(tmp_path):
    path = tmp_path / "out" / "browser.json"
    results = Results(path)
    assert results.data == {}
    results.data["student_64"] = {"frame_ms": 10.0}
    results.save()
    assert json.loads(path.read_text()) == {"student_64": {"frame_ms": 10.0}}
    assert [p.name for p in path.parent.iterdir()] == ["browser.json"]  # no partial file left behind
    again = Results(path)
    assert again.data == {"student_64": {"frame_ms": 10.0}}
    again.data["teacher_64"] = {"frame_ms": 25.0}
    again.save()
    assert set(Results(path).data) == {"student_64", "teacher_64"}


def test_the_student_is_reused_only_when_distilled_with_the_same_options(tmp_path, monkeypatch):
    import eugen_nerf.distill.run as run_module

    calls = []

    def fake_distill(options):
        calls.append(options)
        options.output_dir.mkdir(parents=True, exist_ok=True)
        (options.output_dir / "config.yml").write_text("")
        report = {"options": json.loads(json.dumps(options.recorded(), default=str))}
        (options.output_dir / "distill_report.json").write_text(json.dumps(report))

    monkeypatch.setattr(run_module, "distill", fake_distill)
    narrow = args(tmp_path, distill_width_fraction=0.5, distill_layers=("twin",))
    assert student_run(narrow) == tmp_path / "w" / "student" and len(calls) == 1
    assert calls[0].width_fraction == 0.5 and calls[0].layers == ("twin",)
    student_run(narrow)
    assert len(calls) == 1  # the same options: reused
    scored_on_one_view = args(
        tmp_path, distill_width_fraction=0.5, distill_layers=("twin",), distill_eval_views=1
    )
    student_run(scored_on_one_view)  # an option of the scoring only: reused
    assert len(calls) == 1
    student_run(args(tmp_path, distill_width_fraction=0.5))  # other layers: distilled again
    assert len(calls) == 2 and calls[-1].layers != ("twin",)
    student_run(args(tmp_path, distill_width_fraction=0.5625))  # another width: distilled again
    assert len(calls) == 3 and calls[-1].width_fraction == 0.5625
    assert student_run(args(tmp_path, student=tmp_path / "mine")) == tmp_path / "mine" and len(calls) == 3


def test_an_export_is_made_again_when_its_run_has_a_newer_checkpoint(tmp_path, monkeypatch):
    import os

    from eugen_nerf.export import cli

    made = []

    class FakeExport:
        def __init__(self, config, output, dtype, overwrite):
            self.output = output

        def main(self):
            made.append(self.output)
            self.output.mkdir(parents=True, exist_ok=True)
            (self.output / "field.eugen").write_bytes(b"export")

    monkeypatch.setattr(cli, "Export", FakeExport)
    run = tmp_path / "run"
    (run / "nerfstudio_models").mkdir(parents=True)
    (run / "config.yml").write_text("")
    checkpoint = run / "nerfstudio_models" / "step-000000099.ckpt"
    checkpoint.write_bytes(b"first")
    os.utime(checkpoint, (1_000, 1_000))
    exported(run, tmp_path / "export")
    exported(run, tmp_path / "export")
    assert len(made) == 1  # the export is newer than the checkpoint: reused
    os.utime(checkpoint, (4_000_000_000, 4_000_000_000))  # the run distilled (or trained) again
    exported(run, tmp_path / "export")
    assert len(made) == 2


def test_a_screenshot_is_taken_again_when_older_than_an_export_it_shows(tmp_path):
    import os

    exports = [tmp_path / "student", tmp_path / "teacher"]
    for export in exports:
        export.mkdir()
        (export / "field.eugen").write_bytes(b"export")
        os.utime(export / "field.eugen", (1_000, 1_000))
    picture = tmp_path / "screenshot.png"
    assert not screenshot_due(None, exports)  # none asked for
    assert screenshot_due(picture, exports)  # missing
    picture.write_bytes(b"png")
    assert not screenshot_due(picture, exports)  # newer than both exports: kept
    os.utime(exports[0] / "field.eugen", (4_000_000_000, 4_000_000_000))  # the student exported again
    assert screenshot_due(picture, exports)


def test_a_rerun_forgets_what_it_measured_of_a_field_exported_again(tmp_path):
    exports = {name: tmp_path / name for name in ("student", "teacher")}
    for name, export in exports.items():
        export.mkdir()
        (export / "field.eugen").write_bytes(name.encode())
    data = {
        "student_64": {"frame_ms": 100.0},
        "student_200": {"frame_ms": 900.0},
        "teacher_64": {"frame_ms": 180.0},
        "teacher_over_student_frame_time": 1.8,
        "settings": {"samples": 128},
    }
    assert forget_other_exports(data, exports) == []  # no record yet: taken as these exports' figures
    assert set(data["exports"]) == {"student", "teacher"} and "student_64" in data
    assert forget_other_exports(data, exports) == []  # the same exports: everything kept
    assert data["teacher_over_student_frame_time"] == 1.8
    (exports["student"] / "field.eugen").write_bytes(b"another student")
    assert forget_other_exports(data, exports) == ["student"]
    assert set(data) == {"teacher_64", "settings", "exports"}
    reference = {"student": {"views": 8}, "teacher": {"views": 8}, "march": {}}
    forget_other_exports(reference, exports)
    (exports["teacher"] / "field.eugen").write_bytes(b"another teacher")
    assert forget_other_exports(reference, exports) == ["teacher"]
    assert set(reference) == {"student", "march", "exports"}
    zipnerf = {"eugen": {}, "dense": {}, "eugen_march_vs_nerfstudio_db": 40.0, "browser": {}}
    frames = {"eugen_64_0": {}, "eugen_float16_64": {}, "dense_64_0": {}}
    zipnerf["browser"] = page = {"frames": frames, "dense_over_eugen_frame_time": 1.3}
    pair = {"eugen": exports["student"], "dense": exports["teacher"]}
    forget_other_exports(zipnerf, pair, also=(page, frames))
    (exports["student"] / "field.eugen").write_bytes(b"a third student")
    assert forget_other_exports(zipnerf, pair, also=(page, frames)) == ["eugen"]
    assert set(zipnerf) == {"dense", "browser", "exports"} and set(frames) == {"dense_64_0"}
    assert set(page) == {"frames"}


def test_frames_alternate_and_the_ratio_compares_the_fastest_of_each():
    plan = frame_plan(64, 200, 2)
    assert [(name, size, repeat) for name, size, _, repeat in plan] == [
        ("student", 64, 0),
        ("teacher", 64, 0),
        ("student", 64, 1),
        ("teacher", 64, 1),
        ("student", 200, 0),
    ]
    assert {frame[2] for frame in plan} == {"page_student.png", "page_teacher.png", "page_student_large.png"}
    assert len(frame_plan(16, 0, 1)) == 2
    results: dict = {}
    add_frame(results, "student_64", {"frame_ms": 120.0, "page_vs_reference_db": 65.0})
    assert frame_time_ratio(results, 64) is None
    add_frame(results, "teacher_64", {"frame_ms": 184.0, "page_vs_reference_db": 65.0})
    add_frame(results, "student_64", {"frame_ms": 100.0, "page_vs_reference_db": 65.0})
    assert results["student_64"] == {
        "frame_ms": 100.0,
        "frame_ms_each": [120.0, 100.0],
        "page_vs_reference_db": 65.0,
    }
    assert frames_done(results, "student_64") == 2 and frames_done(results, "teacher_64") == 1
    assert frames_done(results, "student_200") == 0
    single = {"student_200": {"frame_ms": 5.0}}  # a report of single frames, continued
    assert frames_done(single, "student_200") == 1
    add_frame(single, "student_200", {"frame_ms": 4.0})
    assert single["student_200"] == {"frame_ms": 4.0, "frame_ms_each": [5.0, 4.0]}
    assert frame_time_ratio(results, 64) == 1.84
    assert frame_time_ratio(results, 16) is None


def test_frames_default_to_the_scene_size_and_a_non_square_scene_needs_size(tmp_path):
    square, wide = np.zeros((128, 128, 3)), np.zeros((96, 128, 3))
    assert frame_size(args(tmp_path), square, TEACHER) == 128
    assert frame_size(args(tmp_path, size=40), wide, TEACHER) == 40
    with pytest.raises(InputError, match="128x96, not square; give --size"):
        frame_size(args(tmp_path), wide, TEACHER)


def test_a_frame_time_that_is_not_positive_and_finite_is_refused():
    assert finite_ms(12.345, "f") == 12.3
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(RuntimeError, match="frame time"):
            finite_ms(bad, "f")


def test_psnr_and_the_view_summary():
    a = np.zeros((4, 4, 3))
    assert psnr(a, a + 0.1) == pytest.approx(20.0, abs=1e-3)
    assert psnr(a, a) == 200.0
    entry = {
        "views": [
            {"reference_vs_nerfstudio_db": 120.0, "nerfstudio_vs_truth_db": 27.0, "march_vs_truth_db": 28.0},
            {"reference_vs_nerfstudio_db": 110.0, "nerfstudio_vs_truth_db": 28.0, "march_vs_truth_db": 29.0},
        ]
    }
    summarise_views(entry)
    assert entry["min_reference_vs_nerfstudio_db"] == 110.0
    assert entry["mean_nerfstudio_vs_truth_db"] == 27.5 and entry["mean_march_vs_truth_db"] == 28.5


def test_the_published_report_keeps_the_keys_the_readme_table_reads():
    tables = Tables(PROTOCOLS / "tables.yaml", ROOT)
    rows = tables.tables["headline"]["rows"]
    cells = [cell for row in rows for cell in row if isinstance(cell, dict)]
    cell = next(c for c in cells if c.get("file") == "benchmarks/export/browser.json")
    report = json.loads((ROOT / cell["file"]).read_text())
    for key in cell["key"]:
        value = report
        for part in key.split("."):
            value = value[part]
        assert isinstance(value, float), key
    size = int(next(k for k in cell["key"] if k.startswith("student_")).split(".")[0].split("_")[1])
    assert report["teacher_over_student_frame_time"] == frame_time_ratio(report, size)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # a small distillation, two tiny Zip-NeRF trainings, frames through SwiftShader
@pytest.mark.usefixtures("chromium")
def test_quick_mode_measures_the_page_against_the_reference(tmp_path):
    suite = load_protocol(PROTOCOLS / "cpu.yaml").suites["export"]
    places = Places(tmp_path / "out", tmp_path / "work", ROOT / "scenes", ROOT / "teachers")
    done = run_command([sys.executable, *suite.command(places, quick=True)], cwd=ROOT, timeout=2400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "out" / "export"
    reference = json.loads((out / "reference.json").read_text())
    for name in ("teacher", "student"):
        assert len(reference[name]["views"]) == 1
        assert reference[name]["min_reference_vs_nerfstudio_db"] >= 40, reference[name]
    browser = json.loads((out / "browser.json").read_text())
    for key in ("student_16", "teacher_16"):
        assert browser[key]["frame_ms"] > 0 and browser[key]["page_vs_reference_db"] >= 30, browser[key]
    screenshots = {"screenshot.png", "screenshot_zipnerf.png"}  # asked for by the quick mode's arguments
    assert set(suite.outputs) | screenshots == {p.name for p in out.iterdir()}
    for picture in ("page_student.png", "page_teacher.png"):
        pixels = np.asarray(Image.open(out / picture).convert("RGB"), dtype=np.float64) / 255
        assert (pixels.min(axis=-1) < 0.8).mean() > 0.02, f"{picture} shows no object"
    assert browser["teacher_over_student_frame_time"] > 0
    assert (
        set(reference["exports"]) == set(browser["exports"]) == {"teacher", "student"}
    )  # what they measured
    zipnerf = json.loads((out / "zipnerf.json").read_text())
    frames = zipnerf["browser"]["frames"]
    assert set(zipnerf["exports"]) == {"eugen", "dense"}
    for key in ("eugen_16_0", "dense_16_0", "eugen_float16_16"):
        assert frames[key]["page_vs_reference_db"] >= 30, (key, frames[key])
    for name in ("dense", "eugen"):
        assert zipnerf[name]["min_reference_vs_nerfstudio_db"] >= 40, zipnerf[name]
        assert (out / f"page_zipnerf_{name}.png").is_file()


def test_frames_taken_with_other_settings_or_in_another_session_are_taken_again(monkeypatch):
    """A page frame time is compared only with frames of the same browser, device, settings and session."""
    from eugen_nerf.bench import browser
    from eugen_nerf.bench.suites.export import browser_header, forget_frames

    monkeypatch.setattr(browser, "chromium_version", lambda: "Chromium 1")
    results: dict = {}
    assert browser_header(results, samples=128, camera=0) is False  # a new report: nothing to compare
    results.update(student_64={"frame_ms": 5.0}, teacher_64={"frame_ms": 9.0})
    assert browser_header(results, samples=128, camera=0) is False
    assert browser_header(results, samples=64, camera=0) is True
    monkeypatch.setattr(browser, "chromium_version", lambda: "Chromium 2")
    assert browser_header(results, samples=64, camera=0) is True
    forget_frames(results, ["student_64", "teacher_64"])
    assert "student_64" not in results and "teacher_64" not in results and "settings" in results
