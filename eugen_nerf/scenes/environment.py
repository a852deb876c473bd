"""What rays that miss the object see in the capture-style scenes: a photograph on a far sphere (unbounded
360) or on a backdrop plane behind the object (forward-facing). Both are unlit, like a real distant scene."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from eugen_nerf.scenes.appearance import bilinear

BACKDROP_MISS_COLOR = 0.5
"""Grey for the (out-of-view) rays that pass beside the backdrop plane."""


@dataclass(frozen=True)
class SphereEnvironment:
    """A photo wrapped around a sphere of ``radius`` at the origin (longitude mirrored, so there is no seam)."""

    photo: np.ndarray
    radius: float

    def __call__(self, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        d = directions / np.linalg.norm(directions, axis=1, keepdims=True)
        b = np.einsum("nc,nc->n", origins, d)
        c = np.einsum("nc,nc->n", origins, origins) - self.radius**2  # < 0: the cameras are inside
        points = origins + (-b + np.sqrt(b * b - c))[:, None] * d
        longitude = (np.arctan2(points[:, 1], points[:, 0]) + math.pi) / (2.0 * math.pi)  # [0, 1]
        u = 1.0 - np.abs(2.0 * longitude - 1.0)  # mirrored: 0 -> 1 -> 0 around the sphere
        v = np.arccos(np.clip(points[:, 2] / self.radius, -1.0, 1.0)) / math.pi  # 0 at the top
        height, width = self.photo.shape[:2]
        return bilinear(self.photo, u * (width - 1), v * (height - 1))


@dataclass(frozen=True)
class PlaneBackdrop:
    """A photo on the plane x = ``x`` facing +x, centred on the z axis, ``half_size`` wide each way."""

    photo: np.ndarray
    x: float
    half_size: float

    def __call__(self, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        colors = np.full((len(origins), 3), BACKDROP_MISS_COLOR)
        toward = directions[:, 0] < -1e-9
        t = (self.x - origins[toward, 0]) / directions[toward, 0]
        points = origins[toward] + t[:, None] * directions[toward]
        height, width = self.photo.shape[:2]
        u = (points[:, 1] + self.half_size) / (2.0 * self.half_size)
        v = (self.half_size - points[:, 2]) / (2.0 * self.half_size)
        inside = (u >= 0) & (u <= 1) & (v >= 0) & (v <= 1)
        sampled = bilinear(self.photo, u * (width - 1), v * (height - 1))
        colors[np.flatnonzero(toward)[inside]] = sampled[inside]
        return colors
