"""Near/far, background and scene contraction chosen from the data (a bounded object or an unbounded scene).

nerfstudio's stock methods fix these per method (vanilla NeRF: near 2 / far 6 on white, for Blender
objects; nerfacto: near 0.05 / far 1000, contraction, for auto-scaled captures). Our methods decide from the
dataset instead, in the frame the dataparser produced (after its orientation, centring and scaling):

1. **scene.json** (an ``eugen-scenes`` object scene) declares ``near``, ``far`` and ``background`` in its own
   world units: used as written, times the dataparser's scale.
2. Otherwise the **image borders** decide: if nearly all border pixels of the training images are one known
   colour (white or black), the data is a bounded object on a known background. The cameras' optical axes
   then meet at the object (their least-squares focus point); an object seen whole by every camera lies
   within half the nearest camera's distance of it, so near = 0.5 * min distance, far = 1.5 * max distance.
   No contraction. These ratios are invariant to rotation, offset and scale. So are the positions a field
   reads: the object's frame puts the focus point at the origin and the nearest camera
   :data:`OBJECT_CAMERA_DISTANCE` away, as in an eugen-scenes object, so that positional encodings and
   SIREN frequencies see the object at the same size whatever frame the poses were written in.
3. Anything else is an **unbounded** scene (a capture, a 360 scene, a forward-facing one): nerfacto's
   settings for auto-scaled poses, near 0.05, far 1000, scene contraction, and the ray's last sample as
   background.

Every field can be overridden on the command line (``--pipeline.model.near-plane`` etc.).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes.validate import is_synthetic_folder

FRAMING_KEY = "eugen_framing"
"""Key of the :class:`Framing` in the training dataset's metadata (which nerfstudio hands to the model)."""

Background = Literal["white", "black", "random", "last_sample"]
KNOWN_BACKGROUNDS = {"white": 1.0, "black": 0.0}
BORDER_FRACTION = 0.95
"""Share of border pixels that must be the background colour for the data to count as an object scene."""
BORDER_TOLERANCE = 0.08
"""Largest per-channel difference from the background colour (JPEG ringing, anti-aliasing)."""
OBJECT_NEAR, OBJECT_FAR = 0.5, 1.5
"""Object scenes: near and far as multiples of the nearest / farthest camera's distance to the focus point."""
FRAMING_IMAGES = 8
"""Training images (evenly spread) whose borders decide between an object scene and an unbounded one."""
OBJECT_CAMERA_DISTANCE = 4.0
"""Distance of the nearest camera from an object in the object's frame: what eugen-scenes objects (radius about
1, near 2, far 6) are shot from, so their frame is their world frame."""
UNBOUNDED_NEAR, UNBOUNDED_FAR = 0.05, 1000.0
"""Unbounded scenes: nerfacto's planes for poses auto-scaled into the unit cube."""


@dataclass(frozen=True)
class Framing:
    kind: Literal["object", "unbounded"]
    near: float
    far: float
    background: Background
    contraction: bool
    source: str
    """Where the values come from, for the log line."""
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """The object's frame: models whose fields read raw positions (NeRF, SIREN) render rays moved to
    ``(x - origin) / unit``; near, far and depths stay in the dataparser's units."""
    unit: float = 1.0
    """Dataparser units per unit of the object's frame."""

    @property
    def moves_rays(self) -> bool:
        """Whether the object's frame differs from the dataparser's."""
        return self.unit != 1.0 or any(value != 0.0 for value in self.origin)

    def describe(self) -> str:
        what = f"object on {self.background}" if self.kind == "object" else "unbounded scene"
        contraction = "scene contraction" if self.contraction else "no scene contraction"
        frame = ""
        if self.moves_rays:
            origin = ", ".join(f"{value:.3g}" for value in self.origin)
            frame = f", object frame at ({origin}) with unit {self.unit:.3g}"
        return (
            f"{what}: near {self.near:.3g}, far {self.far:.3g}, background {self.background}, "
            f"{contraction}{frame} ({self.source})"
        )

    def override(
        self,
        near: float | None = None,
        far: float | None = None,
        background: str | None = None,
        contraction: bool | None = None,
    ) -> Framing:
        """Command-line values (``None``/``"auto"``: keep the data's) replace the chosen ones."""
        changes = {
            "near": near,
            "far": far,
            "background": None if background == "auto" else background,
            "contraction": contraction,
        }
        changes = {key: value for key, value in changes.items() if value is not None}
        if not changes:
            return self
        framing = replace(self, **changes, source=f"{self.source}; command line: {', '.join(changes)}")
        if not 0.0 <= framing.near < framing.far:
            raise InputError(f"near plane {framing.near} and far plane {framing.far} need 0 <= near < far")
        return framing


OBJECT_DEFAULT = Framing("object", 2.0, 6.0, "white", False, "defaults for eugen-scenes objects")
"""The framing of a model built without our datamanager, which has no data to decide it from."""


NERF_SYNTHETIC_FRAMING = {"near": 2.0, "far": 6.0, "background": "white"}
"""What a NeRF-Synthetic folder declares by its format (blender-data's near, far and alpha colour): an object
inside ±1.5 seen from about 4 units, on white. Its objects may reach the image border (a floor, a plate), so
the border test would not find the background."""


