"""Training a method in-process for a benchmark: the one place the benchmark suites train.

Two ways: :func:`train_in_process` trains a fixed number of steps (a finished run is recorded in
``bench_train.json`` beside its ``config.yml``, so a suite rerun with ``reuse=True`` skips what it already
trained); :func:`train_to_plateau` trains until the validation PSNR stops improving (:class:`PlateauRule`),
in checkpointed chunks, so that a run longer than a working session continues where it stopped.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch
import yaml
from nerfstudio.engine.trainer import Trainer, TrainerConfig

from eugen_nerf.bench.provenance import content_hash
from eugen_nerf.inputs.errors import InputError, TrainingStopped
from eugen_nerf.inputs.outputs import atomic_write_bytes

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
    """Whether the run saved at ``config_path`` was trained with ``config``'s seed and model, data and optimiser
    configuration (a changed model default, training rays, say ``train_scales``, or learning rate trains
    afresh). Optimisers are compared group by group over the groups both configurations name: a group one
    of them lacks is one its model has no parameters for."""
    if not config_path.is_file():
        return False
    saved = yaml.load(config_path.read_text(), Loader=yaml.Loader)

    def relevant(pipeline) -> list:
        return [
            without_unused_eugen_knobs(plain(getattr(pipeline, part))) for part in ("model", "datamanager")
        ]

    shared = saved.optimizers.keys() & config.optimizers.keys()
    if saved.machine.seed != config.machine.seed:
        return False
    return relevant(saved.pipeline) == relevant(config.pipeline) and all(
        plain(saved.optimizers[group]) == plain(config.optimizers[group]) for group in shared
    )


def without_unused_eugen_knobs(model: object) -> object:
    """A plain model (or field) config without the EUGen knobs when it selects no EUGen layer (every
    ``layers`` / ``*_layers`` of its ``eugen`` empty: a dense twin), so a changed EUGen default does not retrain
    the dense twins."""
    eugen = model.get("eugen") if isinstance(model, dict) else None
    if isinstance(eugen, dict):
        selections = {
            key: value for key, value in eugen.items() if key == "layers" or key.endswith("_layers")
        }
        if selections and not any(selections.values()):
            return {**model, "eugen": selections}
    return model


def scene_hash(config: TrainerConfig) -> str | None:
    """The content hash of the scene ``config`` trains on (``None`` when it names no folder): kept in a run's
    record, so a scene rendered again in place is never continued or reused with runs of the old one."""
    data = config.pipeline.datamanager.data or config.data
    return content_hash(Path(data)) if data is not None and Path(data).is_dir() else None


def seed_everything(seed: int) -> None:
    """What ``ns-train`` does before building the trainer (python, numpy and torch seeded with the machine seed):
    without it a run's initialisation and ray batches depend on whatever the process drew before, and a
    benchmark's rerun of the same seed is another run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def benchmark_run(
    config: TrainerConfig, scene: Path, output_dir: Path, timestamp: str, steps: int
) -> TrainerConfig:
    """A copy of ``config`` that trains on ``scene`` for ``steps`` into ``output_dir/<scene>/<method>/<timestamp>``,
    logging to TensorBoard and never evaluating during training (the suites score the checkpoints)."""
    config = copy.deepcopy(config)
    config.data = None
    config.pipeline.datamanager.data = scene
    config.output_dir = output_dir
    config.experiment_name = scene.name
    config.timestamp = timestamp
    config.max_num_iterations = steps
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**9
    config.vis = "tensorboard"
    return config


def timed_training(
    config: TrainerConfig, total_steps: int | None = None, resume_hint: str | None = None
) -> tuple[Trainer, float, float]:
    """Set up ``config``'s trainer and train it: the trainer, and the wall seconds (after a synchronise on CUDA)
    and this process's CPU seconds that training took, set-up excluded (on a stop, recorded in the
    :class:`TrainingStopped` it raises). ``total_steps``: the whole run's steps
    when ``config`` trains one chunk of it, so the progress line counts percent and time left against the run
    (nerfstudio counts them against the chunk's own steps, e.g. 1822% at step 9,110 of a 500-step chunk).
    ``resume_hint``: what a stop's line tells the user to do to continue (our methods' trainer)."""
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    if resume_hint is not None and hasattr(trainer, "resume_hint"):
        trainer.resume_hint = resume_hint
    if total_steps is not None:
        from nerfstudio.utils import writer

        writer.GLOBAL_BUFFER["max_iter"] = total_steps
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start, start_cpu = time.perf_counter(), time.process_time()
    try:
        trainer.train()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    except TrainingStopped as stopped:  # Ctrl-C or SIGTERM: the last finished step is saved; so is its time
        stopped.wall, stopped.cpu = time.perf_counter() - start, time.process_time() - start_cpu
        raise
    finally:
        close_event_writers()  # after the clock stops: flushing the event files is not training
    return trainer, wall, cpu


