"""Evaluate one trained run: test-split image metrics, speed and size, as one report entry.

Every view is rendered at the test camera's own resolution; rendering is timed (after warm-up, with
device synchronisation, median of repeats) while metrics and error images are computed outside the
timed region. Several runs of one scene are also timed side by side (each repeat renders every run in
turn), which is what a speed ratio needs on a shared machine, and each run's render memory is measured in a
fresh process (:mod:`eugen_nerf.eval.memory`).
"""

from __future__ import annotations

import copy
import gc
import statistics
from dataclasses import dataclass
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import torch
from rich.console import Console
from rich.progress import track
from torch import Tensor

from eugen_nerf.eval import metrics
from eugen_nerf.eval.field_speed import NoFieldError, time_field
from eugen_nerf.eval.lpips import lpips_unavailable_reason
from eugen_nerf.eval.memory import render_memory
from eugen_nerf.eval.panels import compose, difference
from eugen_nerf.eval.runs import (
    EvalInputError,
    Run,
    final_rgb,
    ground_truth_image,
    load_run,
    mismatched_test_views,
)
from eugen_nerf.eval.size import count_parameters
from eugen_nerf.eval.timing import Timing, benchmark_interleaved, median_rate, render_and_score
from eugen_nerf.inputs.numerics import check_finite

CONSOLE = Console()


@dataclass
class EvalSettings:
    """How runs are measured (recorded in the report)."""

    warmup: int = 1
    """Untimed renders of the first test view (and field forwards) before timing."""
    repeats: int = 3
    """Timed renders per view (and field forwards); the median is reported."""
    field_points: int = 65536
    """Points per timed field forward."""
    lpips: bool = True
    """Compute LPIPS (reported as null with a reason when off or when the weights are missing)."""
    max_views: int | None = None
    """Evaluate only the first N test views (quick checks); None for all."""
    eval_num_rays_per_chunk: int | None = None
    """Override the model's rays per forward chunk when rendering."""
    speed_views: int = 2
    """Test views on which several runs of one scene are timed side by side (the render speed-up)."""
    render_memory: bool = True
    """Measure each run's render memory (one test view, in a fresh process: see docs/evaluation.md)."""


def stats(values: list[float]) -> dict[str, object]:
    """``{mean, std, per_view}``; std is the population std (ddof 0), so one view gives 0."""
    return {"mean": statistics.fmean(values), "std": statistics.pstdev(values), "per_view": values}


def error_image(pred: Tensor, gt: Tensor) -> np.ndarray:
    """``|prediction - ground truth|`` per channel as 8-bit RGB (unscaled: 255 is an error of 1)."""
    return ((pred - gt).abs().clamp(0, 1) * 255).round().byte().cpu().numpy()


def comparison_image(pred: Tensor, gt: Tensor) -> np.ndarray:
    """``prediction | ground truth | |error|`` side by side, 8-bit RGB: what a reader wants to look at."""
    to_bytes = lambda image: (image.clamp(0, 1) * 255).round().byte().cpu().numpy()
    return np.concatenate([to_bytes(pred), to_bytes(gt), error_image(pred, gt)], axis=1)


def check_sizes(dataset, views: list[int], images: list[Tensor]) -> None:
    """Raise naming the image file when a ground-truth image and its test camera differ in size."""
    for index, image in zip(views, images):
        camera = dataset.cameras[index]
        expected = (int(camera.height), int(camera.width))
        if tuple(image.shape[:2]) != expected:
            raise EvalInputError(
                f"{dataset.image_filenames[index]}: image is {image.shape[1]}x{image.shape[0]} but the model "
                f"renders {expected[1]}x{expected[0]} for this test camera"
            )


def area_downsample(image: Tensor, scale: int) -> Tensor:
    """``(H, W, C)`` averaged over ``scale x scale`` blocks (how multiscale Blender makes its small images)."""
    if scale == 1:
        return image
    return torch.nn.functional.avg_pool2d(image.permute(2, 0, 1)[None], scale)[0].permute(1, 2, 0)


@dataclass
class TestViewScores:
    """What :func:`score_test_views` measured: per-view metrics and render timings."""

    views: list[int]
    scores: dict[str, list[float]]
    """``psnr``, ``ssim`` and (when available) ``lpips``, one value per view."""
    render: list[Timing]
    pixels: list[int]
    lpips_reason: str | None
    """Why LPIPS is absent (``None`` when it was computed)."""

    def mean(self, key: str) -> float:
        return statistics.fmean(self.scores[key])

    def means(self) -> dict[str, float]:
        """The mean over views of every metric (what the benchmarks and reports record)."""
        return {key: self.mean(key) for key in self.scores}

    @property
    def fps(self) -> float:
        return 1.0 / statistics.median(t.median for t in self.render)

    @property
    def rays_per_second(self) -> float:
        return median_rate(self.pixels, self.render)


