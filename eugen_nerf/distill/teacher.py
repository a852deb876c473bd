"""Load a trained nerfstudio run (any method) offline, as the teacher of a distillation.

nerfstudio's ``eval_setup`` falls back to a non-strict state-dict load when the checkpoint does not
fit the model, so a checkpoint from another method would load silently as a half-random model. This
loader checks the run directory and the checkpoint with the shared checks (:mod:`eugen_nerf.eval.runs`,
:mod:`eugen_nerf.eval.checkpoints`), builds the pipeline from ``config.yml`` and loads the newest
checkpoint strictly, raising :class:`~eugen_nerf.distill.options.DistillError` when it does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch

from eugen_nerf.distill.options import DistillError
from eugen_nerf.eval.checkpoints import allow_numpy_checkpoints, load_checkpoint
from eugen_nerf.eval.runs import find_config, latest_checkpoint, read_config
from eugen_nerf.eval.lpips import install_offline_lpips

if TYPE_CHECKING:  # nerfstudio is imported lazily, after the offline patches
    from nerfstudio.engine.trainer import TrainerConfig
    from nerfstudio.models.base_model import Model
    from nerfstudio.pipelines.base_pipeline import VanillaPipeline


@dataclass
class Teacher:
    """A loaded run: its config, pipeline (eval mode) and the checkpoint it came from."""

    config_path: Path
    config: "TrainerConfig"
    pipeline: "VanillaPipeline"
    checkpoint: Path
    step: int

    @property
    def model(self) -> "Model":
        return self.pipeline.model


def load_checkpoint_strict(
    pipeline, checkpoint: Path, config_path: Path, method: str, loaded: dict | None = None
) -> int:
    """Load ``checkpoint`` (already read: ``loaded``) into ``pipeline``'s model, every key and shape matching,
    and return its step."""
    loaded = loaded if loaded is not None else load_checkpoint(checkpoint)
    state = {key.removeprefix("module."): value for key, value in loaded["pipeline"].items()}
    model_state = {key[len("_model."):]: value for key, value in state.items() if key.startswith("_model.")}
    expected = pipeline.model.state_dict()
    missing = sorted(set(expected) - set(model_state))
    unexpected = sorted(set(model_state) - set(expected))
    mismatched = sorted(k for k in set(expected) & set(model_state) if expected[k].shape != model_state[k].shape)
    if missing or unexpected or mismatched:
        details = "; ".join(
            f"{label} {len(keys)} (e.g. {keys[0]})"
            for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong-shaped", mismatched))
            if keys
        )
        raise DistillError(
            f"{checkpoint} does not fit the model of {config_path} (method {method!r}): "
            f"it was saved by a different method or model configuration [{details}]"
        )
    step = int(loaded.get("step", 0))
    pipeline.model.update_to_step(step)
    pipeline.model.load_state_dict(model_state, strict=True)
    return step


def load_teacher(path: Path, device: Optional[str] = None) -> Teacher:
    """Load the run at ``path`` (``config.yml`` or its directory) in eval mode, offline.

    The pipeline is set up in nerfstudio's ``test`` mode: training cameras (for rays) and the test
    split (for the report) are both loaded.
    """
    allow_numpy_checkpoints()
    install_offline_lpips()
    config_path = find_config(path)
    checkpoint = latest_checkpoint(config_path)
    config = read_config(config_path)
    loaded = load_checkpoint(checkpoint)  # a truncated file fails here, before the slow pipeline setup
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config.machine.device_type = torch.device(device).type
    pipeline = config.pipeline.setup(device=torch.device(device), test_mode="test")
    pipeline.eval()
    step = load_checkpoint_strict(pipeline, checkpoint, config_path, config.method_name, loaded)
    return Teacher(config_path, config, pipeline, checkpoint, step)
