"""``eugen-scenes blender NAME``: render a named Blender scene into a dataset folder, cached and resumable.

Object scenes are written in NeRF-Synthetic's format (``train/ val/ test/`` RGBA PNGs,
``transforms_{train,val,test}.json`` with ``camera_angle_x``), the unbounded scene in nerfstudio-data's
format (``images/`` JPEGs, ``transforms.json`` with intrinsics and split lists). Frames are rendered into
a staging folder beside the output (``.NAME.partial``); a rerun continues there; the folder becomes the
output when every frame is on disk. ``scene.json`` records the command, the Blender version, the render
settings, every asset with its source and licence, and the measured time and noise floor.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shlex
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import imageio.v3 as iio
import numpy as np
import tyro

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.inputs.outputs import staging_path, swap_into_place
from eugen_nerf.scenes.blender.formats import write_nerfstudio_transforms, write_synthetic_transforms
from eugen_nerf.scenes.blender.library import GARDEN_TARGET, SCENES
from eugen_nerf.scenes.blender.rigs import SYNTHETIC_ANGLE_X, every_nth, inward_orbits, synthetic_splits
from eugen_nerf.scenes.blender.runner import JobTiming, blender_version, find_blender, run_job
from eugen_nerf.scenes.blender.spec import FrameSpec, RenderSettings, SceneDescription, check_description, job

SceneName = Literal["shiny", "branches", "patterns", "sculpture", "garden"]
FORMAT = "eugen-blender-scene/1"
RESOLUTION_RANGE = (16, 2048)
MAX_VIEWS = 1000
UNBOUNDED_ANGLE_X = 1.0
"""garden's horizontal field of view (57 degrees), wider than the objects' as in hand-held captures."""
DEFAULT_VIEWS = {"object": (100, 100, 200), "unbounded": (160,)}
CYCLES_RECORD = {"engine": "CYCLES", "device": "CPU", "denoising": False, "view_transform": "Standard"}
"""How ``bpy_render.py`` sets Cycles up, as scene.json's ``render`` records it."""
PIXEL_FILTER = "Blackman-Harris 1.5 px"


@dataclass
class BlenderSceneConfig:
    """Render a named Blender scene: an object in NeRF-Synthetic's format, or the unbounded garden in
    nerfstudio-data's format. Needs the `blender` program (Debian package `blender`)."""

    name: tyro.conf.Positional[SceneName]
    """The scene.

    - objects: shiny (gloss, reflection), branches (thin), patterns (texture), sculpture (smooth, shadowed);
    - unbounded: garden."""
    output: Path
    """Dataset folder to create. A folder rendered with the same settings is reused as it is.
    An interrupted render resumes from its staging folder beside it."""
    resolution: int = 800
    """Image width and height in pixels (16 to 2048)."""
    views: tuple[int, ...] = ()
    """How many views.

    - objects: train, val and test counts (default 100 100 200, NeRF-Synthetic's);
    - garden: the number of frames (default 160; every eighth is a test view)."""
    seed: int = 0
    """Seeds the procedural geometry, the cameras and Cycles' sampling."""
    samples: Annotated[int | None, tyro.conf.arg(help_behavior_hint="")] = None
    """Cycles samples per pixel (default: the scene's own, chosen for a noise floor above 35 dB)."""
    noise_floor_views: int = 0
    """Render this many test views again with another sampling seed.
    The PSNR between the two renders (the Monte-Carlo noise floor) goes into scene.json."""
    overwrite: bool = False
    """Replace an output folder that holds a different scene (it stays until the new one is complete; a folder
    of other files is refused)."""
    quiet: bool = False
    """No progress bar."""

    def command(self) -> str:
        args = [
            "eugen-scenes",
            "blender",
            self.name,
            "--output",
            str(self.output),
            "--resolution",
            str(self.resolution),
        ]
        if self.views:
            args += ["--views", *map(str, self.views)]
        if self.seed:
            args += ["--seed", str(self.seed)]
        if self.samples is not None:
            args += ["--samples", str(self.samples)]
        if self.noise_floor_views:
            args += ["--noise-floor-views", str(self.noise_floor_views)]
        return shlex.join(args)


