"""``eugen-scenes photo-capture``: the garden photographed by hand, as JPEGs with no poses, for
``ns-process-data`` and COLMAP.

Cycles renders the unbounded garden (objects on a table in a meadow) along a hand-held orbit;
:mod:`eugen_nerf.scenes.photographs` turns each render into the camera's JPEG (exposure drift, white
balance, sensor noise, EXIF focal length). The output folder holds::

    images/frame_00001.jpg ...    the photographs: the folder to give ns-process-data (no poses in it)
    reference/transforms.json     Blender's true poses and intrinsics, to score structure from motion
    scene.json                    command, Blender version, render settings, camera model, assets, measured

Rendering resumes where it stopped (frames already on disk are kept), and a folder holding the same capture
is reused as it is.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import imageio.v3 as iio
import numpy as np
from PIL import Image

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes.blender.formats import pinhole_intrinsics
from eugen_nerf.scenes.blender.generate import (
    CYCLES_RECORD,
    PIXEL_FILTER,
    asset_records,
    check_capture_options,
    compare_renders,
    options_command,
    output_is_current,
    publish_staging,
    read_scene_json,
    start_staging,
    write_assets,
    write_scene_json,
)
from eugen_nerf.scenes.blender.library import GARDEN_TARGET, SCENES
from eugen_nerf.scenes.blender.runner import blender_version, find_blender, run_job
from eugen_nerf.scenes.blender.spec import FrameSpec, RenderSettings, SceneDescription, check_description, job
from eugen_nerf.scenes.colmap import list_photographs
from eugen_nerf.scenes.photographs import (
    Exposure,
    Handheld,
    Lens,
    frame_exposures,
    handheld_poses,
    read_exif_focal,
    write_photograph,
)
from eugen_nerf.scenes.validate import SceneError, validate_scene
from eugen_nerf.scenes.writer import pose_to_json

FORMAT = "eugen-photo-capture/1"
FRAME_RANGE = (3, 1000)
SCENE_NAME = "garden"
RENDER_BOUNCES = {"diffuse_bounces": 1, "glossy_bounces": 1, "adaptive_threshold": 0.0}
"""One diffuse and one glossy bounce, every pixel sampled fully: the noise floor is reached in fewer samples."""


@dataclass
class PhotoCaptureConfig:
    """Photograph the garden scene by hand: JPEGs with EXIF focal length along a wobbly orbit, no poses
    (Blender's true poses go to reference/ for scoring structure from motion). Needs `blender`."""

    output: Path
    """Capture folder to create (images/, reference/, scene.json)."""
    width: int = 224
    """Photograph width in pixels (16 to 2048)."""
    height: int = 168
    """Photograph height in pixels (16 to 2048)."""
    frames: int = 100
    """Number of photographs along the orbit."""
    samples: int = 64
    """Cycles samples per pixel (64 puts the Monte-Carlo noise of the clean renders above 35 dB PSNR)."""
    seed: int = 0
    """Seeds the scene, the walk, the exposures and noise, and Cycles' sampling."""
    noise_floor_views: int = 4
    """Render this many frames again with another sampling seed and record the PSNR between the two clean
    renders (the Monte-Carlo noise floor) in scene.json; 0 skips it."""
    jpeg_quality: int = 92
    """JPEG quality of the photographs, 1 to 100 (a camera's usual: about 90)."""
    overwrite: bool = False
    """Replace an output folder that holds another photo capture (it stays until the new one is complete; a
    folder of other files is refused)."""
    quiet: bool = False
    """No progress bar."""

    def command(self) -> str:
        names = ("width", "height", "frames", "samples", "seed", "noise_floor_views", "jpeg_quality")
        return options_command("photo-capture", self, names)


@dataclass(frozen=True)
class CapturePlan:
    scene: SceneDescription
    settings: RenderSettings
    frames: list[FrameSpec]
    lens: Lens
    exposure: Exposure
    path: Handheld
    camera_angle_x: float

    def fingerprint(self, config: PhotoCaptureConfig) -> str:
        content = json.dumps(
            {
                "scene": self.scene.digest(),
                "settings": asdict(self.settings),
                "lens": asdict(self.lens),
                "exposure": asdict(self.exposure),
                "path": asdict(self.path),
                "jpeg_quality": config.jpeg_quality,
                "noise_floor_views": config.noise_floor_views,
            },
            sort_keys=True,
        )
        return hashlib.sha256(content.encode()).hexdigest()


def check_config(config: PhotoCaptureConfig) -> None:
    check_capture_options(config, FRAME_RANGE)
    if not 1 <= config.jpeg_quality <= 100:
        raise InputError(f"--jpeg-quality {config.jpeg_quality} is out of range: use 1 to 100")


def plan(config: PhotoCaptureConfig) -> CapturePlan:
    """Everything the capture needs, decided before anything is written."""
    check_config(config)
    scene = SCENES[SCENE_NAME](config.seed)
    check_description(scene)
    path = Handheld(num_frames=config.frames, target=tuple(float(v) for v in GARDEN_TARGET), seed=config.seed)
    lens = Lens()
    settings = RenderSettings.for_scene(
        scene,
        config.width,
        config.height,
        samples=config.samples,
        format="PNG",
        transparent=False,
        **RENDER_BOUNCES,
    )
    poses = handheld_poses(path)
    frames = [FrameSpec(f"frame_{i + 1:05d}", pose) for i, pose in enumerate(poses)]
    angle = lens.camera_angle_x(config.width, config.height)
    return CapturePlan(scene, settings, frames, lens, Exposure(seed=config.seed), path, angle)


def prepare_output(config: PhotoCaptureConfig, fingerprint: str) -> bool:
    """True when ``--output`` already holds this capture; an error when it holds something else."""
    return output_is_current(
        config.output,
        fingerprint,
        config.overwrite,
        FORMAT,
        lambda record: "a different photo capture" if record else "files that are not a photo capture",
    )


def reference_transforms(plan_: CapturePlan, width: int, height: int) -> dict[str, Any]:
    """Blender's poses and the true pinhole intrinsics, in nerfstudio-data's format (paths into images/)."""
    return {
        **pinhole_intrinsics(plan_.lens.focal_pixels(width, height), width, height),
        "frames": [
            {"file_path": f"../images/{f.file_path}.jpg", "transform_matrix": pose_to_json(f.camera_to_world)}
            for f in plan_.frames
        ],
    }


def evenly(count: int, total: int) -> list[int]:
    return sorted({int(i) for i in np.linspace(0, total - 1, count).round()}) if count else []


def generate_photo_capture(config: PhotoCaptureConfig) -> Path:
    """Render (or reuse) the capture ``config`` describes; returns the capture folder."""
    plan_ = plan(config)
    fingerprint = plan_.fingerprint(config)
    if prepare_output(config, fingerprint):
        if not config.quiet:
            print(f"{config.output}: up to date, nothing to render")
        return config.output
    program = find_blender()
    version = blender_version(program)
    staging, work = start_staging(config.output, fingerprint)
    write_assets(plan_.scene, work)
    start = time.time()
    renders = work / "renders"
    document = job(plan_.scene, plan_.settings, plan_.frames, plan_.camera_angle_x, renders, config.seed)
    timing = run_job(program, document, work / f"job-{config.seed}.json", "photo capture", config.quiet)
    measured: dict[str, Any] = {"render": asdict(timing)}
    if config.noise_floor_views:
        chosen = [plan_.frames[i] for i in evenly(config.noise_floor_views, len(plan_.frames))]
        noise = work / "noise"
        second = job(plan_.scene, plan_.settings, chosen, plan_.camera_angle_x, noise, config.seed + 1)
        run_job(program, second, work / f"job-{config.seed + 1}.json", "noise floor", config.quiet)
        measured["noise_floor"] = {
            "sampling_seeds": [config.seed, config.seed + 1],
            **compare_renders(renders, noise, [f.file_path for f in chosen], ".png"),
        }
    images = staging / "images"
    images.mkdir(exist_ok=True)
    exposures = frame_exposures(len(plan_.frames), plan_.exposure)
    for index, (frame, exposure) in enumerate(zip(plan_.frames, exposures)):
        rgb = iio.imread(renders / f"{frame.file_path}.png")[..., :3].astype(np.float64) / 255.0
        write_photograph(
            images / f"{frame.file_path}.jpg",
            rgb,
            plan_.lens,
            exposure,
            plan_.exposure,
            index,
            config.jpeg_quality,
        )
    (staging / "reference").mkdir(exist_ok=True)
    reference = reference_transforms(plan_, config.width, config.height)
    (staging / "reference" / "transforms.json").write_text(json.dumps(reference, indent=2) + "\n")
    measured["wall_seconds"] = round(time.time() - start, 1)
    write_record(staging, config, plan_, version, fingerprint, measured, exposures)
    publish_staging(staging, config.output)
    return config.output


def write_record(
    root: Path,
    config: PhotoCaptureConfig,
    plan_: CapturePlan,
    version: str,
    fingerprint: str,
    measured: dict[str, Any],
    exposures,
) -> None:
    record = {
        "format": FORMAT,
        "name": "garden_photos",
        "kind": "photo-capture",
        "summary": "the garden scene photographed by hand: JPEGs with EXIF focal length, no poses",
        "command": config.command(),
        "seed": config.seed,
        "width": config.width,
        "height": config.height,
        "frames": config.frames,
        "images": "images/",
        "reference_poses": "reference/transforms.json",
        "note": "give images/ to ns-process-data; reference/ holds Blender's poses, only for scoring",
        "blender": version,
        "render": {
            **CYCLES_RECORD,
            "pixel_filter": PIXEL_FILTER,
            "sampling_seed": config.seed,
            **asdict(plan_.settings),
        },
        "camera": {
            **asdict(plan_.lens),
            "focal_35mm": plan_.lens.focal_35mm,
            "focal_pixels": plan_.lens.focal_pixels(config.width, config.height),
            "camera_angle_x": plan_.camera_angle_x,
            "jpeg_quality": config.jpeg_quality,
        },
        "photographs": {
            **asdict(plan_.exposure),
            "ev_range": [min(e.ev for e in exposures), max(e.ev for e in exposures)],
        },
        "walk": asdict(plan_.path),
        "scene": SCENE_NAME,
        "assets": asset_records(plan_.scene),
        "fingerprint": fingerprint,
        "measured": measured,
    }
    write_scene_json(root, record)


def check_photo_capture(path: Path | str) -> str | None:
    """A one-line report on a photo capture folder (``None`` if ``path`` is not one); raises
    :class:`SceneError` naming the first photograph without EXIF focal length or of the wrong size, or a
    broken reference/transforms.json."""
    root = Path(path)
    record = read_scene_json(root, FORMAT) if root.is_dir() else None
    if record is None:
        return None
    photographs = list_photographs(root / "images")
    if len(photographs) != record["frames"]:
        raise SceneError(
            f"{root}: images/ holds {len(photographs)} photographs, scene.json says {record['frames']}"
        )
    for photo in photographs:
        with Image.open(photo) as image:
            if image.size != (record["width"], record["height"]):
                raise SceneError(
                    f"{photo}: {image.size[0]}x{image.size[1]}, scene.json says "
                    f"{record['width']}x{record['height']}"
                )
        try:
            exif = read_exif_focal(photo)
        except (KeyError, OSError) as error:
            raise SceneError(
                f"{photo}: no EXIF focal length ({error}); COLMAP would have to guess it"
            ) from error
    validate_scene(root / "reference")
    return (
        f"{root}: OK - photo capture, {len(photographs)} JPEGs {record['width']}x{record['height']} with EXIF "
        f"focal length ({exif['focal_mm']:g} mm, {exif['focal_35mm']:g} mm full-frame equivalent), no poses; "
        "true poses in reference/transforms.json"
    )


def render_photographs(config: PhotoCaptureConfig, indices: list[int], output: Path) -> list[Path]:
    """Render and photograph the frames ``indices`` of the capture ``config`` describes into ``output`` (for
    comparing a regenerated capture with a shipped one); returns the JPEGs' paths."""
    plan_ = plan(config)
    frames = [plan_.frames[i] for i in indices]
    output.mkdir(parents=True, exist_ok=True)
    write_assets(plan_.scene, output)
    document = job(plan_.scene, plan_.settings, frames, plan_.camera_angle_x, output / "renders", config.seed)
    run_job(find_blender(), document, output / "job.json", "photographs", quiet=True)
    exposures = frame_exposures(len(plan_.frames), plan_.exposure)
    paths = []
    for index, frame in zip(indices, frames):
        rgb = iio.imread(output / "renders" / f"{frame.file_path}.png")[..., :3].astype(np.float64) / 255.0
        path = output / f"{frame.file_path}.jpg"
        write_photograph(path, rgb, plan_.lens, exposures[index], plan_.exposure, index, config.jpeg_quality)
        paths.append(path)
    return paths
