"""An RGB-D room for iSDF: a furnished room built from Blender primitives and procedural materials, a
hand-held camera walking through it, colour from Cycles, depth from Cycles' Z pass as 16-bit PNGs
(thousandths of a scene unit, nerfstudio's depth scale: 2 mm, the room's unit being 2 m), and the room's own triangles as the ground-truth mesh.

The room is modelled in metres and scaled by :data:`UNITS_PER_METRE` so that it lies inside the box
``[-1.1, 1.1]^3`` in which iSDF extracts and evaluates surfaces; every length in the written scene (poses,
depth, mesh) is in these world units. The scene folder has ``bunny_rgbd``'s layout: ``images/``,
``depth/``, ``transforms.json`` in temporal order with every tenth frame also in val/test, the Blender
split files, ``mesh.ply`` and ``scene.json``.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eugen_nerf.scenes.blender.generate import (
    CYCLES_RECORD,
    PIXEL_FILTER,
    check_capture_options,
    compare_renders,
    options_command,
    output_is_current,
    publish_staging,
    start_staging,
    write_scene_json,
)
from eugen_nerf.scenes.blender.runner import blender_command, blender_version, find_blender, run_job
from eugen_nerf.scenes.blender.spec import FrameSpec, RenderSettings, SceneDescription, check_description, job
from eugen_nerf.scenes.cameras import Intrinsics, look_at
from eugen_nerf.scenes.depth import DEPTH_UNIT_SCALE_FACTOR, read_depth, write_depth
from eugen_nerf.scenes.photographs import smooth_noise
from eugen_nerf.scenes.writer import pose_to_json, write_transforms

UNITS_PER_METRE = 0.5
CAMERA_ANGLE_X = math.radians(70.0)
"""Horizontal field of view of the depth camera (4:3 images: 55 degrees vertically)."""
ROOM_SIZE_M = (4.0, 3.6, 2.4)
"""Inside width (x), depth (y) and height (z) of the room in metres; the floor is at z = -1.2 m."""


def scaled(values: tuple[float, ...]) -> list[float]:
    return [UNITS_PER_METRE * v for v in values]


def room_floor_z() -> float:
    return -0.5 * ROOM_SIZE_M[2]


def material_library() -> dict[str, dict[str, Any]]:
    """Procedural materials (Principled BSDF descriptions of the Blender-side renderer)."""
    wood = {
        "kind": "wave",
        "wave_type": "BANDS",
        "direction": "X",
        "scale": 3.0,
        "distortion": 6.0,
        "detail": 3.0,
        "color1": (0.42, 0.25, 0.12),
        "color2": (0.2, 0.1, 0.04),
    }
    return {
        "floor": {"color": wood, "roughness": 0.45, "specular": 0.3},
        "ceiling": {
            "color": {
                "kind": "noise",
                "scale": 6.0,
                "detail": 6.0,
                "color1": (0.85, 0.84, 0.8),
                "color2": (0.7, 0.69, 0.66),
            },
            "roughness": 0.9,
        },
        "brick": {
            "color": {
                "kind": "brick",
                "scale": 6.0,
                "color1": (0.55, 0.18, 0.1),
                "color2": (0.35, 0.12, 0.08),
                "mortar_color": (0.75, 0.72, 0.66),
            },
            "roughness": 0.85,
        },
        "wallpaper": {
            "color": {
                "kind": "magic",
                "scale": 4.0,
                "distortion": 2.0,
                "color1": (0.2, 0.45, 0.4),
                "color2": (0.85, 0.8, 0.62),
            },
            "roughness": 0.7,
        },
        "plaster_warm": {
            "color": {
                "kind": "voronoi",
                "scale": 9.0,
                "color1": (0.8, 0.6, 0.42),
                "color2": (0.55, 0.35, 0.25),
            },
            "roughness": 0.8,
        },
        "plaster_blue": {
            "color": {
                "kind": "checker",
                "scale": 3.0,
                "color1": (0.35, 0.45, 0.7),
                "color2": (0.75, 0.78, 0.85),
            },
            "roughness": 0.75,
        },
        "table_wood": {"color": {**wood, "scale": 6.0, "color1": (0.55, 0.35, 0.18)}, "roughness": 0.4},
        "metal": {"color": (0.6, 0.6, 0.62), "metallic": 1.0, "roughness": 0.3},
        "gold": {"color": (1.0, 0.76, 0.33), "metallic": 1.0, "roughness": 0.2},
        "fabric": {
            "color": {
                "kind": "voronoi",
                "scale": 40.0,
                "color1": (0.15, 0.22, 0.45),
                "color2": (0.3, 0.4, 0.7),
            },
            "roughness": 1.0,
            "sheen": 0.5,
        },
        "rug": {
            "color": {
                "kind": "checker",
                "scale": 8.0,
                "color1": (0.7, 0.15, 0.12),
                "color2": (0.9, 0.8, 0.6),
            },
            "roughness": 0.95,
        },
        "ceramic": {"color": (0.75, 0.2, 0.15), "roughness": 0.1, "clearcoat": 1.0},
        "white": {"color": (0.85, 0.85, 0.82), "roughness": 0.5},
        "book_red": {"color": (0.6, 0.1, 0.1), "roughness": 0.6},
        "book_green": {"color": (0.1, 0.45, 0.2), "roughness": 0.6},
        "book_yellow": {"color": (0.8, 0.65, 0.15), "roughness": 0.6},
        "book_blue": {"color": (0.12, 0.2, 0.55), "roughness": 0.6},
        "book_black": {"color": (0.05, 0.05, 0.05), "roughness": 0.5},
    }


@dataclass
class RoomBuilder:
    """Collects object descriptions given in metres (floor at z = 0) and writes them in world units."""

    objects: list[dict[str, Any]]

    def add(
        self, name: str, shape: str, centre, half_size, material: str, rotation=(0.0, 0.0, 0.0), **extra
    ) -> None:
        """``half_size`` is the primitive's scale in metres (Blender's cube, plane and cylinder span -1..1)."""
        x, y, z = centre
        position = (x, y, z + room_floor_z())
        obj = {
            "name": name,
            "shape": shape,
            "location": scaled(position),
            "rotation": list(rotation),
            "scale": scaled(half_size),
            "material": material,
            "smooth": shape in ("uv_sphere", "cylinder", "torus", "cone"),
            **extra,
        }
        self.objects.append(obj)

    def box(self, name: str, lower, upper, material: str, **extra) -> None:
        """An axis-aligned box from its lower to its upper corner (metres, floor at z = 0)."""
        centre = tuple(0.5 * (a + b) for a, b in zip(lower, upper))
        half = tuple(0.5 * (b - a) for a, b in zip(lower, upper))
        self.add(name, "cube", centre, half, material, **extra)


def textured(material: dict[str, Any], stretch: tuple[float, float, float]) -> dict[str, Any]:
    """``material`` with its colour texture scaled to an object's half size, so features keep their size."""
    color = material.get("color")
    if isinstance(color, dict):
        return {**material, "color": {**color, "stretch": list(stretch)}}
    return material