@dataclass(frozen=True)
class Plan:
    """Everything a render needs, derived from the config before anything is written."""

    scene: SceneDescription
    settings: RenderSettings
    frames: dict[str, list[FrameSpec]]
    camera_angle_x: float
    views: tuple[int, ...]

    def all_frames(self) -> list[FrameSpec]:
        seen: dict[str, FrameSpec] = {}
        for frames in self.frames.values():
            for frame in frames:
                seen.setdefault(frame.file_path, frame)
        return list(seen.values())

    def fingerprint(self, seed: int) -> str:
        """Hash of what determines the pixels: a cached folder is reused only when this matches."""
        poses = np.stack([f.camera_to_world for f in self.all_frames()]).round(9)
        content = json.dumps(
            {
                "scene": self.scene.digest(),
                "settings": asdict(self.settings),
                "seed": seed,
                "angle": self.camera_angle_x,
                "frames": [f.file_path for f in self.all_frames()],
            },
            sort_keys=True,
        )
        return hashlib.sha256(content.encode() + poses.tobytes()).hexdigest()


def check_config(config: BlenderSceneConfig) -> tuple[int, ...]:
    """One-line :class:`InputError` for out-of-range options; returns the view counts to use."""
    low, high = RESOLUTION_RANGE
    if not low <= config.resolution <= high:
        raise InputError(f"--resolution {config.resolution} is out of range: use {low} to {high} pixels")
    kind = "unbounded" if config.name == "garden" else "object"
    views = tuple(config.views) or DEFAULT_VIEWS[kind]
    if len(views) != len(DEFAULT_VIEWS[kind]):
        wanted = "three counts (train val test)" if kind == "object" else "one count (the number of frames)"
        raise InputError(f"--views {' '.join(map(str, views))}: {config.name} takes {wanted}")
    floor = 8 if kind == "unbounded" else 1
    if any(not floor <= v <= MAX_VIEWS for v in views):
        raise InputError(
            f"--views {' '.join(map(str, views))} is out of range: each count from {floor} to {MAX_VIEWS}"
        )
    if config.samples is not None and not 1 <= config.samples <= 65536:
        raise InputError(f"--samples {config.samples} is out of range: use 1 to 65536")
    if not 0 <= config.noise_floor_views <= views[-1]:
        raise InputError(
            f"--noise-floor-views {config.noise_floor_views} must be between 0 and the {views[-1]} test views"
        )
    return views


def plan(config: BlenderSceneConfig) -> Plan:
    views = check_config(config)
    scene = SCENES[config.name](config.seed)
    check_description(scene)
    overrides = {} if config.samples is None else {"samples": config.samples}
    settings = RenderSettings.for_scene(scene, config.resolution, config.resolution, **overrides)
    if scene.kind == "object":
        poses = synthetic_splits(views, config.seed)  # type: ignore[arg-type]
        frames = {
            split: [FrameSpec(f"{split}/r_{i}", pose) for i, pose in enumerate(split_poses)]
            for split, split_poses in poses.items()
        }
        return Plan(scene, settings, frames, SYNTHETIC_ANGLE_X, views)
    poses = inward_orbits(views[0], GARDEN_TARGET, np.random.default_rng(config.seed))
    all_frames = [FrameSpec(f"images/frame_{i + 1:05d}", pose) for i, pose in enumerate(poses)]
    frames = {split: [all_frames[i] for i in indices] for split, indices in every_nth(views[0]).items()}
    return Plan(scene, settings, frames, UNBOUNDED_ANGLE_X, views)


