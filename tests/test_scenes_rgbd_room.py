"""The RGB-D room for iSDF: its description and walk (default suite, no Blender), the depth-versus-mesh
check, and a tiny room rendered end to end by Blender and read by iSDF's stream loader (slow suite)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import open3d as o3d
import pytest

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes.blender.spec import check_description, object_bounds
from eugen_nerf.scenes.cameras import Intrinsics
from eugen_nerf.scenes.rgbd_room import (
    CAMERA_ANGLE_X,
    FAR,
    NEAR,
    RoomConfig,
    Walkthrough,
    depth_against_mesh,
    generate_room,
    room_description,
    walkthrough_poses,
)
from eugen_nerf.scenes.validate import check_rigid

ISDF_BOX = 1.1
"""iSDF meshes and evaluates in [-1.1, 1.1]^3."""


def furniture_boxes() -> list[tuple[np.ndarray, np.ndarray]]:
    scene = room_description(0)
    shell = {"floor", "ceiling", "wall_west", "wall_east", "wall_south", "wall_north"}
    return [object_bounds(obj) for obj in scene.objects if obj["name"] not in shell]


def test_room_is_a_valid_description_inside_the_isdf_box() -> None:
    scene = room_description(0)
    check_description(scene)
    assert len(scene.objects) > 50  # a furnished room, books on the shelf included
    for obj in scene.objects:
        if obj["shape"] == "plane":  # flat: no extent along its own z, whatever its z scale
            obj = {**obj, "scale": [*obj["scale"][:2], 0.0]}
        low, high = object_bounds(obj)
        assert low.min() >= -ISDF_BOX - 1e-9 and high.max() <= ISDF_BOX + 1e-9, obj["name"]
    assert len(scene.lights) == 1 and scene.diffuse_bounces == 0  # direct light only: converges fast


def test_walk_stays_inside_the_room_and_out_of_the_furniture() -> None:
    poses = walkthrough_poses(Walkthrough(num_frames=100))
    assert poses.shape == (100, 4, 4)
    for pose in poses:
        check_rigid(pose, "walk")
    positions = poses[:, :3, 3]
    assert np.all(np.abs(positions[:, :2]) < 0.9) and np.all(np.abs(positions[:, 2]) < 0.55)
    for low, high in furniture_boxes():
        inside = np.all((positions > low - 0.05) & (positions < high + 0.05), axis=1)
        assert not inside.any()
    steps = np.linalg.norm(np.diff(positions, axis=0), axis=1)
    assert steps.max() < 0.1  # a continuous stream: each frame close to the last
    looking_down = -poses[:, 2, 2]  # z component of the viewing direction (-z axis of the camera)
    assert np.all(looking_down < 0)  # tilted towards the floor and the furniture


def test_depth_check_tells_z_depth_from_range(tmp_path: Path) -> None:
    """A wall one unit in front of the camera: z-depth 1 everywhere, range growing towards the corners."""
    wall = o3d.geometry.TriangleMesh.create_box(4.0, 4.0, 0.01).translate((-2.0, -2.0, -1.01))
    o3d.io.write_triangle_mesh(str(tmp_path / "wall.ply"), wall)
    intrinsics = Intrinsics(32, 24, CAMERA_ANGLE_X)
    z_depth = np.ones((24, 32))
    report = depth_against_mesh(tmp_path / "wall.ply", np.eye(4)[None], [z_depth], intrinsics)
    assert report["z_depth_error_max"] < 1e-5
    assert report["range_error_median"] > 0.02
    assert report["pixels_compared"] == 32 * 24 and report["pixels_without_depth_or_hit"] == 0


def test_bad_options_and_occupied_output_are_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--width 8 is out of range"):
        generate_room(RoomConfig(tmp_path / "a", width=8))
    with pytest.raises(InputError, match="--frames 1 is out of range"):
        generate_room(RoomConfig(tmp_path / "a", frames=1))
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="holds files that are not this scene"):
        generate_room(RoomConfig(occupied))
    assert not (tmp_path / "a").exists() and (occupied / "notes.txt").read_text() == "mine"


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("blender") is None, reason="needs the blender program (Debian package blender)"
)
def test_tiny_room_renders_and_streams_into_isdf(tmp_path: Path) -> None:
    from eugen_nerf.isdf.frames import load_stream

    output = tmp_path / "room"
    generate_room(
        RoomConfig(output, width=32, height=24, frames=3, samples=2, noise_floor_views=1, quiet=True)
    )
    record = json.loads((output / "scene.json").read_text())
    check = record["measured"]["depth_check"]
    assert check["z_depth_error_max"] <= 0.0006  # the 1 mm-unit PNG rounding, nothing more
    assert check["range_error_median"] > 0.01  # Cycles' Z pass is z-depth, not range
    assert check["pixels_without_depth_or_hit"] == 0  # a closed room: every pixel has depth
    assert record["near"] == NEAR and record["far"] == FAR and record["trajectory"] is True
    scene, frames = load_stream(output)
    assert len(frames) == 3 and scene.mesh_path == output / "mesh.ply"
    assert float(frames[0].depth.min()) > NEAR and float(frames[0].depth.max()) < FAR
    mesh = o3d.io.read_triangle_mesh(str(output / "mesh.ply"))
    low, high = mesh.get_min_bound(), mesh.get_max_bound()
    assert low.min() >= -ISDF_BOX and high.max() <= ISDF_BOX and len(mesh.triangles) > 5000
    again = generate_room(
        RoomConfig(output, width=32, height=24, frames=3, samples=2, noise_floor_views=1, quiet=True)
    )
    assert again == output  # the same settings: reused, not rendered again


def test_shipped_room_reads_as_bunny_rgbd_does() -> None:
    """The shipped room: iSDF's stream loader, nerfstudio's own parsers, its poses used verbatim."""
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from eugen_nerf.isdf.frames import load_stream
    from eugen_nerf.scenes import SHIPPED_SCENES_DIR
    from eugen_nerf.scenes.dataparser import declares_its_frame

    root = SHIPPED_SCENES_DIR / "room_rgbd"
    scene, frames = load_stream(root)
    assert len(frames) == 100 and (scene.width, scene.height) == (160, 120)
    assert scene.metadata["trajectory"] is True and scene.mesh_path == root / "mesh.ply"
    assert all(float(frame.depth.min()) > NEAR for frame in frames)  # a closed room: depth everywhere
    assert declares_its_frame(root)  # our methods use the poses exactly as written, as for bunny_rgbd
    outputs = NerfstudioDataParserConfig(data=root).setup().get_dataparser_outputs("train")
    assert len(outputs.image_filenames) == 100 and len(outputs.metadata["depth_filenames"]) == 100
    assert (
        len(BlenderDataParserConfig(data=root).setup().get_dataparser_outputs("test").image_filenames) == 10
    )
    measured = scene.metadata["measured"]
    assert measured["depth_check"]["z_depth_error_p99"] < 0.001
    assert measured["noise_floor"]["psnr"] >= 35.0


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("blender") is None, reason="needs the blender program (Debian package blender)"
)
def test_regenerated_room_matches_the_shipped_one(tmp_path: Path) -> None:
    import imageio.v3 as iio

    from eugen_nerf.scenes import SHIPPED_SCENES_DIR
    from eugen_nerf.scenes.rgbd_room import render_room_frames

    shipped = SHIPPED_SCENES_DIR / "room_rgbd"
    (path,) = render_room_frames(RoomConfig(shipped), [33], tmp_path, sampling_seed=1)  # another seed, even
    fresh = iio.imread(path)[..., :3] / 255.0
    truth = iio.imread(shipped / "images" / "frame_0033.png")[..., :3] / 255.0
    assert -10 * np.log10(np.mean((fresh - truth) ** 2)) >= 33.0  # the noise floor's worst frame: 34.8 dB