def room_spec(seed: int = 0) -> dict[str, Any]:
    """The furnished room as a scene description for the Blender-side renderer (world units)."""
    rng = np.random.default_rng(seed)
    width, depth, height = ROOM_SIZE_M
    hw, hd = width / 2, depth / 2
    library = material_library()
    materials = dict(library)
    room = RoomBuilder([])
    # shell: planes facing into the room (Blender's plane spans -1..1 in x, y with its normal on +z)
    shell = [
        ("floor", (0, 0, 0), (hw, hd, 1), (0, 0, 0), "floor"),
        ("ceiling", (0, 0, height), (hw, hd, 1), (180, 0, 0), "ceiling"),
        ("wall_west", (-hw, 0, height / 2), (height / 2, hd, 1), (0, 90, 0), "brick"),
        ("wall_east", (hw, 0, height / 2), (height / 2, hd, 1), (0, -90, 0), "wallpaper"),
        ("wall_south", (0, -hd, height / 2), (hw, height / 2, 1), (-90, 0, 0), "plaster_warm"),
        ("wall_north", (0, hd, height / 2), (hw, height / 2, 1), (90, 0, 0), "plaster_blue"),
    ]
    for name, centre, half, rotation, material in shell:
        materials[f"{name}_mat"] = textured(library[material], half)
        room.add(name, "plane", centre, half, f"{name}_mat", rotation)
    # rug and table in the middle
    room.box("rug", (-1.1, -0.8, 0.0), (1.1, 0.8, 0.01), "rug")
    room.box("table_top", (-0.6, -0.4, 0.72), (0.6, 0.4, 0.76), "table_wood")
    for sx in (-1, 1):
        for sy in (-1, 1):
            room.add(
                f"table_leg_{sx}{sy}", "cylinder", (0.53 * sx, 0.33 * sy, 0.36), (0.03, 0.03, 0.36), "metal"
            )
    # two chairs
    for index, (x, facing) in enumerate(((-0.85, 1), (0.85, -1))):
        room.box(f"chair_seat_{index}", (x - 0.22, -0.22, 0.43), (x + 0.22, 0.22, 0.47), "table_wood")
        back_x = x - facing * 0.2
        room.box(
            f"chair_back_{index}", (back_x - 0.02, -0.22, 0.47), (back_x + 0.02, 0.22, 0.95), "table_wood"
        )
        for sx in (-1, 1):
            for sy in (-1, 1):
                room.add(
                    f"chair_leg_{index}_{sx}{sy}",
                    "cylinder",
                    (x + 0.18 * sx, 0.18 * sy, 0.215),
                    (0.02, 0.02, 0.215),
                    "metal",
                )
    # objects on the table
    room.add("vase", "cylinder", (0.25, 0.1, 0.88), (0.07, 0.07, 0.12), "ceramic")
    room.add("ball", "uv_sphere", (-0.25, -0.05, 0.86), (0.1, 0.1, 0.1), "gold")
    room.add("ring", "torus", (-0.05, 0.22, 0.785), (0.12, 0.12, 0.12), "metal", rotation=(0, 0, 30))
    # sofa against the north wall
    sofa_y = hd - 0.45
    room.box("sofa_base", (-1.0, sofa_y - 0.45, 0.0), (1.0, hd - 0.02, 0.42), "fabric")
    room.box("sofa_back", (-1.0, hd - 0.22, 0.42), (1.0, hd - 0.02, 0.9), "fabric")
    for sx in (-1, 1):
        x = 1.0 * sx
        room.box(f"sofa_arm_{sx}", (x - 0.12, sofa_y - 0.45, 0.42), (x + 0.12, hd - 0.02, 0.62), "fabric")
    for index, x in enumerate((-0.5, 0.45)):
        room.add(
            f"cushion_{index}", "uv_sphere", (x, sofa_y - 0.05, 0.58), (0.22, 0.08, 0.16), "wallpaper_cushion"
        )
    materials["wallpaper_cushion"] = library["rug"]
    # bookshelf against the west wall, filled with books of random heights
    shelf_x0, shelf_x1 = -hw + 0.02, -hw + 0.37
    shelf_y0, shelf_y1 = -0.9, 0.3
    room.box("shelf_side_a", (shelf_x0, shelf_y0, 0.0), (shelf_x1, shelf_y0 + 0.03, 1.9), "table_wood")
    room.box("shelf_side_b", (shelf_x0, shelf_y1 - 0.03, 0.0), (shelf_x1, shelf_y1, 1.9), "table_wood")
    book_materials = ["book_red", "book_green", "book_yellow", "book_blue", "book_black"]
    for level, z in enumerate((0.02, 0.48, 0.94, 1.4, 1.86)):
        room.box(
            f"shelf_board_{level}",
            (shelf_x0, shelf_y0 + 0.03, z),
            (shelf_x1, shelf_y1 - 0.03, z + 0.03),
            "table_wood",
        )
        if z > 1.8:
            continue
        y = shelf_y0 + 0.05
        book = 0
        while True:
            thickness = float(rng.uniform(0.025, 0.06))
            if y + thickness > shelf_y1 - 0.06:
                break
            book_height = float(rng.uniform(0.22, 0.38))
            depth_in = float(rng.uniform(0.2, 0.3))
            room.box(
                f"book_{level}_{book}",
                (shelf_x0 + 0.02, y, z + 0.03),
                (shelf_x0 + 0.02 + depth_in, y + thickness, z + 0.03 + book_height),
                book_materials[int(rng.integers(len(book_materials)))],
            )
            y += thickness + float(rng.uniform(0.0, 0.01))
            book += 1
    # standing lamp in the south-east corner, a side cabinet by the east wall
    room.add("lamp_base", "cylinder", (hw - 0.4, -hd + 0.4, 0.02), (0.18, 0.18, 0.02), "metal")
    room.add("lamp_pole", "cylinder", (hw - 0.4, -hd + 0.4, 0.8), (0.015, 0.015, 0.78), "metal")
    room.add("lamp_shade", "cone", (hw - 0.4, -hd + 0.4, 1.6), (0.25, 0.25, 0.18), "white", radius_top=0.45)
    room.box("cabinet", (hw - 0.45, 0.2, 0.0), (hw - 0.02, 1.2, 0.8), "table_wood")
    room.add("plant_pot", "cylinder", (hw - 0.25, 0.45, 0.92), (0.1, 0.1, 0.12), "ceramic")
    room.add(
        "plant", "ico_sphere", (hw - 0.25, 0.45, 1.18), (0.18, 0.18, 0.2), "fabric_green", subdivisions=2
    )
    materials["fabric_green"] = {
        "color": {"kind": "voronoi", "scale": 25.0, "color1": (0.1, 0.4, 0.1), "color2": (0.3, 0.6, 0.2)},
        "roughness": 0.8,
    }
    # direct light only, from one point light under the ceiling (no penumbra and no choice of light to
    # sample, no indirect bounce): renders converge in few samples
    lights = [
        {
            "kind": "POINT",
            "name": "ceiling_light",
            "strength": 30.0,
            "radius": 0.0,
            "location": scaled((0.0, 0.0, room_floor_z() + 2.15)),
        }
    ]
    return {
        "world": {"kind": "color", "color": (0.05, 0.05, 0.05), "strength": 1.0},
        "materials": materials,
        "objects": room.objects,
        "lights": lights,
    }


