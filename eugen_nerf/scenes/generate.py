"""Render a complete scene folder from a mesh: the pipeline behind ``eugen-scenes render``."""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from rich.progress import track

from eugen_nerf.scenes.appearance import (
    ColorSource,
    PhotoName,
    load_photo,
    make_appearance,
    resolve_color_source,
    vertex_albedo,
)
from eugen_nerf.scenes.cameras import (
    DEFAULT_CAMERA_ANGLE_X,
    Intrinsics,
    fibonacci_directions,
    look_at,
    orbit_poses,
    random_directions,
    trajectory_poses,
)
from eugen_nerf.scenes.depth import DEPTH_UNIT_SCALE_FACTOR
from eugen_nerf.scenes.environment import PlaneBackdrop, SphereEnvironment
from eugen_nerf.scenes.meshes import Normalisation, UpAxis, load_mesh, normalise, resolve_mesh, sha256
from eugen_nerf.scenes.render import Renderer, Shading
from eugen_nerf.scenes.writer import (
    SPLITS,
    atomic_output,
    pose_to_json,
    refuse_output,
    write_capture_transforms,
    write_jpeg,
    write_json,
    write_ply,
    write_transforms,
    write_view,
)

FORMAT_VERSION = 1
NEAR_FAR_MARGIN = 1.0
"""near = radius - 1 - margin, far = radius + 1 + margin: 2 and 6 for the default radius of 4."""
SceneKind = Literal["object", "captured", "unbounded", "forward-facing"]
CAPTURE_OPTIONS = (
    "kind",
    "frame_rotation_seed",
    "frame_scale",
    "frame_offset",
    "distortion",
    "environment",
    "jpeg_quality",
)
"""SceneConfig fields that only the capture-style kinds use."""
UNBOUNDED_RADII = (2.5, 5.0)
"""unbounded: camera distances are drawn uniformly from this range (the object fills the unit sphere)."""
ENVIRONMENT_RADIUS = 12.0
"""unbounded: radius of the sphere carrying the environment photo."""
BACKDROP_X, BACKDROP_HALF_SIZE = -2.5, 4.0
"""forward-facing: the backdrop plane x = -2.5 (behind the object), 8 x 8 units."""


@dataclass
class SceneConfig:
    """Render a nerfstudio/Blender-format dataset (RGB on white, depth, masks, cameras, mesh) from a mesh."""

    output: Path
    """Scene folder to create (rendered into a temporary folder first, renamed at the end)."""
    mesh: str = "bunny"
    """Bundled pymeshlab mesh (see `eugen-scenes list-meshes`) or a path to an .obj/.ply file."""
    color: ColorSource = "auto"
    """Surface colour: the mesh's vertex colours, its texture, or a photograph wrapped around it.
    'auto' uses the texture, else vertex colours, else the photo."""
    photo: PhotoName = "coffee"
    """scikit-image photograph wrapped around the object for --color photo."""
    up_axis: UpAxis | None = None
    """Axis of the source mesh that points up (rotated to +z); defaults to the bundled mesh's, else y."""
    width: int = 64
    """Image width in pixels."""
    height: int = 64
    """Image height in pixels."""
    camera_angle_x: float = DEFAULT_CAMERA_ANGLE_X
    """Horizontal field of view in radians (the default frames the unit sphere)."""
    layout: Literal["sphere", "hemisphere", "trajectory"] = "sphere"
    """Cameras all around the object, on its upper half only, or an ordered smooth RGB-D path (for iSDF).
    object and captured kinds only."""
    kind: SceneKind = "object"
    """What to render. The capture-style kinds (the last three) write JPEG images and a transforms.json as
    ns-process-data does (no depth, masks or declared frame).

    - object: on white in the declared object frame (depth, masks, mesh);
    - captured: the object scene's cameras in another frame (--frame-*) with OPENCV --distortion;
    - unbounded: the object inside --environment on a far sphere, cameras at varied distances (upper half);
    - forward-facing: a handheld path in front of the object and a --environment backdrop behind it."""
    frame_rotation_seed: int = 7
    """captured: seed of the random rotation of the written frame."""
    frame_scale: float = 3.7
    """captured: scale of the written frame (as COLMAP's arbitrary unit)."""
    frame_offset: tuple[float, float, float] = (11.0, -6.0, 3.0)
    """captured: offset of the written frame's origin."""
    distortion: tuple[float, float, float, float] = (-0.05, 0.01, 0.001, -0.0005)
    """capture-style kinds: OpenCV k1 k2 p1 p2 applied to the images (and written to transforms.json)."""
    environment: PhotoName = "rocket"
    """unbounded / forward-facing: scikit-image photograph on the far sphere or the backdrop."""
    jpeg_quality: int = 95
    """capture-style kinds: JPEG quality of the images."""
    radius: float = 4.0
    """Distance of the cameras from the origin (the object lies inside the unit sphere)."""
    num_train: int = 50
    """Training views (sphere/hemisphere: a Fibonacci lattice for even coverage)."""
    num_val: int = 10
    """Validation views (sphere/hemisphere: uniformly random, off the training lattice)."""
    num_test: int = 10
    """Test views (sphere/hemisphere: uniformly random, off the training lattice)."""
    num_frames: int = 80
    """Trajectory only: frames in the ordered stream (all are training frames)."""
    eval_every: int = 10
    """Trajectory only: every n-th frame is also listed in the val and test splits."""
    supersample: int = 2
    """Anti-aliasing: colour is averaged over supersample^2 rays per pixel (depth uses the pixel centre)."""
    ambient: float = Shading.ambient
    """Ambient share of the Lambert + ambient shading."""
    light_direction: tuple[float, float, float] = Shading.light_direction
    """Direction towards the (fixed, world-space) light."""
    seed: int = 0
    """Random seed for the camera placement; same arguments and seed give byte-identical files."""
    overwrite: bool = False
    """Replace OUTPUT if it already holds a scene (a folder of other files is refused)."""

    def command(self) -> str:
        """The ``eugen-scenes render`` call that reproduces this config (non-default options only)."""
        args = ["eugen-scenes", "render", "--output", str(self.output)]
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in ("output", "overwrite") or value == field.default:
                continue
            flag = "--" + field.name.replace("_", "-")
            args += [flag, *map(str, value)] if isinstance(value, tuple) else [flag, str(value)]
        return shlex.join(args)


