"""The capture benchmark's datasets: Blender's and COLMAP's poses over the same photographs and split, read
by nerfstudio's own parser (no training here)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from eugen_nerf.bench.suites.capture import colmap_dataset, colmap_tag, datasets, split
from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes.alignment import Similarity
from eugen_nerf.scenes.photographs import Handheld, handheld_poses


def test_every_nth_registered_frame_is_a_test_view() -> None:
    train, test = split([9, 0, 1, 2, 3, 5, 6, 7, 8], 4)
    assert test == [0, 5, 9] and train == [1, 2, 3, 6, 7, 8]


def write_capture(root: Path, truth: np.ndarray, registered: dict[int, np.ndarray]) -> tuple[Path, Path]:
    import imageio.v3 as iio

    capture, colmap = root / "capture", root / "colmap"
    (capture / "images").mkdir(parents=True)
    (capture / "reference").mkdir()
    colmap.mkdir()
    for i in range(len(truth)):
        iio.imwrite(capture / "images" / f"frame_{i + 1:05d}.jpg", np.full((12, 16, 3), 10 * i, np.uint8))
    intrinsics = {
        "camera_model": "OPENCV",
        "fl_x": 14.0,
        "fl_y": 14.0,
        "cx": 8.0,
        "cy": 6.0,
        "w": 16,
        "h": 12,
    }
    reference = [
        {"file_path": f"../images/frame_{i + 1:05d}.jpg", "transform_matrix": p.tolist()}
        for i, p in enumerate(truth)
    ]
    (capture / "reference" / "transforms.json").write_text(json.dumps({**intrinsics, "frames": reference}))
    frames = [
        {"file_path": f"images/frame_{i + 1:05d}.jpg", "transform_matrix": p.tolist()}
        for i, p in sorted(registered.items())
    ]
    estimated = {**intrinsics, "fl_x": 14.5, "k1": 0.01, "frames": frames, "ply_file_path": "sparse_pc.ply"}
    (colmap / "transforms.json").write_text(json.dumps(estimated))
    return capture, colmap


def test_both_datasets_hold_the_registered_photographs_with_the_same_split(tmp_path: Path) -> None:
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    truth = handheld_poses(Handheld(num_frames=20))
    colmap_frame = Similarity(0.3, np.eye(3), np.array([1.0, -2.0, 0.5]))
    estimated = colmap_frame.apply_poses(truth)
    registered = {i: estimated[i] for i in range(20) if i != 3}  # COLMAP left one photograph out
    capture, colmap = write_capture(tmp_path, truth, registered)
    data, listing = datasets(capture, colmap, tmp_path / "work", test_every=8)
    assert listing["test"] == ["frame_00001.jpg", "frame_00010.jpg", "frame_00018.jpg"]
    assert len(listing["train"]) == 16 and "frame_00004.jpg" not in listing["train"]
    assert (
        listing["intrinsics"]["colmap"]["fl_x"] == 14.5 and listing["intrinsics"]["blender"]["fl_x"] == 14.0
    )
    outputs = {}
    for poses, folder in data.items():
        parser = NerfstudioDataParserConfig(data=folder).setup()
        outputs[poses] = {split_: parser.get_dataparser_outputs(split_) for split_ in ("train", "test")}
    for split_ in ("train", "test"):
        names = {p: [f.name for f in outputs[p][split_].image_filenames] for p in data}
        assert names["blender"] == names["colmap"]  # the same photographs, the same files
        files = {p: [f.resolve() for f in outputs[p][split_].image_filenames] for p in data}
        assert files["blender"] == files["colmap"]
    blender_poses = json.loads((data["blender"] / "transforms.json").read_text())["frames"]
    np.testing.assert_allclose(
        blender_poses[3]["transform_matrix"], truth[4]
    )  # frame 4 is the 4th registered
    assert outputs["colmap"]["test"].cameras.distortion_params[0, 0] == pytest.approx(0.01)


def test_a_colmap_dataset_made_with_other_settings_is_refused_not_scored(tmp_path: Path) -> None:
    colmap = tmp_path / "colmap"
    colmap.mkdir()
    (colmap / "transforms.json").write_text("{}")
    saved = {"matching_method": "sequential", "camera_type": "perspective", "refine_intrinsics": True}
    (colmap / "registration.json").write_text(json.dumps({**saved, "num_registered": 7}))
    assert colmap_dataset(tmp_path, colmap, "sequential", "perspective", True)["num_registered"] == 7
    with pytest.raises(InputError, match="camera_type"):
        colmap_dataset(tmp_path, colmap, "sequential", "pinhole", False)
    assert colmap_tag("pinhole", False) == "colmap-pinhole"
    assert colmap_tag("perspective", True) == "colmap-perspective-refined"
