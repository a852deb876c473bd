"""Procedural meshes made with numpy and handed to Blender as PLY files: tubes (branches, wires, springs),
surfaces of revolution (vases, bowls) and a seeded branching tree."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TriangleMesh:
    vertices: np.ndarray  # (V, 3) float64
    faces: np.ndarray  # (F, 3) int64


def merge(meshes: list[TriangleMesh]) -> TriangleMesh:
    offsets = np.cumsum([0] + [len(m.vertices) for m in meshes[:-1]])
    return TriangleMesh(
        np.concatenate([m.vertices for m in meshes]),
        np.concatenate([m.faces + o for m, o in zip(meshes, offsets)]),
    )


def _frame(axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors perpendicular to ``axis`` and to each other."""
    helper = np.array([1.0, 0.0, 0.0]) if abs(axis[0]) < 0.9 else np.array([0.0, 1.0, 0.0])
    u = np.cross(axis, helper)
    u /= np.linalg.norm(u)
    return u, np.cross(axis, u)


def tubes(segments: np.ndarray, sides: int = 8) -> TriangleMesh:
    """Closed tapered cylinders, one per row ``(x0, y0, z0, x1, y1, z1, r0, r1)`` of ``segments``."""
    angles = 2.0 * math.pi * np.arange(sides) / sides
    ring_faces = np.array(
        [[k, (k + 1) % sides, sides + k] for k in range(sides)]
        + [[(k + 1) % sides, sides + (k + 1) % sides, sides + k] for k in range(sides)]
    )
    caps = np.array(
        [[2 * sides, (k + 1) % sides, k] for k in range(sides)]
        + [[2 * sides + 1, sides + k, sides + (k + 1) % sides] for k in range(sides)]
    )
    faces_one = np.concatenate([ring_faces, caps])
    vertices, faces = [], []
    for index, row in enumerate(np.asarray(segments, dtype=np.float64)):
        p0, p1, r0, r1 = row[:3], row[3:6], row[6], row[7]
        axis = p1 - p0
        axis /= np.linalg.norm(axis)
        u, v = _frame(axis)
        circle = np.cos(angles)[:, None] * u + np.sin(angles)[:, None] * v
        vertices.append(np.concatenate([p0 + r0 * circle, p1 + r1 * circle, [p0, p1]]))
        faces.append(faces_one + index * (2 * sides + 2))
    return TriangleMesh(np.concatenate(vertices), np.concatenate(faces))


def lathe(profile: np.ndarray, segments: int = 96) -> TriangleMesh:
    """Surface of revolution about +z of a polyline ``(radius, z)`` (closed at an end where radius is 0)."""
    profile = np.asarray(profile, dtype=np.float64)
    angles = 2.0 * math.pi * np.arange(segments) / segments
    ring = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    vertices = np.concatenate([np.column_stack([r * ring, np.full(segments, z)]) for r, z in profile])
    faces = []
    for i in range(len(profile) - 1):
        for k in range(segments):
            a, b = i * segments + k, i * segments + (k + 1) % segments
            faces += [[a, b, a + segments], [b, b + segments, a + segments]]
    return TriangleMesh(vertices, np.array(faces, dtype=np.int64))


def helix(turns: float, radius: float, height: float, wire: float, steps_per_turn: int = 48) -> np.ndarray:
    """Tube segments of a coil spring about +z starting at the origin."""
    t = np.linspace(0.0, 1.0, int(turns * steps_per_turn) + 1)
    points = np.column_stack(
        [radius * np.cos(2 * math.pi * turns * t), radius * np.sin(2 * math.pi * turns * t), height * t]
    )
    return np.column_stack([points[:-1], points[1:], np.full(len(t) - 1, wire), np.full(len(t) - 1, wire)])


def tree(
    rng: np.random.Generator, depth: int = 7, trunk: float = 0.55, radius: float = 0.045, twig: float = 0.004
) -> np.ndarray:
    """Tube segments of a seeded branching tree rooted at the origin, growing up +z.

    Each branch splits into two or three children, shorter by ~0.72 and thinner by ~0.68, turned 25-45
    degrees from their parent; ``radius`` and ``twig`` are the trunk's and the last generation's radii.
    Each segment starts slightly inside its parent so the joints have no gaps.
    """
    segments: list[list[float]] = []

    def grow(start: np.ndarray, direction: np.ndarray, length: float, r: float, level: int) -> None:
        bend = rng.normal(0.0, 0.12, size=3)
        direction = direction + bend
        direction /= np.linalg.norm(direction)
        end = start + length * direction
        r_end = max(twig, r * 0.75) if level < depth else twig
        segments.append([*(start - 0.5 * r * direction), *end, max(r, twig), r_end])
        if level == depth:
            return
        children = 2 if rng.uniform() < 0.6 else 3
        u, v = _frame(direction)
        phase = rng.uniform(0.0, 2.0 * math.pi)
        for c in range(children):
            tilt = math.radians(rng.uniform(25.0, 45.0))
            spin = phase + 2.0 * math.pi * c / children
            child = math.cos(tilt) * direction + math.sin(tilt) * (math.cos(spin) * u + math.sin(spin) * v)
            child[2] += 0.25  # branches reach upwards
            scale = rng.uniform(0.62, 0.8)
            next_r = twig if level + 1 == depth else max(twig, r * 0.68)
            grow(end, child / np.linalg.norm(child), length * scale, next_r, level + 1)

    grow(np.zeros(3), np.array([0.0, 0.0, 1.0]), trunk, radius, 0)
    return np.array(segments)
