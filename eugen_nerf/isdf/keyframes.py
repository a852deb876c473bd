"""iSDF's keyframe buffer: which past frames keep being replayed, and how often.

A frame becomes a keyframe when the map, after training on it, still explains it badly (iSDF's
information-gain test): depth is rendered from the map along ``rays`` of the frame's pixels, and fewer than
``pixel_ratio`` of them come within ``depth_threshold`` (relative) of the measured depth. Each training
window is the latest frame plus keyframes drawn without replacement with probability proportional to their
last loss, so poorly fitted regions are revisited more (iSDF's loss-weighted keyframe sampling).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class KeyframeConfig:
    window_size: int = 5
    """Frames per training step: the latest one and ``window_size - 1`` keyframes (iSDF: 5)."""
    pixel_ratio: float = 0.65
    """A frame is a keyframe if fewer than this fraction of its tested pixels are explained (iSDF)."""
    depth_threshold: float = 0.1
    """A pixel is explained when the depth rendered from the map is within this fraction of the measured
    depth (iSDF's ``kf_dist_th``)."""
    rays: int = 400
    """Pixels of the frame the test renders (iSDF's ``n_rays_is_kf``)."""


@dataclass
class KeyframeBuffer:
    config: KeyframeConfig
    keyframes: list[int] = field(default_factory=list)
    losses: dict[int, float] = field(default_factory=dict)

    def consider(self, frame: int, explained_fraction: float) -> bool:
        """Add ``frame`` if it is the first frame or poorly explained; returns whether it was added."""
        added = not self.keyframes or explained_fraction < self.config.pixel_ratio
        if added:
            self.keyframes.append(frame)
            self.losses[frame] = max(self.losses.values(), default=1.0)
        return added

    def window(self, latest: int, generator: torch.Generator) -> list[int]:
        """``latest`` plus up to ``window_size - 1`` keyframes drawn by loss."""
        candidates = [k for k in self.keyframes if k != latest]
        count = min(self.config.window_size - 1, len(candidates))
        if count == 0:
            return [latest]
        weights = torch.tensor([self.losses[k] for k in candidates], dtype=torch.float64).clamp(min=1e-8)
        drawn = torch.multinomial(weights, count, replacement=False, generator=generator)
        return [latest] + [candidates[i] for i in drawn.tolist()]

    def update(self, frames: list[int], losses: list[float]) -> None:
        """Record the latest loss of every keyframe in ``frames``."""
        for frame, loss in zip(frames, losses):
            if frame in self.losses:
                self.losses[frame] = loss
