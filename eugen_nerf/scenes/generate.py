"""Render a complete scene folder from a mesh: the pipeline behind ``eugen-scenes render``."""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from rich.progress import track

from eugen_nerf.scenes.appearance import (
    ColorSource,
    PhotoName,
    make_appearance,
    resolve_color_source,
    vertex_albedo,
)
from eugen_nerf.scenes.cameras import (
    DEFAULT_CAMERA_ANGLE_X,
    Intrinsics,
    fibonacci_directions,
    orbit_poses,
    random_directions,
    trajectory_poses,
)
from eugen_nerf.scenes.depth import DEPTH_UNIT_SCALE_FACTOR
from eugen_nerf.scenes.meshes import Normalisation, UpAxis, load_mesh, normalise, resolve_mesh, sha256
from eugen_nerf.scenes.render import Renderer, Shading
from eugen_nerf.scenes.writer import (
    SPLITS,
    atomic_output,
    pose_to_json,
    write_json,
    write_ply,
    write_transforms,
    write_view,
)

FORMAT_VERSION = 1
NEAR_FAR_MARGIN = 1.0
"""near = radius - 1 - margin, far = radius + 1 + margin: 2 and 6 for the default radius of 4."""


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
    """Cameras all around the object, on its upper half only, or an ordered smooth RGB-D path (for iSDF)."""
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
    """Replace OUTPUT if it already exists."""

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


def generate_scene(config: SceneConfig) -> Path:
    """Render the scene described by ``config`` into ``config.output`` and return that path."""
    for name in ("width", "height", "supersample", "num_frames", "eval_every"):
        if getattr(config, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")
    if config.layout != "trajectory" and min(config.num_train, config.num_val, config.num_test) < 1:
        raise ValueError("every split needs at least one view")
    if config.radius <= 1.0:
        raise ValueError("--radius must exceed 1 (the object fills the unit sphere)")
    if config.output.exists() and not config.overwrite:  # before the (slow) mesh load and render
        raise FileExistsError(f"--output {config.output} already exists; pass --overwrite to replace it")

    mesh_path, bundled = resolve_mesh(config.mesh)
    up_axis = config.up_axis or (bundled.up_axis if bundled else "y")
    mesh, normalisation = normalise(load_mesh(mesh_path), up_axis)
    color = resolve_color_source(mesh, config.color)
    appearance = make_appearance(mesh, color, config.photo)
    renderer = Renderer(mesh, appearance, Shading(config.ambient, config.light_direction))
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
    """scene.json: where the scene came from and the conventions it follows (no timestamps: deterministic)."""
    options = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("output", "overwrite")}
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
