"""The two dataset formats the Blender scenes are written in, exactly as their stock parsers read them.

* NeRF-Synthetic (nerfstudio's ``blender-data``): ``transforms_{train,val,test}.json``, each
  ``{"camera_angle_x": ..., "frames": [{"file_path": "./train/r_0", "transform_matrix": ...}]}`` with the
  ``.png`` left off the path, as in the original files.
* nerfstudio-data (``ns-process-data``'s output): one ``transforms.json`` with pinhole intrinsics at the
  top level, ``frames`` with ``file_path`` relative to the folder, and ``train/val/test_filenames``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eugen_nerf.scenes.blender.spec import FrameSpec
from eugen_nerf.scenes.validate import SPLITS
from eugen_nerf.scenes.writer import pose_to_json


def _write(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=4) + "\n")


def synthetic_transforms(camera_angle_x: float, frames: Sequence[FrameSpec]) -> dict[str, Any]:
    return {
        "camera_angle_x": camera_angle_x,
        "frames": [
            {"file_path": f"./{f.file_path}", "transform_matrix": pose_to_json(f.camera_to_world)}
            for f in frames
        ],
    }


def write_synthetic_transforms(
    root: Path, camera_angle_x: float, splits: Mapping[str, Sequence[FrameSpec]]
) -> None:
    for split in SPLITS:
        _write(root / f"transforms_{split}.json", synthetic_transforms(camera_angle_x, splits[split]))


def pinhole_intrinsics(focal: float, width: int, height: int) -> dict[str, Any]:
    """nerfstudio-data's top-level camera fields for a distortion-free pinhole with the centre mid-image."""
    return {
        "camera_model": "OPENCV",
        "fl_x": focal,
        "fl_y": focal,
        "cx": 0.5 * width,
        "cy": 0.5 * height,
        "w": width,
        "h": height,
        "k1": 0.0,
        "k2": 0.0,
        "p1": 0.0,
        "p2": 0.0,
    }


def nerfstudio_transforms(
    width: int, height: int, camera_angle_x: float, splits: Mapping[str, Sequence[FrameSpec]], suffix: str
) -> dict[str, Any]:
    focal = 0.5 * width / math.tan(0.5 * camera_angle_x)
    frames: dict[str, FrameSpec] = {}
    for split in SPLITS:
        for frame in splits[split]:
            frames.setdefault(frame.file_path, frame)
    ordered = sorted(frames.values(), key=lambda f: f.file_path)
    return {
        **pinhole_intrinsics(focal, width, height),
        "frames": [
            {"file_path": f.file_path + suffix, "transform_matrix": pose_to_json(f.camera_to_world)}
            for f in ordered
        ],
        **{f"{split}_filenames": [f.file_path + suffix for f in splits[split]] for split in SPLITS},
    }


def write_nerfstudio_transforms(
    root: Path,
    width: int,
    height: int,
    camera_angle_x: float,
    splits: Mapping[str, Sequence[FrameSpec]],
    suffix: str,
) -> None:
    _write(root / "transforms.json", nerfstudio_transforms(width, height, camera_angle_x, splits, suffix))
