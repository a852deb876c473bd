"""Each way a scene can be broken is rejected by validate_scene with a message naming the culprit."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from eugen_nerf.scenes import SceneError, dataparser_config, load_scene, validate_scene
from eugen_nerf.scenes.generate import SceneConfig, generate_scene


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("validate") / "scene"
    return generate_scene(SceneConfig(output=output, width=16, height=12, num_train=3, num_val=1, num_test=1))


@pytest.fixture
def scene(pristine: Path, tmp_path: Path) -> Path:
    return shutil.copytree(pristine, tmp_path / "scene")


def edit_transforms(scene: Path, edit: Callable[[dict], None], name: str = "transforms.json") -> None:
    meta = json.loads((scene / name).read_text())
    edit(meta)
    (scene / name).write_text(json.dumps(meta))


def set_pose(index: int, value) -> Callable[[dict], None]:
    def edit(meta: dict) -> None:
        meta["frames"][index]["transform_matrix"] = value

    return edit


def scale_rotation(meta: dict) -> None:
    pose = np.array(meta["frames"][1]["transform_matrix"])
    pose[:3, :3] *= 1.5
    meta["frames"][1]["transform_matrix"] = pose.tolist()


def reflect(meta: dict) -> None:
    pose = np.array(meta["frames"][2]["transform_matrix"])
    pose[:3, 0] *= -1
    meta["frames"][2]["transform_matrix"] = pose.tolist()


def test_pristine_scene_is_valid(pristine: Path) -> None:
    summary = validate_scene(pristine)
    assert (summary.width, summary.height, summary.num_frames) == (16, 12, 5)
    assert summary.split_sizes == {"train": 3, "val": 1, "test": 1} and summary.has_depth
    assert validate_scene(pristine / "transforms.json").num_frames == 5


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (
            lambda s: [(s / name).unlink() for name in ("transforms.json", "transforms_train.json")],
            r"transforms\.json: missing",
        ),
        (
            lambda s: (s / "transforms.json").unlink(),
            r"a NeRF-Synthetic folder .*: read it with the blender-data",
        ),
        (lambda s: (s / "transforms.json").write_text("{ not json"), r"transforms\.json: unreadable JSON"),
        (lambda s: edit_transforms(s, lambda m: m.pop("frames")), r"no 'frames' list"),
        (lambda s: edit_transforms(s, lambda m: m.update(frames=[])), r"'frames' is empty"),
        (
            lambda s: (s / "images/train_001.png").unlink(),
            r"frame 1 \(images/train_001\.png\): image file .* missing",
        ),
        (
            lambda s: (s / "images/val_000.png").write_bytes(b"garbage"),
            r"frame 3 \(images/val_000\.png\).*unreadable",
        ),
        (
            lambda s: iio.imwrite(s / "images/train_002.png", np.zeros((12, 20, 3), np.uint8)),
            r"frame 2 \(images/train_002\.png\): image is 20x12 but 16x12 was expected",
        ),
        (lambda s: edit_transforms(s, lambda m: m.update(w=32)), r"frame 0 .*image is 16x12 but 32x12"),
        (
            lambda s: edit_transforms(s, lambda m: m.update(fl_x=float("nan"))),
            r"intrinsic 'fl_x'.*not a finite",
        ),
        (lambda s: edit_transforms(s, set_pose(0, [[float("nan")] * 4] * 4)), r"frame 0 .*non-finite"),
        (lambda s: edit_transforms(s, set_pose(0, [[1, 0, 0], [0, 1, 0]])), r"frame 0 .*shape \(2, 3\)"),
        (lambda s: edit_transforms(s, scale_rotation), r"frame 1 .*not rigid"),
        (lambda s: edit_transforms(s, reflect), r"frame 2 .*not rigid.*det = -1"),
        (
            lambda s: np.save(s / "depth/train_000.npy", np.full((12, 16), np.nan)),
            r"frame 0 .*depth file .*train_000\.npy contains NaN",
        ),
        (
            lambda s: np.save(s / "depth/train_000.npy", -np.ones((12, 16))),
            r"frame 0 .*depth file .*train_000\.npy contains negative",
        ),
        (
            lambda s: (s / "depth/test_000.png").unlink(),
            r"frame 4 \(images/test_000\.png\): depth file .* missing",
        ),
        (
            lambda s: iio.imwrite(s / "depth/train_001.png", np.ones((6, 8), np.uint16)),
            r"frame 1 .*depth map is 8x6, image is 16x12",
        ),
        (
            lambda s: edit_transforms(s, lambda m: m.update(val_filenames=[])),
            r"split 'val_filenames' is empty",
        ),
        (
            lambda s: edit_transforms(s, lambda m: m.update(test_filenames=["images/nope.png"])),
            r"'test_filenames' lists files that are not frames: \['images/nope\.png'\]",
        ),
        (
            lambda s: edit_transforms(s, lambda m: m.update(frames=[]), "transforms_test.json"),
            r"transforms_test\.json: 'frames' is empty",
        ),
    ],
)
def test_broken_scene_is_rejected(scene: Path, corrupt: Callable[[Path], None], message: str) -> None:
    if "npy" in message:  # point the frame at the .npy depth the corruption wrote
        edit_transforms(scene, lambda m: m["frames"][0].update(depth_file_path="depth/train_000.npy"))
    corrupt(scene)
    with pytest.raises(SceneError, match=message):
        validate_scene(scene)


def test_degenerate_poses_all_at_one_point_are_rejected(scene: Path) -> None:
    def collapse(meta: dict) -> None:
        for frame in meta["frames"]:
            frame["transform_matrix"][0][3] = frame["transform_matrix"][1][3] = frame["transform_matrix"][2][
                3
            ] = 1.0

    edit_transforms(scene, collapse)
    with pytest.raises(SceneError, match=r"transforms\.json: all 5 cameras are at one point \(1, 1, 1\)"):
        validate_scene(scene)


def test_blender_layout_is_validated_per_split_file(scene: Path) -> None:
    from eugen_nerf.scenes.validate import validate_blender

    assert validate_blender(scene).split_sizes == {"train": 3, "val": 1, "test": 1}
    (scene / "transforms_test.json").rename(scene / "aside.json")
    with pytest.raises(SceneError, match=r"transforms_test\.json: missing"):
        validate_blender(scene)
    (scene / "aside.json").rename(scene / "transforms_test.json")
    iio.imwrite(scene / "images/val_000.png", np.zeros((12, 20, 3), np.uint8))
    with pytest.raises(SceneError, match=r"transforms_val\.json: frame 0 .*is 20x12"):
        validate_blender(scene)


def test_float_npy_depth_is_read_in_the_units_nerfstudio_reads_it(scene: Path) -> None:
    """nerfstudio scales a ``.npy`` depth map by ``depth_unit_scale_factor`` as it does a PNG."""
    from nerfstudio.data.utils.data_utils import get_depth_image_from_path

    from eugen_nerf.scenes.depth import DEPTH_UNIT_SCALE_FACTOR

    path = scene / "depth/train_000.npy"
    np.save(path, np.full((12, 16), 3500.0, dtype=np.float32))
    edit_transforms(scene, lambda m: m["frames"][0].update(depth_file_path="depth/train_000.npy"))
    validate_scene(scene)
    ours = load_scene(scene).frames[0].depth()
    theirs = get_depth_image_from_path(path, 12, 16, DEPTH_UNIT_SCALE_FACTOR)[..., 0].numpy()
    assert ours.max() == pytest.approx(3.5) and np.allclose(ours, theirs)


def test_missing_scene_folder_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(SceneError, match="does not exist"):
        validate_scene(tmp_path / "nowhere")


def test_loaders_reject_broken_scenes(scene: Path) -> None:
    (scene / "images/train_000.png").unlink()
    with pytest.raises(SceneError, match="train_000.png"):
        load_scene(scene)
    with pytest.raises(SceneError, match="train_000.png"):
        dataparser_config(scene).setup().get_dataparser_outputs("train")
    assert issubclass(SceneError, ValueError)


def test_one_camera_for_every_frame_from_focal_lengths_or_the_field_of_view(scene: Path) -> None:
    loaded = load_scene(scene)
    fx, width = loaded.intrinsics[0, 0], loaded.width

    def angle_only(meta: dict) -> None:  # Blender-style: only the horizontal field of view
        for key in ("fl_x", "fl_y", "cx", "cy", "w", "h"):
            meta.pop(key, None)
        meta["camera_angle_x"] = 2 * np.arctan(0.5 * width / fx)

    edit_transforms(scene, angle_only)
    again = load_scene(scene)
    np.testing.assert_allclose(again.intrinsics, loaded.intrinsics, rtol=1e-9)
    assert (again.width, again.height) == (loaded.width, loaded.height)
    edit_transforms(scene, lambda m: m["frames"][2].update(fl_x=fx * 2))
    with pytest.raises(
        SceneError, match="frame 2 has fl_x .* where frame 0 has .*one camera for every frame"
    ):
        load_scene(scene)
    edit_transforms(scene, lambda m: (m["frames"][2].pop("fl_x"), m.update(k1=-0.1, p2=0.01)))
    assert load_scene(scene).distortion == (-0.1, 0.0, 0.0, 0.0, 0.0, 0.01)