def close_event_writers() -> None:
    """Close and forget the writers a trainer's set-up registered in nerfstudio's module-level lists. Each
    set-up appends its own (TensorBoard, console), so without this every later training in the process would
    write each event, and print each progress line, once per training before it."""
    from nerfstudio.utils import writer

    for event_writer in writer.EVENT_WRITERS:
        summary = getattr(event_writer, "tb_writer", None)
        if summary is not None:
            summary.close()
    writer.EVENT_WRITERS.clear()
    writer.EVENT_STORAGE.clear()


def step_seconds(
    configs: dict[str, TrainerConfig], scene: Path, steps: int, rounds: int, output_dir: Path
) -> dict[str, list[float]]:
    """Seconds per training step of each configuration from its initial weights on ``scene``: ``steps`` steps a
    round, the configurations taking turns for ``rounds`` rounds, so that load from other processes hits them
    alike. On the CPU a round counts this process's CPU seconds (with one thread, the step's cost alone on one
    core); on CUDA, elapsed seconds after a synchronise. A round includes the first step's warm-up and the
    checkpoint nerfstudio writes at the end (into ``output_dir``)."""
    cuda = torch.cuda.is_available()
    out: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(rounds):
        for name, config in configs.items():
            run = benchmark_run(config, scene, output_dir, f"step-time-{name}", steps)
            run.steps_per_save = 10**9
            run.save_only_latest_checkpoint = True
            _, wall, cpu = timed_training(run)
            out[name].append((wall if cuda else cpu) / steps)
    return out


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
    as it is (a changed default, say the EUGen layers of a method, trains afresh), and one that Ctrl-C or
    SIGTERM stopped (its last finished step saved) continues from that step.
    """
    config = benchmark_run(config, scene, output_dir, timestamp, steps)
    config.steps_per_save = steps
    with training_lock(config.get_base_dir()):
        return _train_in_process(config, steps, reuse)


def _train_in_process(config: TrainerConfig, steps: int, reuse: bool) -> tuple[Path, float]:
    """:func:`train_in_process` on the run ``config`` names, its lock held."""
    path = config.get_base_dir() / "config.yml"
    record = path.parent / RECORD
    if (path.parent / PLATEAU_RECORD).is_file():
        raise InputError(
            f"{path.parent} holds a run trained to plateau ({PLATEAU_RECORD}); train to plateau again, or choose "
            "another output folder for a fixed number of steps"
        )
    stopped: dict = {}
    scene = scene_hash(config)
    if reuse and record.is_file():
        try:
            saved = json.loads(record.read_text())
        except ValueError:  # a record cut short: the run is not known to be finished
            saved = {}
        same_run = (
            saved.get("seed") == config.machine.seed
            and saved.get("steps") == steps
            and saved.get("scene_hash", scene) == scene  # records from before the hash was kept: unknown
            and same_model(path, config)
        )
        if same_run and (path.parent / "nerfstudio_models" / f"step-{steps - 1:09d}.ckpt").is_file():
            return path, saved["seconds_per_step"]
        if same_run and saved.get("stopped", {}).get("step") == last_checkpoint_steps(path.parent):
            stopped = saved["stopped"]  # the newest checkpoint is the one its stop saved: continue from it
    record.unlink(missing_ok=True)  # an interrupted retraining must not pass for the run recorded before it
    config.save_config()
    done = stopped.get("step", 0)
    run = copy.deepcopy(config)
    run.max_num_iterations = steps - done
    run.load_dir = path.parent / "nerfstudio_models" if done else None
    seed_everything(config.machine.seed + done)  # a continued run draws other rays than its first part
    try:
        wall = timed_training(run, total_steps=steps, resume_hint="run the same command again to continue")[1]
    except TrainingStopped as stop:
        if stop.step is not None:  # saved: the rerun continues from it, the time so far kept
            seconds = stopped.get("seconds", 0.0) + stop.wall
            write_record(
                record,
                {
                    "steps": steps,
                    "seed": config.machine.seed,
                    "scene_hash": scene,
                    "stopped": {"step": stop.step + 1, "seconds": seconds},
                },
            )
        raise
    seconds_per_step = (stopped.get("seconds", 0.0) + wall) / steps
    write_record(
        record,
        {
            "steps": steps,
            "seed": config.machine.seed,
            "scene_hash": scene,
            "seconds_per_step": seconds_per_step,
        },
    )
    return path, seconds_per_step


def cached_for_checkpoint(
    config_path: Path,
    name: str,
    compute: Callable[[], dict],
    usable: Callable[[dict], bool] = lambda result: True,
    **key: object,
) -> dict:
    """``compute()``'s result for a trained run, kept in ``name`` beside its ``config.yml`` and read back while
    the run's last checkpoint (its name and write time: a retrained run keeps its name) and ``key`` are
    unchanged and ``usable`` accepts it (say, scores taken before the LPIPS weights were installed), so a
    benchmark's rerun over finished runs does not score them again."""
    cache = config_path.parent / name
    checkpoints = sorted((config_path.parent / "nerfstudio_models").glob("*.ckpt"))
    last = checkpoints[-1] if checkpoints else None
    stamp = {"checkpoint": last and last.name, "written_ns": last and last.stat().st_mtime_ns, **plain(key)}
    if cache.is_file():
        saved = json.loads(cache.read_text())
        if saved.get("stamp") == stamp and usable(saved["metrics"]):
            return saved["metrics"]
    result = compute()
    atomic_write_bytes(cache, (json.dumps({"stamp": stamp, "metrics": result}, indent=1) + "\n").encode())
    return result


