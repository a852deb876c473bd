"""Scenes rendered by Blender's Cycles: NeRF-Synthetic-style objects and an unbounded 360 scene.

The Python side (descriptions, cameras, dataset files, checks) runs without Blender; ``bpy_render.py`` is
the script a headless ``blender`` runs to build and render a described scene.
"""

from eugen_nerf.scenes.blender.generate import BlenderSceneConfig, generate_blender_scene, rerender
from eugen_nerf.scenes.blender.library import SCENES
from eugen_nerf.scenes.blender.spec import FrameSpec, RenderSettings, SceneDescription, check_description, job

__all__ = [
    "SCENES",
    "BlenderSceneConfig",
    "FrameSpec",
    "RenderSettings",
    "SceneDescription",
    "check_description",
    "generate_blender_scene",
    "job",
    "rerender",
]
