"""Scene descriptions and render jobs for the Blender renderer, written and checked without Blender.

A :class:`SceneDescription` is plain data (JSON-ready dicts): the world shader, Principled materials,
objects (Blender primitives or PLY meshes written from numpy) and lights. A render *job* adds the render
settings, the cameras and the output folder; ``bpy_render.py`` builds and renders it inside Blender.

Objects: ``{"shape": "uv_sphere" | "ico_sphere" | "cube" | "cylinder" | "cone" | "torus" | "plane" | "ply",
"location": [x, y, z], "rotation": [degrees about x, y, z], "scale": [sx, sy, sz], "material": NAME,
"modifiers": [{"kind": "wireframe" | "subsurf" | "bevel" | "solidify", ...}], "smooth": bool}``; a PLY
names its asset (``"path"``) and its box about its own origin (``"bounds": [low, high]``, for the
bounds check).

Materials: ``{"color": C, "metallic": S, "roughness": S, "specular": S, "clearcoat": S,
"clearcoat_roughness": S, "bump": {"texture": T, "strength": s, "distance": d}}`` where a colour C or scalar
S is a constant or a texture T: ``{"kind": "checker" | "brick" | "noise" | "voronoi" | "wave" | "magic" |
"gradient" | "image", "scale": s, "color1": C, "color2": C, "coordinates": "object" | "generated" | "uv"}``.

World: ``{"kind": "color", "color": C}``, ``{"kind": "sky", "sun_elevation": deg, "sun_rotation": deg}``
(Nishita daylight) or ``{"kind": "studio", "sky": T, "walls": T, "floor": T}`` (a procedural panorama that
gives reflections detail in every direction); all take ``"strength"``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes.writer import pose_to_json

SHAPES = ("uv_sphere", "ico_sphere", "cube", "cylinder", "cone", "torus", "plane", "ply")
TEXTURES = ("checker", "brick", "noise", "voronoi", "wave", "magic", "gradient", "image")
WORLDS = ("color", "sky", "studio")
MODIFIERS = ("wireframe", "subsurf", "bevel", "solidify")
LIGHTS = ("SUN", "AREA", "POINT", "SPOT")
SCENE_BOX = 1.5
"""Object scenes fit inside nerfstudio's blender-data scene box, [-1.5, 1.5]^3."""
SceneKind = Literal["object", "unbounded"]


@dataclass(frozen=True)
class Asset:
    """A file the job needs beside it (a PLY mesh, a texture image), with where it came from."""

    path: str
    data: bytes
    source: str
    licence: str


@dataclass(frozen=True)
class SceneDescription:
    """What to build in Blender, plus the rig and sampling the scene needs (see the module docstring)."""

    name: str
    kind: SceneKind
    summary: str
    world: dict[str, Any]
    materials: dict[str, dict[str, Any]]
    objects: tuple[dict[str, Any], ...]
    lights: tuple[dict[str, Any], ...] = ()
    assets: tuple[Asset, ...] = ()
    samples: int = 256
    """Cycles samples per pixel (before adaptive stopping) that put the noise floor above 35 dB."""
    adaptive_threshold: float = 0.01
    diffuse_bounces: int = 3
    glossy_bounces: int = 4

    def as_json(self) -> dict[str, Any]:
        """The part Blender reads (world, materials, objects, lights)."""
        return {
            "world": self.world,
            "materials": self.materials,
            "objects": list(self.objects),
            "lights": list(self.lights),
        }

    def digest(self) -> str:
        """Content hash of the description and its assets: a cached render is reused only if it matches."""
        h = hashlib.sha256(json.dumps(self.as_json(), sort_keys=True).encode())
        for asset in sorted(self.assets, key=lambda a: a.path):
            h.update(asset.path.encode() + hashlib.sha256(asset.data).digest())
        return h.hexdigest()


@dataclass(frozen=True)
class RenderSettings:
    """Cycles settings of one render job (CPU, no denoiser, view transform Standard)."""

    width: int
    height: int
    samples: int
    adaptive_threshold: float
    transparent: bool
    format: Literal["PNG", "JPEG"] = "PNG"
    depth: bool = False
    """Also write Cycles' Z pass (metres along the viewing axis, 0 where nothing was hit) as ``.npy``."""
    jpeg_quality: int = 95
    diffuse_bounces: int = 3
    glossy_bounces: int = 4
    clamp_indirect: float = 2.0
    """Indirect light per sample is clamped here: fewer fireflies, the same (slight) bias in every render."""
    exposure: float = 0.0

    @classmethod
    def for_scene(cls, scene: SceneDescription, width: int, height: int, **overrides: Any) -> RenderSettings:
        settings = cls(
            width=width,
            height=height,
            samples=scene.samples,
            adaptive_threshold=scene.adaptive_threshold,
            transparent=scene.kind == "object",
            format="PNG" if scene.kind == "object" else "JPEG",
            diffuse_bounces=scene.diffuse_bounces,
            glossy_bounces=scene.glossy_bounces,
        )
        return settings if not overrides else cls(**{**asdict(settings), **overrides})


@dataclass(frozen=True)
class FrameSpec:
    """One camera to render: ``file_path`` is relative to the output folder, without extension."""

    file_path: str
    camera_to_world: np.ndarray = field(repr=False)
    depth_path: str | None = None


