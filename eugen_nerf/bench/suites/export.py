"""The exported field in the web page: ``eugen-export`` files rendered by the reference renderer and by the page
in headless Chromium, against nerfstudio and the ground truth, with the page's frame times.

Three parts, each writing its JSON into ``--output`` after every render (an interrupted run keeps what it
measured; a rerun measures only what is missing):

* ``reference`` (``reference.json``): the NeRF teacher (``--teacher``) and its student (``--student``, or one
  distilled with ``eugen-distill``'s defaults into ``--work-dir/student``), both exported (float32); on every
  test view the reference renderer's nerfstudio sampling against nerfstudio itself, and the page's sampling
  (a march of ``--samples`` samples a ray with occupancy skipping and early termination) against the truth;
* ``browser`` (``browser.json``, ``page_student.png``, ``page_teacher.png``, ``page_student_large.png``):
  the web page (the package's ``eugen_nerf/export/viewer``) in headless Chromium, WebGL2 through SwiftShader:
  test camera ``--camera`` of the student and the teacher at ``--size``, in turn, ``--repeats`` times (and of
  the student once at ``--large-size``), each against the reference renderer with the same sampling and
  against the truth, with the frames' times; the teacher's fastest frame over the student's; with
  ``--screenshot``, the page as a person sees it, student and teacher side by side;
* ``zipnerf`` (``zipnerf.json``, ``page_zipnerf_*.png``): the Zip-NeRF head, a small dense-zipnerf /
  eugen-zipnerf pair trained on ``--zipnerf-scene`` (see :mod:`eugen_nerf.bench.suites.export_zipnerf`).

Finished students, exports and Zip-NeRF runs under ``--work-dir`` are reused. Each report records the
sha256 of the exports it measured; a rerun on another export of a field (a new student, a run trained
further) measures that field again instead of keeping its old figures.

    eugen-bench export                                               # the protocol's setting
    python -m eugen_nerf.bench.suites.export --teacher teachers/shiny128/dense-nerf/paper \\
        --work-dir outputs/bench/export --output benchmarks/export --parts reference browser
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import tyro
from PIL import Image

from eugen_nerf.bench.merge import publish_json
from eugen_nerf.bench.suites import command_line
from eugen_nerf.distill.options import FractionArg
from eugen_nerf.inputs.errors import InputError, one_line_errors

PROG = "eugen-bench export"
PARTS = ("reference", "browser", "zipnerf", "zipnerf-distilled")
DEVICE = "headless Chromium, SwiftShader WebGL2 (software), {cores}-core CPU"


@dataclass
class BenchExport:
    """Measure exported fields in the web page (headless Chromium) against the reference renderer, nerfstudio
    and the ground truth."""

    teacher: Path
    """The NeRF teacher run (its folder or config.yml)."""
    work_dir: Path
    """Where the distilled student, the exports and the Zip-NeRF runs are kept (reused by a rerun)."""
    output: Path
    """The folder the JSON reports and the page's frames are written into."""
    student: Path | None = None
    """The teacher's student run; by default one distilled with eugen-distill's defaults into WORK_DIR/student."""
    parts: tuple[Literal["reference", "browser", "zipnerf", "zipnerf-distilled"], ...] = PARTS
    """Which parts to measure."""
    samples: int = 128
    """Samples a ray of the page's march (and of the reference renderer it is compared with)."""
    camera: int = 0
    """The test camera the page renders."""
    size: int | None = None
    """Width and height of the page's frames compared with the truth; by default each part's scene's own size
    (its test images', which must then be square)."""
    large_size: int = 200
    """Width and height of one more frame of the student, and of the zipnerf part's EUGen field (0: none)."""
    repeats: int = 2
    """Frames of the student and of the teacher at SIZE timed in turn (the fastest of each counts)."""
    views: int | None = None
    """The reference part's test views: the first VIEWS (all by default)."""
    distill_image_fraction: float | None = None
    """eugen-distill's --image-fraction for the student (its default when not given)."""
    distill_resolution_scale: float | None = None
    """eugen-distill's --resolution-scale for the student (its default when not given)."""
    distill_refine_steps: int | None = None
    """eugen-distill's --refine-steps for the student (its default when not given)."""
    distill_eval_views: int | None = None
    """eugen-distill's --eval-views for the student (its default when not given)."""
    distill_layers: tuple[str, ...] | None = None
    """eugen-distill's --layers for the student (its default when not given)."""
    distill_width_fraction: FractionArg | None = None
    """eugen-distill's --width-fraction for the student (its default when not given)."""
    distill_narrow_fraction: FractionArg | None = None
    """eugen-distill's --narrow-fraction for the student (its default when not given)."""
    distill_fold_out_activation: bool = True
    """eugen-distill's --fold-out-activation for the student (on, as its default)."""
    zipnerf_scene: Path = Path("scenes/bunny64")
    """The scene the Zip-NeRF pair trains on."""
    zipnerf_teacher: Path = Path("teachers/garden200/dense-zipnerf/cpu")
    """The zipnerf-distilled part's trained Zip-NeRF teacher (its folder or config.yml; by default the shipped
    one of the unbounded garden), measured beside its student distilled with eugen-distill's defaults."""
    distilled_views: int = 1
    """Test views the zipnerf-distilled part scores with the reference renderer (each rendered at full size)."""
    distilled_size: int = 64
    """Side of the zipnerf-distilled part's page frames."""
    zipnerf_steps: int = 600
    """Training steps of each Zip-NeRF run."""
    zipnerf_repeats: int = 2
    """Frames of each Zip-NeRF field timed in the page (the fastest counts)."""
    screenshot: Path | None = None
    """Where to save a screenshot of the page showing the student and the teacher side by side at SIZE, once
    both frames are drawn (none by default; an existing file is kept)."""
    zipnerf_screenshot: Path | None = None
    """Where to save a screenshot of the page showing the Zip-NeRF pair side by side (none by default; an
    existing file is kept)."""


