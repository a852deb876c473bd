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
    """A photo around a sphere of ``radius`` at the origin above a photo-tiled floor at z = ``floor_z``.

    The photo covers latitudes ``latitudes`` (degrees; its top and bottom rows extend beyond them) with the
    longitude mirrored, so there is no seam; the floor repeats the photo mirrored every ``floor_tile`` units
    out to the sphere. Every ray from inside the sphere hits one of them.
    """

    photo: np.ndarray
    radius: float
    floor_z: float = -1.0
    floor_tile: float = 3.0
    latitudes: tuple[float, float] = (-15.0, 60.0)

    def __call__(self, origins: np.ndarray, directions: np.ndarray) -> np.ndarray:
        d = directions / np.linalg.norm(directions, axis=1, keepdims=True)
        b = np.einsum("nc,nc->n", origins, d)
        c = np.einsum("nc,nc->n", origins, origins) - self.radius**2  # < 0: the cameras are inside
        t_sphere = -b + np.sqrt(b * b - c)
        points = origins + t_sphere[:, None] * d
        longitude = (np.arctan2(points[:, 1], points[:, 0]) + math.pi) / (2.0 * math.pi)  # [0, 1]
        u = 1.0 - np.abs(2.0 * longitude - 1.0)  # mirrored: 0 -> 1 -> 0 around the sphere
        latitude = np.degrees(np.arcsin(np.clip(points[:, 2] / self.radius, -1.0, 1.0)))
        low, high = self.latitudes
        v = (high - latitude) / (high - low)
        height, width = self.photo.shape[:2]
        colors = bilinear(self.photo, u * (width - 1), v * (height - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            t_floor = (self.floor_z - origins[:, 2]) / d[:, 2]
        floor = (d[:, 2] < 0) & (t_floor < t_sphere)
        if floor.any():
            xy = (origins[floor] + t_floor[floor, None] * d[floor])[:, :2] / self.floor_tile
            fx, fy = (1.0 - np.abs(np.mod(xy, 2.0) - 1.0)).T  # mirrored repeat in [0, 1]
            colors[floor] = bilinear(self.photo, fx * (width - 1), fy * (height - 1))
        return colors


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
