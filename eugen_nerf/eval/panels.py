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
    ``min_height`` rows, so that a 64-pixel render is seen as one and the labels stay sharp. A label wider
    than its panel is set smaller and then wrapped, so that it never runs into the next panel's.
    """
    if len(panels) != len(labels):
        raise ValueError(f"{len(panels)} panels but {len(labels)} labels")
    cpu = [panel.detach().float().cpu() for panel in panels]
    image = Image.fromarray((torch.cat(cpu, dim=1).clamp(0, 1).numpy() * 255).round().astype(np.uint8))
    height, width = cpu[0].shape[:2]
    scale = -(-min_height // height)
    image = image.resize((image.width * scale, image.height * scale), Image.Resampling.NEAREST)
    draw = ImageDraw.Draw(image)
    for i, label in enumerate(labels):
        font, lines = fit_label(draw, label, width * scale - 2 * LABEL_MARGIN)
        draw.multiline_text(
            (i * width * scale + LABEL_MARGIN, LABEL_MARGIN),
            "\n".join(lines),
            fill=(255, 255, 255),
            font=font,
            stroke_width=LABEL_STROKE,
            stroke_fill=(0, 0, 0),
        )
    return np.asarray(image)


LABEL_MARGIN = 6
LABEL_STROKE = 2
LABEL_SIZES = (16, 14, 12, 10)
"""Font sizes tried in turn before a label is wrapped (at the smallest)."""


def fit_label(draw: ImageDraw.ImageDraw, label: str, max_width: int) -> tuple[ImageFont.ImageFont, list[str]]:
    """The font and lines of ``label`` that keep every line within ``max_width`` pixels (stroke included):
    the largest of :data:`LABEL_SIZES` that fits on one line, else the smallest, wrapped at spaces (a word
    wider than the panel is broken between characters)."""

    def fits(text: str, font) -> bool:
        return draw.textlength(text, font=font) + 2 * LABEL_STROKE <= max_width

    for size in LABEL_SIZES:
        font = ImageFont.load_default(size=size)
        if fits(label, font):
            return font, [label]
    lines: list[str] = []
    line = ""
    for word in label.split(" "):
        candidate = f"{line} {word}" if line else word
        if fits(candidate, font):
            line = candidate
            continue
        if line:
            lines.append(line)
        line = ""
        for char in word:  # a word wider than the panel
            if line and not fits(line + char, font):
                lines.append(line)
                line = ""
            line += char
    lines.append(line)
    return font, lines
