"""Training a method in-process for a benchmark: the one place the benchmark suites train.

A finished run is recorded in ``bench_train.json`` beside its ``config.yml``, so a suite rerun with
``reuse=True`` skips what it already trained (adding seeds, or resuming an interrupted benchmark).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import yaml
from nerfstudio.engine.trainer import TrainerConfig

RECORD = "bench_train.json"


def plain(value: object) -> object:
    """A config as nested plain values, field by field (a field added since a run was saved reads as its
    class default, so older runs of an unchanged model still match)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name, "<missing>")) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, type):
        return f"{value.__module__}.{value.__qualname__}"
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def same_model(config_path: Path, config: TrainerConfig) -> bool:
    """Whether the run saved at ``config_path`` was trained with ``config``'s model and data configuration
    (a changed model default or training rays, say ``train_scales``, trains afresh)."""
    if not config_path.is_file():
        return False
    saved = yaml.load(config_path.read_text(), Loader=yaml.Loader)

    def relevant(pipeline) -> list:
        return [
            without_unused_eugen_knobs(plain(getattr(pipeline, part))) for part in ("model", "datamanager")
        ]

    return relevant(saved.pipeline) == relevant(config.pipeline)


def without_unused_eugen_knobs(model: object) -> object:
    """A plain model config without the EUGen knobs when it selects no EUGen layer (every ``*_layers`` of its
    ``eugen`` empty: a dense twin), so a changed EUGen default does not retrain the dense twins."""
    eugen = model.get("eugen") if isinstance(model, dict) else None
    if isinstance(eugen, dict):
        selections = {key: value for key, value in eugen.items() if key.endswith("_layers")}
        if selections and not any(selections.values()):
            return {**model, "eugen": selections}
    return model


def seed_everything(seed: int) -> None:
    """What ``ns-train`` does before building the trainer (python, numpy and torch seeded with the machine seed):
    without it a run's initialisation and ray batches depend on whatever the process drew before, and a
    benchmark's rerun of the same seed is another run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train_in_process(
    config: TrainerConfig,
    scene: Path,
    steps: int,
    output_dir: Path,
    timestamp: str = "bench",
    reuse: bool = False,
) -> tuple[Path, float]:
    """Train ``config`` on ``scene`` for ``steps`` (one checkpoint, at the end; no evaluation during training).

    Returns the run's ``config.yml`` and the training seconds per step. With ``reuse``, a run recorded in
    ``output_dir`` for the same steps, seed and model configuration whose final checkpoint exists is returned
    as it is (a changed default, say the EUGen layers of a method, trains afresh).
    """
    config = copy.deepcopy(config)
    config.data = None
    config.pipeline.datamanager.data = scene
    config.output_dir = output_dir
    config.experiment_name = scene.name
    config.timestamp = timestamp
    config.max_num_iterations = steps
    config.steps_per_save = steps
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**9
    config.vis = "tensorboard"
    path = config.get_base_dir() / "config.yml"
    record = path.parent / RECORD
    if reuse and record.is_file():
        saved = json.loads(record.read_text())
        same_run = saved.get("seed") == config.machine.seed and same_model(path, config)
        if (
            same_run
            and saved["steps"] == steps
            and (path.parent / "nerfstudio_models" / f"step-{steps - 1:09d}.ckpt").is_file()
        ):
            return path, saved["seconds_per_step"]
    record.unlink(missing_ok=True)  # an interrupted retraining must not pass for the run recorded before it
    config.save_config()
    seed_everything(config.machine.seed)
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    start = time.perf_counter()
    trainer.train()
    seconds_per_step = (time.perf_counter() - start) / steps
    record.write_text(
        json.dumps({"steps": steps, "seed": config.machine.seed, "seconds_per_step": seconds_per_step}) + "\n"
    )
    return path, seconds_per_step


def cached_for_checkpoint(config_path: Path, name: str, compute: Callable[[], dict], **key: object) -> dict:
    """``compute()``'s result for a trained run, kept in ``name`` beside its ``config.yml`` and read back while
    the run's last checkpoint (its name and write time: a retrained run keeps its name) and ``key`` are
    unchanged, so a benchmark's rerun over finished runs does not score them again."""
    cache = config_path.parent / name
    checkpoints = sorted((config_path.parent / "nerfstudio_models").glob("*.ckpt"))
    last = checkpoints[-1] if checkpoints else None
    stamp = {"checkpoint": last and last.name, "written_ns": last and last.stat().st_mtime_ns, **plain(key)}
    if cache.is_file():
        saved = json.loads(cache.read_text())
        if saved.get("stamp") == stamp:
            return saved["metrics"]
    result = compute()
    cache.write_text(json.dumps({"stamp": stamp, "metrics": result}, indent=1) + "\n")
    return result
