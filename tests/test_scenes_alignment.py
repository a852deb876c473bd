"""Umeyama similarity alignment of camera poses (the photo capture's COLMAP-vs-Blender comparison)."""

from __future__ import annotations

import numpy as np
import pytest

from eugen_nerf.scenes.alignment import Similarity, pose_errors, rotation_angle_deg, umeyama
from eugen_nerf.scenes.cameras import look_at


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def orbit_poses(count: int, rng: np.random.Generator) -> np.ndarray:
    """Camera-to-world poses on a wobbly orbit looking at the origin (OpenGL: camera looks down -z)."""
    angles = np.linspace(0, 2 * np.pi, count, endpoint=False)
    return np.array(
        [look_at(np.array([4 * np.cos(a), 4 * np.sin(a), 1.5 + 0.3 * rng.normal()])) for a in angles]
    )


def test_umeyama_recovers_a_known_similarity() -> None:
    rng = np.random.default_rng(0)
    points = rng.normal(size=(50, 3))
    truth = Similarity(2.7, random_rotation(rng), np.array([3.0, -1.0, 5.0]))
    found = umeyama(points, truth.apply_points(points))
    assert found.scale == pytest.approx(2.7, rel=1e-9)
    np.testing.assert_allclose(found.rotation, truth.rotation, atol=1e-9)
    np.testing.assert_allclose(found.translation, truth.translation, atol=1e-9)
    np.testing.assert_allclose(
        found.matrix() @ np.append(points[0], 1.0), np.append(truth.apply_points(points[:1])[0], 1.0)
    )


def test_umeyama_never_returns_a_reflection() -> None:
    rng = np.random.default_rng(1)
    points = rng.normal(size=(20, 3))
    mirrored = points * np.array([1.0, 1.0, -1.0])
    assert np.linalg.det(umeyama(points, mirrored).rotation) == pytest.approx(1.0)


def test_umeyama_refuses_degenerate_points() -> None:
    line = np.outer(np.arange(5.0), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="one line"):
        umeyama(line, line)
    with pytest.raises(ValueError, match="at least 3"):
        umeyama(np.zeros((2, 3)), np.zeros((2, 3)))


def test_pose_errors_are_zero_for_poses_moved_by_a_similarity() -> None:
    rng = np.random.default_rng(2)
    reference = orbit_poses(40, rng)
    to_estimate = Similarity(0.31, random_rotation(rng), np.array([11.0, -6.0, 3.0]))
    estimated = to_estimate.apply_poses(reference)  # what SfM returns: the same rig in its own frame
    errors = pose_errors(estimated, reference)
    assert errors.rotation_deg.max() < 1e-6
    assert errors.translation.max() < 1e-9
    assert errors.similarity.scale == pytest.approx(1 / 0.31)
    summary = errors.summary()
    assert summary["num_cameras"] == 40 and summary["scene_radius"] == pytest.approx(4.0, rel=0.05)


def test_pose_errors_measure_a_known_perturbation() -> None:
    rng = np.random.default_rng(3)
    reference = orbit_poses(60, rng)
    estimated = Similarity(1.9, random_rotation(rng), np.array([1.0, 2.0, 3.0])).apply_poses(reference)
    # tilt one camera by 2 degrees about its own x axis: only that camera's rotation error moves
    angle = np.radians(2.0)
    tilt = np.array([[1, 0, 0], [0, np.cos(angle), -np.sin(angle)], [0, np.sin(angle), np.cos(angle)]])
    estimated[7, :3, :3] = estimated[7, :3, :3] @ tilt
    errors = pose_errors(estimated, reference, scene_radius=4.0)
    assert errors.rotation_deg[7] == pytest.approx(2.0, abs=1e-6)
    assert np.delete(errors.rotation_deg, 7).max() < 1e-6
    assert errors.summary()["rotation_deg_max"] == pytest.approx(2.0, abs=1e-6)


def test_pose_errors_report_position_noise_as_a_fraction_of_the_radius() -> None:
    rng = np.random.default_rng(4)
    reference = orbit_poses(200, rng)
    estimated = reference.copy()
    estimated[:, :3, 3] += rng.normal(scale=0.04, size=(200, 3))
    summary = pose_errors(estimated, reference, scene_radius=4.0).summary()
    # |N(0, 0.04^2 I_3)| has mean 0.04 * sqrt(8/pi) ~ 0.064, i.e. 1.6% of the radius
    assert summary["translation_over_radius_mean"] == pytest.approx(0.064 / 4.0, rel=0.15)


def test_rotation_angle() -> None:
    assert rotation_angle_deg(np.eye(3)) == pytest.approx(0.0)
    half_turn = np.diag([1.0, -1.0, -1.0])
    assert rotation_angle_deg(half_turn) == pytest.approx(180.0)


def test_pose_errors_refuse_mismatched_sets() -> None:
    poses = orbit_poses(5, np.random.default_rng(5))
    with pytest.raises(ValueError, match="5 estimated poses but 4"):
        pose_errors(poses, poses[:4])
    with pytest.raises(ValueError, match="camera-to-world"):
        pose_errors(poses[:, :2], poses[:, :2])
