"""Marching-cubes surface of an SDF field and its ``.ply`` export."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import open3d as o3d
import torch
from skimage.measure import marching_cubes
from torch import Tensor

SDFFunction = Callable[[Tensor], Tensor]


@torch.no_grad()
def sdf_grid(
    sdf: SDFFunction, half_extent: float, resolution: int, device: torch.device, chunk: int = 65536
) -> np.ndarray:
    """``(R, R, R)`` SDF values on a regular grid over ``[-half_extent, half_extent]³`` (index order x, y, z)."""
    axis = torch.linspace(-half_extent, half_extent, resolution)
    points = torch.stack(torch.meshgrid(axis, axis, axis, indexing="ij"), dim=-1).reshape(-1, 3)
    values = torch.cat([sdf(part.to(device)).reshape(-1).cpu() for part in points.split(chunk)])
    return values.reshape(resolution, resolution, resolution).numpy()


def extract_mesh(
    sdf: SDFFunction, half_extent: float = 1.1, resolution: int = 64, device: torch.device | None = None
) -> o3d.geometry.TriangleMesh:
    """The zero level set as a triangle mesh in world coordinates; raises if the SDF never changes sign."""
    grid = sdf_grid(sdf, half_extent, resolution, device or torch.device("cpu"))
    if not grid.min() < 0.0 < grid.max():
        raise ValueError(
            f"the SDF has no zero crossing in the box (range {grid.min():.3g} .. {grid.max():.3g})"
        )
    spacing = 2.0 * half_extent / (resolution - 1)
    # skimage's default winding ("descent") makes the normals point towards increasing SDF: outwards.
    vertices, faces, _, _ = marching_cubes(grid, level=0.0, spacing=(spacing,) * 3)
    mesh = o3d.geometry.TriangleMesh(
        o3d.utility.Vector3dVector(vertices - half_extent), o3d.utility.Vector3iVector(faces)
    )
    mesh.compute_vertex_normals()
    return mesh


def export_mesh(mesh: o3d.geometry.TriangleMesh, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not o3d.io.write_triangle_mesh(str(path), mesh):
        raise OSError(f"could not write the mesh to {path}")
    return path
