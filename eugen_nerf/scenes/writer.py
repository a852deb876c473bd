"""Dataset files: images, depth, masks, transforms.json (+ Blender-style split files), mesh.ply, scene.json.

Output is written into a hidden temporary folder next to the target and renamed into place at the end,
so an interrupted render never leaves a folder that looks like a complete scene.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import imageio.v3 as iio
import numpy as np

from eugen_nerf.inputs.outputs import swap_into_place
from eugen_nerf.scenes.cameras import Intrinsics
from eugen_nerf.scenes.depth import write_depth
from eugen_nerf.scenes.render import View
from eugen_nerf.scenes.validate import SPLITS


def refuse_output(target: Path, overwrite: bool) -> None:
    """:class:`FileExistsError` when ``target`` exists and ``overwrite`` is not set, or holds files that are not
    a scene (no scene.json): ``--overwrite`` replaces an earlier scene, never a folder of something else."""
    if not target.exists():
        return
    if overwrite and target.is_dir() and any(target.iterdir()) and not (target / "scene.json").is_file():
        raise FileExistsError(
            f"--output {target} holds files that are not a scene (no scene.json); choose an empty or new folder"
        )
    if not overwrite:
        raise FileExistsError(f"--output {target} already exists; pass --overwrite to replace it")


@contextmanager
def atomic_output(target: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a temporary folder that replaces ``target`` only if the body finishes without error."""
    refuse_output(target, overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        yield staging
        swap_into_place(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def to_uint8(image: np.ndarray) -> np.ndarray:
    return np.round(np.clip(image, 0.0, 1.0) * 255.0).astype(np.uint8)


def write_view(root: Path, stem: str, view: View) -> dict[str, str]:
    """Write one view's RGB (on white), alpha mask and depth; returns the frame's file entries."""
    entry = {
        "file_path": f"images/{stem}.png",
        "depth_file_path": f"depth/{stem}.png",
        "alpha_file_path": f"masks/{stem}.png",
    }
    for path in entry.values():
        (root / path).parent.mkdir(exist_ok=True)
    iio.imwrite(root / entry["file_path"], to_uint8(view.rgb))
    iio.imwrite(root / entry["alpha_file_path"], to_uint8(view.alpha))
    write_depth(root / entry["depth_file_path"], view.depth)
    return entry


def write_jpeg(root: Path, stem: str, rgb: np.ndarray, quality: int) -> dict[str, str]:
    """Write one capture-style view as ``images/<stem>.jpg`` (no depth, no mask); returns the frame entry."""
    entry = {"file_path": f"images/{stem}.jpg"}
    (root / "images").mkdir(exist_ok=True)
    iio.imwrite(root / entry["file_path"], to_uint8(rgb), quality=quality)
    return entry


def write_capture_transforms(
    root: Path, intrinsics: Intrinsics, frames: Sequence[dict[str, Any]], splits: dict[str, Sequence[int]]
) -> None:
    """transforms.json as ns-process-data writes it (OPENCV with distortion), plus explicit split lists."""
    k1, k2, p1, p2 = intrinsics.distortion
    transforms: dict[str, Any] = {
        "w": intrinsics.width,
        "h": intrinsics.height,
        "fl_x": intrinsics.focal,
        "fl_y": intrinsics.focal,
        "cx": 0.5 * intrinsics.width,
        "cy": 0.5 * intrinsics.height,
        "k1": k1,
        "k2": k2,
        "p1": p1,
        "p2": p2,
        "camera_model": "OPENCV",
        "frames": list(frames),
    }
    for split in SPLITS:
        transforms[f"{split}_filenames"] = [frames[i]["file_path"] for i in splits[split]]
    write_json(root / "transforms.json", transforms)


def pose_to_json(pose: np.ndarray) -> list[list[float]]:
    """Rounded so the JSON is short and stable; 1e-9 keeps the rotation orthonormal far below tolerance."""
    return (np.round(pose, 9) + 0.0).tolist()  # + 0.0 turns -0.0 into 0.0


def write_transforms(
    root: Path,
    intrinsics: Intrinsics,
    frames: Sequence[dict[str, Any]],
    splits: dict[str, Sequence[int]],
) -> None:
    """transforms.json for the nerfstudio-data parser, plus transforms_<split>.json for blender-data."""
    header = {
        "camera_model": "OPENCV",
        "fl_x": intrinsics.focal,
        "fl_y": intrinsics.focal,
        "cx": 0.5 * intrinsics.width,
        "cy": 0.5 * intrinsics.height,
        "w": intrinsics.width,
        "h": intrinsics.height,
        "k1": 0.0,
        "k2": 0.0,
        "p1": 0.0,
        "p2": 0.0,
    }
    transforms: dict[str, Any] = {
        **header,
        "camera_angle_x": intrinsics.camera_angle_x,
        "frames": list(frames),
    }
    for split in SPLITS:
        transforms[f"{split}_filenames"] = [frames[i]["file_path"] for i in splits[split]]
    write_json(root / "transforms.json", transforms)
    for split in SPLITS:
        # The blender-data parser appends ".png" to file_path itself.
        blender_frames = [
            {**frames[i], "file_path": "./" + frames[i]["file_path"].removesuffix(".png")}
            for i in splits[split]
        ]
        write_json(
            root / f"transforms_{split}.json",
            {"camera_angle_x": intrinsics.camera_angle_x, "frames": blender_frames},
        )


def write_ply(path: Path, vertices: np.ndarray, faces: np.ndarray, colors: np.ndarray | None) -> None:
    """Binary little-endian PLY (float32 positions, uchar colours), byte-for-byte deterministic."""
    path.write_bytes(ply_bytes(vertices, faces, colors))


def ply_bytes(vertices: np.ndarray, faces: np.ndarray, colors: np.ndarray | None = None) -> bytes:
    """The contents of :func:`write_ply`'s file."""
    vertex_fields = [("x", "<f4"), ("y", "<f4"), ("z", "<f4")]
    if colors is not None:
        vertex_fields += [("red", "u1"), ("green", "u1"), ("blue", "u1")]
    vertex_data = np.empty(len(vertices), dtype=vertex_fields)
    for axis, name in enumerate("xyz"):
        vertex_data[name] = vertices[:, axis]
    if colors is not None:
        for channel, name in enumerate(("red", "green", "blue")):
            vertex_data[name] = to_uint8(colors[:, channel])
    face_data = np.empty(len(faces), dtype=[("n", "u1"), ("indices", "<i4", (3,))])
    face_data["n"] = 3
    face_data["indices"] = faces
    header = ["ply", "format binary_little_endian 1.0", f"element vertex {len(vertices)}"]
    header += [f"property {'float' if kind == '<f4' else 'uchar'} {name}" for name, kind in vertex_fields]
    header += [f"element face {len(faces)}", "property list uchar int vertex_indices", "end_header"]
    return ("\n".join(header) + "\n").encode("ascii") + vertex_data.tobytes() + face_data.tobytes()
