"""Pictures a person can look at: renders side by side, enlarged without interpolation, labelled.

Used by ``eugen-eval --side-by-side`` (runs beside the ground truth and their difference) and by
``eugen-viewer`` (left | right | difference in the browser).
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont
from torch import Tensor


def difference(a: Tensor, b: Tensor, gain: float = 1.0) -> Tensor:
    """``gain * |a - b|`` per channel, clamped to [0, 1]: black where the two images agree."""
    return ((a - b).abs() * gain).clamp(0.0, 1.0)


def compose(panels: list[Tensor], labels: list[str], min_height: int = 384) -> np.ndarray:
    """Panels ``(H, W, 3)`` in [0, 1] side by side as one uint8 image, labelled in their top-left corners.

    Small renders are enlarged by an integer factor without interpolation (pixels stay pixels) to at least
    ``min_height`` rows, so that a 64-pixel render is seen as one and the labels stay sharp.
    """
    if len(panels) != len(labels):
        raise ValueError(f"{len(panels)} panels but {len(labels)} labels")
    cpu = [panel.detach().float().cpu() for panel in panels]
    image = Image.fromarray((torch.cat(cpu, dim=1).clamp(0, 1).numpy() * 255).round().astype(np.uint8))
    height, width = cpu[0].shape[:2]
    scale = -(-min_height // height)
    image = image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=16)
    for i, label in enumerate(labels):
        draw.text(
            (i * width * scale + 6, 6),
            label,
            fill=(255, 255, 255),
            font=font,
            stroke_width=2,
            stroke_fill=(0, 0, 0),
        )
    return np.asarray(image)
