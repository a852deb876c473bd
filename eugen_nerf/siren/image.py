"""Images as coordinate -> value training sets for SIREN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from skimage import data as skimage_data
from skimage.transform import resize
from torch import Tensor

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.inputs.images import read_image_float

SKIMAGE_IMAGES = (
    "astronaut",
    "brick",
    "camera",
    "cat",
    "checkerboard",
    "chelsea",
    "clock",
    "coffee",
    "coins",
    "grass",
    "gravel",
    "horse",
    "moon",
    "page",
    "rocket",
    "text",
)
"""``skimage.data`` images accepted by name (functions of ``skimage.data`` that need no download)."""


def load_image(name: str, size: int) -> np.ndarray:
    """A ``skimage.data`` image by name (e.g. ``camera``) or an image file, resized to ``size``², in [0, 1].

    Returns ``(size, size, C)`` float32 (``C`` = 1 for greyscale, 3 for colour).
    """
    path = Path(name)
    if path.suffix or path.exists():  # a file name: read (and checked) by the shared image reader
        image = read_image_float(path, "--image")
    elif name in SKIMAGE_IMAGES:
        image = np.asarray(getattr(skimage_data, name)(), dtype=np.float32)
        image = image / 255.0 if image.max() > 1.0 else image
        image = image[..., None] if image.ndim == 2 else image[..., :3]
    else:
        raise InputError(
            f"--image {name!r} is neither an image file nor a skimage.data image (e.g. 'camera')"
        )
    return resize(image, (size, size, image.shape[-1]), anti_aliasing=True).astype(np.float32)


def pixel_grid(height: int, width: int) -> Tensor:
    """``(H·W, 2)`` pixel-centre coordinates in ``[-1, 1]²``, row-major (SIREN's ``get_mgrid``)."""
    ys = torch.linspace(-1.0, 1.0, height)
    xs = torch.linspace(-1.0, 1.0, width)
    return torch.stack(torch.meshgrid(ys, xs, indexing="ij"), dim=-1).reshape(-1, 2)


def to_signed(image: Tensor) -> Tensor:
    """[0, 1] -> [-1, 1], SIREN's normalisation of pixel values (zero-mean targets for a linear output)."""
    return image * 2.0 - 1.0


def from_signed(values: Tensor) -> Tensor:
    """[-1, 1] -> [0, 1], clamped."""
    return ((values + 1.0) / 2.0).clamp(0.0, 1.0)
