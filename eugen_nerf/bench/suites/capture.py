"""Training on COLMAP's poses against training on the true ones: what structure from motion costs a field.

A photo capture made by ``eugen-scenes photo-capture`` holds JPEG photographs without poses and, apart, the
poses Blender rendered them from. ``eugen-scenes colmap`` (``ns-process-data`` and COLMAP) estimates the
poses. This suite trains ``eugen-zipnerf`` twice on the frames COLMAP registered, once on COLMAP's poses and
intrinsics and once on Blender's, with everything else equal: the same photographs (the same files), the
same train/test split (every ``--test-every``-th registered frame is a test view, mip-NeRF 360's
convention), steps, rays, seed and dataparser (nerfstudio-data's orientation, centring and scaling, computed
from each run's own poses). The Zip-NeRF model has no camera optimiser: COLMAP's poses are used as they
are. Each run is scored on its own test cameras (COLMAP's test poses come from the same reconstruction as
its training poses, as in every COLMAP benchmark) against the same test photographs.

Writes the JSON report given by ``--output``, and beside it (``_views.png``) test views rendered by both
runs next to the photograph.

    python -m eugen_nerf.bench.suites.capture --capture scenes/garden_photos --steps 1500
    python -m eugen_nerf.bench.suites.capture --steps 2 --test-views 1 --output /tmp/capture.json  # smoke

Resumable: the COLMAP dataset in ``--colmap`` (default ``WORK_DIR/colmap``) is made once and reused, and a
run already trained for ``--steps`` in ``--work-dir`` is reused with its scores (``--retrain`` trains
afresh).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tyro

from eugen_nerf.bench.merge import publish_json
from eugen_nerf.bench.provenance import provenance
from eugen_nerf.bench.suites import command_line
from eugen_nerf.bench.suites.methods import small_zipnerf  # the CPU preset
from eugen_nerf.bench.training import cached_for_checkpoint, train_in_process
from eugen_nerf.inputs.errors import InputError, usage_error
from eugen_nerf.scenes.colmap import CameraType

GOAL_GAP_DB = 1.0
POSES = ("blender", "colmap")
METHOD = "eugen-zipnerf"


def split(frames: list[int], test_every: int) -> tuple[list[int], list[int]]:
    """Train and test frames: every ``test_every``-th of the (sorted) registered frames is a test view."""
    frames = sorted(frames)
    test = frames[::test_every]
    return [f for f in frames if f not in set(test)], test


def pose_dataset(
    folder: Path,
    images: Path,
    frames: dict[int, np.ndarray],
    intrinsics: dict[str, Any],
    names: list[str],
    train: list[int],
    test: list[int],
) -> Path:
    """A nerfstudio-data folder: ``images`` linked in as ``images/``, ``transforms.json`` with ``intrinsics``,
    the poses ``frames`` (photograph index -> camera-to-world) and the explicit train/val/test split."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "images"
    if link.is_symlink() and link.resolve() != images.resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to(images.resolve(), target_is_directory=True)

    def path(i: int) -> str:
        return f"images/{names[i]}"

    meta = {
        **intrinsics,
        "frames": [{"file_path": path(i), "transform_matrix": frames[i].tolist()} for i in sorted(frames)],
        "train_filenames": [path(i) for i in train],
        "val_filenames": [path(i) for i in test],
        "test_filenames": [path(i) for i in test],
    }
    (folder / "transforms.json").write_text(json.dumps(meta, indent=1) + "\n")
    return folder


def colmap_tag(camera_type: str, refine_intrinsics: bool) -> str:
    """The name of a COLMAP setting's dataset and run folders (``colmap-pinhole``, ``colmap-perspective-refined``)."""
    return f"colmap-{camera_type}" + ("-refined" if refine_intrinsics else "")


def colmap_dataset(
    capture: Path, colmap: Path, matching_method: str, camera_type: str, refine_intrinsics: bool
) -> dict[str, Any]:
    """``eugen-scenes colmap`` on the capture's photographs into ``colmap`` (reused when already there with
    the same settings; a folder made with other settings is refused rather than silently scored)."""
    from eugen_nerf.scenes.colmap import ColmapConfig, run_colmap

    record = colmap / "registration.json"
    if record.is_file() and (colmap / "transforms.json").is_file():
        saved = json.loads(record.read_text())
        wanted = {
            "matching_method": matching_method,
            "camera_type": camera_type,
            "refine_intrinsics": refine_intrinsics,
        }
        found = {key: saved.get(key) for key in wanted}
        if found != wanted:
            raise InputError(
                f"--colmap {colmap}: made with {found}, not {wanted}; pass another --colmap folder (or remove it)"
            )
        return saved
    print(f"[capture] COLMAP on {capture / 'images'} -> {colmap}", flush=True)
    return run_colmap(
        ColmapConfig(
            capture / "images",
            colmap,
            matching_method=matching_method,
            camera_type=camera_type,
            refine_intrinsics=refine_intrinsics,
        )
    )


