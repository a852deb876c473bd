"""``eugen-scenes photo-capture``: the plan and its refusals (default suite, no Blender), and a tiny capture
rendered by Blender and checked (slow suite)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes.blender.library import GARDEN_TARGET
from eugen_nerf.scenes.photo_capture import (
    PhotoCaptureConfig,
    check_photo_capture,
    generate_photo_capture,
    plan,
    reference_transforms,
)
from eugen_nerf.scenes.photographs import read_exif_focal
from eugen_nerf.scenes.validate import validate_scene


def test_plan_walks_around_the_garden_table_with_the_lens_field_of_view(tmp_path: Path) -> None:
    config = PhotoCaptureConfig(tmp_path / "capture")
    first, second = plan(config), plan(config)
    assert len(first.frames) == 100 and first.fingerprint(config) == second.fingerprint(config)
    positions = np.stack([f.camera_to_world[:3, 3] for f in first.frames])
    distance = np.linalg.norm(positions[:, :2] - GARDEN_TARGET[:2], axis=1)
    assert distance.min() > 1.5 and distance.max() < 3.5
    assert first.settings.transparent is False and first.settings.format == "PNG"
    assert first.camera_angle_x == pytest.approx(2 * np.arctan(0.5 * 224 / first.lens.focal_pixels(224, 168)))
    other = PhotoCaptureConfig(tmp_path / "capture", samples=128)
    assert plan(other).fingerprint(other) != first.fingerprint(config)


def test_reference_poses_are_nerfstudio_data_pointing_at_the_photographs(tmp_path: Path) -> None:
    config = PhotoCaptureConfig(tmp_path / "capture", frames=5)
    meta = reference_transforms(plan(config), 224, 168)
    assert [f["file_path"] for f in meta["frames"]][:2] == [
        "../images/frame_00001.jpg",
        "../images/frame_00002.jpg",
    ]
    assert meta["w"] == 224 and meta["fl_x"] == pytest.approx(plan(config).lens.focal_pixels(224, 168))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"width": 8}, "--width 8 is out of range"),
        ({"frames": 2}, "--frames 2 is out of range"),
        ({"samples": 0}, "--samples 0 is out of range"),
        ({"noise_floor_views": 7, "frames": 5}, "--noise-floor-views 7"),
        ({"jpeg_quality": 101}, "--jpeg-quality 101"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(tmp_path: Path, options, message) -> None:
    with pytest.raises(InputError, match=message):
        generate_photo_capture(PhotoCaptureConfig(tmp_path / "capture", **options))
    assert not any(tmp_path.iterdir())


def test_a_folder_holding_something_else_is_refused(tmp_path: Path) -> None:
    (tmp_path / "capture").mkdir()
    (tmp_path / "capture" / "photo.jpg").write_bytes(b"someone's photo")
    with pytest.raises(InputError, match="holds files that are not a photo capture"):
        generate_photo_capture(PhotoCaptureConfig(tmp_path / "capture"))
    assert check_photo_capture(tmp_path / "capture") is None  # not a capture: other checks apply


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("blender") is None, reason="needs the blender program (Debian package blender)"
)
def test_tiny_capture_renders_photographs_without_poses(tmp_path: Path) -> None:
    output = tmp_path / "capture"
    config = PhotoCaptureConfig(
        output, width=40, height=30, frames=3, samples=2, noise_floor_views=1, quiet=True
    )
    generate_photo_capture(config)
    assert sorted(p.name for p in (output / "images").iterdir()) == [f"frame_0000{i}.jpg" for i in (1, 2, 3)]
    assert not list(
        (output / "images").glob("*.json")
    )  # nothing but photographs where the user points COLMAP
    assert "3 JPEGs 40x30 with EXIF focal length" in check_photo_capture(output)
    assert read_exif_focal(output / "images" / "frame_00001.jpg")["focal_35mm"] == 31
    validate_scene(output / "reference")
    record = json.loads((output / "scene.json").read_text())
    assert record["blender"].startswith("Blender") and "noise_floor" in record["measured"]
    assert generate_photo_capture(config) == output  # cached: the same capture is reused


def test_shipped_capture_is_photographs_only_with_reference_poses_apart() -> None:
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    from eugen_nerf.scenes import SHIPPED_SCENES_DIR

    root = SHIPPED_SCENES_DIR / "garden_photos"
    assert "100 JPEGs 224x168 with EXIF focal length" in check_photo_capture(root)
    assert {p.suffix for p in (root / "images").iterdir()} == {".jpg"}
    record = json.loads((root / "scene.json").read_text())
    ev_low, ev_high = record["photographs"]["ev_range"]
    assert -0.6 < ev_low < 0 < ev_high < 0.6  # the exposure drifts, a little
    reference = NerfstudioDataParserConfig(data=root / "reference").setup().get_dataparser_outputs("train")
    assert len(reference.image_filenames) >= 90  # nerfstudio's own parser reads the true poses


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("blender") is None, reason="needs the blender program (Debian package blender)"
)
def test_regenerated_photograph_matches_the_shipped_one(tmp_path: Path) -> None:
    import imageio.v3 as iio

    from eugen_nerf.scenes import SHIPPED_SCENES_DIR
    from eugen_nerf.scenes.photo_capture import render_photographs

    shipped = SHIPPED_SCENES_DIR / "garden_photos"
    (path,) = render_photographs(PhotoCaptureConfig(shipped), [40], tmp_path)
    fresh = iio.imread(path) / 255.0
    truth = iio.imread(shipped / "images" / "frame_00041.jpg") / 255.0
    assert (
        -10 * np.log10(max(np.mean((fresh - truth) ** 2), 1e-12)) >= 35.0
    )  # same seeds: Cycles repeats itself