@dataclass(frozen=True)
class Walkthrough:
    """A person carrying a depth camera once around the table, looking at the walls and the furniture."""

    num_frames: int = 120
    radius_m: tuple[float, float] = (1.25, 0.95)
    """Half axes (x, y) of the walk's ellipse around the room's centre."""
    height_m: float = 1.45
    """Camera height above the floor; it sways by 0.15 m."""
    pitch_deg: float = -22.0
    """Mean downward tilt of the view."""
    sweep_deg: float = 75.0
    """The view turns from the room's centre out towards the walls by up to this much."""
    seed: int = 0


def walkthrough_poses(path: Walkthrough) -> np.ndarray:
    """(N, 4, 4) camera-to-world poses in world units, temporal order (OpenGL convention, +z up)."""
    if path.num_frames < 2:
        raise ValueError(f"a walk-through needs at least 2 frames, got {path.num_frames}")
    rng = np.random.default_rng(path.seed)
    t = np.arange(path.num_frames) / path.num_frames
    azimuth = 2 * math.pi * t + rng.uniform(0, 2 * math.pi)
    ax, ay = path.radius_m
    height = (
        path.height_m + 0.15 * np.sin(6 * math.pi * t) + 0.02 * smooth_noise(rng, path.num_frames, 1)[:, 0]
    )
    positions = np.stack([ax * np.cos(azimuth), ay * np.sin(azimuth), height + room_floor_z()], axis=1)
    positions[:, :2] += 0.02 * smooth_noise(rng, path.num_frames, 2, correlation=3.0)
    # heading: towards the centre, swinging out to the walls and back three times per loop
    inward = azimuth + math.pi
    heading = inward + np.radians(path.sweep_deg) * np.sin(6 * math.pi * t)
    pitch = np.radians(path.pitch_deg + 8.0 * np.sin(4 * math.pi * t + 1.0))
    views = np.stack(
        [np.cos(pitch) * np.cos(heading), np.cos(pitch) * np.sin(heading), np.sin(pitch)], axis=1
    )
    poses = []
    for position, view in zip(positions, views):
        pose = look_at(-view)  # look_at(p) looks from p towards the origin, i.e. along -p
        pose[:3, 3] = position
        poses.append(pose)
    poses = np.stack(poses)
    poses[:, :3, 3] *= UNITS_PER_METRE
    return poses