def score_test_views(
    pipeline,
    views: list[int] | None = None,
    *,
    warmup: int = 1,
    repeats: int = 1,
    lpips: bool | str = True,
    downscale: int = 1,
    error_dir: Path | None = None,
    label: str = "",
    truth=None,
    pinhole: bool = False,
) -> TestViewScores:
    """Render the test views of ``pipeline`` (timed: warm-up, synchronised, ``repeats`` each) and score them
    against their ground truth (untimed): the one evaluation loop of ``eugen-eval``, ``eugen-distill``'s report
    and the benchmarks.

    ``downscale``: render with the camera's resolution divided by it and compare with the ground truth
    area-averaged to that size (the multiscale check of anti-aliasing). ``lpips``: ``False`` or a reason
    string leaves it out. Renders are checked finite and of the ground truth's size; ``error_dir`` receives
    a prediction | ground truth | error image per view.

    ``truth``: another dataset of the same test views, in the same order, whose images are the ground truth
    (a run trained on a re-expressed copy of a scene, scored against the original's images: whether the
    frame changed the picture). ``pinhole``: render the cameras without their lens distortion (for a truth
    shot with a pinhole camera).
    """
    model, device = pipeline.model, pipeline.device
    dataset = pipeline.datamanager.eval_dataset
    views = list(range(len(dataset))) if views is None else list(views)
    if truth is not None and len(truth) != len(dataset):
        raise EvalInputError(f"the truth dataset has {len(truth)} test views, the run {len(dataset)}")
    images = [
        ground_truth_image(pipeline, truth if truth is not None else dataset, i).to(device) for i in views
    ]
    check_sizes(dataset, views, images)
    images = [area_downsample(image, downscale) for image in images]
    if lpips is True:
        lpips_reason = lpips_unavailable_reason(min((tuple(image.shape[:2]) for image in images), key=min))
    else:
        lpips_reason = lpips or "disabled (--no-lpips)"
    if error_dir is not None:
        error_dir.mkdir(parents=True, exist_ok=True)
    cameras = dataset.cameras.to(device)  # once, outside the timed renders
    if downscale != 1 or pinhole:
        cameras = copy.deepcopy(cameras)
    if downscale != 1:
        cameras.rescale_output_resolution(1.0 / downscale)
    if pinhole and cameras.distortion_params is not None:
        cameras.distortion_params.zero_()
    model.eval()

    def render(i: int) -> Tensor:
        with torch.no_grad():
            return final_rgb(model.get_outputs_for_camera(cameras[views[i] : views[i] + 1]))

    def score(i: int, rgb: Tensor) -> dict[str, float]:
        name = dataset.image_filenames[views[i]]
        check_finite(rgb, f"render of test view {name}")
        pred, gt = rgb.clamp(0, 1), images[i]
        if pred.shape != gt.shape:
            raise EvalInputError(f"{name}: model rendered {tuple(pred.shape)}, image is {tuple(gt.shape)}")
        if error_dir is not None:
            iio.imwrite(error_dir / f"{Path(name).stem}.png", comparison_image(pred, gt))
        values = {"psnr": metrics.psnr(pred, gt).item(), "ssim": metrics.ssim(pred, gt).item()}
        if lpips_reason is None:
            values["lpips"] = metrics.lpips(pred, gt).item()
        return values

    results = render_and_score(
        track(range(len(views)), description=f"rendering {label}".strip(), transient=True),
        render,
        score,
        device,
        warmup=warmup,
        repeats=repeats,
    )
    return TestViewScores(
        views=views,
        scores={key: [s[key] for s in results.scores] for key in results.scores[0]},
        render=results.render,
        pixels=[int(cameras[i].height) * int(cameras[i].width) for i in views],
        lpips_reason=lpips_reason,
    )


