"""``eugen-scenes measure``: what the generated scenes cost and how good their ground truth is.

Per scene: the generation time and Monte-Carlo noise floor that scene.json recorded, and the view
dependence (:mod:`eugen_nerf.scenes.view_dependence`) for object scenes. Blender object scenes ship no
depth, so their depth maps are rendered once (one sample per pixel, Cycles' Z pass) into a cache folder.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import imageio.v3 as iio
import numpy as np
import tyro

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes.blender.generate import rerender
from eugen_nerf.scenes.depth import read_depth
from eugen_nerf.scenes.photo_capture import check_photo_capture
from eugen_nerf.scenes.validate import SPLITS, clean, validate_any
from eugen_nerf.scenes.view_dependence import View, colour_spread


def _rgba(path: Path) -> tuple[np.ndarray, np.ndarray]:
    image = iio.imread(path).astype(np.float64) / 255.0
    alpha = image[..., 3] if image.shape[-1] == 4 else np.ones(image.shape[:2])
    rgb = (
        image[..., :3] * alpha[..., None] + (1.0 - alpha[..., None])
        if image.shape[-1] == 4
        else image[..., :3]
    )
    return rgb, alpha


def views_of_nerfstudio_scene(root: Path) -> list[View]:
    """Views of a scene with depth and alpha masks in transforms.json (``eugen-scenes render``'s scenes)."""
    meta = json.loads((root / "transforms.json").read_text())
    views = []
    for frame in meta["frames"]:
        rgb, _ = _rgba(root / clean(frame["file_path"]))
        alpha = iio.imread(root / clean(frame["alpha_file_path"])).astype(np.float64) / 255.0
        depth = read_depth(root / clean(frame["depth_file_path"]))
        views.append(
            View(
                rgb,
                alpha,
                depth,
                np.asarray(frame["transform_matrix"], dtype=np.float64),
                float(meta["fl_x"]),
                float(meta["cx"]),
                float(meta["cy"]),
            )
        )
    return views


def views_of_blender_scene(root: Path, depth_cache: Path, quiet: bool = True) -> list[View]:
    """Views of a NeRF-Synthetic-format scene made by ``eugen-scenes blender``, with rendered depth."""
    frames = []
    for split in SPLITS:
        meta = json.loads((root / f"transforms_{split}.json").read_text())
        frames += [
            (clean(f["file_path"]), f["transform_matrix"], meta["camera_angle_x"]) for f in meta["frames"]
        ]
    names = [name for name, _, _ in frames]
    missing = [n for n in names if not (depth_cache / "depth" / f"{n}.npy").is_file()]
    if missing:
        rerender(root, missing, depth_cache, quiet=quiet, samples=1, adaptive_threshold=0.0, depth=True)
    views = []
    for name, pose, angle in frames:
        rgb, alpha = _rgba(root / f"{name}.png")
        depth = np.load(depth_cache / "depth" / f"{name}.npy")
        focal = 0.5 * rgb.shape[1] / math.tan(0.5 * angle)
        views.append(
            View(
                rgb,
                alpha,
                depth,
                np.asarray(pose, dtype=np.float64),
                focal,
                0.5 * rgb.shape[1],
                0.5 * rgb.shape[0],
            )
        )
    return views


def content_hash(root: Path) -> tuple[str, int]:
    """sha256 over every file of a scene folder (relative path and bytes, in path order) and its total size."""
    digest, size = hashlib.sha256(), 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(data).digest())
        size += len(data)
    return digest.hexdigest(), size


def generated_record(root: Path) -> dict[str, Any] | None:
    """What the scene.json of a scene made by ``eugen-scenes`` (Blender objects and garden, photo capture,
    RGB-D room) says about it: kind, size, frames, Blender, samples and what generation measured."""
    try:
        record = json.loads((root / "scene.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or "measured" not in record or "kind" not in record:
        return None
    render = record.get("render", {})
    if "resolution" in record:
        size = {"resolution": record["resolution"], "views": record["views"]}
    else:
        if "width" not in record and (root / "transforms.json").is_file():  # the RGB-D room keeps it there
            meta = json.loads((root / "transforms.json").read_text())
            record = {**record, "width": meta.get("w"), "height": meta.get("h")}
        size = {
            "width": record.get("width", render.get("width")),
            "height": record.get("height", render.get("height")),
            "frames": record.get("frames", record.get("walk", {}).get("num_frames")),
        }
    return {
        "kind": record["kind"],
        **size,
        "blender": record.get("blender"),
        "samples": render.get("samples"),
        **record["measured"],
    }


def measure_scene(
    root: Path, cache: Path, quiet: bool = True, view_dependence: bool = True
) -> dict[str, Any]:
    """``root``'s content hash and generation record; with ``view_dependence``, also the spread of a surface
    point's colour across views (object scenes and scenes with depth and masks)."""
    check_photo_capture(root) or validate_any(root)
    sha, size = content_hash(root)
    result: dict[str, Any] = {"scene": str(root), "content_sha256": sha, "bytes": size}
    record = generated_record(root)
    if record is not None:
        result.update(record)
        if record["kind"] != "object" or not view_dependence:
            return result
        views = views_of_blender_scene(root, cache / root.name, quiet)
    elif not view_dependence:
        return result
    else:
        views = views_of_nerfstudio_scene(root)
    result["view_dependence"] = {
        k: round(v, 5) if isinstance(v, float) else v for k, v in colour_spread(views).items()
    }
    return result


@dataclass
class Measure:
    """Measure scenes: generation time and noise floor (from scene.json) and view dependence (the spread of
    a surface point's colour across the views that see it). Writes one JSON file."""

    scenes: tyro.conf.Positional[tuple[Path, ...]]
    """Scene folders (Blender scenes, or scenes with depth and masks such as scenes/bunny64)."""
    output: Path = Path("benchmarks/scenes/scenes.json")
    """JSON file to write."""
    cache: Path = Path(".cache/scene-depth")
    """Where rendered depth maps of Blender object scenes are kept between runs."""
    view_dependence: bool = True
    """Measure view dependence (renders each object view's depth once); off, only what scene.json recorded
    and the content hash (any scene eugen-scenes generates, at any size)."""

    def main(self) -> None:
        if not self.scenes:
            raise InputError("name at least one scene folder to measure")
        results = [
            measure_scene(Path(root), self.cache, view_dependence=self.view_dependence)
            for root in self.scenes
        ]
        self.output.parent.mkdir(parents=True, exist_ok=True)
        try:  # other records kept in the file (a regeneration check, say) stay
            report = json.loads(self.output.read_text())
        except (OSError, ValueError):
            report = {}
        report = report if isinstance(report, dict) else {}
        # a scene measured again (the same folder, however it was named) replaces its entry in place; the
        # other scenes' entries stay
        measured = {Path(result["scene"]).resolve(): result for result in results}

        def same_scene(entry: object) -> Path | None:
            scene = entry.get("scene") if isinstance(entry, dict) else None
            return (
                Path(scene).resolve()
                if isinstance(scene, str) and Path(scene).resolve() in measured
                else None
            )

        entries = [
            measured.pop(key) if (key := same_scene(entry)) is not None else entry
            for entry in report.get("scenes", [])
        ]
        report = {**report, "scenes": entries + list(measured.values())}
        self.output.write_text(json.dumps(report, indent=2) + "\n")
        for result in results:
            spread = result.get("view_dependence", {}).get("mean_spread")
            floor = result.get("noise_floor", {}).get("psnr")
            print(f"{result['scene']}: view-dependence spread {spread}, noise floor {floor} dB")
