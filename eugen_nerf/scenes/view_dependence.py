"""How view-dependent a scene's appearance is: the spread of a surface point's colour across the views
that see it.

Surface points are taken from each view's depth map (fully covered pixels away from depth edges),
projected into every other view, and kept in a view where that view's depth agrees (the point is
visible there, not occluded). For a point seen in at least ``min_views`` views, its spread is the standard
deviation of its colour across those views (per channel, averaged over R, G, B, colours in [0, 1]). A
Lambertian scene under fixed lighting scores near zero (only resampling and edge blending remain); gloss,
reflection and moving highlights raise it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class View:
    """One image with its geometry: colour on white, coverage, z-depth (0 = none), camera-to-world."""

    rgb: np.ndarray  # (H, W, 3) float in [0, 1]
    alpha: np.ndarray  # (H, W) float in [0, 1]
    depth: np.ndarray  # (H, W) z-depth along the viewing axis, 0 where nothing was hit
    camera_to_world: np.ndarray  # (4, 4) OpenGL convention
    focal: float
    cx: float
    cy: float


def _interior(view: View, edge_tolerance: float) -> np.ndarray:
    """Pixels fully covered whose 3x3 neighbourhood has no depth edge (relative depth range below tolerance)."""
    depth = view.depth
    padded = np.pad(depth, 1, mode="edge")
    stack = np.stack(
        [padded[dy : dy + depth.shape[0], dx : dx + depth.shape[1]] for dy in range(3) for dx in range(3)]
    )
    smooth = (stack.max(axis=0) - stack.min(axis=0)) <= edge_tolerance * np.maximum(depth, 1e-6)
    covered = np.pad(view.alpha >= 0.999, 1, mode="constant")
    covered = np.all(
        np.stack(
            [
                covered[dy : dy + depth.shape[0], dx : dx + depth.shape[1]]
                for dy in range(3)
                for dx in range(3)
            ]
        ),
        axis=0,
    )
    return smooth & covered & (depth > 0) & (stack.min(axis=0) > 0)


def _unproject(view: View, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    z = view.depth[rows, cols]
    x = (cols + 0.5 - view.cx) / view.focal * z
    y = -(rows + 0.5 - view.cy) / view.focal * z
    camera = np.stack([x, y, -z], axis=1)
    return camera @ view.camera_to_world[:3, :3].T + view.camera_to_world[:3, 3]


def _project(view: View, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pixel row, column (continuous, pixel centres at +0.5) and z-depth of world points in ``view``."""
    world_to_camera = np.linalg.inv(view.camera_to_world)
    camera = points @ world_to_camera[:3, :3].T + world_to_camera[:3, 3]
    z = -camera[:, 2]
    safe = np.where(z > 1e-6, z, 1.0)
    cols = camera[:, 0] / safe * view.focal + view.cx
    rows = -camera[:, 1] / safe * view.focal + view.cy
    return rows, cols, z


def colour_spread(
    views: list[View],
    stride: int = 3,
    min_views: int = 5,
    depth_tolerance: float = 0.01,
    edge_tolerance: float = 0.02,
) -> dict[str, float]:
    """Mean and median spread over surface points (see the module docstring), with the point count."""
    interiors = [_interior(view, edge_tolerance) for view in views]
    spreads = []
    for index, view in enumerate(views):
        rows, cols = np.nonzero(interiors[index])
        keep = (rows % stride == 0) & (cols % stride == 0)
        rows, cols = rows[keep], cols[keep]
        if not len(rows):
            continue
        points = _unproject(view, rows, cols)
        colours = np.full((len(views), len(points), 3), np.nan)
        for other_index, other in enumerate(views):
            r, c, z = _project(other, points)
            ri, ci = np.floor(r).astype(int), np.floor(c).astype(int)
            inside = (
                (z > 0) & (ri >= 0) & (ci >= 0) & (ri < other.depth.shape[0]) & (ci < other.depth.shape[1])
            )
            ri, ci = np.clip(ri, 0, other.depth.shape[0] - 1), np.clip(ci, 0, other.depth.shape[1] - 1)
            seen = inside & interiors[other_index][ri, ci]
            seen &= np.abs(other.depth[ri, ci] - z) <= depth_tolerance * z
            colours[other_index, seen] = other.rgb[ri[seen], ci[seen]]
        counts = np.sum(~np.isnan(colours[..., 0]), axis=0)
        enough = counts >= min_views
        if enough.any():
            spreads.append(np.nanstd(colours[:, enough], axis=0).mean(axis=1))
    values = np.concatenate(spreads) if spreads else np.zeros(0)
    return {
        "mean_spread": float(values.mean()) if len(values) else float("nan"),
        "median_spread": float(np.median(values)) if len(values) else float("nan"),
        "points": len(values),
    }
