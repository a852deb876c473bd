"""The report follows its documented JSON schema; table and plots render."""

import copy
import json

import jsonschema
import pytest
import torch
from rich.console import Console

from eugen_nerf.eval import report


def stat(values):
    return {"mean": sum(values) / len(values), "std": 0.1, "per_view": values}


def run_entry(name: str, lpips: bool = True) -> dict:
    return {
        "name": name,
        "config": f"outputs/{name}/config.yml",
        "method": "nerfacto",
        "scene": "scenes/bunny32",
        "step": 29,
        "checkpoint": f"outputs/{name}/nerfstudio_models/step-000000029.ckpt",
        "views": ["a.png", "b.png"],
        "metrics": {
            "psnr": stat([20.0, 22.0]),
            "ssim": stat([0.8, 0.9]),
            "lpips": stat([0.2, 0.1]) if lpips else None,
            "lpips_reason": None if lpips else "no offline LPIPS weights",
        },
        "speed": {
            "render_fps": 2.5,
            "render_seconds_per_view": [0.4, 0.4],
            "rays_per_second": 4096.0,
            "field_points_per_second": 1.5e6,
            "field_module": "field",
            "resolution": [32, 32],
            "render_speedup": 1.0,
            "render_fps_side_by_side": 2.5,
        },
        "size": {
            "parameters": 12345,
            "checkpoint_bytes": 678910,
            "render_memory_bytes": 2**20,
            "render_memory_kind": "rss_delta_fresh_process",
        },
    }


@pytest.fixture
def sample_report() -> dict:
    runs = [run_entry("bunny32/nerfacto/a"), run_entry("bunny32/eugen-nerf/b", lpips=False)]
    runs[1]["speed"].update(field_points_per_second=None, field_module=None)  # e.g. splatfacto
    return report.build_report(runs, {"warmup": 1, "repeats": 3}, torch.device("cpu"))


def test_report_matches_schema(sample_report, tmp_path):
    jsonschema.validate(sample_report, report.SCHEMA)
    path = tmp_path / "r.json"
    report.write_json(sample_report, path)
    assert json.loads(path.read_text()) == sample_report


def test_isdf_metrics_are_allowed_instead_of_image_metrics(sample_report):
    isdf = copy.deepcopy(sample_report)
    isdf["runs"][0]["metrics"] = {"sdf_error": stat([0.01]), "chamfer": stat([0.02]), "f_score": stat([0.9])}
    jsonschema.validate(isdf, report.SCHEMA)


@pytest.mark.parametrize(
    "path, value",
    [
        (("runs", 0, "metrics", "lpips"), "0.3"),  # neither a STAT nor null
        (("runs", 0, "size", "render_memory_kind"), "vms"),
        (("runs", 0, "speed", "render_speedup"), "fast"),
        (("runs", 1, "metrics", "psnr", "per_view"), [1.0, "x"]),
        (("schema_version",), 1),
    ],
)
def test_schema_rejects_bad_reports(sample_report, path, value):
    bad = copy.deepcopy(sample_report)
    node = bad
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, report.SCHEMA)


def test_missing_required_field_is_rejected(sample_report):
    del sample_report["runs"][0]["size"]["checkpoint_bytes"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(sample_report, report.SCHEMA)


def test_json_refuses_non_finite_numbers(sample_report, tmp_path):
    sample_report["runs"][0]["metrics"]["psnr"]["mean"] = float("inf")
    with pytest.raises(ValueError):
        report.write_json(sample_report, tmp_path / "r.json")


def test_table_and_plots(sample_report, tmp_path):
    console = Console(record=True, width=200)
    report.print_table(sample_report, console)
    text = console.export_text()
    assert "bunny32/eugen-nerf/b" in text and "21.00 ± 0.10" in text and "n/a" in text
    written = report.plot(sample_report, tmp_path / "plots")
    assert [p.name for p in written] == ["psnr_vs_fps.png", "per_view_psnr.png"]
    assert all(p.stat().st_size > 1000 for p in written)


def test_table_shows_fps_and_rays_from_one_timing(sample_report):
    """Timed side by side, a run's FPS, rays/s and speed-up all come from that timing (rays = FPS x pixels);
    timed alone, from its own."""
    speed = sample_report["runs"][0]["speed"]
    speed.update(render_fps=0.04, rays_per_second=41.0, render_fps_side_by_side=0.2)
    assert report.shown_speed(speed) == (0.2, 0.2 * 32 * 32)
    console = Console(record=True, width=200)
    report.print_table(sample_report, console)
    row = next(line for line in console.export_text().splitlines() if "bunny32/nerfacto/a" in line)
    assert " 0.2 " in row and " 205 " in row and " 41 " not in row, row
    speed["render_fps_side_by_side"] = None
    assert report.shown_speed(speed) == (0.04, 41.0)