def evaluate_images(run: Run, settings: EvalSettings, error_dir: Path | None = None) -> dict[str, object]:
    """Render and score the test split; returns ``{"metrics", "speed", "views"}`` report parts."""
    model, device = run.pipeline.model, run.pipeline.device
    dataset = run.pipeline.datamanager.eval_dataset
    views = list(range(len(dataset)))[: settings.max_views]
    result = score_test_views(
        run.pipeline,
        views,
        warmup=settings.warmup,
        repeats=settings.repeats,
        lpips=settings.lpips,
        error_dir=error_dir,
        label=run.name,
    )
    try:
        field_name, field_timing = time_field(
            model, settings.field_points, device, settings.warmup, settings.repeats
        )
        field_rate: float | None = settings.field_points / field_timing.median
    except NoFieldError:  # e.g. Gaussian splatting: there is no field to time
        field_name, field_rate = None, None
    return {
        "views": [str(dataset.image_filenames[i]) for i in views],
        "metrics": {
            "psnr": stats(result.scores["psnr"]),
            "ssim": stats(result.scores["ssim"]),
            "lpips": stats(result.scores["lpips"]) if result.lpips_reason is None else None,
            "lpips_reason": result.lpips_reason,
        },
        "speed": {
            "render_fps": result.fps,
            "render_seconds_per_view": [t.median for t in result.render],
            "rays_per_second": result.rays_per_second,
            "field_points_per_second": field_rate,
            "field_module": field_name,
            "resolution": [int(dataset.cameras[views[0]].width), int(dataset.cameras[views[0]].height)],
        },
    }


def is_sdf_run(run: Run) -> bool:
    """Runs whose model scores itself on geometry (iSDF: an SDF field, no colour) instead of images.

    Such a model has an ``evaluate_geometry(scene, cameras, settings)`` method; looking for it (rather than for
    the iSDF model class) keeps this module free of imports from the layers above it.
    """
    return callable(getattr(run.pipeline.model, "evaluate_geometry", None))


def render_seconds_side_by_side(
    models: dict[object, tuple[torch.nn.Module, object]],
    views: list[int],
    device: torch.device | str,
    warmup: int = 1,
    repeats: int = 2,
    clock: str = "wall",
) -> dict[object, float]:
    """Median seconds to render each of ``views`` for every model, all timed side by side on ``clock``
    (:data:`~eugen_nerf.eval.timing.CLOCKS`).

    ``models`` maps a name to ``(model, cameras)``; each repeat renders the view with every model in turn
    (:func:`~eugen_nerf.eval.timing.benchmark_interleaved`: load from elsewhere hits all alike, each first
    output is checked finite), and every view's repeats are pooled into one median per model."""
    timings = {name: Timing() for name in models}
    for view in views:
        fns = {
            name: (lambda m=model, c=cameras, v=view: final_rgb(m.get_outputs_for_camera(c[v : v + 1])))
            for name, (model, cameras) in models.items()
        }
        with torch.no_grad():
            for name, timing in benchmark_interleaved(
                fns, device, warmup=warmup, repeats=repeats, clock=clock
            ).items():
                timings[name].seconds.extend(timing.seconds)
    return {name: timing.median for name, timing in timings.items()}


def side_by_side_image(runs: list[Run], names: list[str], view: int, gain: float) -> np.ndarray:
    """Test view ``view`` rendered by every run, its ground truth, and ``gain * |second - first|``."""
    panels, labels = [], list(names)
    for run in runs:
        camera = run.pipeline.datamanager.eval_dataset.cameras[view : view + 1].to(run.pipeline.device)
        with torch.no_grad():
            panels.append(final_rgb(run.model.get_outputs_for_camera(camera)).clamp(0, 1).cpu())
    first = runs[0].pipeline
    panels.append(ground_truth_image(first, first.datamanager.eval_dataset, view).cpu())
    labels.append("ground truth")
    panels.append(difference(panels[1], panels[0], gain))
    labels.append(f"|{labels[1]} - {labels[0]}| x{gain:g}" if gain != 1 else f"|{labels[1]} - {labels[0]}|")
    return compose(panels, labels)


def check_scene_frame(run: Run) -> None:
    """An SDF run is scored against the ground-truth mesh in the scene's own frame: refused (one line) when its
    dataparser moved or scaled the poses (the field's distances would be in another frame and unit)."""
    outputs = run.pipeline.datamanager.train_dataparser_outputs
    transform, scale = outputs.dataparser_transform.double().cpu(), float(outputs.dataparser_scale)
    if (
        not torch.allclose(transform, torch.eye(4, dtype=torch.float64)[:3], atol=1e-6)
        or abs(scale - 1) > 1e-6
    ):
        raise EvalInputError(
            f"{run.config_path}: its dataparser moved or scaled the scene (scale {scale:g}), so its SDF is not in "
            "the ground-truth mesh's frame and units; train it on the scene's poses as written"
        )