def check(args: BenchExport) -> None:
    """Every value the suite cannot use, as one :class:`InputError`, before anything is written."""
    for name in (
        "samples",
        "size",
        "repeats",
        "zipnerf_steps",
        "zipnerf_repeats",
        "distilled_views",
        "distilled_size",
    ):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.camera < 0 or args.large_size < 0:
        raise InputError("--camera and --large-size must not be negative")
    if args.views is not None and args.views < 1:
        raise InputError(f"--views must be at least 1, got {args.views}")
    if not args.parts or len(set(args.parts)) != len(args.parts):
        raise InputError(f"--parts must name each of {', '.join(PARTS)} at most once, got {list(args.parts)}")
    if args.output.exists() and not args.output.is_dir():
        raise InputError(f"--output {args.output} is a file; give a folder")
    nerf = {"reference", "browser"} & set(args.parts)
    if nerf and not run_config(args.teacher).is_file():
        raise InputError(f"--teacher {args.teacher}: no config.yml there; give a trained NeRF run's folder")
    if nerf and args.student is not None and not run_config(args.student).is_file():
        raise InputError(
            f"--student {args.student}: no config.yml there; give the student's run or leave --student out "
            "to distil one"
        )
    if "zipnerf-distilled" in args.parts and not run_config(args.zipnerf_teacher).is_file():
        raise InputError(
            f"--zipnerf-teacher {args.zipnerf_teacher}: no config.yml there; give a trained Zip-NeRF run's folder"
        )
    if "zipnerf" in args.parts and not (args.zipnerf_scene / "transforms_train.json").is_file():
        raise InputError(
            f"--zipnerf-scene {args.zipnerf_scene} is not a NeRF-Synthetic scene (no transforms_train.json); "
            f"make it with: eugen-scenes render --output {args.zipnerf_scene}"
        )
    if "browser" in args.parts or "zipnerf" in args.parts:
        from eugen_nerf.bench.browser import chromium_missing

        missing = chromium_missing()
        if missing:
            raise InputError(missing)


def run_config(run: Path) -> Path:
    """A run's config.yml, given the run's folder or the file itself."""
    return run if run.suffix in (".yml", ".yaml") else run / "config.yml"


