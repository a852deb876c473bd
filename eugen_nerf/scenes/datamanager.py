"""nerfstudio's datamanager plus two things our models need: the data's framing, and quiet ray generation.

:class:`FramingMixin` runs after nerfstudio's ``VanillaDataManager.__init__`` (with any dataparser: ours, or a
stock subcommand such as ``nerfstudio-data`` or ``blender-data``), chooses near/far, background and scene
contraction from the training cameras and images (:mod:`eugen_nerf.scenes.framing`) and stores the choice in
the training dataset's metadata, which nerfstudio's pipeline hands to the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from nerfstudio.data.datamanagers.base_datamanager import VanillaDataManager, VanillaDataManagerConfig
from nerfstudio.data.datasets.base_dataset import InputDataset
from nerfstudio.utils.rich_utils import CONSOLE

from eugen_nerf.scenes.framing import (
    FRAMING_KEY,
    Framing,
    choose_framing,
    declared_frame_mismatch,
    evenly_spread,
    scene_json_hint,
)
from eugen_nerf.scenes.quiet import quiet_camera_indexing


class FramingMixin:
    """Put the data's :class:`Framing` into ``train_dataset.metadata``; ray generation without the warning."""

    framing: Framing

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
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
            return super().next_train(step)

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