def evaluate_run(run: Run, settings: EvalSettings, plots_dir: Path | None = None) -> dict[str, object]:
    """The report entry of one loaded run (quality, its own render timing, field speed and size)."""
    error_dir = plots_dir / "errors" / run.name.replace("/", "_") if plots_dir is not None else None
    if is_sdf_run(run):
        check_scene_frame(run)
    entry = {
        "name": run.name,
        "config": str(run.config_path),
        "method": run.method,
        "scene": str(run.scene),
        "step": run.step,
        "checkpoint": str(run.checkpoint),
        **(
            run.pipeline.model.evaluate_geometry(
                run.scene, run.pipeline.datamanager.eval_dataset.cameras, settings
            )
            if is_sdf_run(run)
            else evaluate_images(run, settings, error_dir)
        ),
    }
    entry["size"] = {
        "parameters": count_parameters(run.pipeline.model),
        "checkpoint_bytes": run.checkpoint.stat().st_size,
        "render_memory_bytes": None,
        "render_memory_kind": None,
    }
    return entry


def evaluate_configs(
    config_paths: list[Path],
    settings: EvalSettings,
    plots_dir: Path | None = None,
    side_by_side: Path | None = None,
    side_by_side_view: int = 0,
    difference_gain: float = 4.0,
    names: list[str] | None = None,
) -> list[dict[str, object]]:
    """Load every run, evaluate each, time runs of one scene side by side, write the side-by-side picture,
    free the runs, then measure each run's render memory in a fresh process. Returns the report entries;
    ``speed.render_speedup`` is the first run's render time over each run's (``None`` when the runs'
    test views differ or only one run renders images). ``names``: one per run, replacing
    ``experiment/method/timestamp`` in the entries and the picture."""
    runs = [load_run(path, settings.eval_num_rays_per_chunk) for path in config_paths]
    images = [i for i, run in enumerate(runs) if not is_sdf_run(run)]  # the runs that render images
    mismatch = mismatched_test_views([runs[i].pipeline for i in images]) if len(images) >= 2 else None
    comparable = len(images) >= 2 and mismatch is None
    count = len(runs[images[0]].pipeline.datamanager.eval_dataset) if images else 0
    if side_by_side is not None and not comparable:  # before any scoring
        raise EvalInputError(
            "--side-by-side needs two or more image runs with the same test views"
            + (f" ({mismatch})" if mismatch else "")
        )
    if mismatch is not None:
        CONSOLE.print(f"not timed side by side: {mismatch}")
    if side_by_side is not None and not 0 <= side_by_side_view < count:
        raise EvalInputError(f"--side-by-side-view {side_by_side_view}: the runs have {count} test views")
    entries = [evaluate_run(run, settings, plots_dir) for run in runs]
    for entry, name in zip(entries, names or []):
        entry["name"] = name
    for i in images:
        entries[i]["speed"]["render_speedup"] = entries[i]["speed"]["render_fps_side_by_side"] = None
    if comparable:
        seconds = render_seconds_side_by_side(
            {
                i: (
                    runs[i].model.eval(),
                    runs[i].pipeline.datamanager.eval_dataset.cameras.to(runs[i].pipeline.device),
                )
                for i in images
            },
            list(range(min(settings.speed_views, count, settings.max_views or count))),
            runs[images[0]].pipeline.device,
            warmup=settings.warmup,
            repeats=settings.repeats,
        )
        for i in images:
            entries[i]["speed"]["render_speedup"] = seconds[images[0]] / seconds[i]
            entries[i]["speed"]["render_fps_side_by_side"] = 1.0 / seconds[i]
    if side_by_side is not None:
        side_by_side.parent.mkdir(parents=True, exist_ok=True)
        picture = side_by_side_image(
            [runs[i] for i in images],
            [str(entries[i]["name"]) for i in images],
            side_by_side_view,
            difference_gain,
        )
        iio.imwrite(side_by_side, picture)
    del runs
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if settings.render_memory:
        for path, entry in zip(config_paths, entries):
            if "render_fps" in entry.get("speed", {}):
                try:
                    entry["size"].update(render_memory(path, chunk=settings.eval_num_rays_per_chunk))
                except RuntimeError as error:  # the scores and timings stand: the memory figure is left null
                    entry["size"]["render_memory_reason"] = str(error)
                    CONSOLE.print(f"render memory not measured: {error}")
    return entries
