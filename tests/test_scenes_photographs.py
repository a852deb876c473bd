"""Hand-held photographs of a rendered scene: the walk, the per-frame exposure, the sensor noise and the EXIF
focal length COLMAP reads (the COLMAP check itself is in the slow suite)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from eugen_nerf.scenes.alignment import rotation_angle_deg
from eugen_nerf.scenes.photographs import (
    Exposure,
    FrameExposure,
    Handheld,
    Lens,
    frame_exposures,
    handheld_poses,
    linear_to_srgb,
    photograph,
    read_exif_focal,
    srgb_to_linear,
    write_photograph,
)
from eugen_nerf.scenes.validate import check_rigid


def test_handheld_walk_circles_the_target_in_small_overlapping_steps() -> None:
    path = Handheld(num_frames=100)
    poses = handheld_poses(path)
    assert poses.shape == (100, 4, 4)
    for pose in poses:
        check_rigid(pose, "walk")
    target = np.asarray(path.target)
    offsets = poses[:, :3, 3] - target
    horizontal = np.linalg.norm(offsets[:, :2], axis=1)
    assert horizontal.min() > path.radius - path.radius_sway - 0.1
    assert horizontal.max() < path.radius + path.radius_sway + 0.1
    azimuth = np.unwrap(np.arctan2(offsets[:, 1], offsets[:, 0]))
    steps = np.degrees(np.diff(azimuth))
    assert np.all(steps > 0) and steps.max() < 8.0  # always forward, neighbours a few degrees apart
    assert abs(np.degrees(azimuth[-1] - azimuth[0]) + steps.mean() - 360.0) < 10.0
    # every camera looks at the target to within the aim's wander: the angle off its optical axis is small
    to_target = target - poses[:, :3, 3]
    axis = -poses[:, :3, 2]
    off_axis = np.degrees(
        np.arccos(np.einsum("ni,ni->n", axis, to_target) / np.linalg.norm(to_target, axis=1))
    )
    assert off_axis.max() < 6.0
    # the hand is not a tripod: the camera rolls a little, differently from frame to frame
    roll = np.degrees(np.arcsin(np.clip(poses[:, 2, 0], -1, 1)))
    assert 0.3 < roll.std() < 5.0
    relative = np.swapaxes(poses[:-1, :3, :3], 1, 2) @ poses[1:, :3, :3]
    assert rotation_angle_deg(relative).max() < 10.0


def test_walk_is_deterministic_in_its_seed() -> None:
    np.testing.assert_array_equal(handheld_poses(Handheld(seed=3)), handheld_poses(Handheld(seed=3)))
    assert not np.allclose(handheld_poses(Handheld(seed=3)), handheld_poses(Handheld(seed=4)))
    with pytest.raises(ValueError, match="at least 3 frames"):
        handheld_poses(Handheld(num_frames=2))


def test_exposures_drift_smoothly_by_small_amounts() -> None:
    exposures = frame_exposures(200, Exposure(seed=0))
    ev = np.array([e.ev for e in exposures])
    assert 0.05 < ev.std() < 0.25 and np.abs(ev).max() < 0.6
    assert np.abs(np.diff(ev)).mean() < 0.5 * ev.std()  # a drift, not independent jumps
    gains = np.array([e.gains for e in exposures])
    assert np.abs(gains - 1).max() < 0.05
    assert frame_exposures(200, Exposure(seed=0)) == exposures  # seeded
    assert len({e.noise_seed for e in exposures}) == 200  # each frame its own grain


def test_photograph_applies_exposure_in_linear_light_and_adds_sensor_noise() -> None:
    grey = np.full((64, 64, 3), 0.5)
    exposure = Exposure(shot_noise=0.0, read_noise=0.0)
    brighter = photograph(grey, FrameExposure(1.0, (1.0, 1.0, 1.0), 0), exposure)
    expected = linear_to_srgb(2.0 * srgb_to_linear(np.array(0.5)))  # one stop up, in linear light
    assert brighter.dtype == np.uint8
    assert np.all(np.abs(brighter.astype(float) / 255 - expected) <= 0.5 / 255 + 1e-9)
    noisy = photograph(grey, FrameExposure(0.0, (1.0, 1.0, 1.0), 0), Exposure()).astype(float) / 255
    assert abs(noisy.mean() - 0.5) < 0.01
    assert 0.003 < noisy.std() < 0.03  # visible grain, far below the signal
    again = photograph(grey, FrameExposure(0.0, (1.0, 1.0, 1.0), 0), Exposure()).astype(float) / 255
    np.testing.assert_array_equal(noisy, again)  # the noise is seeded per frame


def test_jpeg_carries_the_focal_length_as_a_camera_writes_it(tmp_path: Path) -> None:
    lens = Lens()
    path = tmp_path / "frame_00001.jpg"
    image = np.random.default_rng(0).uniform(size=(48, 64, 3))
    write_photograph(path, image, lens, FrameExposure(0.1, (1.0, 1.0, 1.0), 1), Exposure(), index=0)
    with Image.open(path) as jpeg:
        assert jpeg.format == "JPEG" and jpeg.size == (64, 48)
    exif = read_exif_focal(path)
    assert exif["focal_mm"] == pytest.approx(lens.focal_mm, rel=1e-3)
    assert exif["focal_35mm"] == lens.focal_35mm == 31
    # focal length in pixels from the EXIF alone (mm times pixels per mm of sensor) is the true one
    assert exif["focal_mm"] * exif["focal_plane_pixels_per_mm"] == pytest.approx(
        lens.focal_pixels(64, 48), rel=1e-3
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("colmap") is None, reason="needs the colmap program (Debian package colmap)")
def test_colmap_takes_its_focal_length_prior_from_the_exif(tmp_path: Path) -> None:
    lens = Lens()
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for index in range(2):
        write_photograph(
            images / f"frame_{index + 1:05d}.jpg",
            rng.uniform(size=(150, 200, 3)),
            lens,
            FrameExposure(0.0, (1.0, 1.0, 1.0), index),
            Exposure(),
            index,
        )
    database = tmp_path / "database.db"
    subprocess.run(
        [
            "colmap",
            "feature_extractor",
            "--database_path",
            str(database),
            "--image_path",
            str(images),
            "--ImageReader.single_camera",
            "1",
            "--ImageReader.camera_model",
            "OPENCV",
            "--SiftExtraction.use_gpu",
            "0",
        ],
        check=True,
        capture_output=True,
    )
    with sqlite3.connect(database) as connection:
        params_blob, prior = connection.execute("SELECT params, prior_focal_length FROM cameras").fetchone()
    focal = np.frombuffer(params_blob, dtype=np.float64)[0]
    assert prior == 1  # COLMAP trusts the focal length it found in the EXIF
    # COLMAP divides the 35 mm equivalent by 35, cameras compute it on 36 mm: 3 % off, as with a real camera
    assert focal == pytest.approx(lens.focal_35mm / 35.0 * 200, rel=1e-6)
    assert focal == pytest.approx(lens.focal_pixels(200, 150), rel=0.05)
