"""nerfstudio's datamanager plus what our models need: the data's framing, quiet ray generation, and
(for anti-aliased fields) multiscale training rays made from the full-resolution images.

:class:`FramingMixin` runs after nerfstudio's ``VanillaDataManager.__init__`` (with any dataparser: ours, or a
stock subcommand such as ``nerfstudio-data`` or ``blender-data``), chooses near/far, background and scene
contraction from the training cameras and images (:mod:`eugen_nerf.scenes.framing`) and stores the choice in
the training dataset's metadata, which nerfstudio's pipeline hands to the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from nerfstudio.data.datamanagers.base_datamanager import VanillaDataManager, VanillaDataManagerConfig
from nerfstudio.data.datasets.base_dataset import InputDataset
from nerfstudio.model_components.ray_generators import RayGenerator
from nerfstudio.utils.rich_utils import CONSOLE

from eugen_nerf.scenes.framing import (
    FRAMING_KEY,
    Framing,
    choose_framing,
    declared_frame_mismatch,
    evenly_spread,
    scene_json_hint,
)
from eugen_nerf.scenes.multiscale import assign_scales, block_average, check_scales, stacked_scaled_cameras
from eugen_nerf.scenes.quiet import quiet_camera_indexing


class FramingMixin:
    """Put the data's :class:`Framing` into ``train_dataset.metadata``; ray generation without the warning."""

    framing: Framing
    multiscale_ray_generator: RayGenerator | None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.train_scales = check_scales(getattr(self.config, "train_scales", (1,)))
        self.multiscale_ray_generator = None
        if self.train_scales != (1,):
            if self.train_dataparser_outputs.mask_filenames is not None:
                raise ValueError(
                    "train-scales other than (1,) cannot average masked images; use train-scales 1"
                )
            cameras = stacked_scaled_cameras(self.train_dataset.cameras, self.train_scales)
            self.multiscale_ray_generator = RayGenerator(cameras.to(self.device))
            CONSOLE.print(
                f"Multiscale training rays: scales {list(self.train_scales)} of the full-resolution images"
            )
        outputs = self.train_dataparser_outputs
        dataset = self.train_dataset
        images = [dataset.get_image_float32(i).numpy() for i in evenly_spread(len(dataset))]
        poses, scale = outputs.cameras.camera_to_worlds.numpy(), float(outputs.dataparser_scale)
        hint = scene_json_hint(self.config.dataparser.data)
        mismatch = None if hint is None else declared_frame_mismatch(hint, poses, scale)
        if mismatch is not None:
            CONSOLE.print(f"[yellow]Warning: ignoring scene.json's near/far/background: {mismatch}")
            hint = None
        self.framing = choose_framing(poses, images, hint, scale)
        dataset.metadata[FRAMING_KEY] = self.framing
        CONSOLE.print(f"Framing from the data: {self.framing.describe()}")
        extent = float(np.abs(outputs.cameras.camera_to_worlds[:, :3, 3].numpy()).max())
        if self.framing.contraction and not 0.2 <= extent <= 2.0:
            CONSOLE.print(
                f"[yellow]Warning: unbounded scene, but the cameras reach {extent:.3g} from the origin; "
                "scene contraction expects them in the unit cube (use nerfstudio's auto-scaling, e.g. "
                "the nerfstudio-data dataparser with --auto-scale-poses True)"
            )

    def next_train(self, step: int):
        with quiet_camera_indexing():
            if self.multiscale_ray_generator is None:
                return super().next_train(step)
            return self._next_multiscale_train()

    def _next_multiscale_train(self):
        """nerfstudio's ``next_train`` with the rays split evenly over ``train_scales``: a ray at scale ``s``
        goes through the block of ``s x s`` pixels holding its sampled pixel, its target the block's average."""
        self.train_count += 1
        image_batch = next(self.iter_train_image_dataloader)
        batch = self.train_pixel_sampler.sample(image_batch)
        indices = batch["indices"].clone()  # rewritten below to the scaled cameras' blocks
        cameras = self.train_dataset.cameras
        camera, rows, cols = batch["indices"].unbind(-1)
        position = torch.full((len(cameras),), -1, dtype=torch.long)
        position[image_batch["image_idx"].long().cpu()] = torch.arange(len(image_batch["image_idx"]))
        scale_index = assign_scales(len(indices), len(self.train_scales)).to(indices.device)
        images, image = image_batch["image"], batch["image"]
        image_device = images.device if isinstance(images, torch.Tensor) else images[0].device
        for k, scale in enumerate(self.train_scales):
            chosen = (scale_index == k).nonzero().squeeze(-1)
            if scale == 1 or len(chosen) == 0:
                continue
            c = camera[chosen]
            # whole blocks only: a pixel of the last partial row or column takes the block before it
            block_rows = torch.minimum(
                rows[chosen] // scale, cameras.height[c.cpu(), 0].to(c.device) // scale - 1
            )
            block_cols = torch.minimum(
                cols[chosen] // scale, cameras.width[c.cpu(), 0].to(c.device) // scale - 1
            )
            average = block_average(
                images,
                *(t.to(image_device) for t in (position[c.cpu()], block_rows * scale, block_cols * scale)),
                scale,
            ).to(image.device)
            image[chosen.to(image.device)] = (
                average.to(image.dtype)
                if image.is_floating_point()
                else (average * 255).round().to(image.dtype)
            )
            indices[chosen] = torch.stack([c + k * len(cameras), block_rows, block_cols], dim=-1)
        ray_bundle = self.multiscale_ray_generator(indices)
        ray_bundle.camera_indices = camera[:, None].to(ray_bundle.camera_indices)
        return ray_bundle, batch

    def next_eval(self, step: int):
        with quiet_camera_indexing():
            return super().next_eval(step)

    def next_eval_image(self, step: int):
        with quiet_camera_indexing():
            return super().next_eval_image(step)


class FramingDataManager(FramingMixin, VanillaDataManager[InputDataset]):
    """nerfstudio's ``VanillaDataManager`` with the data's framing."""


@dataclass
class FramingDataManagerConfig(VanillaDataManagerConfig):
    _target: type = field(default_factory=lambda: FramingDataManager)
    train_scales: tuple[int, ...] = (1,)
    """Resolution divisors of the training rays, made from the full-resolution images (an even share of the
    rays each; see :mod:`eugen_nerf.scenes.multiscale`). ``1`` alone is nerfstudio's usual training."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.train_scales = check_scales(self.train_scales)
