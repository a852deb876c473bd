"""Score a model on its test split (quality, speed, size) and print / write the distillation report.

Quality is PSNR/SSIM/LPIPS of the rendered test views against the ground truth (metrics from
:mod:`eugen_nerf.eval`), each view rendered once; size is the parameter count without metric modules.
The teacher's and the student's frame rates come from one side-by-side timing (:func:`side_by_side_fps`,
the median of ``repeats`` renders per view): two FPS figures measured minutes apart on a shared machine do
not make a ratio.
Render memory is measured by ``eugen-eval`` on the written run directories, each in a fresh process.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from torch import Tensor

from eugen_nerf.eval import metrics
from eugen_nerf.eval.evaluate import render_seconds_side_by_side, score_test_views
from eugen_nerf.eval.runs import final_rgb, ground_truth_image
from eugen_nerf.eval.size import count_parameters
from eugen_nerf.eval.timing import time_inside
from eugen_nerf.inputs.outputs import atomic_write


def render_rgb(model, camera) -> Tensor:
    return final_rgb(model.get_outputs_for_camera(camera)).clamp(0, 1)


def view_psnr(model, pipeline, dataset, indices) -> float:
    """Mean PSNR over views ``indices`` of ``dataset`` (used by ``auto`` on held-out training views)."""
    values = [
        metrics.psnr(
            render_rgb(model, dataset.cameras[i : i + 1].to(pipeline.device)),
            ground_truth_image(pipeline, dataset, i),
        )
        for i in indices
    ]
    return float(torch.cat(values).mean())


def evaluate(pipeline, views: int | None, label: str) -> dict[str, float]:
    """Test-split quality and parameters of ``pipeline.model`` (the shared evaluation loop), each view rendered
    once: the report's frame rates come from :func:`side_by_side_fps`, so timing these renders would be wasted."""
    dataset = pipeline.datamanager.eval_dataset
    count = len(dataset) if views is None else min(views, len(dataset))
    result = score_test_views(pipeline, list(range(count)), warmup=0, repeats=1, label=f"evaluate {label}")
    summary = {
        key: result.mean(key) if key in result.scores else float("nan")  # NaN -> null in the JSON
        for key in ("psnr", "ssim", "lpips")
    }
    summary.update(views=count, parameters=count_parameters(pipeline.model))
    return summary


def side_by_side_fps(
    teacher, student, pipeline, views: int = 2, repeats: int = 2, clock: str = "wall"
) -> dict[str, float]:
    """Frames per second of ``teacher`` and ``student`` on the first ``views`` test views of ``pipeline``,
    timed side by side on ``clock`` (:func:`~eugen_nerf.eval.evaluate.render_seconds_side_by_side`)."""
    dataset = pipeline.datamanager.eval_dataset
    cameras = dataset.cameras.to(pipeline.device)
    seconds = render_seconds_side_by_side(
        {"teacher": (teacher, cameras), "student": (student, cameras)},
        list(range(min(views, len(dataset)))),
        pipeline.device,
        repeats=repeats,
        clock=clock,
    )
    return {name: 1.0 / value for name, value in seconds.items()}


def render_share(teacher, pipeline, paths: list[str], view: int = 0) -> dict[str, object]:
    """The share of ``teacher``'s render of test view ``view`` spent inside the modules at ``paths`` (the MLPs
    a student changes), and the speed-up a student would reach if they cost nothing: ``1 / (1 - share)``, the
    bound on any student that changes only them (hash grids, samplers and the other MLPs are the teacher's)."""
    cameras = pipeline.datamanager.eval_dataset.cameras.to(pipeline.device)
    modules = {path: teacher.get_submodule(path) for path in paths}
    with torch.no_grad():
        _, total, inside = time_inside(
            lambda: teacher.get_outputs_for_camera(cameras[view : view + 1]), modules, pipeline.device
        )
    share = sum(inside.values()) / total
    return {"modules": list(paths), "share": share, "speedup_bound": 1.0 / max(1.0 - share, 1e-9)}


def write_json_atomic(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename: never a half-written file."""
    # NaN (a score not measured) is written as null, as is an infinity: strict JSON has neither, and
    # json.dumps never passes a float to ``default``, so they are replaced first
    text = json.dumps(_non_finite_to_none(data), indent=2, default=_json_default, allow_nan=False) + "\n"
    atomic_write(path, lambda partial: partial.write_text(text))


def _non_finite_to_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _non_finite_to_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_non_finite_to_none(item) for item in value]
    return value


def _json_default(value):
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _fmt(value, spec: str) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def print_report(report: dict, console: Console | None = None) -> None:
    """The report as rich tables: teacher vs student, layers, stage times."""
    console = console or Console()
    teacher, student = report.get("teacher"), report.get("student")
    if teacher and student:
        table = Table(title="teacher vs student (test split)")
        for column in ("", "teacher", "student", "student / teacher"):
            table.add_column(column, justify="right")
        for key, spec in (
            ("psnr", ".3f"),
            ("ssim", ".4f"),
            ("lpips", ".4f"),
            ("fps", ".2f"),
            ("parameters", ",d"),
        ):
            ratio = student[key] / teacher[key] if teacher[key] else float("nan")
            label = key
            if key == "fps" and report.get("render_speedup") is not None:
                label = f"fps (side by side, {report.get('fps_clock', 'wall')} clock)"
            table.add_row(label, _fmt(teacher[key], spec), _fmt(student[key], spec), _fmt(ratio, ".4f"))
        table.add_row(
            "checkpoint_bytes",
            _fmt(report["teacher_checkpoint_bytes"], ",d"),
            _fmt(report["student_checkpoint_bytes"], ",d"),
            "",
        )
        share = report.get("changed_mlps_render_share")
        if share:
            table.caption = (
                f"the MLPs the student changes take {share['share']:.0%} of the teacher's render: "
                f"no student of them renders more than {share['speedup_bound']:.2f}x faster"
            )
        console.print(table)
    layers = Table(title="replaced layers")
    for column in ("layer", "R² held-out", "R² train", "ridge", "pairs"):
        layers.add_column(column, justify="right")
    for fit in report["layers"]:
        layers.add_row(
            fit["path"],
            _fmt(fit["r2_heldout"], ".5f"),
            _fmt(fit["r2_train"], ".5f"),
            _fmt(fit["ridge"], ".0e"),
            f"{fit['pairs_train']:,d}+{fit['pairs_heldout']:,d}",
        )
    console.print(layers)
    if report.get("auto"):
        auto = Table(title=f"auto selection (budget {report['auto']['budget_db']} dB)")
        for column in ("layer", "PSNR drop (dB)", "decision"):
            auto.add_column(column, justify="right")
        for row in report["auto"]["decisions"]:
            auto.add_row(row["path"], _fmt(row["drop_db"], ".4f"), "kept" if row["kept"] else "rejected")
        console.print(auto)
    times = Table(title="time per stage (s)")
    for stage in report["seconds"]:
        times.add_column(stage, justify="right")
    times.add_row(*(_fmt(v, ".2f") for v in report["seconds"].values()))
    console.print(times)