PLATEAU_RECORD = "plateau.json"


@dataclasses.dataclass(frozen=True)
class PlateauRule:
    """When a training run has stopped improving: trained at least ``min_steps`` steps, and its PSNR on the
    evaluation views (the validation split, all of its views, scored every ``eval_every`` steps) gained less
    than ``min_gain_db`` over the last ``window`` of the steps; or ``max_steps`` reached. Each score is the
    mean of the last ``smooth`` evaluations: one checkpoint's PSNR moves by tenths of a dB from chunk to
    chunk, and a single low or high score must not end or prolong training."""

    eval_every: int = 500
    window: float = 0.2
    min_gain_db: float = 0.1
    min_steps: int = 2000
    max_steps: int = 20000
    smooth: int = 2

    def check(self) -> None:
        if self.eval_every < 1 or self.min_steps < 0 or self.max_steps < self.eval_every or self.smooth < 1:
            raise InputError(
                f"plateau rule: --eval-every ({self.eval_every}) must be >= 1 and <= --max-steps ({self.max_steps}),"
                f" smooth ({self.smooth}) >= 1"
            )
        if not 0.0 < self.window < 1.0:
            raise InputError(f"plateau rule: the window must lie in (0, 1), got {self.window}")

    def smoothed(self, history: list[dict], index: int) -> float:
        """The mean PSNR of the ``smooth`` evaluations ending at ``history[index]``."""
        scores = [h["psnr"] for h in history[max(0, index - self.smooth + 1) : index + 1]]
        return sum(scores) / len(scores)

    def gain(self, history: list[dict]) -> float | None:
        """PSNR gained over the last ``window`` of the steps: the (smoothed) last score minus the (smoothed)
        score at the last evaluation at or before ``(1 - window)`` of the steps (``None`` while there is none)."""
        last = history[-1]
        earlier = [i for i, h in enumerate(history) if h["step"] <= (1.0 - self.window) * last["step"]]
        if not earlier:
            return None
        return self.smoothed(history, len(history) - 1) - self.smoothed(history, earlier[-1])

    def status(self, history: list[dict]) -> str | None:
        """``"plateau"`` or ``"max_steps"`` when training should stop, else ``None``."""
        if not history:
            return None
        steps = history[-1]["step"]
        if steps >= self.max_steps:
            return "max_steps"
        gain = self.gain(history)
        if steps >= self.min_steps and gain is not None and gain < self.min_gain_db:
            return "plateau"
        return None


def write_record(path: Path, record: dict) -> None:
    """A run's record, renamed into place: a stop while it is written leaves the previous one whole."""
    atomic_write_bytes(path, (json.dumps(record, indent=1) + "\n").encode())