def scene_json_hint(data: Path | None) -> dict | None:
    """``near``/``far``/``background`` of an eugen-scenes object scene (``scene.json`` beside the data), or
    the format's own for a NeRF-Synthetic folder."""
    if data is None:
        return None
    root = Path(data) if Path(data).suffix != ".json" else Path(data).parent
    if is_synthetic_folder(root):
        return dict(NERF_SYNTHETIC_FRAMING)
    path = root / "scene.json"
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or not all(key in meta for key in ("near", "far", "background")):
        return None
    if meta["background"] not in KNOWN_BACKGROUNDS:
        return None
    return {"near": float(meta["near"]), "far": float(meta["far"]), "background": meta["background"]}


def declared_frame_mismatch(
    hint: dict, camera_to_worlds: np.ndarray, dataparser_scale: float = 1.0, at_origin: bool = False
) -> str | None:
    """Why the cameras contradict scene.json's declared frame (``None`` if they agree).

    The declaration holds for the cameras it was written with: they look at one point (the object,
    at the origin when ``at_origin``, i.e. for poses used verbatim) from between ``near`` and ``far``. A
    copy whose poses were re-expressed in another frame keeps a scene.json that no longer applies.
    """
    poses = np.asarray(camera_to_worlds, dtype=np.float64)
    focus = focus_point(poses)
    if focus is None:
        return "the cameras do not look at one point"
    distances = np.linalg.norm(poses[:, :3, 3] - focus, axis=1)
    near, far = hint["near"] * dataparser_scale, hint["far"] * dataparser_scale
    if not near < distances.min() <= distances.max() < far:
        return (
            f"the cameras are {distances.min():.3g} to {distances.max():.3g} from their focus point, "
            f"outside near {near:.3g} / far {far:.3g}"
        )
    if at_origin and np.linalg.norm(focus) > dataparser_scale:
        return f"the cameras look at {np.round(focus, 3).tolist()}, not at the origin"
    return None


def border_background(images: Sequence[np.ndarray]) -> str | None:
    """``"white"``/``"black"`` when nearly all border pixels of ``images`` ((H, W, 3) in [0, 1]) are that."""
    borders = []
    for image in images:
        image = np.asarray(image, dtype=np.float64)[..., :3]
        borders += [image[:2].reshape(-1, 3), image[-2:].reshape(-1, 3)]
        borders += [image[:, :2].reshape(-1, 3), image[:, -2:].reshape(-1, 3)]
    if not borders:
        return None
    pixels = np.concatenate(borders)
    for name, value in KNOWN_BACKGROUNDS.items():
        if np.mean(np.all(np.abs(pixels - value) <= BORDER_TOLERANCE, axis=1)) >= BORDER_FRACTION:
            return name
    return None


def evenly_spread(count: int, size: int = FRAMING_IMAGES) -> list[int]:
    """Up to ``size`` indices spread evenly over ``range(count)`` (the images the framing looks at)."""
    return sorted({int(i) for i in np.linspace(0, count - 1, min(size, count)).round()})


def focus_point(camera_to_worlds: np.ndarray) -> np.ndarray | None:
    """Least-squares point closest to every optical axis (OpenGL cameras look down -z); ``None`` when the
    axes are (nearly) parallel or the point is behind a camera."""
    origins = camera_to_worlds[:, :3, 3]
    axes = -camera_to_worlds[:, :3, 2]
    axes = axes / np.linalg.norm(axes, axis=1, keepdims=True)
    projectors = np.eye(3)[None] - axes[:, :, None] * axes[:, None, :]
    lhs, rhs = projectors.sum(axis=0), np.einsum("nij,nj->i", projectors, origins)
    eigenvalues = np.linalg.eigvalsh(lhs)
    if eigenvalues[0] < 1e-3 * len(origins):
        return None
    point = np.linalg.solve(lhs, rhs)
    if np.any(np.einsum("ni,ni->n", point - origins, axes) <= 0):
        return None
    return point


def choose_framing(
    camera_to_worlds: np.ndarray,
    images: Sequence[np.ndarray],
    hint: dict | None = None,
    dataparser_scale: float = 1.0,
) -> Framing:
    """The framing of a dataset from its training cameras (N, 3|4, 4), a few training images, scene.json."""
    if hint is not None:
        near, far = hint["near"] * dataparser_scale, hint["far"] * dataparser_scale
        return Framing("object", near, far, hint["background"], False, "scene.json")
    background = border_background(images)
    focus = focus_point(np.asarray(camera_to_worlds, dtype=np.float64)) if background else None
    if background is not None and focus is not None:
        distances = np.linalg.norm(np.asarray(camera_to_worlds)[:, :3, 3] - focus, axis=1)
        return Framing(
            "object",
            OBJECT_NEAR * float(distances.min()),
            OBJECT_FAR * float(distances.max()),
            background,
            False,
            f"{background} image borders; cameras look at one point",
            origin=tuple(float(value) for value in focus),
            unit=float(distances.min()) / OBJECT_CAMERA_DISTANCE,
        )
    reason = "image borders are not one colour" if background is None else "cameras do not look at one point"
    return Framing("unbounded", UNBOUNDED_NEAR, UNBOUNDED_FAR, "last_sample", True, reason)