def camera_rig(
    config: SceneConfig, rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, list[int]], list[str]]:
    """All poses in frame order, the frame indices of each split, and each frame's file stem."""
    if config.layout == "trajectory":
        poses = trajectory_poses(config.num_frames, config.radius, rng)
        eval_ids = list(range(0, config.num_frames, config.eval_every))
        splits = {"train": list(range(config.num_frames)), "val": eval_ids, "test": eval_ids}
        return poses, splits, [f"frame_{i:04d}" for i in range(config.num_frames)]
    hemisphere = config.layout == "hemisphere"
    counts = {"train": config.num_train, "val": config.num_val, "test": config.num_test}
    directions = [fibonacci_directions(config.num_train, rng, hemisphere)]
    directions += [random_directions(counts[split], rng, hemisphere) for split in ("val", "test")]
    starts = np.cumsum([0] + list(counts.values()))
    splits = {split: list(range(starts[k], starts[k + 1])) for k, split in enumerate(SPLITS)}
    stems = [f"{split}_{i:03d}" for split in SPLITS for i in range(counts[split])]
    return orbit_poses(np.concatenate(directions), config.radius), splits, stems


def random_rotation(seed: int) -> np.ndarray:
    """A uniformly random proper rotation (3, 3)."""
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def captured_frame(config: SceneConfig) -> np.ndarray:
    """The similarity (4, 4) from the object frame to the captured scene's written frame."""
    similarity = np.eye(4)
    similarity[:3, :3] = config.frame_scale * random_rotation(config.frame_rotation_seed)
    similarity[:3, 3] = config.frame_offset
    return similarity


