"""Source meshes: the real meshes bundled in the pymeshlab wheel, or any .obj/.ply file.

Meshes are loaded through pymeshlab (it handles OBJ materials, negative indices, wedge UVs and PLY
colours) and normalised into the scene convention: +z up, centred at the origin, inside the unit sphere.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import imageio.v3 as iio
import numpy as np

from eugen_nerf.inputs.errors import one_line
from eugen_nerf.scenes.validate import SceneError

UpAxis = Literal["x", "y", "z"]


@dataclass(frozen=True)
class BundledMesh:
    """A mesh that ships inside the pymeshlab wheel (under ``pymeshlab/tests/sample_meshes``)."""

    filename: str
    description: str
    up_axis: UpAxis = "y"


BUNDLED_MESHES: dict[str, BundledMesh] = {
    "bunny": BundledMesh("bunny.obj", "Stanford bunny, 28k vertices, geometry only"),
    "textured_bunny": BundledMesh("bunny10k_textured.obj", "Stanford bunny, 10k faces, UV-mapped texture"),
    "cow": BundledMesh("cow.obj", "cow, 3k vertices, geometry only"),
    "airplane": BundledMesh("airplane.obj", "airplane, 7k vertices, geometry only"),
    "colored_airplane": BundledMesh("colored_airplane.ply", "airplane, 7k vertices, per-vertex colours"),
}


def bundled_mesh_dir() -> Path:
    """Folder of pymeshlab's sample meshes (imported lazily: pymeshlab is slow to import)."""
    import pymeshlab

    return Path(pymeshlab.__file__).parent / "tests" / "sample_meshes"


def resolve_mesh(name_or_path: str) -> tuple[Path, BundledMesh | None]:
    """Map a bundled-mesh name or a file path to the mesh file (and its bundled entry, if any)."""
    if name_or_path in BUNDLED_MESHES:
        entry = BUNDLED_MESHES[name_or_path]
        path = bundled_mesh_dir() / entry.filename
        if not path.is_file():
            raise FileNotFoundError(f"pymeshlab no longer ships {entry.filename} (looked in {path.parent})")
        return path, entry
    path = Path(name_or_path)
    if path.suffix.lower() not in (".obj", ".ply"):
        raise ValueError(
            f"Mesh {name_or_path!r} is neither a bundled mesh ({', '.join(BUNDLED_MESHES)}) nor an .obj/.ply file"
        )
    if not path.is_file():
        raise FileNotFoundError(f"Mesh file {path} does not exist")
    return path, None


@dataclass(frozen=True)
class Mesh:
    """A triangle mesh with the optional colour sources the renderer can use."""

    vertices: np.ndarray  # (V, 3) float64
    faces: np.ndarray  # (F, 3) int64
    vertex_colors: np.ndarray | None = None  # (V, 3) float in [0, 1]
    wedge_uvs: np.ndarray | None = None  # (F, 3, 2) texture coordinates per face corner
    texture: np.ndarray | None = None  # (H, W, 3) float in [0, 1]


def load_mesh(path: Path) -> Mesh:
    """Load a mesh file with its vertex colours and (first) texture, if it has them."""
    import pymeshlab

    meshset = pymeshlab.MeshSet()
    try:
        meshset.load_new_mesh(str(path))
    except pymeshlab.PyMeshLabException as error:  # empty, truncated or foreign files
        raise SceneError(f"--mesh {path}: unreadable mesh file ({one_line(error)})") from None
    mesh = meshset.current_mesh()
    vertices = np.asarray(mesh.vertex_matrix(), dtype=np.float64)
    faces = np.asarray(mesh.face_matrix(), dtype=np.int64)
    if len(vertices) == 0 or len(faces) == 0:
        raise SceneError(f"--mesh {path}: the mesh has {len(vertices)} vertices and {len(faces)} faces")
    if not np.all(np.isfinite(vertices)):
        raise SceneError(f"--mesh {path}: vertex positions contain NaN or infinite values")
    vertex_colors = np.asarray(mesh.vertex_color_matrix())[:, :3] if mesh.has_vertex_color() else None
    wedge_uvs = texture = None
    textures = list(mesh.textures()) if mesh.has_wedge_tex_coord() else []
    if textures:
        wedge_uvs = np.asarray(mesh.wedge_tex_coord_matrix(), dtype=np.float64).reshape(-1, 3, 2)
        image = iio.imread(path.parent / textures[0])
        image = np.atleast_3d(image)[..., :3]
        texture = np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image
        texture = texture.astype(np.float64) / np.iinfo(image.dtype).max
    # pymeshlab reports white for meshes without colour; only trust colours that vary.
    if vertex_colors is not None and np.ptp(vertex_colors, axis=0).max() == 0:
        vertex_colors = None
    return Mesh(vertices, faces, vertex_colors, wedge_uvs, texture)


@dataclass(frozen=True)
class Normalisation:
    """world = scale * (rotation @ (original - center)): recorded so scenes map back to the source file."""

    center: np.ndarray
    scale: float
    rotation: np.ndarray


_UP_TO_Z = {
    "x": np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]),
    "y": np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]),
    "z": np.eye(3),
}


def normalise(mesh: Mesh, up_axis: UpAxis = "y", radius: float = 1.0) -> tuple[Mesh, Normalisation]:
    """Rotate ``up_axis`` to +z, centre the bounding box at the origin and scale into a sphere of ``radius``.

    A fixed convention lets every scene share one camera rig (radius 4, near 2, far 6) and one scene box.
    """
    rotation = _UP_TO_Z[up_axis]
    center = 0.5 * (mesh.vertices.min(axis=0) + mesh.vertices.max(axis=0))
    rotated = (mesh.vertices - center) @ rotation.T
    scale = radius / float(np.linalg.norm(rotated, axis=1).max())
    return replace(mesh, vertices=rotated * scale), Normalisation(center, scale, rotation)


def sha256(path: Path) -> str:
    """Content hash recorded in scene.json, so provenance survives pymeshlab upgrades."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