# ------------------------------------------------------------------------------------------- generation

FORMAT = "eugen-rgbd-room/1"
FRAME_RANGE = (2, 5000)
EVAL_EVERY = 10
"""Every tenth frame is also listed in the val and test splits (as in ``bunny_rgbd``)."""
NEAR, FAR = 0.05, 3.5
"""World units: the walk stays 0.2 units or more from every surface; the room's diagonal is 2.95."""
EXPORT_SCRIPT = Path(__file__).with_name("blender") / "bpy_export_mesh.py"
COLOUR_RENDER = {"diffuse_bounces": 0, "glossy_bounces": 0, "adaptive_threshold": 0.0}
"""Direct light only, every pixel fully sampled (see :func:`room_spec`'s lighting)."""
DEPTH_RENDER = {
    "samples": 1,
    "adaptive_threshold": 0.0,
    "diffuse_bounces": 0,
    "glossy_bounces": 0,
    "depth": True,
}
DEPTH_FILTER_WIDTH = 0.01
"""Pixel filter width of the depth render: its one sample per pixel goes through the pixel centre, so the Z
pass is the z-depth of the pixel-centre ray (what nerfstudio's and iSDF's ray generation assume)."""


@dataclass
class RoomConfig:
    """Render the RGB-D room for iSDF: colour, 16-bit depth from Cycles' Z pass (thousandths of a
    scene unit), a walk-through in
    temporal order and the room's triangles as ground-truth mesh. Needs the `blender` program."""

    output: Path
    """Scene folder to create (images/, depth/, transforms*.json, mesh.ply, scene.json)."""
    width: int = 160
    """Image width in pixels (16 to 2048)."""
    height: int = 120
    """Image height in pixels (16 to 2048)."""
    frames: int = 100
    """Frames along the walk (every tenth is also a val/test frame)."""
    samples: int = 16
    """Cycles samples per pixel of the colour images."""
    seed: int = 0
    """Seeds the books on the shelf, the walk's wobble and Cycles' sampling."""
    noise_floor_views: int = 4
    """Render this many frames again with another sampling seed and record the PSNR between the two renders
    in scene.json; 0 skips it."""
    overwrite: bool = False
    """Replace an output folder that holds another room render (it stays until the new one is complete; a
    folder of other files is refused)."""
    quiet: bool = False
    """No progress bar."""

    def command(self) -> str:
        names = ("width", "height", "frames", "samples", "seed", "noise_floor_views")
        return options_command("rgbd-room", self, names)


