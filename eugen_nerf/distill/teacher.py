"""Load a trained nerfstudio run (any method) offline, as the teacher of a distillation.

nerfstudio's ``eval_setup`` falls back to a non-strict state-dict load when the checkpoint does not
fit the model, so a checkpoint from another method would load silently as a half-random model; it
also ``sys.exit``s on a missing checkpoint directory. This loader checks the run directory, builds
the pipeline from ``config.yml`` and loads the newest checkpoint strictly, raising
:class:`~eugen_nerf.distill.options.DistillError` with the file at fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch
import yaml

from eugen_nerf.distill.options import DistillError
from eugen_nerf.eval.checkpoints import allow_numpy_checkpoints
from eugen_nerf.eval.lpips import install_offline_lpips

if TYPE_CHECKING:  # nerfstudio is imported lazily, after the offline patches
    from nerfstudio.engine.trainer import TrainerConfig
    from nerfstudio.models.base_model import Model
    from nerfstudio.pipelines.base_pipeline import VanillaPipeline

_CHECKPOINT = re.compile(r"step-(\d+)\.ckpt")


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


def find_config(path: Path) -> Path:
    """``path`` itself when it is a file, else ``path/config.yml``; raise if neither is a run config."""
    path = Path(path)
    config_path = path if path.is_file() else path / "config.yml"
    if not config_path.is_file():
        raise DistillError(f"{path}: not a nerfstudio run directory (no config.yml)")
    return config_path


def latest_checkpoint(config_path: Path) -> Path:
    """The highest-step ``nerfstudio_models/step-*.ckpt`` next to ``config_path``."""
    directory = config_path.parent / "nerfstudio_models"
    checkpoints = sorted(
        (int(match.group(1)), path)
        for path in directory.glob("step-*.ckpt")
        if (match := _CHECKPOINT.fullmatch(path.name))
    )
    if not checkpoints:
        raise DistillError(f"{config_path.parent}: not a nerfstudio run directory (no nerfstudio_models/step-*.ckpt)")
    return checkpoints[-1][1]


def read_config(config_path: Path) -> "TrainerConfig":
    from nerfstudio.configs.method_configs import all_methods
    from nerfstudio.engine.trainer import TrainerConfig

    try:
        config = yaml.load(config_path.read_text(), Loader=yaml.Loader)
    except (yaml.YAMLError, ImportError, AttributeError) as err:
        raise DistillError(f"{config_path}: not a readable nerfstudio config ({err})") from err
    if not isinstance(config, TrainerConfig):
        raise DistillError(f"{config_path}: not a nerfstudio TrainerConfig")
    if config.method_name in all_methods:  # as eval_setup: generic datamanager targets do not survive YAML
        config.pipeline.datamanager._target = all_methods[config.method_name].pipeline.datamanager._target
    data = config.pipeline.datamanager.data or config.pipeline.datamanager.dataparser.data
    if not Path(data).exists():
        raise DistillError(
            f"{config_path}: its scene {data} does not exist (relative paths are resolved against the "
            "current directory: run from where the teacher was trained)"
        )
    return config


def load_checkpoint_strict(pipeline, checkpoint: Path, config_path: Path, method: str) -> int:
    """Load ``checkpoint`` into ``pipeline``'s model, every key and shape matching, and return its step."""
    try:
        loaded = torch.load(checkpoint, map_location="cpu")
    except Exception as err:
        raise DistillError(f"{checkpoint}: not a readable nerfstudio checkpoint ({err})") from err
    if not isinstance(loaded, dict) or "pipeline" not in loaded:
        raise DistillError(f"{checkpoint}: not a nerfstudio checkpoint (no 'pipeline' state)")
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
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config.machine.device_type = torch.device(device).type
    pipeline = config.pipeline.setup(device=torch.device(device), test_mode="test")
    pipeline.eval()
    step = load_checkpoint_strict(pipeline, checkpoint, config_path, config.method_name)
    return Teacher(config_path, config, pipeline, checkpoint, step)
