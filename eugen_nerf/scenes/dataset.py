"""Plain numpy access to a generated scene, for code that does not go through a nerfstudio dataparser
(iSDF's ordered RGB-D stream, evaluation against the ground-truth mesh)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import imageio.v3 as iio
import numpy as np

from eugen_nerf.scenes.depth import read_depth
from eugen_nerf.scenes.validate import SPLITS, SceneError, clean, transforms_path, validate_scene

SHIPPED_SCENES_DIR = Path(__file__).resolve().parents[2] / "scenes"
"""The repository's ``scenes/`` folder (present in a source checkout, not in a wheel)."""


def shipped_scene(name: str) -> Path:
    """Path of a scene shipped in ``scenes/`` (e.g. ``bunny64``), with a clear error if it is absent."""
    path = SHIPPED_SCENES_DIR / name
    if not (path / "transforms.json").is_file():
        raise FileNotFoundError(f"No shipped scene {name!r} in {SHIPPED_SCENES_DIR} (see scenes/README.md)")
    return path


@dataclass(frozen=True)
class Frame:
    image_path: Path
    depth_path: Path | None
    camera_to_world: np.ndarray
    """(4, 4), OpenGL convention (camera looks down -z), in the scene's units."""

    def rgb(self) -> np.ndarray:
        """(H, W, 3) float32 in [0, 1], background already white."""
        return iio.imread(self.image_path)[..., :3].astype(np.float32) / 255.0

    def depth(self) -> np.ndarray:
        """(H, W) z-depth in the scene's units, 0 where the ray missed."""
        if self.depth_path is None:
            raise ValueError(f"{self.image_path} has no depth map")
        return read_depth(self.depth_path)


@dataclass(frozen=True)
class Scene:
    root: Path
    width: int
    height: int
    intrinsics: np.ndarray
    """(3, 3) pinhole matrix K for pixel centres at integer + 0.5 (nerfstudio's convention)."""
    frames: list[Frame]
    """In file order: for a trajectory scene this is the temporal order of the stream."""
    splits: dict[str, list[int]]
    """Frame indices of each split (all frames for splits the scene does not list)."""
    metadata: dict[str, Any]
    """scene.json (provenance and conventions), or {} for scenes made elsewhere."""
    distortion: tuple[float, ...] = (0.0,) * 6
    """The lens's OpenCV distortion ``k1, k2, k3, k4, p1, p2`` (all zero: a pinhole)."""

    @property
    def mesh_path(self) -> Path | None:
        name = self.metadata.get("ground_truth_mesh")
        return self.root / name if name else None

    def split(self, name: str) -> list[Frame]:
        return [self.frames[i] for i in self.splits[name]]


INTRINSICS = ("fl_x", "fl_y", "cx", "cy", "w", "h")
DISTORTION = ("k1", "k2", "k3", "k4", "p1", "p2")


def camera_values(meta: dict[str, Any], frame: dict[str, Any], root: Path) -> dict[str, float]:
    """One frame's intrinsics and lens distortion (its own values, else the top-level ones; no distortion
    given: none); a Blender-style file's
    ``camera_angle_x`` (no focal lengths, no size) gives the focal length at the first image's size."""
    values = {key: frame.get(key, meta.get(key)) for key in (*INTRINSICS, *DISTORTION)}
    values.update({key: values[key] or 0.0 for key in DISTORTION})
    if values["w"] is None or values["h"] is None:
        image = root / clean(meta["frames"][0]["file_path"])
        height, width = iio.improps(image if image.suffix else image.with_suffix(".png")).shape[:2]
        values["w"] = values["w"] if values["w"] is not None else width
        values["h"] = values["h"] if values["h"] is not None else height
    if values["fl_x"] is None:
        angle = frame.get("camera_angle_x", meta.get("camera_angle_x"))
        values["fl_x"] = 0.5 * float(values["w"]) / math.tan(0.5 * float(angle))
    values["fl_y"] = values["fl_y"] if values["fl_y"] is not None else values["fl_x"]
    values["cx"] = values["cx"] if values["cx"] is not None else float(values["w"]) / 2
    values["cy"] = values["cy"] if values["cy"] is not None else float(values["h"]) / 2
    return {key: float(value) for key, value in values.items()}


def load_scene(path: Path | str) -> Scene:
    """Validate and load a scene folder (or transforms.json); raises SceneError if it is broken."""
    validate_scene(path)
    source = transforms_path(Path(path))
    root = source.parent
    meta = json.loads(source.read_text())
    frames = [
        Frame(
            image_path=root / clean(frame["file_path"]),
            depth_path=root / clean(frame["depth_file_path"]) if "depth_file_path" in frame else None,
            camera_to_world=np.vstack(
                [np.asarray(frame["transform_matrix"], dtype=np.float64)[:3], [0, 0, 0, 1]]
            ),
        )
        for frame in meta["frames"]
    ]
    index = {clean(frame["file_path"]): i for i, frame in enumerate(meta["frames"])}
    splits = {
        split: [index[clean(name)] for name in meta[f"{split}_filenames"]]
        if f"{split}_filenames" in meta
        else list(range(len(frames)))
        for split in SPLITS
    }
    # a Scene has one camera: frames with other intrinsics would get another camera's rays
    cameras = [camera_values(meta, frame, root) for frame in meta["frames"]]
    for index, camera in enumerate(cameras):
        if camera != cameras[0]:
            changed = next(key for key in camera if camera[key] != cameras[0][key])
            raise SceneError(
                f"{source}: frame {index} has {changed} {camera[changed]:g} where frame 0 has "
                f"{cameras[0][changed]:g}; this reader takes one camera for every frame"
            )
    fx, fy, cx, cy, w, h = (cameras[0][key] for key in INTRINSICS)
    intrinsics = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
    scene_json = root / "scene.json"
    metadata = json.loads(scene_json.read_text()) if scene_json.is_file() else {}
    distortion = tuple(cameras[0][key] for key in DISTORTION)
    return Scene(root, int(w), int(h), intrinsics, frames, splits, metadata, distortion)
