"""Shared pieces of every eugen-nerf method configuration: device, data validation, framing from the data."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from nerfstudio.configs.base_config import ViewerConfig
from nerfstudio.engine.trainer import TrainerConfig
from nerfstudio.models.base_model import ModelConfig
from nerfstudio.pipelines.base_pipeline import VanillaPipelineConfig

from eugen_nerf.eval.checkpoints import install_checkpoint_checks
from eugen_nerf.methods.trainer import SceneTrainer
from eugen_nerf.scenes import dataparser_config
from eugen_nerf.scenes.datamanager import FramingDataManagerConfig
from eugen_nerf.scenes.validate import validate_data


def default_device() -> str:
    """CUDA when available, otherwise CPU: ``ns-train`` works on a machine without a GPU with no flag."""
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class SceneTrainerConfig(TrainerConfig):
    """``TrainerConfig`` that rejects a ``--data`` path that is not a dataset for the chosen dataparser while
    the command line is parsed.

    tyro reports a ``ValueError`` raised here as a one-line error, before any output folder or model exists.
    Training runs :class:`~eugen_nerf.methods.trainer.SceneTrainer` (non-finite losses stop or skip,
    checkpoints are written atomically).
    """

    _target: type = field(default_factory=lambda: SceneTrainer)
    on_non_finite: Literal["abort", "skip"] = "abort"
    """A non-finite loss: abort with a message naming the step (default), or skip that step."""

    def __post_init__(self) -> None:
        datamanager = self.pipeline.datamanager
        dataparser = datamanager.dataparser
        # --data (either alias) overrides the dataparser's own; Path() is nerfstudio's "not given".
        data = self.data or datamanager.data or getattr(dataparser, "data", None)
        if data is not None and Path(data) != Path():
            validate_data(data, dataparser)

    def get_checkpoint_dir(self) -> Path:
        # eval_setup (ns-eval, ns-render, ns-viewer) asks for this right before it loads the checkpoint:
        # from here on nerfstudio reads checkpoints through our check (a truncated file is one clear line).
        install_checkpoint_checks()
        return super().get_checkpoint_dir()


def object_method_config(
    method_name: str,
    model: ModelConfig,
    optimizers: dict[str, Any],
    max_num_iterations: int,
    train_num_rays_per_batch: int,
    data: Path | None = None,
) -> SceneTrainerConfig:
    """A trainer for any nerfstudio dataset (the shipped scenes by default): CUDA or CPU, TensorBoard logging.

    The dataparser is a subcommand as for stock methods (``ns-train eugen-nerf nerfstudio-data --data ...``);
    the datamanager chooses near/far, background and scene contraction from the data.

    ``vis="tensorboard"`` so that ``ns-train`` ends when training ends (the viewer keeps it alive);
    ``--vis viewer`` or ``ns-viewer`` give the interactive viewer, bound to 127.0.0.1.
    """
    device = default_device()
    config = SceneTrainerConfig(
        method_name=method_name,
        steps_per_eval_batch=500,
        steps_per_eval_image=500,
        steps_per_save=2000,
        max_num_iterations=max_num_iterations,
        mixed_precision=device == "cuda",
        pipeline=VanillaPipelineConfig(
            datamanager=FramingDataManagerConfig(
                dataparser=dataparser_config(),
                train_num_rays_per_batch=train_num_rays_per_batch,
                eval_num_rays_per_batch=train_num_rays_per_batch,
            ),
            model=model,
        ),
        optimizers=optimizers,
        viewer=ViewerConfig(websocket_host="127.0.0.1", num_rays_per_chunk=model.eval_num_rays_per_chunk),
        vis="tensorboard",
        data=data,
    )
    config.machine.device_type = device
    return config


def layer_summary(groups: dict[str, tuple[int, ...]]) -> str:
    """What a method's ``ns-train --help`` line says of its MLPs: each group's EUGen layers, or "dense"
    (``{"trunk": (1, 2), "colour head": ()}`` -> ``"EUGen trunk layers 1, 2; colour head dense"``)."""
    if not any(groups.values()):
        return "every layer dense (the dense twin)"
    return "; ".join(
        f"EUGen {name} layers {', '.join(map(str, layers))}" if layers else f"{name} dense"
        for name, layers in groups.items()
    )