def read_scene_json(folder: Path, format_: str = FORMAT) -> dict[str, Any] | None:
    """``folder``'s scene.json if it is a record of ``format_`` (by default a Blender scene's), else None."""
    try:
        data = json.loads((folder / "scene.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == format_ else None


def output_is_current(
    output: Path,
    fingerprint: str,
    overwrite: bool,
    format_: str,
    describe: Callable[[dict[str, Any] | None], str],
) -> bool:
    """True when ``output`` already holds the render ``fingerprint`` names (its scene.json of ``format_``
    says so); False when it is absent, empty or holds another render of ``format_`` that ``overwrite`` lets
    go; otherwise one-line :class:`InputError` saying what it holds (``describe`` of its record, None when it
    has none: a folder that is no render of ``format_`` is refused even with ``overwrite``)."""
    if output.exists() and not output.is_dir():
        raise InputError(f"--output {output} exists and is not a folder")
    if not output.exists() or not any(output.iterdir()):
        return False
    record = read_scene_json(output, format_)
    if record is not None and record.get("fingerprint") == fingerprint:
        return True
    if record is None:  # --overwrite replaces an earlier render, never a folder of something else
        raise InputError(f"--output {output} holds {describe(record)}; choose an empty or new folder")
    if overwrite:
        return False
    raise InputError(f"--output {output} holds {describe(record)}; choose another folder or pass --overwrite")


def prepare_output(config: BlenderSceneConfig, fingerprint: str) -> bool:
    """True when ``--output`` already holds this very scene; an error when it holds something else."""
    return output_is_current(
        config.output,
        fingerprint,
        config.overwrite,
        FORMAT,
        lambda record: f"a different {record['name']} render" if record else "files that are not this scene",
    )


def start_staging(output: Path, fingerprint: str) -> tuple[Path, Path]:
    """The staging folder beside ``output`` and its ``.work`` folder, ready for the render ``fingerprint``
    names: a staging folder left by a render of other settings (or of unknown ones) is removed, one of the
    same is resumed."""
    staging = staging_path(output)
    work = staging / ".work"
    recorded = (work / "fingerprint").read_text() if (work / "fingerprint").is_file() else None
    if staging.exists() and recorded != fingerprint:
        # a stale render of other settings, or one stopped while it was published (no record left of what
        # it rendered): start again rather than mix its frames into this render
        shutil.rmtree(staging)
    work.mkdir(parents=True, exist_ok=True)
    (work / "fingerprint").write_text(fingerprint)
    return staging, work


def publish_staging(staging: Path, output: Path) -> None:
    """Drop the staging folder's ``.work`` and make the complete folder ``output`` (replacing any old one)."""
    shutil.rmtree(staging / ".work")
    output.parent.mkdir(parents=True, exist_ok=True)
    swap_into_place(staging, output)


def write_scene_json(root: Path, record: dict[str, Any]) -> None:
    (root / "scene.json").write_text(json.dumps(record, indent=2) + "\n")


def asset_records(scene: SceneDescription) -> list[dict[str, str]]:
    """scene.json's ``assets``: each asset file with its source, licence and SHA-256."""
    return [
        {
            "file": a.path,
            "source": a.source,
            "licence": a.licence,
            "sha256": hashlib.sha256(a.data).hexdigest(),
        }
        for a in scene.assets
    ]


def check_capture_options(config: Any, frame_range: tuple[int, int]) -> None:
    """One-line :class:`InputError` for a walk capture's ``--width``, ``--height``, ``--frames``,
    ``--samples`` or ``--noise-floor-views`` out of range."""
    low, high = RESOLUTION_RANGE
    for name in ("width", "height"):
        if not low <= getattr(config, name) <= high:
            raise InputError(f"--{name} {getattr(config, name)} is out of range: use {low} to {high} pixels")
    if not frame_range[0] <= config.frames <= frame_range[1]:
        raise InputError(
            f"--frames {config.frames} is out of range: use {frame_range[0]} to {frame_range[1]}"
        )
    if not 1 <= config.samples <= 65536:
        raise InputError(f"--samples {config.samples} is out of range: use 1 to 65536")
    if not 0 <= config.noise_floor_views <= config.frames:
        raise InputError(f"--noise-floor-views {config.noise_floor_views} must be between 0 and --frames")


def options_command(subcommand: str, config: Any, names: tuple[str, ...]) -> str:
    """``eugen-scenes SUBCOMMAND --output ...`` with the options ``names`` that differ from their defaults."""
    args = ["eugen-scenes", subcommand, "--output", str(config.output)]
    defaults = type(config)(config.output)
    for name in names:
        if getattr(config, name) != getattr(defaults, name):
            args += ["--" + name.replace("_", "-"), str(getattr(config, name))]
    return shlex.join(args)


def image_suffix(settings: RenderSettings) -> str:
    return ".jpg" if settings.format == "JPEG" else ".png"


def write_assets(scene: SceneDescription, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for asset in scene.assets:
        (folder / asset.path).write_bytes(asset.data)


def render_frames(
    program: str,
    plan_: Plan,
    frames: list[FrameSpec],
    output: Path,
    work: Path,
    sampling_seed: int,
    label: str,
    quiet: bool,
) -> JobTiming:
    """Render ``frames`` into ``output`` (skipping those on disk); returns what it cost."""
    write_assets(plan_.scene, work)
    document = job(plan_.scene, plan_.settings, frames, plan_.camera_angle_x, output, sampling_seed)
    return run_job(program, document, work / f"job-{sampling_seed}.json", label, quiet)


def load_rgb(path: Path) -> np.ndarray:
    """An image as float RGB in [0, 1]; RGBA is composited on white, as blender-data loads it."""
    image = iio.imread(path).astype(np.float64) / 255.0
    if image.shape[-1] == 4:
        image = image[..., :3] * image[..., 3:] + (1.0 - image[..., 3:])
    return image[..., :3]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a - b) ** 2))
    return math.inf if mse == 0 else -10.0 * math.log10(mse)


