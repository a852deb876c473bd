"""Depth maps in nerfstudio's convention: z-depth, 16-bit PNG in thousandths of a scene unit (millimetres
when the unit is a metre; ``depth_unit_scale_factor`` 1e-3), 0 meaning "no hit".

``.npy`` float maps are read as nerfstudio reads them: in the same thousandths, times the same factor.
"""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np

DEPTH_UNIT_SCALE_FACTOR = 1e-3
"""Metres per PNG unit; equals nerfstudio's default ``depth_unit_scale_factor``."""


def encode_depth(depth: np.ndarray) -> np.ndarray:
    """Scene units -> uint16 thousandths (rounded); refuses depths that do not fit instead of wrapping."""
    units = np.round(depth / DEPTH_UNIT_SCALE_FACTOR)
    if not np.all(np.isfinite(units)) or units.min() < 0 or units.max() > np.iinfo(np.uint16).max:
        raise ValueError("depth must be finite, non-negative and below 65.535 m to fit a 16-bit PNG")
    return units.astype(np.uint16)


def write_depth(path: Path, depth: np.ndarray) -> None:
    iio.imwrite(path, encode_depth(depth))


def read_depth(path: Path) -> np.ndarray:
    """Depth in metres as float32 (H, W); 0 where nothing was hit. A ``.npy`` map is scaled like a PNG, as
    nerfstudio's depth loader scales both by ``depth_unit_scale_factor``: a map in metres would train
    nerfstudio's depth models at a thousandth of its depth."""
    if path.suffix == ".npy":
        return np.load(path).astype(np.float32) * np.float32(DEPTH_UNIT_SCALE_FACTOR)
    raw = iio.imread(path)
    if raw.ndim != 2 or raw.dtype != np.uint16:
        # an 8-bit PNG holds at most 255 mm: a depth map re-saved as 8-bit is clipped garbage, not depth
        raise ValueError(
            f"{path}: depth PNG must be single-channel 16-bit (millimetres), got {raw.dtype} {raw.shape}"
        )
    return raw.astype(np.float32) * DEPTH_UNIT_SCALE_FACTOR
