"""Training a method in-process for a benchmark: the one place the benchmark suites train.

A finished run is recorded in ``bench_train.json`` beside its ``config.yml``, so a suite rerun with
``reuse=True`` skips what it already trained (adding seeds, or resuming an interrupted benchmark).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Tuple

from nerfstudio.engine.trainer import TrainerConfig

RECORD = "bench_train.json"


def train_in_process(
    config: TrainerConfig, scene: Path, steps: int, output_dir: Path, timestamp: str = "bench", reuse: bool = False
) -> Tuple[Path, float]:
    """Train ``config`` on ``scene`` for ``steps`` (one checkpoint, at the end; no evaluation during training).

    Returns the run's ``config.yml`` and the training seconds per step. With ``reuse``, a run recorded in
    ``output_dir`` for the same steps whose final checkpoint exists is returned as it is.
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
        if saved["steps"] == steps and (path.parent / "nerfstudio_models" / f"step-{steps - 1:09d}.ckpt").is_file():
            return path, saved["seconds_per_step"]
    config.save_config()
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    start = time.perf_counter()
    trainer.train()
    seconds_per_step = (time.perf_counter() - start) / steps
    record.write_text(json.dumps({"steps": steps, "seconds_per_step": seconds_per_step}) + "\n")
    return path, seconds_per_step
