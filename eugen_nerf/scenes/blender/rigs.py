"""Seeded camera paths for the Blender scenes (OpenGL camera-to-world, world +z up, as Blender stores them).

* NeRF-Synthetic's rig: training and validation cameras uniformly at random on the upper hemisphere of
  radius 4.03 looking at the origin; test cameras on a circle 30 degrees up; field of view 0.6911 rad.
* mip-NeRF 360's setting: inward-facing orbits at several heights around a point of interest, every
  eighth frame held out for testing.
"""

from __future__ import annotations

import math

import numpy as np

from eugen_nerf.scenes.cameras import look_at

SYNTHETIC_RADIUS = 4.031128874
"""NeRF-Synthetic's camera distance (|(0, -4, 0.5)| in its Blender files)."""
SYNTHETIC_ANGLE_X = 0.6911112070083618
"""NeRF-Synthetic's camera_angle_x (a 50 mm lens on a 36 mm sensor)."""
TEST_ELEVATION_DEG = 30.0


def look_at_target(position: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Camera-to-world for a camera at ``position`` looking at ``target`` (world +z up)."""
    pose = look_at(np.asarray(position, dtype=np.float64) - target)
    pose[:3, 3] = position
    return pose


def upper_hemisphere(n: int, rng: np.random.Generator, radius: float = SYNTHETIC_RADIUS) -> np.ndarray:
    """``n`` cameras uniformly at random on the upper hemisphere, looking at the origin: (n, 4, 4)."""
    v = rng.normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v[:, 2] = np.abs(v[:, 2])
    return np.stack([look_at(radius * d) for d in v]) if n else np.zeros((0, 4, 4))


def circle(
    n: int,
    elevation_deg: float = TEST_ELEVATION_DEG,
    radius: float = SYNTHETIC_RADIUS,
    start_deg: float = -90.0,
) -> np.ndarray:
    """``n`` cameras evenly around a circle ``elevation_deg`` up, looking at the origin: (n, 4, 4)."""
    elevation = math.radians(elevation_deg)
    azimuth = np.radians(start_deg) + 2.0 * math.pi * np.arange(n) / max(n, 1)
    positions = radius * np.stack(
        [
            math.cos(elevation) * np.cos(azimuth),
            math.cos(elevation) * np.sin(azimuth),
            np.full(n, math.sin(elevation)),
        ],
        axis=1,
    )
    return np.stack([look_at(p) for p in positions]) if n else np.zeros((0, 4, 4))


def synthetic_splits(views: tuple[int, int, int], seed: int) -> dict[str, np.ndarray]:
    """NeRF-Synthetic's three splits for ``views`` = (train, val, test) counts, deterministic in ``seed``.

    Training and validation cameras come from separate random streams, so a smaller split is a prefix of
    a larger one (the shipped 200-pixel scenes see the scene from the first cameras of the full split)."""
    return {
        "train": upper_hemisphere(views[0], np.random.default_rng([seed, 0])),
        "val": upper_hemisphere(views[1], np.random.default_rng([seed, 1])),
        "test": circle(views[2]),
    }


def inward_orbits(
    n: int,
    target: np.ndarray,
    rng: np.random.Generator,
    elevations_deg: tuple[float, ...] = (8.0, 22.0, 38.0),
    distance: tuple[float, float] = (2.6, 3.4),
    jitter_deg: float = 2.0,
) -> np.ndarray:
    """``n`` inward-facing cameras on orbits at several heights around ``target`` (mip-NeRF 360's setting).

    Frames go ring by ring (lowest first), evenly spaced in azimuth with a little seeded jitter in angle,
    distance and aim, as a person walking around an object with a camera would take them.
    """
    target = np.asarray(target, dtype=np.float64)
    rings = np.array_split(np.arange(n), len(elevations_deg))
    poses = []
    for ring, elevation in zip(rings, elevations_deg):
        offset = rng.uniform(0.0, 2.0 * math.pi)
        for k in range(len(ring)):
            azimuth = offset + 2.0 * math.pi * k / len(ring) + math.radians(rng.normal(0.0, jitter_deg))
            up = math.radians(elevation + rng.normal(0.0, jitter_deg))
            r = rng.uniform(*distance)
            position = target + r * np.array(
                [math.cos(up) * math.cos(azimuth), math.cos(up) * math.sin(azimuth), math.sin(up)]
            )
            aim = target + rng.normal(0.0, 0.05, size=3)
            poses.append(look_at_target(position, aim))
    return np.stack(poses)


def every_nth(n: int, step: int = 8) -> dict[str, list[int]]:
    """mip-NeRF 360's split: every ``step``-th frame (from the first) is a test (and val) view."""
    held = list(range(0, n, step))
    return {"train": [i for i in range(n) if i % step], "val": held, "test": held}