def job(
    scene: SceneDescription,
    render: RenderSettings,
    frames: Sequence[FrameSpec],
    camera_angle_x: float,
    output: Path,
    sampling_seed: int,
) -> dict[str, Any]:
    """The JSON document ``bpy_render.py`` reads."""
    return {
        "output": str(Path(output).resolve()),
        "sampling_seed": int(sampling_seed),
        "camera_angle_x": float(camera_angle_x),
        "render": asdict(render),
        "scene": scene.as_json(),
        "frames": [
            {
                "file_path": frame.file_path,
                "depth_path": frame.depth_path or f"depth/{frame.file_path}",
                "transform_matrix": pose_to_json(frame.camera_to_world),
            }
            for frame in frames
        ],
    }


# ------------------------------------------------------------------------------------------------ checks


def _check_texture(value: Any, where: str, assets: set[str]) -> None:
    if isinstance(value, (int, float)):
        return
    if isinstance(value, (list, tuple)):
        if len(value) != 3 or not all(isinstance(v, (int, float)) and 0.0 <= v <= 1.0 for v in value):
            raise InputError(f"{where}: a colour is three numbers in [0, 1], got {value!r}")
        return
    if not isinstance(value, dict) or value.get("kind") not in TEXTURES:
        raise InputError(f"{where}: a texture needs a 'kind' among {', '.join(TEXTURES)}, got {value!r}")
    if value["kind"] == "image" and value.get("path") not in assets:
        raise InputError(f"{where}: image texture {value.get('path')!r} is not among the scene's assets")
    for key in ("color1", "color2"):
        if key in value:
            _check_texture(value[key], f"{where}.{key}", assets)


def _local_box(obj: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The shape's box about its origin before scaling (Blender's primitives span ±1)."""
    shape = obj["shape"]
    if shape == "ply":
        low, high = obj["bounds"]
        return np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    half = np.ones(3)
    if shape == "torus":
        outer = float(obj.get("major_radius", 1.0) + obj.get("minor_radius", 0.25))
        half = np.array([outer, outer, float(obj.get("minor_radius", 0.25))])
    elif shape == "cone":
        wide = max(1.0, float(obj.get("radius_top", 0.0)))
        half = np.array([wide, wide, 1.0])
    return -half, half


def euler_xyz(degrees: Any) -> np.ndarray:
    """Blender's XYZ Euler rotation (applied x first): Rz @ Ry @ Rx."""
    x, y, z = np.radians(np.asarray(degrees, dtype=np.float64))
    rx = np.array([[1, 0, 0], [0, math.cos(x), -math.sin(x)], [0, math.sin(x), math.cos(x)]])
    ry = np.array([[math.cos(y), 0, math.sin(y)], [0, 1, 0], [-math.sin(y), 0, math.cos(y)]])
    rz = np.array([[math.cos(z), -math.sin(z), 0], [math.sin(z), math.cos(z), 0], [0, 0, 1]])
    return rz @ ry @ rx


def object_bounds(obj: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """A conservative axis-aligned box around one object: the corners of its scaled, rotated shape box."""
    low, high = _local_box(obj)
    corners = np.array([[(high if (k >> axis) & 1 else low)[axis] for axis in range(3)] for k in range(8)])
    corners = corners * np.asarray(obj.get("scale", (1.0, 1.0, 1.0)), dtype=np.float64)
    corners = corners @ euler_xyz(obj.get("rotation", (0.0, 0.0, 0.0))).T
    corners += np.asarray(obj.get("location", (0.0, 0.0, 0.0)), dtype=np.float64)
    return corners.min(axis=0), corners.max(axis=0)


def check_description(scene: SceneDescription) -> None:
    """:class:`InputError` naming the first thing Blender could not build, or an object outside the box."""
    assets = {asset.path for asset in scene.assets}
    world = scene.world
    if world.get("kind") not in WORLDS:
        raise InputError(f"{scene.name}: world kind {world.get('kind')!r} is not one of {', '.join(WORLDS)}")
    for key in ("sky", "walls", "floor", "color"):
        if key in world:
            _check_texture(world[key], f"{scene.name}: world.{key}", assets)
    for name, material in scene.materials.items():
        for key, value in material.items():
            if key == "bump":
                _check_texture(value.get("texture"), f"{scene.name}: material {name}.bump", assets)
            elif key != "emission_strength":
                _check_texture(value, f"{scene.name}: material {name}.{key}", assets)
    if not scene.objects:
        raise InputError(f"{scene.name}: the scene has no objects")
    for index, obj in enumerate(scene.objects):
        where = f"{scene.name}: object {index} ({obj.get('name', obj.get('shape'))})"
        if obj.get("shape") not in SHAPES:
            raise InputError(f"{where}: shape {obj.get('shape')!r} is not one of {', '.join(SHAPES)}")
        if obj["shape"] == "ply" and obj.get("path") not in assets:
            raise InputError(f"{where}: mesh {obj.get('path')!r} is not among the scene's assets")
        if "material" in obj and obj["material"] not in scene.materials:
            raise InputError(f"{where}: material {obj['material']!r} is not defined")
        for modifier in obj.get("modifiers", ()):
            if modifier.get("kind") not in MODIFIERS:
                raise InputError(
                    f"{where}: modifier {modifier.get('kind')!r} is not one of {', '.join(MODIFIERS)}"
                )
        if scene.kind == "object":
            low, high = object_bounds(obj)
            if low.min() < -SCENE_BOX or high.max() > SCENE_BOX:
                raise InputError(
                    f"{where}: reaches {low.min():.2f}..{high.max():.2f}, outside the ±{SCENE_BOX} scene box "
                    "of NeRF-Synthetic's format"
                )
    for index, light in enumerate(scene.lights):
        if light.get("kind") not in LIGHTS:
            raise InputError(
                f"{scene.name}: light {index} kind {light.get('kind')!r} is not one of {', '.join(LIGHTS)}"
            )
