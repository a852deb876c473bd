"""Contact sheets: a grid of a scene's views in one PNG, for the docs and for looking at a scene at a glance."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import imageio.v3 as iio
import numpy as np

from eugen_nerf.scenes.validate import SPLITS, clean, load_json


def scene_images(root: Path) -> list[Path]:
    """Image files of a scene in split order (NeRF-Synthetic split files, else transforms.json's frames)."""
    if (root / "transforms.json").is_file():
        return [root / clean(frame["file_path"]) for frame in load_json(root / "transforms.json")["frames"]]
    if (
        not (root / f"transforms_{SPLITS[0]}.json").is_file() and (root / "images").is_dir()
    ):  # a photo capture
        return sorted(p for p in (root / "images").iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    paths = []
    for split in SPLITS:
        meta = load_json(root / f"transforms_{split}.json")
        paths += [root / (clean(frame["file_path"]) + ".png") for frame in meta["frames"]]
    return paths


def _tile(path: Path, size: int | None) -> np.ndarray:
    """One view as RGB in [0, 1] (RGBA composited on white), resized to ``size`` pixels wide if given."""
    image = iio.imread(path)
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    if size is not None and image.shape[1] != size:
        from PIL import Image

        height = max(1, round(image.shape[0] * size / image.shape[1]))
        image = np.asarray(Image.fromarray(image).resize((size, height), Image.Resampling.LANCZOS))
    image = image.astype(np.float64) / 255.0
    if image.shape[2] == 4:
        image = image[..., :3] * image[..., 3:] + (1.0 - image[..., 3:])
    return image[..., :3]


def contact_sheet(
    roots: Path | Sequence[Path],
    output: Path,
    count: int = 12,
    columns: int = 6,
    gap: int = 2,
    size: int | None = None,
) -> Path:
    """Write ``count`` views spread evenly over each scene of ``roots`` into a ``columns``-wide grid (RGBA on
    white), scene after scene, each in a cell of the largest view's size. ``size`` resizes every view to
    that width first."""
    roots = [Path(roots)] if isinstance(roots, (str, Path)) else [Path(r) for r in roots]
    tiles = []
    for root in roots:
        paths = scene_images(root)
        chosen = [
            paths[i] for i in np.linspace(0, len(paths) - 1, min(count, len(paths))).round().astype(int)
        ]
        tiles += [_tile(path, size) for path in chosen]
    h, w = max(t.shape[0] for t in tiles), max(t.shape[1] for t in tiles)  # smaller views sit centred
    rows = -(-len(tiles) // columns)
    sheet = np.ones((rows * (h + gap) - gap, columns * (w + gap) - gap, 3))
    for k, tile in enumerate(tiles):
        r, c = divmod(k, columns)
        top, left = r * (h + gap) + (h - tile.shape[0]) // 2, c * (w + gap) + (w - tile.shape[1]) // 2
        sheet[top : top + tile.shape[0], left : left + tile.shape[1]] = tile
    output.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(output, np.round(sheet * 255.0).astype(np.uint8))
    return output