def check_room_config(config: RoomConfig) -> None:
    check_capture_options(config, FRAME_RANGE)


def room_description(seed: int) -> SceneDescription:
    spec = room_spec(seed)
    return SceneDescription(
        name="room",
        kind="unbounded",  # opaque images, no scene-box check: the camera is inside the scene
        summary="a furnished room (table, chairs, sofa, bookshelf, lamp, cabinet) for RGB-D mapping",
        world=spec["world"],
        materials=spec["materials"],
        objects=tuple(spec["objects"]),
        lights=tuple(spec["lights"]),
        **COLOUR_RENDER,
    )


def room_fingerprint(config: RoomConfig, scene: SceneDescription) -> str:
    content = json.dumps(
        {
            "scene": scene.digest(),
            "width": config.width,
            "height": config.height,
            "frames": config.frames,
            "samples": config.samples,
            "seed": config.seed,
            "noise_floor_views": config.noise_floor_views,
            "walk": asdict(Walkthrough(num_frames=config.frames, seed=config.seed)),
        },
        sort_keys=True,
    )
    return hashlib.sha256(content.encode()).hexdigest()


def export_mesh(program: str, document: dict[str, Any], work: Path, name: str) -> None:
    """Build the scene in Blender (a job with no frames) and write its triangles to ``document["output"]/name``."""
    document = {**document, "frames": [], "export_mesh": name}
    job_path = work / "job-mesh.json"
    job_path.write_text(json.dumps(document))
    done = subprocess.run(
        blender_command(program, job_path, EXPORT_SCRIPT), capture_output=True, text=True, check=False
    )
    job_path.with_suffix(".log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not (Path(document["output"]) / name).is_file():
        tail = " | ".join(done.stdout.strip().splitlines()[-3:])
        raise RuntimeError(f"Blender failed to export the mesh (exit {done.returncode}): {tail}")


def depth_against_mesh(
    mesh_path: Path, poses: np.ndarray, depths: list[np.ndarray], intrinsics: Intrinsics
) -> dict[str, float]:
    """Compare each depth map with the ground-truth mesh ray-cast through the pixel centres.

    Reports the error of the depth as z-depth (distance along the viewing axis, the convention written) and,
    for contrast, as range (distance along the ray): the first is at the PNG's millimetre rounding, the
    second is not, which shows which of the two Cycles' Z pass is.
    """
    import open3d as o3d

    mesh = o3d.io.read_triangle_mesh(str(mesh_path))
    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.t.geometry.TriangleMesh.from_legacy(mesh))
    directions = intrinsics.ray_directions()  # z = -1: the ray parameter is the z-depth
    lengths = np.linalg.norm(directions, axis=-1)
    z_errors, range_errors, misses = [], [], 0
    for pose, depth in zip(poses, depths):
        world = directions @ pose[:3, :3].T
        rays = np.concatenate(
            [np.broadcast_to(pose[:3, 3], world.shape), world / lengths[..., None]], axis=-1
        )
        hit = scene.cast_rays(o3d.core.Tensor(rays.astype(np.float32)))["t_hit"].numpy()
        valid = np.isfinite(hit) & (depth > 0)
        misses += int((~valid).sum())
        z_errors.append(np.abs(depth - hit / lengths)[valid])
        range_errors.append(np.abs(depth - hit)[valid])
    z_all, range_all = np.concatenate(z_errors), np.concatenate(range_errors)
    return {
        "z_depth_error_median": float(np.median(z_all)),
        "z_depth_error_p99": float(np.percentile(z_all, 99)),
        "z_depth_error_max": float(z_all.max()),
        "pixels_off_by_more_than_0.01": int((z_all > 0.01).sum()),
        "range_error_median": float(np.median(range_all)),
        "pixels_without_depth_or_hit": misses,
        "pixels_compared": int(z_all.size),
    }


