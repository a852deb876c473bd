"""The default dataparser of our methods: nerfstudio-data, with the frame chosen from the data.

Scenes that ``eugen-scenes`` renders around an object declare their world frame in ``scene.json`` (object
in the unit sphere, cameras at radius 4, near/far/background): their poses are used exactly as written, no
re-orientation, re-centring or re-scaling. Any other dataset (a capture from ``ns-process-data`` or COLMAP,
our captured/unbounded/forward-facing scenes) gets nerfstudio's own defaults: orientation "up", centring on
the poses, auto-scaling into the unit cube. Each of the four settings can be forced on the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Optional

from nerfstudio.data.dataparsers.nerfstudio_dataparser import Nerfstudio, NerfstudioDataParserConfig
from nerfstudio.utils.rich_utils import CONSOLE

from eugen_nerf.scenes.framing import scene_json_hint
from eugen_nerf.scenes.validate import validate_scene

VERBATIM = {"orientation_method": "none", "center_method": "none", "auto_scale_poses": False}
"""Settings for a scene that declares its world frame (scene.json with near/far)."""
NERFSTUDIO_DEFAULTS = {"orientation_method": "up", "center_method": "poses", "auto_scale_poses": True}
"""nerfstudio-data's own defaults, for any other dataset."""


@dataclass
class SceneDataParserConfig(NerfstudioDataParserConfig):
    """nerfstudio-data; "auto" keeps the poses of eugen-scenes object scenes verbatim and normalises others."""

    _target: type = field(default_factory=lambda: SceneDataParser)
    orientation_method: Literal["auto", "pca", "up", "vertical", "none"] = "auto"
    """auto: none for a scene that declares its frame in scene.json, else nerfstudio's "up"."""
    center_method: Literal["auto", "poses", "focus", "none"] = "auto"
    """auto: none for a scene that declares its frame in scene.json, else nerfstudio's "poses"."""
    auto_scale_poses: Optional[bool] = None
    """None: False for a scene that declares its frame in scene.json, else nerfstudio's True."""
    scale_factor: float = 1.0

    def resolved(self) -> NerfstudioDataParserConfig:
        """This config with every "auto" setting decided from the data."""
        declared = scene_json_hint(self.data) is not None
        chosen = VERBATIM if declared else NERFSTUDIO_DEFAULTS
        current = {
            "orientation_method": self.orientation_method,
            "center_method": self.center_method,
            "auto_scale_poses": self.auto_scale_poses,
        }
        return replace(self, **{
            key: chosen[key] if value in ("auto", None) else value for key, value in current.items()
        })


@dataclass
class SceneDataParser(Nerfstudio):
    """nerfstudio's own parser, after :func:`validate_scene` (once per parser, not once per split)."""

    config: SceneDataParserConfig
    validated: bool = False

    def _generate_dataparser_outputs(self, split: str = "train"):
        if not self.validated:
            validate_scene(self.config.data)
            self.validated = True
            resolved = self.config.resolved()
            if resolved != self.config:
                CONSOLE.print(
                    f"Poses: orientation {resolved.orientation_method}, centring {resolved.center_method}, "
                    f"auto-scale {resolved.auto_scale_poses}"
                )
            self.config = resolved
        return super()._generate_dataparser_outputs(split)


def dataparser_config(data: Path | None = None) -> SceneDataParserConfig:
    """The dataparser config every method uses for these scenes (``data`` defaults to tyro's --data)."""
    return SceneDataParserConfig() if data is None else SceneDataParserConfig(data=Path(data))