def compare_renders(first: Path, second: Path, names: list[str], suffix: str) -> dict[str, Any]:
    """PSNR between two renders of the same frames: per frame, and of the pooled squared error."""
    errors, per_frame = [], {}
    for name in names:
        a, b = load_rgb(first / (name + suffix)), load_rgb(second / (name + suffix))
        errors.append(np.mean((a - b) ** 2))
        per_frame[name] = round(psnr(a, b), 2)
    pooled = float(np.mean(errors))
    return {
        "psnr": round(-10.0 * math.log10(pooled), 2) if pooled else math.inf,
        "min_frame_psnr": min(per_frame.values()),
        "frames": per_frame,
    }


def generate_blender_scene(config: BlenderSceneConfig) -> Path:
    """Render (or reuse) the scene ``config`` names; returns the dataset folder."""
    plan_ = plan(config)
    fingerprint = plan_.fingerprint(config.seed)
    if prepare_output(config, fingerprint):
        if not config.quiet:
            print(f"{config.output}: up to date ({config.name}, {config.resolution} px), nothing to render")
            recorded = ((read_scene_json(config.output) or {}).get("measured") or {}).get("noise_floor") or {}
            if config.noise_floor_views and len(recorded.get("frames", {})) != config.noise_floor_views:
                # the noise floor is no part of the pixels' fingerprint: an up-to-date folder is not re-rendered
                print(
                    f"{config.output}: its scene.json records a noise floor of {len(recorded.get('frames', {}))} "
                    f"views, not {config.noise_floor_views}; render into an empty folder to measure one"
                )
        return config.output
    program = find_blender()
    version = blender_version(program)
    staging, work = start_staging(config.output, fingerprint)
    timing = render_frames(
        program,
        plan_,
        plan_.all_frames(),
        staging,
        work,
        config.seed,
        f"{config.name} {config.resolution}px",
        config.quiet,
    )
    measured: dict[str, Any] = {
        "frames_rendered": timing.frames,
        "wall_seconds": round(timing.wall_seconds, 1),
        "blender_cpu_seconds": round(timing.cpu_seconds, 1),
        "cpu_count": os.cpu_count(),
        "load_average_1min_at_end": round(os.getloadavg()[0], 2),
    }
    if config.noise_floor_views:
        names = [f.file_path for f in plan_.frames["test"][: config.noise_floor_views]]
        second = work / "noise"
        render_frames(
            program,
            plan_,
            [f for f in plan_.frames["test"] if f.file_path in names],
            second,
            work,
            config.seed + 1,
            "noise floor",
            config.quiet,
        )
        measured["noise_floor"] = {
            "sampling_seeds": [config.seed, config.seed + 1],
            **compare_renders(staging, second, names, image_suffix(plan_.settings)),
        }
    write_dataset(staging, config, plan_, version, fingerprint, measured)
    publish_staging(staging, config.output)
    return config.output


