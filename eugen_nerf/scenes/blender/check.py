"""``eugen-scenes check`` for Blender scenes: the dataset format, then what scene.json promises.

Object scenes must be NeRF-Synthetic exactly (RGBA PNGs with a transparent background, training cameras
on the upper hemisphere at the rig's distance, the recorded split sizes and resolution); the unbounded
scene must be an opaque nerfstudio-data dataset with the recorded frame count.
"""

from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np

from eugen_nerf.scenes.blender.generate import read_scene_json
from eugen_nerf.scenes.blender.rigs import SYNTHETIC_RADIUS
from eugen_nerf.scenes.validate import (
    SPLITS,
    SceneError,
    SceneSummary,
    clean,
    validate_blender,
    validate_scene,
)


def _poses(meta: dict) -> np.ndarray:
    return np.array([frame["transform_matrix"] for frame in meta["frames"]], dtype=np.float64)


def check_blender_scene(path: Path | str) -> SceneSummary | None:
    """Validate a folder made by ``eugen-scenes blender``; None if ``path`` is not one (no such scene.json)."""
    root = Path(path)
    record = read_scene_json(root) if root.is_dir() else None
    if record is None:
        return None
    if record["kind"] == "object":
        summary = validate_blender(root)
        expected = {split: record["views"][split] for split in SPLITS}
        if summary.split_sizes != expected:
            raise SceneError(f"{root}: splits hold {summary.split_sizes}, scene.json promises {expected}")
        for split in SPLITS:
            meta = json.loads((root / f"transforms_{split}.json").read_text())
            poses = _poses(meta)
            distance = np.linalg.norm(poses[:, :3, 3], axis=1)
            if np.abs(distance - SYNTHETIC_RADIUS).max() > 1e-3:
                raise SceneError(
                    f"{root}: {split} cameras are not all {SYNTHETIC_RADIUS:.3f} from the origin"
                )
            if split == "train" and poses[:, 2, 3].min() < 0:
                raise SceneError(
                    f"{root}: a training camera is below the horizon (NeRF-Synthetic's are above)"
                )
            for frame in meta["frames"]:
                image_path = root / (clean(frame["file_path"]) + ".png")
                image = iio.imread(image_path)
                if image.ndim != 3 or image.shape[2] != 4:
                    raise SceneError(f"{image_path}: expected an RGBA PNG, got shape {image.shape}")
                if image[..., 3].min() != 0:
                    raise SceneError(
                        f"{image_path}: no transparent pixel: the background must be transparent"
                    )
    else:
        summary = validate_scene(root)
        if summary.num_frames != record["views"]["frames"]:
            raise SceneError(
                f"{root}: {summary.num_frames} frames, scene.json promises {record['views']['frames']}"
            )
        meta = json.loads((root / "transforms.json").read_text())
        first = iio.imread(root / clean(meta["frames"][0]["file_path"]))
        if first.ndim != 3 or first.shape[2] != 3:
            raise SceneError(
                f"{root}: the unbounded scene's images must be opaque RGB, got shape {first.shape}"
            )
    if (summary.width, summary.height) != (record["resolution"], record["resolution"]):
        raise SceneError(
            f"{root}: images are {summary.width}x{summary.height}, scene.json says {record['resolution']}"
        )
    return summary
