"""Image files, read one way by every command (``eugen-fit-image``, ``eugen-eval lpips``, scene checks)."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import numpy as np

from eugen_nerf.inputs.errors import InputError


def read_image(path: Path | str, what: str = "image") -> np.ndarray:
    """The pixels of ``path`` as an integer array ``(H, W)`` or ``(H, W, C)``; :class:`InputError` naming the
    file when it is missing, a folder, not an image (a text file named ``.png``), empty or not integer."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: {what} file is missing")
    if not path.is_file():
        raise InputError(f"{path}: {what} is not a file")
    try:
        image = np.asarray(iio.imread(path))
    except Exception as error:  # noqa: BLE001 - imageio raises many kinds for corrupt or foreign files
        raise InputError(f"{path}: {what} file is unreadable ({type(error).__name__}: {error})") from None
    if image.ndim not in (2, 3) or image.size == 0 or min(image.shape[:2]) == 0:
        raise InputError(f"{path}: {what} has shape {image.shape}, expected (H, W) or (H, W, C)")
    if not np.issubdtype(image.dtype, np.integer):
        raise InputError(f"{path}: expected an 8- or 16-bit {what}, got {image.dtype}")
    return image


def read_image_float(path: Path | str, what: str = "image") -> np.ndarray:
    """``(H, W, C)`` float32 in [0, 1], ``C`` = 1 (grey) or 3 (alpha dropped)."""
    image = read_image(path, what)
    scaled = image.astype(np.float32) / np.iinfo(image.dtype).max
    if scaled.ndim == 2:
        scaled = scaled[..., None]
    return np.ascontiguousarray(scaled[..., :3] if scaled.shape[-1] >= 3 else scaled[..., :1])
