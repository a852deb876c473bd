"""The default dataparser of our methods (also what ``nerfstudio-data`` gives them): the frame from the data.

- Scenes that ``eugen-scenes`` renders around an object declare their world frame in ``scene.json`` (object
  in the unit sphere, cameras at radius 4, near/far/background): poses are used exactly as written.
- A bounded object on a known background in any other frame (e.g. cameras as COLMAP writes them: rotated,
  offset, scaled; detected from the image borders, :mod:`eugen_nerf.scenes.framing`) is brought into that
  same object frame with nerfstudio's own tools: orientation "up", centring on the cameras' focus point, and
  a scale that puts the cameras at median distance 4 from it (times ``--scale-factor``), so the frame the
  capture happened to be written in does not matter.
- Anything else (an unbounded capture from ``ns-process-data``, a 360 or forward-facing scene) gets
  nerfstudio-data's defaults: orientation "up", centring on the poses, auto-scaling into the unit cube.
- A NeRF-Synthetic folder (``transforms_{train,val,test}.json``, e.g. ``eugen-scenes blender``'s objects) is
  read exactly as nerfstudio's ``blender-data`` reads it: RGBA composited on white, poses as written.

Each setting can be forced on the command line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import imageio.v3 as iio
import numpy as np
from nerfstudio.data.dataparsers.nerfstudio_dataparser import Nerfstudio, NerfstudioDataParserConfig
from nerfstudio.utils.rich_utils import CONSOLE

from eugen_nerf.scenes.framing import (
    border_background,
    declared_frame_mismatch,
    evenly_spread,
    focus_point,
    scene_json_hint,
)
from eugen_nerf.scenes.validate import (
    clean,
    is_synthetic_folder,
    transforms_path,
    validate_blender,
    validate_scene,
)

VERBATIM = {"orientation_method": "none", "center_method": "none", "auto_scale_poses": False}
"""Settings for a scene that declares its world frame (scene.json with near/far)."""
OBJECT_FRAME = {"orientation_method": "up", "center_method": "focus", "auto_scale_poses": False}
"""Settings for an object on a known background written in some other frame (plus the scale below)."""
OBJECT_CAMERA_DISTANCE = 4.0
"""Median camera distance to the focus point in the object frame (eugen-scenes' and Blender's radius)."""
NERFSTUDIO_DEFAULTS = {"orientation_method": "up", "center_method": "poses", "auto_scale_poses": True}
"""nerfstudio-data's own defaults, for any other dataset."""


def declares_its_frame(data: Path) -> bool:
    """scene.json declares the object frame, and the cameras are where that frame puts them."""
    hint = scene_json_hint(data)
    if hint is None:
        return False
    try:
        frames = json.loads(transforms_path(Path(data)).read_text())["frames"]
        poses = np.array([np.asarray(frame["transform_matrix"], dtype=np.float64)[:3] for frame in frames])
    except (OSError, KeyError, TypeError, ValueError):
        return False
    mismatch = declared_frame_mismatch(hint, poses, at_origin=True)
    if mismatch is not None:
        CONSOLE.print(
            f"[yellow]Warning: {data}: scene.json declares the object frame, but {mismatch}; "
            "choosing the frame from the data"
        )
    return mismatch is None


def object_frame_scale(data: Path) -> float | None:
    """For an object on a known background: the scale that puts its cameras at :data:`OBJECT_CAMERA_DISTANCE`
    from their focus point; ``None`` for any other dataset (or one that cannot be read)."""
    try:
        source = transforms_path(Path(data))
        frames = json.loads(source.read_text())["frames"]
        paths = [source.parent / clean(frames[i]["file_path"]) for i in evenly_spread(len(frames))]
        images = [iio.imread(path) for path in paths]
        poses = np.array([np.asarray(frame["transform_matrix"], dtype=np.float64)[:3] for frame in frames])
    except (OSError, KeyError, TypeError, ValueError):
        return None
    images = [image[..., :3].astype(np.float64) / np.iinfo(image.dtype).max for image in images]
    focus = focus_point(poses) if border_background(images) else None
    if focus is None:
        return None
    return OBJECT_CAMERA_DISTANCE / float(np.median(np.linalg.norm(poses[:, :3, 3] - focus, axis=1)))


@dataclass
class SceneDataParserConfig(NerfstudioDataParserConfig):
    """nerfstudio-data whose "auto" settings choose the frame from the data (see the module docstring)."""

    _target: type = field(default_factory=lambda: SceneDataParser)
    orientation_method: Literal["auto", "pca", "up", "vertical", "none"] = "auto"
    """auto: none for a scene that declares its frame in scene.json, else nerfstudio's "up"."""
    center_method: Literal["auto", "poses", "focus", "none"] = "auto"
    """auto: none for a declared frame, focus for an object on a known background, else "poses"."""
    auto_scale_poses: bool | None = None
    """None: True (nerfstudio's unit cube) for unbounded data; objects keep or get the radius-4 frame."""
    scale_factor: float = 1.0

    def resolved(self) -> SceneDataParserConfig:
        """This config with every "auto" setting decided from the data."""
        current = {
            "orientation_method": self.orientation_method,
            "center_method": self.center_method,
            "auto_scale_poses": self.auto_scale_poses,
        }
        if all(value not in ("auto", None) for value in current.values()):
            return self
        chosen: dict = NERFSTUDIO_DEFAULTS
        if declares_its_frame(self.data):
            chosen = VERBATIM
        elif (scale := object_frame_scale(self.data)) is not None:
            chosen = {**OBJECT_FRAME, "scale_factor": self.scale_factor * scale}
        resolved = {key: chosen[key] if value in ("auto", None) else value for key, value in current.items()}
        if "scale_factor" in chosen and resolved["auto_scale_poses"] is False:
            resolved["scale_factor"] = chosen["scale_factor"]
        return replace(self, **resolved)


@dataclass
class SceneDataParser(Nerfstudio):
    """nerfstudio's own parser, after :func:`validate_scene` (once per parser, not once per split)."""

    config: SceneDataParserConfig
    validated: bool = False

    def _generate_dataparser_outputs(self, split: str = "train"):
        if is_synthetic_folder(self.config.data):
            from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

            if not self.validated:
                validate_blender(self.config.data)
                self.validated = True
                CONSOLE.print(
                    "NeRF-Synthetic folder: read as blender-data reads it (RGBA on white, poses as written)"
                )
            blender = BlenderDataParserConfig(data=self.config.data, scale_factor=self.config.scale_factor)
            return blender.setup().get_dataparser_outputs(split)
        if not self.validated:
            validate_scene(self.config.data)
            self.validated = True
            resolved = self.config.resolved()
            if resolved != self.config:
                CONSOLE.print(
                    f"Poses: orientation {resolved.orientation_method}, centring {resolved.center_method}, "
                    f"auto-scale {resolved.auto_scale_poses}, scale factor {resolved.scale_factor:.4g}"
                )
            self.config = resolved
        return super()._generate_dataparser_outputs(split)


def dataparser_config(data: Path | None = None) -> SceneDataParserConfig:
    """The dataparser config every method uses for these scenes (``data`` defaults to tyro's --data)."""
    return SceneDataParserConfig() if data is None else SceneDataParserConfig(data=Path(data))