def datasets(
    capture: Path, colmap: Path, work: Path, test_every: int, tag: str = "colmap"
) -> tuple[dict[str, Path], dict]:
    """The two datasets (Blender's poses, COLMAP's) over the registered frames, same images and split."""
    from eugen_nerf.scenes.colmap import list_photographs, read_registration, reference_poses

    photographs = list_photographs(capture / "images")
    names = [p.name for p in photographs]
    registration = read_registration(colmap, len(photographs))
    truth = json.loads((capture / "reference" / "transforms.json").read_text())
    reference = reference_poses(capture / "reference" / "transforms.json", len(photographs))
    train, test = split(list(registration.registered), test_every)
    true_intrinsics = {
        k: truth[k] for k in ("camera_model", "fl_x", "fl_y", "cx", "cy", "w", "h") if k in truth
    }
    colmap_meta = json.loads((colmap / "transforms.json").read_text())
    colmap_intrinsics = {k: v for k, v in colmap_meta.items() if k not in ("frames", "ply_file_path")}
    out = {
        "blender": pose_dataset(
            work / "data" / "blender",
            capture / "images",
            {i: reference[i] for i in registration.registered},
            true_intrinsics,
            names,
            train,
            test,
        ),
        "colmap": pose_dataset(
            work / "data" / tag,
            capture / "images",
            registration.registered,
            colmap_intrinsics,
            names,
            train,
            test,
        ),
    }
    return out, {
        "train": [names[i] for i in train],
        "test": [names[i] for i in test],
        "intrinsics": {"blender": true_intrinsics, "colmap": colmap_intrinsics},
    }


def config(seed: int, rays: int):
    """``eugen-zipnerf`` at the CPU preset (see :func:`small_zipnerf`), seeded."""
    from eugen_nerf.methods import zipnerf as zipnerf_methods

    out = copy.deepcopy(zipnerf_methods.eugen_zipnerf.config)
    small_zipnerf(out)
    out.pipeline.datamanager.train_num_rays_per_batch = rays
    out.machine.seed = seed
    return out


def score(config_path: Path, test_views: int, downscale: int, views_dir: Path) -> dict[str, Any]:
    """PSNR/SSIM of the first ``test_views`` test views (all when 0) rendered at 1/``downscale`` of the
    photographs' resolution against the photographs area-averaged to that size, per view and mean; the
    renders (prediction | photograph | error) go to ``views_dir``."""
    from eugen_nerf.eval.evaluate import score_test_views
    from eugen_nerf.eval.runs import load_run

    run = load_run(config_path)
    dataset = run.pipeline.datamanager.eval_dataset
    views = list(range(len(dataset) if not test_views else min(test_views, len(dataset))))
    scored = score_test_views(run.pipeline, views, warmup=0, lpips=False, error_dir=views_dir, label=run.name)
    return {
        "views": [Path(dataset.image_filenames[i]).name for i in views],
        "psnr_per_view": scored.scores["psnr"],
        **scored.means(),
    }


def views_figure(renders: dict[str, Path], names: list[str], path: Path) -> None:
    """Rows of test views: the photograph, the Blender-pose run's render, the COLMAP-pose run's render."""
    import imageio.v3 as iio
    import torch

    from eugen_nerf.eval.panels import compose

    rows = []
    for name in names:
        stem = Path(name).stem
        panels, labels = [], []
        for poses, folder in renders.items():
            strip = iio.imread(folder / f"{stem}.png")
            width = strip.shape[1] // 3
            if not panels:
                panels.append(torch.from_numpy(strip[:, width : 2 * width] / 255.0))
                labels.append(f"photograph {stem}")
            panels.append(torch.from_numpy(strip[:, :width] / 255.0))
            labels.append(f"trained on {poses} poses")
        rows.append(compose(panels, labels, min_height=336))
    iio.imwrite(path, np.concatenate(rows, axis=0))


@dataclass
class BenchCapture:
    capture: Path = Path("scenes/garden_photos")
    """the photo capture (images/, reference/transforms.json), as ``eugen-scenes photo-capture`` writes it."""
    colmap: Path | None = None
    """the dataset ``eugen-scenes colmap`` made of the capture's images (default WORK_DIR/colmap, made there
    when missing)."""
    matching_method: str = "sequential"
    """COLMAP's matching when the COLMAP dataset is made here."""
    camera_type: CameraType = "pinhole"
    """ns-process-data's camera model when the COLMAP dataset is made here. The capture's photographs come
    from a pinhole lens without distortion, so the default fits focal lengths only; ``perspective`` (OPENCV,
    nerfstudio's default) also fits distortion, which trades against the focal length on small photographs."""
    refine_intrinsics: bool = False
    """run ns-process-data's last bundle adjustment, which also moves the principal point (a centred
    principal point is what the capture's camera has; moving it tilts every camera to compensate)."""
    steps: int = 1500
    """training steps of each run."""
    rays: int = 256
    """rays per training step."""
    seed: int = 0
    """the training seed of both runs."""
    test_every: int = 8
    """every N-th registered frame is a test view (the rest train)."""
    test_views: int = 0
    """score only the first N test views (0: all)."""
    test_downscale: int = 2
    """render the test views at 1/N of the photographs' size, scored against the photographs area-averaged
    to it (Zip-NeRF trains on rays at 1/1, 1/2 and 1/4; on a CPU a full-size view takes minutes)."""
    figure_views: int = 2
    """test views shown in the figure."""
    work_dir: Path = Path("outputs/bench/capture")
    """where the datasets and training runs go; finished runs are reused."""
    output: Path = Path("benchmarks/scenes_capture/capture_training.json")
    """the JSON written (the figure goes beside it, ``_views.png``)."""
    retrain: bool = False
    """train both runs afresh."""
    poses: list[str] = field(default_factory=lambda: list(POSES))
    """the runs trained (default both; the report needs both): runs of one kind of poses can train in
    separate processes on the same --work-dir, and a last call with both reuses them."""