def last_checkpoint_steps(run_dir: Path) -> int:
    """How many steps the newest checkpoint in ``run_dir/nerfstudio_models`` holds (0 without one)."""
    names = sorted((run_dir / "nerfstudio_models").glob("step-*.ckpt"))
    return int(names[-1].stem.split("-")[1]) + 1 if names else 0


@contextlib.contextmanager
def training_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``run_dir`` while it trains: a second process reaching the same run (a suite
    started twice, or two suites sharing a training folder) stops with one line instead of writing the run's
    checkpoints and record alongside the first. The lock file sits beside the run folder (whose contents
    :func:`train_to_plateau` checks) and the operating system releases it when the process ends, however it
    ends. Where ``fcntl`` does not exist (Windows) nothing is locked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on Linux or macOS
        yield
        return
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(run_dir.parent / f".{run_dir.name}.lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(
                f"another process is training {run_dir}; wait for it to finish or stop it, then run this again"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def train_to_plateau(
    config: TrainerConfig,
    scene: Path,
    output_dir: Path,
    rule: PlateauRule,
    timestamp: str = "plateau",
    label: str = "",
) -> tuple[Path, dict]:
    """Train ``config`` on ``scene`` until ``rule`` says it has plateaued, in chunks of ``rule.eval_every``
    steps, scoring the validation views after each chunk; resumable.

    Each chunk ends on a checkpoint (model, optimisers and schedulers) and one line of ``plateau.json``
    beside the run's ``config.yml`` (steps, PSNR, cumulative training seconds, and the chunk's CPU seconds per
    step: on one thread, what a step costs without the time spent waiting for the core). Run again, the same call
    continues from the newest checkpoint, so a run longer than a working session survives being stopped at
    any point: Ctrl-C or SIGTERM saves the last finished step, and the record keeps what the chunk cost so far
    (``stopped``, added to the chunk's figures when it ends), so nothing is trained again (the rest of
    the chunk then draws other rays than an unstopped run would); a harder stop (SIGKILL, a crash) loses the
    chunk in progress. A run directory holding another configuration, seed or
    rule is refused rather than overwritten (other min/max steps continue it); a run of the same configuration
    that ``ns-train`` started there is continued from its newest checkpoint, or started again when it was
    stopped before its first one. A second process reaching the run while it trains is refused
    (:func:`training_lock`). Returns the run's ``config.yml`` and the record.
    """
    rule.check()
    config = benchmark_run(config, scene, output_dir, timestamp, rule.max_steps)  # chunks of rule.eval_every
    config.save_only_latest_checkpoint = True
    with training_lock(config.get_base_dir()):
        return _train_to_plateau(config, rule, label)


def _train_to_plateau(config: TrainerConfig, rule: PlateauRule, label: str) -> tuple[Path, dict]:
    """:func:`train_to_plateau` on the run ``config`` names, its lock held."""
    from eugen_nerf.eval.evaluate import score_test_views

    path = config.get_base_dir() / "config.yml"
    record_path = path.parent / PLATEAU_RECORD
    # the steps are not part of a run's identity: a larger cap or minimum continues it on the same schedule
    rule_key = {k: v for k, v in dataclasses.asdict(rule).items() if k not in ("min_steps", "max_steps")}
    scene = scene_hash(config)
    saved = None
    if record_path.is_file():
        record = json.loads(record_path.read_text())
        saved = copy.deepcopy(record)
        if record.get("scene_hash", scene) != scene:
            raise InputError(
                f"{path.parent} was trained on another version of {config.pipeline.datamanager.data} (its "
                "content changed since): remove the run, or restore the scene it was trained on (a shipped "
                "scene: git checkout -- scenes/)"
            )
        saved_rule = {k: v for k, v in record.get("rule", {}).items() if k not in ("min_steps", "max_steps")}
        if (
            record.get("seed") != config.machine.seed
            or saved_rule != rule_key
            or not same_model(path, config)
        ):
            raise InputError(
                f"{path.parent} holds a run with another configuration, seed or plateau rule; "
                "remove it or choose another work folder"
            )
    elif path.parent.exists() and any(path.parent.iterdir()) and not same_model(path, config):
        raise InputError(
            f"{path.parent} holds something that is not a run of this configuration; remove it first"
        )
    else:
        # a new run, or one of this configuration without a record (ns-train started it, or it stopped before
        # its first checkpoint): continued from its newest checkpoint, if any
        record = {"seed": config.machine.seed, "history": []}
    record["rule"] = dataclasses.asdict(rule)
    record["scene_hash"] = scene
    while True:
        done = last_checkpoint_steps(path.parent)
        history = [h for h in record["history"] if h["step"] <= done]
        on_schedule = done % rule.eval_every == 0 or done >= rule.max_steps
        if done and on_schedule and (not history or history[-1]["step"] != done):
            # stopped between saving and scoring, or by a signal in the chunk's last step
            known = [h["train_seconds"] for h in history if h["train_seconds"] is not None]
            entry = {"step": done, "psnr": None, "train_seconds": known[-1] if known else None}
            stopped = record.pop("stopped", None)
            if stopped and stopped["step"] == done:
                entry["train_seconds"] = (entry["train_seconds"] or 0.0) + stopped["train_seconds"]
                entry["cpu_seconds_per_step"] = stopped["cpu_seconds"] / stopped["steps"]
            history.append(entry)
        record["history"] = history
        scored = bool(history) and history[-1]["psnr"] is not None
        record["finished"] = rule.status(history) if scored else None
        if record["finished"]:
            if record != saved:  # a finished run read back as it was is left untouched (a shipped teacher)
                write_record(record_path, record)
            return path, record
        if not history or scored or not on_schedule:
            # to the next scheduled step: a checkpoint off the schedule (a run that ns-train started, or
            # stopped after a save mid-chunk) is continued, not scored, so every run is scored at the same steps
            chunk = min(rule.eval_every - done % rule.eval_every, rule.max_steps - done)
            run = copy.deepcopy(config)
            run.max_num_iterations = chunk
            # one checkpoint per chunk, at its end (nerfstudio would also save at a first step on the schedule)
            run.steps_per_save = 10**9
            run.load_dir = path.parent / "nerfstudio_models" if done else None
            config.save_config()
            # the part of this chunk trained before a stop saved it, if the newest checkpoint is that save
            stopped = record.get("stopped")
            stopped = stopped if stopped and stopped["step"] == done else {}
            seed_everything(config.machine.seed + done)  # a resumed chunk draws other rays than the first
            try:
                trainer, wall, cpu = timed_training(
                    run, total_steps=rule.max_steps, resume_hint="run the same command again to continue"
                )
            except TrainingStopped as stop:
                if stop.step is not None:  # saved: keep what the stopped part cost, for the chunk's figures
                    record["stopped"] = {
                        "step": stop.step + 1,
                        "steps": stopped.get("steps", 0) + stop.step + 1 - done,
                        "train_seconds": stopped.get("train_seconds", 0.0) + stop.wall,
                        "cpu_seconds": stopped.get("cpu_seconds", 0.0) + stop.cpu,
                    }
                    write_record(record_path, record)
                raise
            record.pop("stopped", None)
            cpu_per_step = (cpu + stopped.get("cpu_seconds", 0.0)) / (chunk + stopped.get("steps", 0))
            before = history[-1]["train_seconds"] if history else 0.0
            seconds = (before or 0.0) + stopped.get("train_seconds", 0.0) + wall
            history.append(
                {
                    "step": done + chunk,
                    "psnr": None,
                    "train_seconds": seconds,
                    "cpu_seconds_per_step": cpu_per_step,
                }
            )
            # on disk before scoring: a stop while the chunk is scored (no signal handler then) must not lose
            # what the chunk cost; the rerun scores the saved checkpoint (an entry without a score)
            record["history"] = history
            write_record(record_path, record)
            pipeline = trainer.pipeline
        else:  # a checkpoint found on disk, not yet scored
            from eugen_nerf.eval.runs import load_run

            pipeline = load_run(path, test_mode="val").pipeline
        scores = score_test_views(
            pipeline, warmup=0, lpips=False, label=f"{label} step {history[-1]['step']}"
        )
        history[-1]["psnr"] = scores.mean("psnr")
        record["history"] = history
        write_record(record_path, record)
        gain = rule.gain(history)
        print(
            f"{label or path.parent}: {history[-1]['step']} steps, validation PSNR {history[-1]['psnr']:.2f} dB"
            + (f", {gain:+.2f} dB over the last {rule.window:.0%} of the steps" if gain is not None else ""),
            flush=True,
        )
