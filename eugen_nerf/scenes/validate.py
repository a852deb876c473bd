"""Scene validation: every loader calls this, so a broken scene fails early with a message naming the file.

Checks the things that otherwise surface as cryptic errors (or silently wrong training) deep inside a
dataparser: unreadable JSON, missing or mis-sized images, non-rigid poses, bad depth, empty splits.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import imageio.v3 as iio
import numpy as np

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes.depth import read_depth

SPLITS = ("train", "val", "test")
RIGID_TOLERANCE = 1e-4


class SceneError(InputError):
    """A scene folder that loaders must not use; the message names the offending file or frame."""


@dataclass(frozen=True)
class SceneSummary:
    """What ``eugen-scenes check`` reports about a valid scene."""

    path: Path
    width: int
    height: int
    num_frames: int
    split_sizes: dict[str, int]
    has_depth: bool

    def __str__(self) -> str:
        splits = (
            ", ".join(f"{name} {size}" for name, size in self.split_sizes.items()) or "no explicit splits"
        )
        depth = "with depth" if self.has_depth else "no depth"
        return f"{self.path}: OK - {self.num_frames} frames {self.width}x{self.height} ({splits}), {depth}"


def transforms_path(path: Path) -> Path:
    """A scene is given as its folder or as its transforms.json (as nerfstudio's ``--data`` allows)."""
    return path if path.suffix == ".json" else path / "transforms.json"


def is_synthetic_folder(path: Path | str) -> bool:
    """A NeRF-Synthetic folder: ``transforms_train.json`` and no ``transforms.json``."""
    path = Path(path)
    return (
        path.is_dir()
        and not (path / "transforms.json").exists()
        and (path / "transforms_train.json").exists()
    )


def load_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        if path.name == "transforms.json" and is_synthetic_folder(path.parent):
            raise SceneError(
                f"{path.parent}: a NeRF-Synthetic folder (transforms_train.json, no transforms.json): "
                "read it with the blender-data dataparser (or our methods' default one)"
            )
        raise SceneError(f"{path}: missing (a scene needs a transforms.json)")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SceneError(f"{path}: unreadable JSON ({error})") from error
    if not isinstance(data, dict):
        raise SceneError(f"{path}: expected a JSON object at the top level")
    return data


def clean(file_path: str) -> str:
    """Normalise a relative path the way the dataparsers resolve it (``./a/b.png`` == ``a/b.png``)."""
    return Path(file_path).as_posix().removeprefix("./")


def check_rigid(matrix: Any, where: str) -> None:
    """A camera-to-world matrix must be a finite rotation + translation (4x4 or 3x4)."""
    try:
        pose = np.asarray(matrix, dtype=np.float64)
    except (TypeError, ValueError) as error:
        raise SceneError(f"{where}: transform_matrix is not numeric ({error})") from error
    if pose.shape not in ((4, 4), (3, 4)):
        raise SceneError(f"{where}: transform_matrix has shape {pose.shape}, expected 4x4")
    if not np.all(np.isfinite(pose)):
        raise SceneError(f"{where}: transform_matrix contains non-finite values")
    if pose.shape == (4, 4) and not np.allclose(pose[3], [0, 0, 0, 1], atol=RIGID_TOLERANCE):
        raise SceneError(f"{where}: transform_matrix bottom row is {pose[3].tolist()}, expected [0, 0, 0, 1]")
    rotation = pose[:3, :3]
    error = np.abs(rotation.T @ rotation - np.eye(3)).max()
    if error > RIGID_TOLERANCE or np.linalg.det(rotation) < 0:
        raise SceneError(
            f"{where}: transform_matrix is not rigid (rotation part is not orthonormal with det +1; "
            f"max |R^T R - I| = {error:.2g}, det = {np.linalg.det(rotation):.3g})"
        )


def read_image_shape(path: Path, where: str, what: str) -> tuple[int, int]:
    if not path.is_file():
        raise SceneError(f"{where}: {what} file {path} is missing")
    try:
        image = iio.imread(path)
    except Exception as error:  # imageio raises many types for corrupt files
        raise SceneError(f"{where}: {what} file {path} is unreadable ({error})") from error
    return image.shape[0], image.shape[1]


def check_depth(path: Path, where: str) -> tuple[int, int]:
    if not path.is_file():
        raise SceneError(f"{where}: depth file {path} is missing")
    if path.suffix not in (".png", ".npy"):
        raise SceneError(
            f"{where}: depth file {path} must be a 16-bit .png or a .npy in thousandths of a scene unit (nerfstudio's depth_unit_scale_factor 1e-3)"
        )
    try:
        depth = read_depth(path)
    except Exception as error:
        raise SceneError(f"{where}: depth file {path} is unreadable ({error})") from error
    if depth.ndim != 2:
        raise SceneError(f"{where}: depth file {path} has shape {depth.shape}, expected a single channel")
    if not np.all(np.isfinite(depth)):
        raise SceneError(f"{where}: depth file {path} contains NaN or infinite values")
    if depth.min() < 0:
        raise SceneError(f"{where}: depth file {path} contains negative depths (min {depth.min():.3g})")
    return depth.shape


def intrinsic(meta: dict[str, Any], frame: dict[str, Any], key: str, where: str) -> float:
    """Per-frame value if present, else the top-level one (the nerfstudio-data convention)."""
    value = frame.get(key, meta.get(key))
    if value is None:
        raise SceneError(f"{where}: camera intrinsic '{key}' is missing")
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SceneError(f"{where}: camera intrinsic '{key}' = {value!r} is not a finite number")
    if key in ("fl_x", "fl_y", "w", "h") and value <= 0:
        raise SceneError(f"{where}: camera intrinsic '{key}' = {value!r} must be positive")
    return float(value)


def check_frames(
    root: Path, meta: dict[str, Any], source: Path, image_suffix: str = ""
) -> tuple[list[str], tuple[int, int] | None, bool]:
    """Validate every frame of one transforms file; returns the file paths, image size and depth presence."""
    frames = meta.get("frames")
    if not isinstance(frames, list):
        raise SceneError(f"{source}: no 'frames' list")
    if not frames:
        raise SceneError(f"{source}: 'frames' is empty")
    file_paths: list[str] = []
    size: tuple[int, int] | None = None
    depth_count = 0
    positions = []
    for index, frame in enumerate(frames):
        where = f"{source}: frame {index}"
        if not isinstance(frame, dict) or not isinstance(frame.get("file_path"), str):
            raise SceneError(f"{where}: has no 'file_path'")
        where = f"{source}: frame {index} ({frame['file_path']})"
        file_paths.append(clean(frame["file_path"]))
        check_rigid(frame.get("transform_matrix"), where)
        positions.append(np.asarray(frame["transform_matrix"], dtype=np.float64)[:3, 3])
        shape = read_image_shape(root / (file_paths[-1] + image_suffix), where, "image")
        if "w" in meta or "w" in frame:
            expected = (int(intrinsic(meta, frame, "h", where)), int(intrinsic(meta, frame, "w", where)))
            for key in ("fl_x", "fl_y", "cx", "cy"):
                intrinsic(meta, frame, key, where)
        else:  # Blender-style files: one size for all frames, taken from the first image
            expected = size or shape
        if shape != expected:
            raise SceneError(
                f"{where}: image is {shape[1]}x{shape[0]} but {expected[1]}x{expected[0]} was expected"
            )
        size = size or shape
        if "depth_file_path" in frame:
            depth_count += 1
            depth_shape = check_depth(root / clean(frame["depth_file_path"]), where)
            if depth_shape != shape:
                raise SceneError(
                    f"{where}: depth map is {depth_shape[1]}x{depth_shape[0]}, image is {shape[1]}x{shape[0]}"
                )
        if "alpha_file_path" in frame:
            alpha_shape = read_image_shape(root / clean(frame["alpha_file_path"]), where, "alpha mask")
            if alpha_shape != shape:
                raise SceneError(
                    f"{where}: alpha mask is {alpha_shape[1]}x{alpha_shape[0]}, image is {shape[1]}x{shape[0]}"
                )
    check_baseline(np.array(positions), source)
    if 0 < depth_count < len(frames):
        raise SceneError(
            f"{source}: only {depth_count} of {len(frames)} frames have a depth_file_path (all or none)"
        )
    return file_paths, size, depth_count > 0


def check_baseline(positions: np.ndarray, source: Path) -> None:
    """Cameras that all sit at one point see no parallax: no radiance field can be fitted from them."""
    if len(positions) < 2:
        return
    spread = np.linalg.norm(positions - positions.mean(axis=0), axis=1).max()
    if spread <= 1e-6 * (1.0 + np.abs(positions).max()):
        where = ", ".join(f"{value:.3g}" for value in positions[0])
        raise SceneError(
            f"{source}: all {len(positions)} cameras are at one point ({where}): the poses are degenerate"
        )


def validate_blender(path: Path | str) -> SceneSummary:
    """Raise :class:`SceneError` unless ``path`` is a Blender-synthetic dataset (transforms_<split>.json)."""
    root = Path(path)
    if not root.is_dir():
        raise SceneError(f"{root}: dataset folder does not exist")
    sizes: dict[str, int] = {}
    size: tuple[int, int] | None = None
    for split in SPLITS:
        source = root / f"transforms_{split}.json"
        meta = load_json(source)
        angle = meta.get("camera_angle_x")
        if not isinstance(angle, (int, float)) or not 0.0 < angle < math.pi:
            raise SceneError(
                f"{source}: camera_angle_x = {angle!r}; blender-data needs the horizontal field of view in radians"
            )
        file_paths, split_size, _ = check_frames(root, meta, source, image_suffix=".png")
        if size is not None and split_size != size:
            raise SceneError(f"{source}: images are {split_size}, transforms_train.json's are {size}")
        size, sizes[split] = split_size, len(file_paths)
    assert size is not None
    return SceneSummary(root, size[1], size[0], sum(sizes.values()), sizes, False)


def validate_data(path: Path | str, dataparser: Any) -> None:
    """Validate ``path`` the way ``dataparser`` (a nerfstudio dataparser config) will read it.

    nerfstudio-data: :func:`validate_scene`; ours: the same, or :func:`validate_blender` for a NeRF-Synthetic
    folder; blender-data: :func:`validate_blender`; any other stock dataparser reads formats we do not check
    beyond the path existing.
    """
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from eugen_nerf.scenes.dataparser import SceneDataParserConfig

    if isinstance(dataparser, SceneDataParserConfig):
        validate_any(path)
    elif isinstance(dataparser, NerfstudioDataParserConfig):
        validate_scene(path)
    elif isinstance(dataparser, BlenderDataParserConfig):
        validate_blender(path)
    elif not Path(path).exists():
        raise SceneError(f"{path}: dataset does not exist")


def validate_scene(path: Path | str) -> SceneSummary:
    """Raise :class:`SceneError` unless ``path`` (a scene folder or its transforms.json) is usable.

    Also checks the Blender-style ``transforms_<split>.json`` files when present, since the blender-data
    parser reads those instead.
    """
    path = Path(path)
    if not path.exists():
        raise SceneError(f"{path}: scene does not exist")
    source = transforms_path(path)
    root = source.parent
    meta = load_json(source)
    file_paths, size, has_depth = check_frames(root, meta, source)
    assert size is not None
    split_sizes: dict[str, int] = {}
    known = set(file_paths)
    for split in SPLITS:
        key = f"{split}_filenames"
        if key not in meta:
            continue
        names = meta[key]
        if not isinstance(names, list) or not names:
            raise SceneError(f"{source}: split '{key}' is empty")
        missing = [name for name in names if clean(str(name)) not in known]
        if missing:
            raise SceneError(f"{source}: split '{key}' lists files that are not frames: {missing[:3]}")
        split_sizes[split] = len(names)
    for split in SPLITS:
        blender = root / f"transforms_{split}.json"
        if blender.exists():
            _, blender_size, _ = check_frames(root, load_json(blender), blender, image_suffix=".png")
            if blender_size != size:
                raise SceneError(f"{blender}: images are {blender_size} but transforms.json's are {size}")
    return SceneSummary(path, size[1], size[0], len(file_paths), split_sizes, has_depth)


def validate_any(path: Path | str) -> SceneSummary:
    """:func:`validate_scene` for a nerfstudio-data folder (or transforms.json), :func:`validate_blender` for a
    folder that holds only NeRF-Synthetic's ``transforms_<split>.json``."""
    return validate_blender(path) if is_synthetic_folder(path) else validate_scene(path)