def generate_room(config: RoomConfig) -> Path:
    """Render (or reuse) the RGB-D room ``config`` describes; returns the scene folder."""
    check_room_config(config)
    scene = room_description(config.seed)
    check_description(scene)
    fingerprint = room_fingerprint(config, scene)
    output = config.output
    if output_is_current(
        output,
        fingerprint,
        config.overwrite,
        FORMAT,
        lambda record: "a different room render" if record else "files that are not this scene",
    ):
        if not config.quiet:
            print(f"{output}: up to date, nothing to render")
        return output
    program = find_blender()
    version = blender_version(program)
    staging, work = start_staging(output, fingerprint)
    intrinsics = Intrinsics(config.width, config.height, CAMERA_ANGLE_X)
    poses = walkthrough_poses(Walkthrough(num_frames=config.frames, seed=config.seed))
    stems = [f"frame_{i:04d}" for i in range(config.frames)]
    frames = [FrameSpec(f"images/{stem}", pose) for stem, pose in zip(stems, poses)]
    colour = RenderSettings.for_scene(
        scene, config.width, config.height, samples=config.samples, format="PNG", transparent=False
    )
    start = time.time()
    document = job(scene, colour, frames, CAMERA_ANGLE_X, staging, config.seed)
    document["render"]["max_bounces"] = 0
    timing = run_job(program, document, work / f"job-{config.seed}.json", "room colour", config.quiet)
    depth_settings = RenderSettings.for_scene(
        scene, config.width, config.height, format="PNG", transparent=False, **DEPTH_RENDER
    )
    depth_frames = [
        FrameSpec(f"zpass-colour/{stem}", pose, depth_path=f"zpass/{stem}")
        for stem, pose in zip(stems, poses)
    ]
    depth_job = job(scene, depth_settings, depth_frames, CAMERA_ANGLE_X, work, config.seed)
    depth_job["render"].update(max_bounces=0, filter_width=DEPTH_FILTER_WIDTH)
    depth_timing = run_job(program, depth_job, work / "job-depth.json", "room depth", config.quiet)
    if not (staging / "mesh.ply").is_file():
        export_mesh(program, {**document, "output": str(staging.resolve())}, work, "mesh.ply")
    measured: dict[str, Any] = {"colour_render": asdict(timing), "depth_render": asdict(depth_timing)}
    if config.noise_floor_views:
        chosen = [
            frames[i] for i in np.linspace(0, len(frames) - 1, config.noise_floor_views).round().astype(int)
        ]
        second = job(scene, colour, chosen, CAMERA_ANGLE_X, work / "noise", config.seed + 1)
        second["render"]["max_bounces"] = 0
        run_job(program, second, work / f"job-{config.seed + 1}.json", "noise floor", config.quiet)
        measured["noise_floor"] = {
            "sampling_seeds": [config.seed, config.seed + 1],
            **compare_renders(staging, work / "noise", [f.file_path for f in chosen], ".png"),
        }
    depths = []
    (staging / "depth").mkdir(exist_ok=True)
    for stem in stems:
        depth = np.load(work / "zpass" / f"{stem}.npy")
        write_depth(staging / "depth" / f"{stem}.png", depth)
        depths.append(read_depth(staging / "depth" / f"{stem}.png"))
    measured["depth_check"] = depth_against_mesh(staging / "mesh.ply", poses, depths, intrinsics)
    measured["depth_range"] = [
        float(min(d[d > 0].min() for d in depths)),
        float(max(d.max() for d in depths)),
    ]
    entries = [
        {
            "file_path": f"images/{stem}.png",
            "depth_file_path": f"depth/{stem}.png",
            "transform_matrix": pose_to_json(pose),
        }
        for stem, pose in zip(stems, poses)
    ]
    held = list(range(0, config.frames, EVAL_EVERY))
    write_transforms(
        staging, intrinsics, entries, {"train": list(range(config.frames)), "val": held, "test": held}
    )
    measured["wall_seconds"] = round(time.time() - start, 1)
    write_room_record(staging, config, scene, version, fingerprint, measured)
    publish_staging(staging, output)
    return output