def capture_rig(
    config: SceneConfig, rng: np.random.Generator
) -> tuple[np.ndarray, dict[str, list[int]], list[str]]:
    """Poses of the unbounded and forward-facing kinds (object frame), split indices and file stems."""
    counts = {"train": config.num_train, "val": config.num_val, "test": config.num_test}
    total = sum(counts.values())
    if config.kind == "unbounded":
        directions = np.concatenate(
            [
                fibonacci_directions(config.num_train, rng, hemisphere=True),
                random_directions(config.num_val + config.num_test, rng, hemisphere=True),
            ]
        )
        elevation = np.arcsin(np.clip(directions[:, 2], 0.0, 1.0))  # 0..90 deg -> 5..40 deg: around, not over
        elevation = np.radians(5.0) + elevation * (np.radians(35.0) / (0.5 * math.pi))
        norms = np.maximum(np.linalg.norm(directions[:, :2], axis=1, keepdims=True), 1e-9)
        horizontal = directions[:, :2] / norms
        directions = np.concatenate([np.cos(elevation)[:, None] * horizontal, np.sin(elevation)[:, None]], 1)
        radii = rng.uniform(*UNBOUNDED_RADII, size=total)
        targets = rng.normal(scale=0.15, size=(total, 3))
        poses = np.stack([look_at(r * d - t) for r, d, t in zip(radii, directions, targets)])
        poses[:, :3, 3] += targets
    else:  # forward-facing: a handheld sweep across the front of the object, gently shaking
        held_out = rng.uniform(0.05, 0.95, total - config.num_train)
        t = np.concatenate([np.linspace(0.0, 1.0, config.num_train), held_out])
        sway = np.stack(
            [0.15 * np.sin(3.0 * math.pi * t), 1.2 * (t - 0.5), 0.3 * np.sin(2.0 * math.pi * t) + 0.2], axis=1
        )
        positions = np.array([4.0, 0.0, 0.0]) + sway + rng.normal(scale=0.03, size=(total, 3))
        targets = rng.normal(scale=0.1, size=(total, 3))
        poses = np.stack([look_at(p - q) for p, q in zip(positions, targets)])
        poses[:, :3, 3] += targets
    starts = np.cumsum([0] + list(counts.values()))
    splits = {split: list(range(starts[k], starts[k + 1])) for k, split in enumerate(SPLITS)}
    return poses, splits, [f"frame_{i + 1:05d}" for i in range(total)]


def generate_capture(
    config: SceneConfig, renderer: Renderer, intrinsics: Intrinsics, rng: np.random.Generator
) -> None:
    """Write a capture-style scene: JPEG images and a transforms.json as ns-process-data writes it."""
    if config.kind == "captured":
        poses, splits, _ = camera_rig(config, rng)  # the object scene's own cameras
        stems = [f"frame_{i + 1:05d}" for i in range(len(poses))]
        written = captured_frame(config) @ poses
        written[:, :3, :3] /= config.frame_scale  # rotations stay rotations
    else:
        poses, splits, stems = capture_rig(config, rng)
        written = poses
    with atomic_output(config.output, config.overwrite) as root:
        frames = []
        views = list(zip(poses, written, stems))
        for pose, pose_out, stem in track(views, description=f"Rendering {config.output.name}"):
            view = renderer.render(pose, intrinsics, config.supersample)
            entry = write_jpeg(root, stem, view.rgb, config.jpeg_quality)
            frames.append({**entry, "transform_matrix": pose_to_json(pose_out)})
        write_capture_transforms(root, intrinsics, frames, splits)
        write_json(root / "scene.json", capture_provenance(config))


def capture_provenance(config: SceneConfig) -> dict[str, Any]:
    """scene.json of a capture-style scene: provenance only, deliberately no near/far/background."""
    options = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("output", "overwrite")}
    meta: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "generator": "eugen-scenes",
        "command": config.command(),
        "seed": config.seed,
        "kind": config.kind,
        "note": "capture-style: no declared frame, near/far or background; methods choose them from the data",
        "options": {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()},
    }
    if config.kind == "captured":
        similarity = captured_frame(config)
        meta["object_to_written"] = {
            "matrix": similarity.tolist(),
            "note": "written pose = matrix @ object-frame pose, rotation part re-normalised by frame_scale",
        }
    else:
        meta["environment"] = f"skimage.data.{config.environment}"
    return meta


