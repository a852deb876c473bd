"""The ordered stream of posed depth frames that iSDF trains on, checked frame by frame.

A frame without depth, a depth map with NaN/inf or negative values, or a camera pose that is not a rigid
transform would otherwise surface as NaN losses (or a silently wrong map) many steps later; each raises
:class:`~eugen_nerf.scenes.SceneError` naming the frame instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from eugen_nerf.scenes import Scene, SceneError, load_scene
from eugen_nerf.scenes.validate import check_rigid, load_json, transforms_path


@dataclass(frozen=True)
class DepthFrame:
    """One posed depth image: z-depth in the scene's units (0 = no measurement), OpenGL camera-to-world pose."""

    index: int
    name: str
    depth: Tensor
    """(H, W) float32."""
    camera_to_world: Tensor
    """(4, 4) float32."""


def check_depth_frame(name: str, depth: np.ndarray, camera_to_world: np.ndarray) -> None:
    """Raise :class:`SceneError` naming ``name`` if the depth or the pose cannot be trained on."""
    if depth.ndim != 2:
        raise SceneError(f"frame {name}: depth has shape {depth.shape}, expected (H, W)")
    if not np.all(np.isfinite(depth)):
        raise SceneError(
            f"frame {name}: depth contains {int((~np.isfinite(depth)).sum())} NaN or infinite values"
        )
    if depth.min() < 0:
        raise SceneError(f"frame {name}: depth contains negative values (min {depth.min():.3g})")
    if not np.any(depth > 0):
        raise SceneError(f"frame {name}: depth has no valid measurement")
    check_rigid(camera_to_world, f"frame {name}")


def depth_stream(scene: Scene) -> list[DepthFrame]:
    """All frames of ``scene`` in temporal order, with depth; raises :class:`SceneError` on bad input."""
    frames = []
    for index, frame in enumerate(scene.frames):
        name = f"{index} ({frame.image_path.name})"
        if frame.depth_path is None:
            raise SceneError(f"frame {name}: has no depth map (iSDF needs 'depth_file_path' on every frame)")
        depth = frame.depth()
        check_depth_frame(name, depth, frame.camera_to_world)
        frames.append(
            DepthFrame(
                index=index,
                name=name,
                depth=torch.from_numpy(np.asarray(depth, dtype=np.float32)),
                camera_to_world=torch.from_numpy(frame.camera_to_world.astype(np.float32)),
            )
        )
    return frames


def check_depth_listed(path: Path | str) -> None:
    """Name the first frame of ``transforms.json`` that lists no depth file (the scene validator only
    counts them)."""
    source = transforms_path(Path(path))
    for index, frame in enumerate(load_json(source).get("frames") or []):
        if isinstance(frame, dict) and "depth_file_path" not in frame:
            raise SceneError(
                f"{source}: frame {index} ({frame.get('file_path')}) has no depth map "
                "(iSDF needs 'depth_file_path' on every frame)"
            )


def load_stream(path: Path | str) -> tuple[Scene, list[DepthFrame]]:
    """Load and check an RGB-D scene folder (see :func:`depth_stream`)."""
    check_depth_listed(path)
    scene = load_scene(path)
    if any(
        scene.distortion
    ):  # the rays are a pinhole camera's: a distorted frame's depths would land elsewhere
        raise SceneError(
            f"{path}: its camera has lens distortion (k1, k2, k3, k4, p1, p2 = "
            f"{', '.join(f'{v:g}' for v in scene.distortion)}); undistort the frames first"
        )
    return scene, depth_stream(scene)