def write_room_record(
    root: Path,
    config: RoomConfig,
    scene: SceneDescription,
    version: str,
    fingerprint: str,
    measured: dict[str, Any],
) -> None:
    """scene.json: ``bunny_rgbd``'s conventions (trajectory, ground-truth mesh, near/far, depth format) plus
    the provenance of a Blender render."""
    record = {
        "format": FORMAT,
        "format_version": 1,
        "generator": "eugen-scenes",
        "name": "room_rgbd",
        "kind": "rgbd-room",
        "summary": scene.summary,
        "command": config.command(),
        "seed": config.seed,
        "trajectory": True,
        "ground_truth_mesh": "mesh.ply",
        "near": NEAR,
        "far": FAR,
        "background": "white",
        "background_note": "every ray hits the room: no pixel shows a background",
        "depth": {
            "type": "z",
            "format": "png16",
            "unit_scale_factor": DEPTH_UNIT_SCALE_FACTOR,
            "no_hit": 0,
            "source": "Cycles Z pass, one sample through each pixel centre",
        },
        "units": {
            "units_per_metre": UNITS_PER_METRE,
            "room_size_m": list(ROOM_SIZE_M),
            "note": "the room is modelled in metres and scaled into [-1.1, 1.1]^3, where iSDF meshes "
            "and evaluates; poses, depth and mesh are in these world units",
        },
        "camera_angle_x": CAMERA_ANGLE_X,
        "walk": asdict(Walkthrough(num_frames=config.frames, seed=config.seed)),
        "blender": version,
        "render": {
            **CYCLES_RECORD,
            "pixel_filter": PIXEL_FILTER,
            "samples": config.samples,
            "lighting": "one point light, direct light only (no indirect bounce)",
            "sampling_seed": config.seed,
        },
        "fingerprint": fingerprint,
        "measured": measured,
    }
    write_scene_json(root, record)


def render_room_frames(
    config: RoomConfig, indices: list[int], output: Path, sampling_seed: int | None = None
) -> list[Path]:
    """Render the colour frames ``indices`` of the room ``config`` describes into ``output/images`` (for
    comparing a regenerated room with a shipped one); returns their paths."""
    check_room_config(config)
    scene = room_description(config.seed)
    poses = walkthrough_poses(Walkthrough(num_frames=config.frames, seed=config.seed))
    frames = [FrameSpec(f"images/frame_{i:04d}", poses[i]) for i in indices]
    colour = RenderSettings.for_scene(
        scene, config.width, config.height, samples=config.samples, format="PNG", transparent=False
    )
    output.mkdir(parents=True, exist_ok=True)
    document = job(
        scene, colour, frames, CAMERA_ANGLE_X, output, config.seed if sampling_seed is None else sampling_seed
    )
    document["render"]["max_bounces"] = 0
    run_job(find_blender(), document, output / "job.json", "room frames", quiet=True)
    return [output / f"{frame.file_path}.png" for frame in frames]
