"""The nerfstudio dataparser settings for eugen-scenes output, with validation in front of loading.

Generated scenes are already in their final world frame (object in the unit sphere, cameras at radius 4),
so nerfstudio must use the poses exactly as written: no re-orientation, re-centring or re-scaling.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from nerfstudio.data.dataparsers.nerfstudio_dataparser import Nerfstudio, NerfstudioDataParserConfig

from eugen_nerf.scenes.validate import validate_scene


@dataclass
class SceneDataParserConfig(NerfstudioDataParserConfig):
    """nerfstudio-data with poses taken verbatim; the scene is validated before it is parsed."""

    _target: type = field(default_factory=lambda: SceneDataParser)
    orientation_method: Literal["pca", "up", "vertical", "none"] = "none"
    center_method: Literal["poses", "focus", "none"] = "none"
    auto_scale_poses: bool = False
    scale_factor: float = 1.0


@dataclass
class SceneDataParser(Nerfstudio):
    """nerfstudio's own parser, after :func:`validate_scene` (once per parser, not once per split)."""

    config: SceneDataParserConfig
    validated: bool = False

    def _generate_dataparser_outputs(self, split: str = "train"):
        if not self.validated:
            validate_scene(self.config.data)
            self.validated = True
        return super()._generate_dataparser_outputs(split)


def dataparser_config(data: Path | None = None) -> SceneDataParserConfig:
    """The dataparser config every method uses for these scenes (``data`` defaults to tyro's --data)."""
    return SceneDataParserConfig() if data is None else SceneDataParserConfig(data=Path(data))
