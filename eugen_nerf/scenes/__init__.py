"""Scenes: generation (``eugen-scenes``), validation and loading.

Two renderers make them: our ray caster (small Lambertian scenes of real meshes, exact depth and masks) and
Blender's Cycles (:mod:`eugen_nerf.scenes.blender`: NeRF-Synthetic-format objects, an unbounded scene).

Heavy pieces (open3d rendering, the nerfstudio dataparser) are imported on first use, so that validating
or loading a scene stays cheap.
"""

from __future__ import annotations

from typing import Any

from eugen_nerf.scenes.dataset import SHIPPED_SCENES_DIR, Frame, Scene, load_scene, shipped_scene
from eugen_nerf.scenes.depth import read_depth
from eugen_nerf.scenes.validate import SceneError, SceneSummary, validate_scene

_LAZY = {
    "SceneConfig": "eugen_nerf.scenes.generate",
    "generate_scene": "eugen_nerf.scenes.generate",
    "SceneDataParserConfig": "eugen_nerf.scenes.dataparser",
    "dataparser_config": "eugen_nerf.scenes.dataparser",
}

__all__ = [
    "SHIPPED_SCENES_DIR",
    "Frame",
    "Scene",
    "SceneConfig",
    "SceneDataParserConfig",
    "SceneError",
    "SceneSummary",
    "dataparser_config",
    "generate_scene",
    "load_scene",
    "read_depth",
    "shipped_scene",
    "validate_scene",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