class Results:
    """One JSON report, read back when it exists (a rerun continues it) and rewritten whole on every save."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict = json.loads(path.read_text()) if path.is_file() else {}

    def save(self) -> None:
        """Through :func:`~eugen_nerf.bench.merge.publish_json`: refused with an inf or NaN, renamed into place."""
        publish_json(self.path, self.data)


def forget_other_exports(data: dict, exports: dict[str, Path], also: tuple[dict, ...] = ()) -> list[str]:
    """Record in a report's ``data`` the sha256 of each field's export and drop what the report (and the dicts
    ``also``, parts of it) holds of a field measured on another export: its entry (``name``) or entries
    (``name_…``) and the frame-time ratio. Returns the names forgotten. A report that records no exports is
    taken as measured on these."""
    from eugen_nerf.export import format as fmt

    digests = {
        name: hashlib.sha256((export / fmt.FILE_NAME).read_bytes()).hexdigest()
        for name, export in exports.items()
    }
    recorded = data.get("exports", digests)
    forgotten = [name for name, digest in digests.items() if recorded.get(name, digest) != digest]
    for part in (data, *also):
        for key in [k for k in part if any(k == name or k.startswith(f"{name}_") for name in forgotten)]:
            del part[key]
        if forgotten:
            part.pop("teacher_over_student_frame_time", None)
            part.pop("dense_over_eugen_frame_time", None)
    data["exports"] = digests
    return forgotten


def psnr(a, b) -> float:
    """PSNR in dB of two images in [0, 1] (float64), to 3 decimals."""
    error = float(np.mean((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2))
    return round(-10 * math.log10(max(error, 1e-20)), 3)


def finite_ms(ms: float, what: str) -> float:
    """A frame time, refused when it is not a positive finite number (the page's clock failed)."""
    if not (math.isfinite(ms) and ms > 0):
        raise RuntimeError(f"{what}: the page reported a frame time of {ms} ms")
    return round(ms, 1)


def save_picture(image, path: Path, scale: int = 1) -> None:
    """An RGB image in [0, 1] (or a row of them side by side) as a PNG, each pixel ``scale`` x ``scale``."""
    images = image if isinstance(image, list) else [image]
    row = np.concatenate([np.asarray(i, dtype=np.float64) for i in images], 1)
    picture = Image.fromarray((row.clip(0, 1) * 255).round().astype(np.uint8))
    if scale > 1:
        picture = picture.resize((row.shape[1] * scale, row.shape[0] * scale), Image.NEAREST)
    path.parent.mkdir(parents=True, exist_ok=True)
    picture.save(path)


def exported(run: Path, output: Path, dtype: str = "float32") -> Path:
    """``run`` exported into ``output`` with ``eugen-export``'s defaults; an existing export is reused unless the
    run's checkpoint is newer (a student distilled again, a run trained further: exported again)."""
    from eugen_nerf.eval.runs import latest_checkpoint
    from eugen_nerf.export import format as fmt
    from eugen_nerf.export.cli import Export

    target = output / fmt.FILE_NAME
    if not target.is_file() or target.stat().st_mtime < latest_checkpoint(run_config(run)).stat().st_mtime:
        Export(config=run_config(run), output=output, dtype=dtype, overwrite=True).main()
    return output


def student_run(args: BenchExport) -> Path:
    """``--student``, or the teacher's student distilled with eugen-distill's defaults (and the ``--distill-*``
    values given) into WORK_DIR/student; a finished one is reused when its report records the same options
    (another width or set of layers, or eugen-distill's defaults changed: distilled again)."""
    if args.student is not None:
        return args.student
    output = args.work_dir / "student"

    given = {
        name: getattr(args, f"distill_{name}")
        for name in (
            "image_fraction",
            "resolution_scale",
            "refine_steps",
            "eval_views",
            "layers",
            "width_fraction",
            "narrow_fraction",
        )
        if getattr(args, f"distill_{name}") is not None
    }
    given["fold_out_activation"] = args.distill_fold_out_activation
    return distilled_once(args.teacher, output, **given)


def distilled_once(teacher: Path, output: Path, **given) -> Path:
    """``teacher``'s student distilled with eugen-distill's defaults and the options ``given`` into ``output``;
    a finished one whose report records the same options is reused (other options: distilled again)."""
    from eugen_nerf.distill.options import DistillOptions
    from eugen_nerf.distill.run import distill

    options = DistillOptions(teacher=teacher, output_dir=output, overwrite=True, **given)
    report = output / "distill_report.json"
    if report.is_file() and (output / "config.yml").is_file():
        recorded = json.loads(json.dumps(options.recorded(), default=str))
        if json.loads(report.read_text()).get("options") == recorded:
            return output
        print(f"the student in {output} was distilled with other options: distilling it again", flush=True)
    print(f"distilling the student of {teacher} into {output}", flush=True)
    with torch.enable_grad():
        distill(options)
    return output


def march(samples: int):
    """The page's sampling: ``samples`` a ray, occupancy skipping and early termination on."""
    from eugen_nerf.export.render import Sampling

    return Sampling(samples=samples)


def measure_reference(entry: dict, run_path: Path, export_path: Path, samples: int, views, save) -> None:
    """Fill ``entry`` with the reference renderer against nerfstudio and the page's march against the truth on
    the first ``views`` test views of the run (all when ``None``), saving after every view; views already in
    ``entry`` are kept."""
    from eugen_nerf.eval.runs import final_rgb, ground_truth, load_run
    from eugen_nerf.export import format as fmt
    from eugen_nerf.export.field import load_export
    from eugen_nerf.export.render import Sampling, render_view

    run = load_run(run_config(run_path), device="cpu")
    field = load_export(export_path, device="cpu")
    cameras = run.pipeline.datamanager.eval_dataset.cameras
    count = len(cameras) if views is None else min(views, len(cameras))
    if "views" not in entry:
        entry.update(
            run=str(run_path),
            method=fmt.read(export_path).header["source"]["method"],
            export_bytes=(export_path / fmt.FILE_NAME).stat().st_size,
            macs_per_sample=fmt.read(export_path).header["macs_per_sample"],
            occupied_fraction=float(field.occupancy.float().mean()),
            views=[],
        )
    done = {v["view"] for v in entry["views"]}
    for view in range(count):
        if view in done:
            continue
        truth = ground_truth(run, view)
        with torch.no_grad():
            nerfstudio = final_rgb(run.model.get_outputs_for_camera(cameras[view : view + 1])).clamp(0, 1)
        start = time.perf_counter()
        reference = render_view(field, view, Sampling(kind="nerfstudio"))
        reference_seconds = time.perf_counter() - start
        start = time.perf_counter()
        marched = render_view(field, view, march(samples))
        march_seconds = time.perf_counter() - start
        entry["views"].append(
            {
                "view": view,
                "reference_vs_nerfstudio_db": psnr(reference, nerfstudio),
                "nerfstudio_vs_truth_db": psnr(nerfstudio, truth),
                "march_vs_truth_db": psnr(marched, truth),
                "reference_seconds": round(reference_seconds, 3),
                "march_seconds": round(march_seconds, 3),
            }
        )
        print(f"{run_path} view {view + 1}/{count}: {entry['views'][-1]}", flush=True)
        save()
    summarise_views(entry)
    save()


def summarise_views(entry: dict) -> None:
    """The worst reference-vs-nerfstudio PSNR and the mean PSNRs against the truth over ``entry["views"]``."""
    views = entry["views"]
    entry["min_reference_vs_nerfstudio_db"] = min(v["reference_vs_nerfstudio_db"] for v in views)
    for key in ("nerfstudio_vs_truth_db", "march_vs_truth_db"):
        entry[f"mean_{key}"] = round(sum(v[key] for v in views) / len(views), 3)


def truth_image(run_path: Path, camera: int) -> np.ndarray:
    """Test image ``camera`` of the run's scene, composited as the run renders (float64, ``(H, W, 3)``)."""
    from eugen_nerf.eval.runs import ground_truth, load_run

    return ground_truth(load_run(run_config(run_path), device="cpu"), camera).numpy().astype(np.float64)


def frame_size(args: BenchExport, truth: np.ndarray, run: Path) -> int:
    """``--size``, or the side of the square test image ``truth`` of ``run``'s scene."""
    if args.size is not None:
        return args.size
    height, width = truth.shape[:2]
    if height != width:
        raise InputError(f"{run}: its test images are {width}x{height}, not square; give --size")
    return width


def page_frame(browser, field: int, export_path: Path, camera: int, size: int, samples: int) -> tuple:
    """Test camera ``camera`` of page field ``field`` at ``size`` x ``size``: its entry (frame ms, PSNR against
    the reference renderer with the same sampling), the page's picture and the reference's."""
    from eugen_nerf.bench.browser import page_render
    from eugen_nerf.export.field import load_export
    from eugen_nerf.export.render import render_view

    options = {"field": field, "camera": camera, "width": size, "height": size, "samples": samples}
    page, ms = page_render(browser, timeout=7200.0, **options)
    reference = render_view(
        load_export(export_path, device="cpu"), camera, march(samples), size, size
    ).numpy()
    entry = {
        "frame_ms": finite_ms(ms, f"{export_path} at {size}x{size}"),
        "page_vs_reference_db": psnr(page, reference),
    }
    return entry, page, reference


def browser_header(results: dict, samples: int, camera: int) -> bool:
    """Record the browser, the device and the page's settings the frames are taken with; whether they differ
    from those ``results`` recorded before (its frames, taken otherwise, are then to be taken again)."""
    from eugen_nerf.bench.browser import chromium_version

    before = {key: results.get(key) for key in HEADER}
    results["browser"] = chromium_version()
    results["device"] = DEVICE.format(cores=os.cpu_count())
    results["settings"] = {"samples": samples, "camera": camera, "occupancy": True, "early_termination": True}
    return before["settings"] is not None and before != {key: results[key] for key in HEADER}


HEADER = ("browser", "device", "settings")
"""What a report's page frames were taken with: frames are compared only within one header."""
FRAME_KEY = re.compile(r"^(student|teacher)_\d+$")
"""The ``browser`` report's frame entries (``student_128``)."""


def forget_frames(frames: dict, keys: list[str]) -> None:
    """Drop the frames ``keys`` of a report, to be taken again with the rest: no frame-time ratio compares
    frames of different headers or sessions (another load, another browser run)."""
    for key in keys:
        frames.pop(key, None)


def frame_plan(size: int, large_size: int, repeats: int) -> list[tuple[str, int, str, int]]:
    """The page's frames, in order, as (field, size, picture file, repeat): the student and the teacher at
    ``size`` in turn, ``repeats`` times, then the student once at ``large_size``."""
    plan = [
        (name, size, f"page_{name}.png", repeat)
        for repeat in range(repeats)
        for name in ("student", "teacher")
    ]
    return plan + ([("student", large_size, "page_student_large.png", 0)] if large_size else [])


def add_frame(results: dict, key: str, entry: dict) -> dict:
    """Record one frame of ``key``: its PSNRs, each frame time and the fastest (``frame_ms``)."""
    before = results.get(key)
    times = [] if before is None else before.get("frame_ms_each", [before["frame_ms"]])
    times = [*times, entry.pop("frame_ms")]
    results[key] = {"frame_ms": min(times), "frame_ms_each": times, **entry}
    return results[key]


def frames_done(results: dict, key: str) -> int:
    """How many frames of ``key`` the report holds."""
    return len(results[key].get("frame_ms_each", [0])) if key in results else 0


def frame_time_ratio(results: dict, size: int) -> float | None:
    """The teacher's frame time over the student's at ``size`` (the fastest of each), once both are measured."""
    student, teacher = results.get(f"student_{size}"), results.get(f"teacher_{size}")
    if student is None or teacher is None:
        return None
    return round(teacher["frame_ms"] / student["frame_ms"], 3)


def measure_browser(args: BenchExport, runs: dict[str, Path], exports: dict[str, Path]) -> Results:
    """The ``browser`` part: the page's frames of the student and the teacher (see the module docstring)."""
    from eugen_nerf.bench.browser import served_page

    results = Results(args.output / "browser.json")
    for name in forget_other_exports(results.data, exports):
        print(f"page: {name} was exported again since its frames were taken: measuring it again", flush=True)
    recorded = [key for key in results.data if FRAME_KEY.match(key)]
    if browser_header(results.data, args.samples, args.camera):
        print("page: browser, device or settings changed since the frames were taken: taking them again")
        forget_frames(results.data, recorded)
    results.data["command"] = command_line()
    truths = {name: truth_image(run, args.camera) for name, run in runs.items()}
    size = frame_size(args, truths["teacher"], args.teacher)
    plan = [
        frame
        for frame in frame_plan(size, args.large_size, args.repeats)
        if frames_done(results.data, f"{frame[0]}_{frame[1]}") <= frame[3]
    ]
    if plan and any(key in results.data for key in recorded):
        forget_frames(results.data, recorded)  # frames still to take beside an earlier session's: all again
        results.data.pop("teacher_over_student_frame_time", None)
        plan = frame_plan(size, args.large_size, args.repeats)
    if plan:
        names = list(exports)
        with served_page([exports[name] for name in names]) as (browser, _):
            for name, size, picture, repeat in plan:
                key = f"{name}_{size}"
                print(f"page: {key}, frame {repeat + 1} ({args.samples} samples a ray) ...", flush=True)
                entry, page, _ = page_frame(
                    browser, names.index(name), exports[name], args.camera, size, args.samples
                )
                save_picture(page, args.output / picture)
                if truths[name].shape[:2] == page.shape[:2]:
                    entry["page_vs_truth_db"] = psnr(page, truths[name])
                print(f"page: {key} {add_frame(results.data, key, entry)}", flush=True)
                results.save()
    ratio = frame_time_ratio(results.data, size)
    if ratio is not None:
        results.data["teacher_over_student_frame_time"] = ratio
    results.save()
    if screenshot_due(args.screenshot, list(exports.values())):
        with served_page(list(exports.values())) as (browser, url):
            page_screenshot(browser, f"{url}?resolution={size}&samples={args.samples}", args.screenshot)
        print(f"wrote {args.screenshot}", flush=True)
    return results


def screenshot_due(path: Path | None, exports: list[Path]) -> bool:
    """Whether a screenshot asked for at ``path`` is to be taken: it is missing, or older than one of the
    ``exports`` it shows (a field exported again is shown again; a finished screenshot is kept by a rerun)."""
    from eugen_nerf.export import format as fmt

    if path is None:
        return False
    if not path.is_file():
        return True
    return path.stat().st_mtime < max((export / fmt.FILE_NAME).stat().st_mtime for export in exports)


def page_screenshot(browser, url: str, path: Path) -> None:
    """The page at ``url`` as a person sees it: fields A and B side by side, taken once both frames are drawn
    (their captions show the frame times)."""
    from eugen_nerf.bench.browser import wait_ready

    browser.open(url)
    state = wait_ready(browser)
    if state != "ready":
        raise RuntimeError(f"the page did not load the exports for the screenshot: {state}")
    browser.evaluate(
        "document.getElementById('show').value = '2'; document.getElementById('show').onchange()"
    )
    captions = "[...document.querySelectorAll('figure.view:not([hidden]) .fps')].map((e) => e.textContent)"
    while not all("ms/frame" in caption for caption in browser.evaluate(captions)):
        time.sleep(2)
    path.parent.mkdir(parents=True, exist_ok=True)
    browser.screenshot(path)


def main(args: BenchExport) -> None:
    check(args)
    args.output.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(False)
    if {"reference", "browser"} & set(args.parts):
        runs = {"student": student_run(args), "teacher": args.teacher}
        exports = {name: exported(run, args.work_dir / "exports" / name) for name, run in runs.items()}
        if "reference" in args.parts:
            results = Results(args.output / "reference.json")
            for name in forget_other_exports(results.data, exports):
                print(
                    f"reference: {name} was exported again since it was measured: measuring it again",
                    flush=True,
                )
            for name in ("teacher", "student"):
                entry = results.data.setdefault(name, {})
                measure_reference(entry, runs[name], exports[name], args.samples, args.views, results.save)
            results.data["march"] = {"samples": args.samples, "occupancy": True, "early_termination": True}
            results.data["command"] = command_line()
            results.save()
            print(f"wrote {results.path}", flush=True)
        if "browser" in args.parts:
            results = measure_browser(args, runs, exports)
            print(f"wrote {results.path}: {json.dumps(results.data)}", flush=True)
    from eugen_nerf.bench.suites.export_zipnerf import measure_zipnerf

    if "zipnerf" in args.parts:
        measure_zipnerf(args)
    if "zipnerf-distilled" in args.parts:
        measure_zipnerf(args, distilled=True)


def entrypoint() -> None:
    with one_line_errors(PROG):
        main(tyro.cli(BenchExport, description=__doc__))


if __name__ == "__main__":
    entrypoint()
