"""Camera placement: pinhole intrinsics and camera-to-world poses around an object at the origin.

Poses use the OpenGL/nerfstudio convention (camera looks down -z, +y is up in the image, world +z is up),
so ``transform_matrix`` can be handed to nerfstudio's dataparsers unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_CAMERA_ANGLE_X = 0.6
"""Horizontal field of view (radians) that frames the unit sphere from 3.6 to 4 units away, tightly enough
that a 64-pixel image still puts most pixels on the object."""


@dataclass(frozen=True)
class Intrinsics:
    """Pinhole intrinsics with square pixels and the principal point at the image centre, optionally with
    OpenCV radial-tangential distortion ``(k1, k2, p1, p2)`` (nerfstudio's OPENCV camera model)."""

    width: int
    height: int
    camera_angle_x: float = DEFAULT_CAMERA_ANGLE_X
    distortion: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    @property
    def focal(self) -> float:
        return 0.5 * self.width / math.tan(0.5 * self.camera_angle_x)

    def ray_directions(self, supersample: int = 1) -> np.ndarray:
        """Camera-space directions (height*s, width*s, 3) with z = -1, through sub-pixel centres.

        With z = -1 the ray parameter of a hit equals its z-depth, the depth convention of nerfstudio.
        """
        offsets = (np.arange(supersample) + 0.5) / supersample
        xs = (np.arange(self.width)[:, None] + offsets).ravel()
        ys = (np.arange(self.height)[:, None] + offsets).ravel()
        x, y = np.meshgrid(xs, ys)
        x, y = (x - 0.5 * self.width) / self.focal, (y - 0.5 * self.height) / self.focal
        u, v = undistort(x, y, self.distortion)
        return np.stack([u, -v, -np.ones_like(x)], axis=-1)


def distort(x: np.ndarray, y: np.ndarray, coeffs: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV's radial-tangential model on normalised image coordinates (y down)."""
    k1, k2, p1, p2 = coeffs
    r2 = x * x + y * y
    radial = 1.0 + k1 * r2 + k2 * r2 * r2
    return (
        x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x),
        y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y,
    )


def undistort(xd: np.ndarray, yd: np.ndarray, coeffs: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Invert :func:`distort` by fixed-point iteration (converges for mild distortion; exact for none)."""
    if not any(coeffs):
        return xd, yd
    x, y = xd.copy(), yd.copy()
    for _ in range(50):
        dx, dy = distort(x, y, coeffs)
        x, y = x - (dx - xd), y - (dy - yd)
    return x, y


def look_at(position: np.ndarray) -> np.ndarray:
    """Camera-to-world (4, 4) for a camera at ``position`` looking at the origin with world +z up."""
    back = position / np.linalg.norm(position)
    up = np.array([0.0, 0.0, 1.0])
    if abs(back @ up) > 0.999:  # looking straight down/up: any horizontal "up" will do
        up = np.array([0.0, 1.0, 0.0])
    right = np.cross(up, back)
    right /= np.linalg.norm(right)
    pose = np.eye(4)
    pose[:3, :3] = np.stack([right, np.cross(back, right), back], axis=1)
    pose[:3, 3] = position
    return pose


def fibonacci_directions(n: int, rng: np.random.Generator, hemisphere: bool) -> np.ndarray:
    """Near-uniform unit vectors (a Fibonacci lattice, randomly turned about z) for even view coverage."""
    i = np.arange(n) + 0.5
    z = 1.0 - i / n if hemisphere else 1.0 - 2.0 * i / n
    azimuth = math.pi * (3.0 - math.sqrt(5.0)) * i + rng.uniform(0.0, 2.0 * math.pi)
    r = np.sqrt(1.0 - z**2)
    return np.stack([r * np.cos(azimuth), r * np.sin(azimuth), z], axis=1)


def random_directions(n: int, rng: np.random.Generator, hemisphere: bool) -> np.ndarray:
    """Uniform random unit vectors: held-out views that are not on the training lattice."""
    v = rng.normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    if hemisphere:
        v[:, 2] = np.abs(v[:, 2])
    return v


def orbit_poses(directions: np.ndarray, radius: float) -> np.ndarray:
    """Cameras at ``radius * directions`` looking at the origin: (N, 4, 4)."""
    return np.stack([look_at(radius * d) for d in directions])


def trajectory_poses(
    n: int, radius: float, rng: np.random.Generator, turns: float = 1.5, elevation_deg: float = 25.0
) -> np.ndarray:
    """A smooth ordered path: a slow orbit whose elevation and distance sway gently (an RGB-D stream)."""
    t = np.linspace(0.0, 1.0, n)
    start = rng.uniform(0.0, 2.0 * math.pi)
    azimuth = start + 2.0 * math.pi * turns * t
    elevation = np.radians(elevation_deg + 15.0 * np.sin(2.0 * math.pi * t))
    distance = radius * (1.0 - 0.1 * np.sin(4.0 * math.pi * t) ** 2)
    positions = distance[:, None] * np.stack(
        [np.cos(elevation) * np.cos(azimuth), np.cos(elevation) * np.sin(azimuth), np.sin(elevation)], axis=1
    )
    return np.stack([look_at(p) for p in positions])
