"""Surface colour: vertex colours, the mesh's own texture, or a real photograph wrapped onto the object.

Every source answers the same question -- the albedo at a surface point given its triangle, barycentric
coordinates and world position -- so the renderer and the baked ``mesh.ply`` colours share one code path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, get_args

import numpy as np

from eugen_nerf.scenes.meshes import Mesh

ColorSource = Literal["auto", "vertex", "texture", "photo"]

PhotoName = Literal["coffee", "astronaut", "chelsea", "rocket"]
"""Colour photographs that ship inside the scikit-image wheel (loading them never downloads)."""
PHOTOS: tuple[str, ...] = get_args(PhotoName)


class Appearance(Protocol):
    def __call__(self, face_ids: np.ndarray, barycentric: np.ndarray, points: np.ndarray) -> np.ndarray:
        """Albedo (N, 3) in [0, 1] for N surface points; ``barycentric`` is (N, 3), weights of each corner."""


def bilinear(image: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Sample ``image`` (H, W, C) at continuous pixel coordinates, clamping at the border."""
    height, width = image.shape[:2]
    x = np.clip(x, 0.0, width - 1.0)
    y = np.clip(y, 0.0, height - 1.0)
    x0 = np.minimum(np.floor(x).astype(np.int64), width - 2)
    y0 = np.minimum(np.floor(y).astype(np.int64), height - 2)
    fx = (x - x0)[:, None]
    fy = (y - y0)[:, None]
    top = image[y0, x0] * (1 - fx) + image[y0, x0 + 1] * fx
    bottom = image[y0 + 1, x0] * (1 - fx) + image[y0 + 1, x0 + 1] * fx
    return top * (1 - fy) + bottom * fy


@dataclass(frozen=True)
class VertexColors:
    """Per-vertex colours interpolated across each triangle."""

    faces: np.ndarray
    colors: np.ndarray

    def __call__(self, face_ids: np.ndarray, barycentric: np.ndarray, points: np.ndarray) -> np.ndarray:
        corners = self.colors[self.faces[face_ids]]  # (N, 3 corners, 3 channels)
        return np.einsum("nk,nkc->nc", barycentric, corners)


@dataclass(frozen=True)
class TextureColors:
    """The mesh's own texture image, looked up through its per-corner UV coordinates."""

    wedge_uvs: np.ndarray
    texture: np.ndarray

    def __call__(self, face_ids: np.ndarray, barycentric: np.ndarray, points: np.ndarray) -> np.ndarray:
        uv = np.einsum("nk,nkc->nc", barycentric, self.wedge_uvs[face_ids])
        uv = np.mod(uv, 1.0)  # textures repeat
        height, width = self.texture.shape[:2]
        return bilinear(self.texture, uv[:, 0] * width - 0.5, (1.0 - uv[:, 1]) * height - 0.5)


@dataclass(frozen=True)
class PhotoColors:
    """A photograph wrapped around the object's vertical (+z) axis.

    The azimuth is mirrored (0 -> pi -> 0 around the object) so the wrap has no seam, and the photo's
    rows follow height, so the mapping is smooth, deterministic and identical from every view.
    """

    photo: np.ndarray

    def __call__(self, face_ids: np.ndarray, barycentric: np.ndarray, points: np.ndarray) -> np.ndarray:
        height, width = self.photo.shape[:2]
        u = np.abs(np.arctan2(points[:, 1], points[:, 0])) / np.pi
        v = 0.5 * (1.0 - np.clip(points[:, 2], -1.0, 1.0))
        return bilinear(self.photo, u * (width - 1), v * (height - 1))


def load_photo(name: PhotoName) -> np.ndarray:
    """A bundled scikit-image colour photograph as float (H, W, 3) in [0, 1]."""
    if name not in PHOTOS:
        raise ValueError(f"Unknown photo {name!r}; choose one of {', '.join(PHOTOS)}")
    import skimage.data

    return getattr(skimage.data, name)()[..., :3].astype(np.float64) / 255.0


def resolve_color_source(mesh: Mesh, source: ColorSource) -> Literal["vertex", "texture", "photo"]:
    """``auto`` prefers what the mesh carries (texture, then vertex colours) and falls back to a photo."""
    if source == "auto":
        return (
            "texture" if mesh.texture is not None else "vertex" if mesh.vertex_colors is not None else "photo"
        )
    if source == "vertex" and mesh.vertex_colors is None:
        raise ValueError("--color vertex: the mesh has no vertex colours")
    if source == "texture" and mesh.texture is None:
        raise ValueError("--color texture: the mesh has no texture")
    return source


def make_appearance(
    mesh: Mesh, source: Literal["vertex", "texture", "photo"], photo: PhotoName
) -> Appearance:
    if source == "vertex":
        assert mesh.vertex_colors is not None
        return VertexColors(mesh.faces, mesh.vertex_colors)
    if source == "texture":
        assert mesh.texture is not None and mesh.wedge_uvs is not None
        return TextureColors(mesh.wedge_uvs, mesh.texture)
    return PhotoColors(load_photo(photo))


def vertex_albedo(mesh: Mesh, appearance: Appearance) -> np.ndarray:
    """Albedo at every vertex (a corner of one of its faces), to bake into the ground-truth mesh."""
    face_ids = np.zeros(len(mesh.vertices), dtype=np.int64)
    barycentric = np.zeros((len(mesh.vertices), 3))
    for corner in range(3):
        face_ids[mesh.faces[:, corner]] = np.arange(len(mesh.faces))
    # Re-derive which corner each vertex is in its chosen face (later corners overwrote earlier ones).
    corner_of_vertex = np.argmax(mesh.faces[face_ids] == np.arange(len(mesh.vertices))[:, None], axis=1)
    barycentric[np.arange(len(mesh.vertices)), corner_of_vertex] = 1.0
    return np.clip(appearance(face_ids, barycentric, mesh.vertices), 0.0, 1.0)
