"""The streaming iSDF trainer: frames arrive in order, the map trains on a window of keyframes.

For each arriving frame (every ``frame_stride``-th frame of the trajectory, as a real-time system drops
frames it cannot keep up with), the trainer runs ``steps_per_frame`` optimisation steps on a window made of
that frame and keyframes drawn by loss, then decides, as iSDF does, whether the frame becomes a keyframe:
does the map, having trained on it, render its depth?

After the stream, :meth:`StreamingTrainer.settle` keeps optimising as a live system does while the camera
rests on its last frame: the same windows (that frame and keyframes drawn by loss), no new frame. The whole
state (field, optimiser, keyframe buffer, random generator) round-trips through :meth:`state_dict`, so a
long run continues where it stopped.

Simplifications against iSDF (documented in docs/methods.md): a fixed number of steps per frame instead of
wall-clock-driven training (and no extra steps for a new keyframe), uniform pixel sampling instead of
loss-weighted pixel sampling, and no colour.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field

import torch
from rich.progress import Progress
from torch import Tensor

from eugen_nerf.eval.timing import cpu_denormals_flushed, synchronize
from eugen_nerf.fields.isdf import ISDFField, ISDFFieldConfig
from eugen_nerf.inputs.errors import NumericalError
from eugen_nerf.isdf.frames import DepthFrame
from eugen_nerf.isdf.keyframes import KeyframeBuffer, KeyframeConfig
from eugen_nerf.isdf.losses import ISDFLossConfig, isdf_losses
from eugen_nerf.isdf.sampling import (
    RayBatch,
    SamplingConfig,
    camera_directions,
    frame_rays,
    pc_bounds,
    render_depth,
    sample_distances,
    sample_points,
)
from eugen_nerf.scenes import Scene


@dataclass
class StreamingConfig:
    """How the stream is consumed and the map optimised (iSDF's values unless noted)."""

    sdf: ISDFFieldConfig = dataclass_field(default_factory=ISDFFieldConfig)
    sampling: SamplingConfig = dataclass_field(default_factory=SamplingConfig)
    loss: ISDFLossConfig = dataclass_field(default_factory=ISDFLossConfig)
    keyframes: KeyframeConfig = dataclass_field(default_factory=KeyframeConfig)
    frame_stride: int = 2
    """Train on every n-th frame of the trajectory."""
    steps_per_frame: int = 10
    """Optimisation steps after each arriving frame."""
    rays_per_frame: int = 64
    """Rays drawn from each frame of the window per step (iSDF: 200; fewer keeps a CPU run in minutes)."""
    lr: float = 0.0013
    """Adam learning rate (iSDF's)."""
    weight_decay: float = 0.012
    """Adam weight decay (iSDF's)."""
    seed: int = 0
    """Seed of the field's initial weights (and EUGen projections) and of the rays drawn each step."""


@dataclass
class TrainingLog:
    """Loss per step, keyframes chosen, and the training wall-clock time (synchronised)."""

    losses: list[float] = dataclass_field(default_factory=list)
    keyframes: list[int] = dataclass_field(default_factory=list)
    train_seconds: float = 0.0
    steps: int = 0


class StreamingTrainer:
    """Trains an :class:`ISDFField` online from an ordered list of :class:`DepthFrame`."""

    def __init__(
        self, config: StreamingConfig, scene: Scene, frames: Sequence[DepthFrame], device: torch.device
    ):
        config = replace(config, sampling=config.sampling.for_scene(scene.metadata))
        self.config = config
        self.frames = list(frames)
        self.device = torch.device(device)
        torch.manual_seed(config.seed)
        self.field = ISDFField(config.sdf).to(self.device)
        self.optimizer = torch.optim.AdamW(
            self.field.parameters(), lr=config.lr, weight_decay=config.weight_decay
        )
        self.directions = camera_directions(torch.from_numpy(scene.intrinsics), scene.height, scene.width)
        self.buffer = KeyframeBuffer(config.keyframes)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.steps_done = 0
        self.latest: int | None = None
        """The last frame that arrived (``None`` before the stream)."""

    def rays(self, indices: Sequence[int], count: int | None = None) -> RayBatch:
        """``count`` (default ``rays_per_frame``) uniformly drawn rays of each frame in ``indices``."""
        rays = frame_rays(
            [self.frames[i] for i in indices],
            self.directions,
            count or self.config.rays_per_frame,
            self.generator,
        )
        return RayBatch(*(tensor.to(self.device) for tensor in (rays.origins, rays.directions, rays.depth)))

    def step(self, window: Sequence[int]) -> Tensor:
        """One optimisation step on ``window``; returns the per-frame mean loss ``(len(window),)``.

        On the CPU it runs with denormal floats flushed to zero (a trained field's tiny activations and
        gradients otherwise slow it severalfold; see :func:`cpu_denormals_flushed`)."""
        with cpu_denormals_flushed(self.device):
            return self._step(window)

    def _step(self, window: Sequence[int]) -> Tensor:
        rays = self.rays(window)
        distances = sample_distances(rays, self.config.sampling, self.generator)
        points = sample_points(rays, distances)
        bounds = pc_bounds(rays, distances, points)
        self.field.train()
        sdf, gradient = self.field.sdf_and_gradient(points, create_graph=True)
        losses = isdf_losses(sdf[..., 0], gradient, bounds, self.config.loss)
        per_sample = losses["sdf"] + losses["eikonal"]
        for name, value in losses.items():
            if not bool(torch.isfinite(value).all()):
                raise NumericalError(
                    f"step {self.steps_done}: iSDF loss '{name}' is non-finite (window frames {list(window)}); "
                    "stopped before the optimiser step"
                )
        self.steps_done += 1
        self.optimizer.zero_grad(set_to_none=True)
        per_sample.mean().backward()
        self.optimizer.step()
        return per_sample.detach().reshape(len(window), -1).mean(dim=1)

    @torch.no_grad()
    def explained_fraction(self, index: int) -> float:
        """Fraction of the frame's tested pixels whose depth, rendered from the map at the training samples
        along their rays, is within the keyframe threshold of the measured depth (pixels that measured
        nothing are not tested)."""
        rays = self.rays([index], self.config.keyframes.rays)
        hit = rays.hit
        if not bool(hit.any()):
            return 1.0
        rays = RayBatch(rays.origins[hit], rays.directions[hit], rays.depth[hit])
        distances = sample_distances(rays, self.config.sampling, self.generator).sort(dim=1).values
        sdf = self.field(sample_points(rays, distances))[..., 0]
        error = (render_depth(distances, sdf) - rays.depth).abs() / rays.depth
        return float((error < self.config.keyframes.depth_threshold).float().mean())

    def train_on_window(self, steps: int) -> list[float]:
        """``steps`` steps, each on a window of the latest frame and keyframes drawn by loss; mean losses."""
        losses = []
        for _ in range(steps):
            window = self.buffer.window(self.latest, self.generator)
            per_frame = self.step(window)
            self.buffer.update(window, per_frame.tolist())
            losses.append(float(per_frame.mean()))
        return losses

    def settle(self, steps: int) -> list[float]:
        """``steps`` more steps after the stream, the camera resting on the last frame; mean losses."""
        if self.latest is None:
            raise RuntimeError("settle() continues a stream: call run() first")
        return self.train_on_window(steps)

    def state_dict(self) -> dict:
        """Everything a continued run needs: field, optimiser, keyframes and their losses, generator, steps."""
        return {
            "field": self.field.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "keyframes": list(self.buffer.keyframes),
            "keyframe_losses": {str(k): v for k, v in self.buffer.losses.items()},
            "generator": self.generator.get_state(),
            "steps_done": self.steps_done,
            "latest": self.latest,
        }

    def load_state_dict(self, state: dict) -> None:
        self.field.load_state_dict(state["field"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.buffer.keyframes = list(state["keyframes"])
        self.buffer.losses = {int(k): float(v) for k, v in state["keyframe_losses"].items()}
        self.generator.set_state(state["generator"])
        self.steps_done = int(state["steps_done"])
        self.latest = state["latest"]

    def run(self, progress: bool = True) -> TrainingLog:
        """Consume the stream in order; returns the log (losses, keyframes, training seconds)."""
        log = TrainingLog()
        arriving = self.frames[:: self.config.frame_stride]
        synchronize(self.device)
        start = time.perf_counter()
        with Progress(transient=True, disable=not progress) as bar:
            task = bar.add_task("streaming frames", total=len(arriving))
            for position in range(0, len(self.frames), self.config.frame_stride):
                self.latest = position
                log.losses.extend(self.train_on_window(self.config.steps_per_frame))
                # As in iSDF, the frame is judged by the map that has just trained on it (the first is
                # always kept).
                first = not self.buffer.keyframes
                self.buffer.consider(position, 0.0 if first else self.explained_fraction(position))
                bar.advance(task)
        synchronize(self.device)
        log.train_seconds = time.perf_counter() - start
        log.keyframes = list(self.buffer.keyframes)
        log.steps = len(log.losses)
        return log