def write_dataset(
    root: Path,
    config: BlenderSceneConfig,
    plan_: Plan,
    version: str,
    fingerprint: str,
    measured: dict[str, Any],
) -> None:
    suffix = image_suffix(plan_.settings)
    if plan_.scene.kind == "object":
        write_synthetic_transforms(root, plan_.camera_angle_x, plan_.frames)
    else:
        write_nerfstudio_transforms(
            root, plan_.settings.width, plan_.settings.height, plan_.camera_angle_x, plan_.frames, suffix
        )
    record = {
        "format": FORMAT,
        "name": config.name,
        "kind": plan_.scene.kind,
        "summary": plan_.scene.summary,
        "command": config.command(),
        "seed": config.seed,
        "resolution": config.resolution,
        "views": dict(zip(("train", "val", "test"), plan_.views))
        if plan_.scene.kind == "object"
        else {
            "frames": plan_.views[0],
            "train": len(plan_.frames["train"]),
            "test": len(plan_.frames["test"]),
        },
        "blender": version,
        "render": {
            **CYCLES_RECORD,
            "film_transparent": plan_.settings.transparent,
            "pixel_filter": PIXEL_FILTER,
            "sampling_seed": config.seed,
            **asdict(plan_.settings),
        },
        "camera_angle_x": plan_.camera_angle_x,
        "assets": asset_records(plan_.scene),
        "fingerprint": fingerprint,
        "measured": measured,
    }
    write_scene_json(root, record)


def rerender(
    folder: Path,
    names: list[str],
    output: Path,
    sampling_seed: int | None = None,
    quiet: bool = True,
    **overrides: Any,
) -> Path:
    """Render frames ``names`` (file paths without extension) of a generated scene again into ``output``,
    from the settings its scene.json records (with another sampling seed, or other
    :class:`RenderSettings` fields such as ``depth=True, samples=1``, if given)."""
    record = read_scene_json(folder)
    if record is None:
        raise InputError(
            f"{folder}: not a scene made by `eugen-scenes blender` (no scene.json of that format)"
        )
    views = (
        tuple(record["views"].values())[:3] if record["kind"] == "object" else (record["views"]["frames"],)
    )
    config = BlenderSceneConfig(
        record["name"],
        folder,
        resolution=record["resolution"],
        views=views,
        seed=record["seed"],
        samples=record["render"]["samples"],
        quiet=quiet,
    )
    plan_ = plan(config)
    if overrides:
        plan_ = replace(plan_, settings=replace(plan_.settings, **overrides))
    frames = [f for f in plan_.all_frames() if f.file_path in set(names)]
    if len(frames) != len(set(names)):
        raise InputError(f"{folder}: some of {names} are not frames of the scene")
    work = output / ".work"
    render_frames(
        find_blender(),
        plan_,
        frames,
        output,
        work,
        record["seed"] if sampling_seed is None else sampling_seed,
        "re-render",
        quiet,
    )
    shutil.rmtree(work)
    return output
