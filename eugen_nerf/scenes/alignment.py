"""Similarity alignment of estimated camera poses to reference poses, and the pose errors left after it.

Structure from motion recovers cameras only up to a similarity (rotation, translation and scale of the
whole reconstruction), so estimated poses are compared with known ones after the least-squares
similarity that maps the estimated camera centres onto the reference ones (Umeyama, "Least-squares
estimation of transformation parameters between two point patterns", PAMI 1991). The rotation error of a
camera is the angle of the rotation between its aligned orientation and the reference one; its position
error is the distance between aligned and reference centres, reported as a fraction of the scene radius.

Poses are camera-to-world matrices (4x4 or 3x4); both sets must use the same camera-axis convention
(nerfstudio's OpenGL one for everything ``ns-process-data`` writes and every scene here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Similarity:
    """``x -> scale * rotation @ x + translation``."""

    scale: float
    rotation: np.ndarray
    """(3, 3), a proper rotation (det +1)."""
    translation: np.ndarray
    """(3,)."""

    def apply_points(self, points: np.ndarray) -> np.ndarray:
        """(N, 3) points mapped by the similarity."""
        return self.scale * np.asarray(points, dtype=np.float64) @ self.rotation.T + self.translation

    def apply_poses(self, camera_to_world: np.ndarray) -> np.ndarray:
        """(N, 4, 4) camera-to-world poses moved by the similarity: centres mapped, orientations rotated.

        The result stays rigid (the scale acts on positions only), as a pose in the target frame must.
        """
        poses = as_poses(camera_to_world)
        out = np.tile(np.eye(4), (len(poses), 1, 1))
        out[:, :3, :3] = self.rotation @ poses[:, :3, :3]
        out[:, :3, 3] = self.apply_points(poses[:, :3, 3])
        return out

    def matrix(self) -> np.ndarray:
        """The 4x4 homogeneous matrix of the similarity."""
        out = np.eye(4)
        out[:3, :3] = self.scale * self.rotation
        out[:3, 3] = self.translation
        return out


def as_poses(camera_to_world: np.ndarray) -> np.ndarray:
    """(N, 4, 4) float64 from (N, 4, 4) or (N, 3, 4) camera-to-world matrices."""
    poses = np.asarray(camera_to_world, dtype=np.float64)
    if poses.ndim != 3 or poses.shape[1:] not in ((4, 4), (3, 4)):
        raise ValueError(f"expected (N, 4, 4) or (N, 3, 4) camera-to-world poses, got shape {poses.shape}")
    if poses.shape[1] == 3:
        poses = np.concatenate([poses, np.tile([[[0.0, 0.0, 0.0, 1.0]]], (len(poses), 1, 1))], axis=1)
    return poses


def umeyama(source: np.ndarray, target: np.ndarray, with_scale: bool = True) -> Similarity:
    """The similarity minimising ``sum |target_i - (s R source_i + t)|^2`` over (N, 3) point pairs.

    Needs at least three points that are not all on one line; raises ``ValueError`` otherwise.
    """
    source = np.asarray(source, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    if source.shape != target.shape or source.ndim != 2 or source.shape[1] != 3:
        raise ValueError(
            f"expected two (N, 3) point sets of one shape, got {source.shape} and {target.shape}"
        )
    if len(source) < 3:
        raise ValueError(f"a similarity needs at least 3 point pairs, got {len(source)}")
    mean_source, mean_target = source.mean(axis=0), target.mean(axis=0)
    centred_source, centred_target = source - mean_source, target - mean_target
    covariance = centred_target.T @ centred_source / len(source)
    u, singular, vt = np.linalg.svd(covariance)
    variance = (centred_source**2).sum() / len(source)
    if variance <= 1e-12 * (1.0 + np.abs(source).max() ** 2) or singular[1] <= 1e-9 * singular[0]:
        raise ValueError("the points are (nearly) all on one line or at one point: no unique similarity")
    sign = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[2, 2] = -1.0  # a reflection fits better than any rotation: take the best proper rotation
    rotation = u @ sign @ vt
    scale = float(np.trace(np.diag(singular) @ sign) / variance) if with_scale else 1.0
    translation = mean_target - scale * rotation @ mean_source
    return Similarity(scale, rotation, translation)


def rotation_angle_deg(rotations: np.ndarray) -> np.ndarray:
    """Angle in degrees of each (..., 3, 3) rotation matrix."""
    rotations = np.asarray(rotations, dtype=np.float64)
    cosine = (np.trace(rotations, axis1=-2, axis2=-1) - 1.0) / 2.0
    # |axial vector| = 2 sin(angle): atan2 keeps small angles exact, where arccos(cosine) loses half the digits
    axial = np.stack(
        [
            rotations[..., 2, 1] - rotations[..., 1, 2],
            rotations[..., 0, 2] - rotations[..., 2, 0],
            rotations[..., 1, 0] - rotations[..., 0, 1],
        ],
        axis=-1,
    )
    return np.degrees(np.arctan2(np.linalg.norm(axial, axis=-1) / 2.0, cosine))


@dataclass(frozen=True)
class PoseErrors:
    """Per-camera errors of estimated poses after their similarity alignment to the reference poses."""

    similarity: Similarity
    """Maps the estimated frame onto the reference frame."""
    rotation_deg: np.ndarray
    """(N,) angle between aligned and reference orientation."""
    translation: np.ndarray
    """(N,) distance between aligned and reference camera centres, in reference units."""
    scene_radius: float
    """The radius the translation errors are divided by in :meth:`summary`."""

    def summary(self) -> dict[str, float]:
        """Mean, median and maximum of both errors (translations as a fraction of the scene radius)."""
        relative = self.translation / self.scene_radius
        return {
            "rotation_deg_mean": float(self.rotation_deg.mean()),
            "rotation_deg_median": float(np.median(self.rotation_deg)),
            "rotation_deg_max": float(self.rotation_deg.max()),
            "translation_over_radius_mean": float(relative.mean()),
            "translation_over_radius_median": float(np.median(relative)),
            "translation_over_radius_max": float(relative.max()),
            "scene_radius": float(self.scene_radius),
            "scale": float(self.similarity.scale),
            "num_cameras": len(self.rotation_deg),
        }


def pose_errors(
    estimated: np.ndarray, reference: np.ndarray, scene_radius: float | None = None
) -> PoseErrors:
    """Align ``estimated`` camera-to-world poses to ``reference`` ones (same cameras, same order) by the
    Umeyama similarity of their centres, then measure each camera's rotation and position error.

    ``scene_radius`` defaults to the largest distance of a reference camera from the cameras' mean.
    """
    estimated, reference = as_poses(estimated), as_poses(reference)
    if len(estimated) != len(reference):
        raise ValueError(f"{len(estimated)} estimated poses but {len(reference)} reference poses")
    similarity = umeyama(estimated[:, :3, 3], reference[:, :3, 3])
    aligned = similarity.apply_poses(estimated)
    relative = np.swapaxes(reference[:, :3, :3], 1, 2) @ aligned[:, :3, :3]
    translation = np.linalg.norm(aligned[:, :3, 3] - reference[:, :3, 3], axis=1)
    if scene_radius is None:
        centres = reference[:, :3, 3]
        scene_radius = float(np.linalg.norm(centres - centres.mean(axis=0), axis=1).max())
    if not scene_radius > 0:
        raise ValueError(f"scene radius must be positive, got {scene_radius}")
    return PoseErrors(similarity, rotation_angle_deg(relative), translation, float(scene_radius))