def generate_scene(config: SceneConfig) -> Path:
    """Render the scene described by ``config`` into ``config.output`` and return that path."""
    for name in ("width", "height", "supersample", "num_frames", "eval_every"):
        if getattr(config, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    if config.layout != "trajectory" and min(config.num_train, config.num_val, config.num_test) < 1:
        raise ValueError("every split needs at least one view")
    if not config.radius > 1.0 + NEAR_FAR_MARGIN:  # scene.json's near plane, radius - 1 - margin, stays > 0
        raise ValueError(
            f"--radius must exceed {1.0 + NEAR_FAR_MARGIN:g} (the object fills the unit sphere, and the near plane "
            f"lies {NEAR_FAR_MARGIN:g} before it)"
        )
    if not 0.0 < config.camera_angle_x < math.pi:
        raise ValueError(f"--camera-angle-x must be in (0, pi) radians, got {config.camera_angle_x}")
    if not 0.0 <= config.ambient <= 1.0:
        raise ValueError(f"--ambient must be in [0, 1], got {config.ambient}")
    if not all(math.isfinite(v) for v in config.light_direction) or not any(config.light_direction):
        raise ValueError(f"--light-direction must be a non-zero direction, got {config.light_direction}")
    if config.kind != "object" and config.layout == "trajectory":
        raise ValueError("--layout trajectory is for --kind object (an RGB-D stream)")
    if not 1 <= config.jpeg_quality <= 100:
        raise ValueError("--jpeg-quality must be between 1 and 100")
    if config.frame_scale <= 0:
        raise ValueError("--frame-scale must be positive")
    refuse_output(config.output, config.overwrite)  # before the (slow) mesh load and render

    mesh_path, bundled = resolve_mesh(config.mesh)
    up_axis = config.up_axis or (bundled.up_axis if bundled else "y")
    mesh, normalisation = normalise(load_mesh(mesh_path), up_axis)
    color = resolve_color_source(mesh, config.color)
    appearance = make_appearance(mesh, color, config.photo)
    environment = None
    if config.kind == "unbounded":
        environment = SphereEnvironment(load_photo(config.environment), ENVIRONMENT_RADIUS)
    elif config.kind == "forward-facing":
        environment = PlaneBackdrop(load_photo(config.environment), BACKDROP_X, BACKDROP_HALF_SIZE)
    renderer = Renderer(mesh, appearance, Shading(config.ambient, config.light_direction), environment)
    if config.kind != "object":
        intrinsics = Intrinsics(config.width, config.height, config.camera_angle_x, config.distortion)
        generate_capture(config, renderer, intrinsics, np.random.default_rng(config.seed))
        return config.output
    intrinsics = Intrinsics(config.width, config.height, config.camera_angle_x)
    poses, splits, stems = camera_rig(config, np.random.default_rng(config.seed))

    with atomic_output(config.output, config.overwrite) as root:
        frames = []
        for pose, stem in track(list(zip(poses, stems)), description=f"Rendering {config.output.name}"):
            view = renderer.render(pose, intrinsics, config.supersample)
            frames.append({**write_view(root, stem, view), "transform_matrix": pose_to_json(pose)})
        write_transforms(root, intrinsics, frames, splits)
        write_ply(root / "mesh.ply", mesh.vertices, mesh.faces, vertex_albedo(mesh, appearance))
        write_json(
            root / "scene.json", provenance(config, mesh_path, bundled is not None, color, normalisation)
        )
    return config.output


def provenance(
    config: SceneConfig, mesh_path: Path, bundled: bool, color: str, normalisation: Normalisation
) -> dict[str, Any]:
    """scene.json: where the scene came from and the conventions it follows (no timestamps: deterministic).

    The capture-style options do not apply to object scenes and are left out (so scene.json is unchanged)."""
    skip = ("output", "overwrite", *CAPTURE_OPTIONS)
    options = {k: v for k, v in dataclasses.asdict(config).items() if k not in skip}
    return {
        "format_version": FORMAT_VERSION,
        "generator": "eugen-scenes",
        "command": config.command(),
        "seed": config.seed,
        "mesh": {
            "name": config.mesh if bundled else mesh_path.name,
            "source": f"pymeshlab/tests/sample_meshes/{mesh_path.name}" if bundled else str(mesh_path),
            "sha256": sha256(mesh_path),
            "normalisation": {
                "center": normalisation.center.tolist(),
                "scale": normalisation.scale,
                "rotation": normalisation.rotation.tolist(),
                "note": "world = scale * rotation @ (source - center)",
            },
        },
        "color": color,
        "photo": f"skimage.data.{config.photo}" if color == "photo" else None,
        "trajectory": config.layout == "trajectory",
        "ground_truth_mesh": "mesh.ply",
        "near": config.radius - 1.0 - NEAR_FAR_MARGIN,
        "far": config.radius + 1.0 + NEAR_FAR_MARGIN,
        "background": "white",
        "depth": {"type": "z", "format": "png16", "unit_scale_factor": DEPTH_UNIT_SCALE_FACTOR, "no_hit": 0},
        "options": {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()},
    }
