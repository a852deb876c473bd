"""CPU ray casting (open3d ``RaycastingScene``) with Lambert + ambient shading under a fixed world light.

The light is fixed in the world (not a head-light), so the images are multi-view consistent, which is
what a radiance field can represent; the background is composited to white.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import open3d as o3d

from eugen_nerf.scenes.appearance import Appearance
from eugen_nerf.scenes.cameras import Intrinsics
from eugen_nerf.scenes.meshes import Mesh


@dataclass(frozen=True)
class Shading:
    ambient: float = 0.4
    """Fraction of the albedo seen on surfaces facing away from the light."""
    light_direction: tuple[float, float, float] = (0.5, -0.4, 0.75)
    """Direction towards the light, in world coordinates (normalised internally)."""


@dataclass(frozen=True)
class View:
    """One rendered camera: RGB on white and alpha (H, W, [3]) in [0, 1], z-depth in metres (0 = no hit)."""

    rgb: np.ndarray
    alpha: np.ndarray
    depth: np.ndarray


def vertex_normals(mesh: Mesh) -> np.ndarray:
    """Area-weighted vertex normals, for smooth shading."""
    corners = mesh.vertices[mesh.faces]
    face_normals = np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0])
    normals = np.zeros_like(mesh.vertices)
    for corner in range(3):
        np.add.at(normals, mesh.faces[:, corner], face_normals)
    return normals / np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)


class Renderer:
    """Renders views of one mesh; build once, call per camera."""

    def __init__(
        self,
        mesh: Mesh,
        appearance: Appearance,
        shading: Shading = Shading(),
        environment: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    ) -> None:
        """``environment(origins, directions)`` colours the rays that miss the mesh (default: white)."""
        self.mesh = mesh
        self.environment = environment
        self.appearance = appearance
        self.ambient = shading.ambient
        self.light = np.asarray(shading.light_direction, dtype=np.float64)
        self.light /= np.linalg.norm(self.light)
        self.normals = vertex_normals(mesh)
        self.scene = o3d.t.geometry.RaycastingScene()
        self.scene.add_triangles(
            o3d.core.Tensor(mesh.vertices.astype(np.float32)), o3d.core.Tensor(mesh.faces.astype(np.uint32))
        )

    def cast(self, camera_to_world: np.ndarray, directions: np.ndarray) -> dict:
        """Cast rays with camera-space ``directions`` (..., 3); returns open3d's hit record as numpy."""
        world_dirs = directions.reshape(-1, 3) @ camera_to_world[:3, :3].T
        origins = np.broadcast_to(camera_to_world[:3, 3], world_dirs.shape)
        rays = np.concatenate([origins, world_dirs], axis=1).astype(np.float32)
        hits = self.scene.cast_rays(o3d.core.Tensor(rays))
        record = {
            key: hits[key].numpy() for key in ("t_hit", "primitive_ids", "primitive_uvs", "primitive_normals")
        }
        record["origins"], record["directions"] = origins, world_dirs
        return record

    def shade(self, hits: dict) -> tuple[np.ndarray, np.ndarray]:
        """Shaded colour on white (or the environment) and coverage for every ray."""
        hit = np.isfinite(hits["t_hit"])
        rgb = np.ones((len(hit), 3))
        if self.environment is not None:
            rgb[~hit] = self.environment(hits["origins"][~hit], hits["directions"][~hit])
        face_ids = hits["primitive_ids"][hit].astype(np.int64)
        uv = hits["primitive_uvs"][hit].astype(np.float64)
        barycentric = np.stack([1.0 - uv[:, 0] - uv[:, 1], uv[:, 0], uv[:, 1]], axis=1)
        directions = hits["directions"][hit]
        points = hits["origins"][hit] + hits["t_hit"][hit, None] * directions
        normals = np.einsum("nk,nkc->nc", barycentric, self.normals[self.mesh.faces[face_ids]])
        normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
        # Two-sided: shade the side the camera sees (meshes may be open, e.g. the bunny's base).
        facing = np.sign(np.einsum("nc,nc->n", hits["primitive_normals"][hit], directions))
        normals *= np.where(facing > 0, -1.0, 1.0)[:, None]
        lambert = np.clip(normals @ self.light, 0.0, None)
        albedo = np.clip(self.appearance(face_ids, barycentric, points), 0.0, 1.0)
        rgb[hit] = albedo * (self.ambient + (1.0 - self.ambient) * lambert)[:, None]
        return rgb, hit.astype(np.float64)

    def render(self, camera_to_world: np.ndarray, intrinsics: Intrinsics, supersample: int = 2) -> View:
        """Colour is averaged over ``supersample``^2 rays per pixel (anti-aliasing); depth is cast through
        the pixel centre, so back-projecting it with the intrinsics lands exactly on the mesh."""
        h, w, s = intrinsics.height, intrinsics.width, supersample
        rgb, alpha = self.shade(self.cast(camera_to_world, intrinsics.ray_directions(s)))
        rgb = rgb.reshape(h, s, w, s, 3).mean(axis=(1, 3))
        alpha = alpha.reshape(h, s, w, s).mean(axis=(1, 3))
        t_hit = self.cast(camera_to_world, intrinsics.ray_directions(1))["t_hit"].reshape(h, w)
        depth = np.where(np.isfinite(t_hit), t_hit, 0.0)
        return View(rgb=rgb, alpha=alpha, depth=depth)
