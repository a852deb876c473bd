"""Contact sheets: a grid of a scene's views in one PNG, for the docs and for looking at a scene at a glance."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np

from eugen_nerf.scenes.validate import SPLITS, clean, load_json


def scene_images(root: Path) -> list[Path]:
    """Image files of a scene in split order (NeRF-Synthetic split files, else transforms.json's frames)."""
    if (root / "transforms.json").is_file():
        return [root / clean(frame["file_path"]) for frame in load_json(root / "transforms.json")["frames"]]
    paths = []
    for split in SPLITS:
        meta = load_json(root / f"transforms_{split}.json")
        paths += [root / (clean(frame["file_path"]) + ".png") for frame in meta["frames"]]
    return paths


def contact_sheet(root: Path, output: Path, count: int = 12, columns: int = 6, gap: int = 2) -> Path:
    """Write ``count`` views spread evenly over the scene into a ``columns``-wide grid (RGBA on white)."""
    paths = scene_images(Path(root))
    chosen = [paths[i] for i in np.linspace(0, len(paths) - 1, min(count, len(paths))).round().astype(int)]
    tiles = []
    for path in chosen:
        image = iio.imread(path).astype(np.float64) / 255.0
        if image.ndim == 2:
            image = np.repeat(image[..., None], 3, axis=2)
        if image.shape[2] == 4:
            image = image[..., :3] * image[..., 3:] + (1.0 - image[..., 3:])
        tiles.append(image[..., :3])
    h, w = tiles[0].shape[:2]
    rows = -(-len(tiles) // columns)
    sheet = np.ones((rows * (h + gap) - gap, columns * (w + gap) - gap, 3))
    for k, tile in enumerate(tiles):
        r, c = divmod(k, columns)
        sheet[r * (h + gap) : r * (h + gap) + h, c * (w + gap) : c * (w + gap) + w] = tile
    output.parent.mkdir(parents=True, exist_ok=True)
    iio.imwrite(output, np.round(sheet * 255.0).astype(np.uint8))
    return output