def main() -> None:
    args = tyro.cli(BenchCapture, description=__doc__)
    name = "python -m eugen_nerf.bench.suites.capture"
    if (
        args.steps < 1
        or args.rays < 1
        or args.test_every < 2
        or args.test_views < 0
        or args.test_downscale < 1
    ):
        usage_error(
            name, "--steps, --rays and --test-downscale must be >= 1, --test-every >= 2, --test-views >= 0"
        )
    if not (args.capture / "reference" / "transforms.json").is_file():
        usage_error(name, f"--capture {args.capture}: not a photo capture (no reference/transforms.json)")
    if not args.poses or set(args.poses) - set(POSES):
        usage_error(name, f"--poses {args.poses}: choose among {list(POSES)}")
    tag = colmap_tag(args.camera_type, args.refine_intrinsics)
    colmap = args.colmap or args.work_dir / tag
    try:
        registration = colmap_dataset(
            args.capture, colmap, args.matching_method, args.camera_type, args.refine_intrinsics
        )
    except InputError as error:
        usage_error(name, str(error))
    data, listing = datasets(args.capture, colmap, args.work_dir, args.test_every, tag)
    runs: dict[str, dict[str, Any]] = {}
    renders: dict[str, Path] = {}
    for poses in args.poses:
        print(f"[capture] {METHOD} on {poses} poses, {args.steps} steps", flush=True)
        path, seconds_per_step = train_in_process(
            config(args.seed, args.rays),
            data[poses],
            args.steps,
            args.work_dir / "runs" / (tag if poses == "colmap" else poses),
            reuse=not args.retrain,
        )
        renders[poses] = path.parent / "test_views"
        scores = cached_for_checkpoint(
            path,
            "bench_capture.json",
            lambda path=path, poses=poses: score(path, args.test_views, args.test_downscale, renders[poses]),
            test_views=args.test_views,
            downscale=args.test_downscale,
            test=listing["test"],
        )
        runs[poses] = {"config": str(path), "seconds_per_step": seconds_per_step, **scores}
    if set(args.poses) != set(POSES):
        print(json.dumps({p: {"psnr": runs[p]["psnr"], "ssim": runs[p]["ssim"]} for p in runs}, indent=2))
        return
    if runs["blender"]["views"] != runs["colmap"]["views"]:
        raise RuntimeError("the two runs were scored on different test photographs")
    gap = runs["blender"]["psnr"] - runs["colmap"]["psnr"]
    figure = args.output.with_name(args.output.stem + "_views.png")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    views_figure(renders, runs["blender"]["views"][: args.figure_views], figure)
    sample = config(args.seed, args.rays)
    report = {
        "capture": str(args.capture),
        "method": METHOD,
        "camera_optimizer": "none (the Zip-NeRF model has no camera optimiser: poses are used as given)",
        "steps": args.steps,
        "rays_per_step": args.rays,
        "train_scales": list(sample.pipeline.datamanager.train_scales),
        "seed": args.seed,
        "resolution": [listing["intrinsics"]["blender"]["w"], listing["intrinsics"]["blender"]["h"]],
        "test_resolution": [
            listing["intrinsics"]["blender"]["w"] // args.test_downscale,
            listing["intrinsics"]["blender"]["h"] // args.test_downscale,
        ],
        "split": {
            "rule": f"every {args.test_every}th registered frame is a test view",
            "num_train": len(listing["train"]),
            "num_test": len(listing["test"]),
            "test": listing["test"],
        },
        "registration": {
            key: registration.get(key)
            for key in (
                "num_images",
                "num_registered",
                "registered_fraction",
                "pose_errors",
                "ns_process_data",
                "camera_type",
                "refine_intrinsics",
            )
        },
        "intrinsics": listing["intrinsics"],
        "runs": runs,
        "blender_minus_colmap_psnr_db": gap,
        "goals": {"colmap_within_1_db_of_blender": gap <= GOAL_GAP_DB},
        "figure": figure.name,
        "command": command_line(),
        "provenance": provenance(args.capture),
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }
    publish_json(args.output, report)
    print(
        json.dumps(
            {
                "psnr": {p: runs[p]["psnr"] for p in POSES},
                "blender_minus_colmap_db": gap,
                "goals": report["goals"],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
