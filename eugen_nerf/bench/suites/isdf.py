"""Streaming iSDF on an RGB-D scene (``--data``, default the furnished room ``scenes/room_rgbd``), EUGen against
the dense field and the reviewers' baselines, over several seeds, each run trained until the dense field
plateaus; resumable.

**How a run trains.** iSDF is online: the ordered frames arrive (every ``--frame-stride``-th of the
trajectory), each is judged for the keyframe buffer and followed by ``--steps-per-frame`` optimisation steps
on a window of it and keyframes drawn by loss. After the last frame the map keeps optimising as a live system
does while the camera rests there (the same windows, no new frame: the *settle* steps), scored every
``--settle-every`` steps by its SDF error on the fixed evaluation points (cheap: no mesh).

**Plateau rule.** The dense field at the first seed trains until its SDF error falls by less than
``--min-gain`` (2%) over the last ``--window`` (20%) of its steps (stream and settle steps together; each score
the mean of the last ``--smooth`` scores in dB, ``-20 log10(error)``), or until ``--max-steps``. That step
count is then every run's budget: every variant and seed streams the same frames and settles to the same
total, so all are compared at equal steps. The rule is :class:`eugen_nerf.bench.training.PlateauRule` (the
one the other suites use on PSNR) applied to the SDF error in dB, where a 2% fall is 0.175 dB.

**Resuming.** Each (variant, seed) run keeps its state (field, optimiser, keyframe buffer, random generator)
and its record (SDF error after the stream and after every settle chunk, training seconds, the final
metrics) in ``--mesh-dir``/runs/VARIANT/seedN, written after every chunk. Rerunning the same command
continues each run where it stopped (at most one chunk or one stream is trained again) and reuses finished
ones; a run folder holding another configuration (scene content, stream, schedule, evaluation) is refused
with one line rather than reused. The report is written only when every run has finished with finite
metrics.

Every variant consumes the same ordered stream, once per seed (the seed sets the initialisation, the ray
samples and the EUGen projections). Variants:

* the dense iSDF field (256 wide) and EUGen (``--eugen.*``, default: the shipped ``eugen-isdf`` layers);
* the reviewers' baselines on the same layers at EUGen's parameter count: low-rank and SNNK;
* the dense field narrowed to EUGen's parameter count, and narrowed to EUGen's inference speed (the width
  whose untrained field times closest to EUGen's, measured side by side once and kept in ``--mesh-dir``);
* with ``--front``: dense at more widths and EUGen at more ``m``, for the quality/speed front.

Measured: SDF error (mean |error| on measured surface points and observed free space, see
:mod:`eugen_nerf.isdf.evaluate`), Chamfer distance and F-score of the marching-cubes mesh cropped to the
ground truth's box (``--evaluation.crop-margin``; nothing behind a room's walls is ever observed; a field
without a zero level yet gets its reason instead), mean ± std over seeds; inference time (SDF at 65,536
points, eval mode, EUGen merged) of the first seed's trained fields, timed side by side
(``benchmark_interleaved``, every output checked finite); the median time of one training step on a fixed
window; each run's training time, and the steps and seconds each first-seed run took to reach the dense
field's final SDF error. Every report records the machine, the torch and nerfstudio versions, the code's
commit and the scene's content hash, and what the suite cost (training seconds and CPU seconds summed over
every run, including those trained by earlier invocations).

Goals (from the paper's iSDF claims): inference >= 1.25x and training >= 1.05x faster than dense at an SDF
error within 5% of dense. Writes ``isdf.json``, ``isdf.png`` (SDF error against inference throughput, the
first seed's SDF error curves) and ``isdf_slices.png`` (the first seed's dense and EUGen SDF in a horizontal
and a vertical slice beside the ground truth's distance) into ``--output``.

    eugen-bench isdf                                                # the protocol's setting
    python -m eugen_nerf.bench.suites.isdf --data scenes/bunny_rgbd --seeds 0 --frame-stride 20 \\
        --steps-per-frame 2 --settle-every 4 --max-steps 16 --no-baselines --output /tmp/isdf --mesh-dir /tmp/isdf/work
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import matplotlib
import numpy as np
import torch
import tyro

from eugen_nerf.bench.merge import non_finite_figures, publish_json
from eugen_nerf.bench.provenance import content_hash, provenance
from eugen_nerf.bench.seeds import mean_and_std
from eugen_nerf.bench.suites import command_line
from eugen_nerf.bench.training import PlateauRule, plain, without_unused_eugen_knobs
from eugen_nerf.eval.timing import benchmark, benchmark_interleaved, closest_in_time
from eugen_nerf.fields.isdf import ISDFEUGenConfig, ISDFField, ISDFFieldConfig, dense_isdf_config
from eugen_nerf.inputs.errors import InputError, NumericalError, one_line_errors, usage_error
from eugen_nerf.inputs.outputs import atomic_write_bytes, file_stem
from eugen_nerf.isdf.evaluate import (
    EvaluationConfig,
    GroundTruth,
    evaluate_field,
    evaluate_sdf,
    evaluation_points,
)
from eugen_nerf.isdf.frames import load_stream
from eugen_nerf.isdf.trainer import StreamingConfig, StreamingTrainer

matplotlib.use("Agg")
import matplotlib.pyplot as plt

INFERENCE_POINTS = 65536
QUALITY_KEYS = (
    "sdf_error",
    "sdf_error_surface",
    "sdf_error_free_space",
    "free_space_sign_accuracy",
    "chamfer",
    "f_score@0.02",
    "f_score@0.05",
)
FRONT_WIDTHS = (64, 96, 128, 192)
FRONT_FEATURES = (16, 32, 64, 128)
FRONT_HIGHER_DEGREE = (32, 64)
"""m of the front's EUGen variants one degree above ``--eugen.degree``."""


STATE = "state.pt"
RECORD = "record.json"


@dataclass
class BenchISDF:
    data: Path = Path("scenes/room_rgbd")
    """The RGB-D scene streamed (ordered frames with depth, scene.json's near/far, the ground-truth mesh)."""
    output: Path = Path("benchmarks/isdf")
    """Folder of isdf.json, isdf.png and isdf_slices.png."""
    mesh_dir: Path = Path("outputs/bench/isdf")
    """Work folder: every (variant, seed) run's state and record under runs/ (continued or reused by a rerun
    of the same configuration) and the first seed's marching-cubes meshes."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Seeds of the dense field and EUGen (the first is the reference run that sets the steps, and is timed)."""
    baseline_seeds: list[int] | None = None
    """Seeds of the baselines (low-rank, SNNK, the narrowed dense fields); None: ``--seeds``."""
    frame_stride: int = 5
    """Stream every n-th frame of the trajectory."""
    steps_per_frame: int = 8
    """Optimisation steps after each arriving frame."""
    settle_every: int = 100
    """Settle steps between two scores of the SDF error after the stream (and between two saved states)."""
    min_gain: float = 0.02
    """The dense field has plateaued when its SDF error fell by less than this fraction over the last
    ``--window`` of its steps."""
    window: float = 0.2
    """Fraction of the steps (stream and settle together) the gain is measured over."""
    smooth: int = 2
    """Each score is the mean (in dB) of this many consecutive SDF-error scores."""
    min_steps: int = 0
    """The dense field trains at least this many steps (stream included)."""
    max_steps: int = 2000
    """The dense field trains at most this many steps (stream included; the stream is never cut short)."""
    eugen: ISDFEUGenConfig = field(default_factory=ISDFEUGenConfig)
    """The EUGen variant measured (its seed is replaced by each run's seed)."""
    eugen_lr: float | None = None
    """Learning rate of the EUGen variants (None: the dense field's, iSDF's 1.3e-3); a set rate names the
    variant, so its runs are kept apart from those at the dense field's rate."""
    front: bool = False
    """Also dense at widths 64-192 and EUGen at m = 16-128 (and one degree higher at m = 32, 64): the
    quality/speed front."""
    front_seeds: list[int] = field(default_factory=lambda: [0])
    """Seeds of the front's extra variants (the first of ``--seeds`` should be among them: it is timed)."""
    baselines: bool = True
    """Also the reviewers' baselines (low-rank, SNNK, dense narrowed to EUGen's parameters and speed); off for a
    longer run of the dense field and EUGen alone."""
    evaluation: EvaluationConfig = field(
        default_factory=lambda: EvaluationConfig(mesh_resolution=128, crop_margin=0.05)
    )
    threads: int = 1
    """torch CPU threads (1 keeps timings comparable on a shared machine)."""
    repeats: int = 7
    """Timed repeats of each speed measurement."""


def parameters(config: ISDFFieldConfig) -> int:
    return sum(p.numel() for p in ISDFField(config).parameters())


def narrowed_to_parameters(target: int) -> ISDFFieldConfig:
    """The dense iSDF MLP narrowed to about ``target`` parameters."""
    width = min(range(8, 257), key=lambda w: abs(parameters(dense_isdf_config(w)) - target))
    return dense_isdf_config(width)


def inference_fn(field_: ISDFField, points: torch.Tensor):
    field_.eval()

    def run():
        with torch.no_grad():
            return field_(points)

    return run


def narrowed_to_speed(eugen: ISDFFieldConfig, repeats: int) -> tuple[ISDFFieldConfig, dict]:
    """The dense width whose (untrained) field infers closest to EUGen's, and how it was found: every width
    timed side by side with EUGen in CPU seconds on this thread (what a query costs whatever else runs), the
    width read off a straight line through the widths' median times against their parameter counts (an MLP's
    cost is linear in its weights, not its width), as the methods suites match a render's speed.

    Untrained weights time like trained ones here: the cost is the matrix shapes, not the values.
    """
    torch.manual_seed(0)
    points = torch.rand(INFERENCE_POINTS, 3) * 2.0 - 1.0
    widths = list(range(16, 257, 16))
    width, timings = closest_in_time(
        inference_fn(ISDFField(eugen), points),
        {str(w): inference_fn(ISDFField(dense_isdf_config(w)), points) for w in widths},
        "cpu",
        warmup=1,
        repeats=repeats,
        sizes={str(w): parameters(dense_isdf_config(w)) for w in widths},
        clock="cpu",
    )
    found = {
        "width": int(width),
        "inference_seconds_median": {name: t.median for name, t in timings.items()},
        "points": INFERENCE_POINTS,
        "chosen_by": "a straight line fitted through the widths' median times against their parameters, "
        "nearest EUGen's",
        "threads": torch.get_num_threads(),
        "clock": "cpu",
    }
    return dense_isdf_config(int(width)), found


def speed_matched(config: BenchISDF, eugen: ISDFFieldConfig) -> ISDFFieldConfig:
    """:func:`narrowed_to_speed`, timed once per EUGen configuration and kept in ``--mesh-dir`` with its
    timings: the width names the variant's runs, so a rerun on a differently loaded machine must not pick
    another width and train another variant."""
    path = config.mesh_dir / "narrowed_to_speed.json"
    key = plain(eugen)
    if path.is_file():
        saved = json.loads(path.read_text())
        if (
            saved.get("eugen") == key
            and saved.get("clock") == "cpu"
            and saved.get("threads") == torch.get_num_threads()
        ):
            return dense_isdf_config(int(saved["width"]))
    by_speed, found = narrowed_to_speed(eugen, config.repeats)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"eugen": key, **found}, indent=1) + "\n")
    return by_speed


def describe(spec: ISDFEUGenConfig, lr: float | None = None) -> str:
    layers = ",".join(str(i) for i in spec.layers)
    if spec.layer_type == "lowrank":
        return f"lowrank (layers {layers}, as many weights as EUGen's A)"
    if spec.layer_type != "eugen":
        return f"{spec.layer_type} (layers {layers}, EUGen's parameters)"
    extra = (
        ("" if spec.scaling == "linear" else f", {spec.scaling} scaling")
        + ("" if not spec.trainable_projections else ", trainable G")
        + ("" if not spec.train_merged else ", trained merged")
        + ("" if lr is None else f", lr {lr:g}")
    )
    return f"eugen (layers {layers}, m={spec.num_features}, k={spec.degree}, {spec.feature_map}{extra})"


def variants(config: BenchISDF) -> dict[str, tuple[ISDFFieldConfig, list[int]]]:
    """Name -> (field config, seeds); the first is the dense reference, the second the EUGen variant under
    test; the front's extra variants train at ``--front-seeds``."""
    eugen = ISDFFieldConfig(eugen=config.eugen)
    out = {
        "dense (iSDF, 256 wide)": dense_isdf_config(),
        describe(config.eugen, config.eugen_lr): eugen,
    }
    if config.baselines:
        for kind in ("lowrank", "snnk"):
            spec = replace(config.eugen, layer_type=kind, feature_map="relu", train_merged=False)
            out[describe(spec)] = ISDFFieldConfig(eugen=spec)
        by_params = narrowed_to_parameters(parameters(eugen))
        out[f"dense narrowed to EUGen's parameters (width {by_params.width})"] = by_params
        by_speed = speed_matched(config, eugen)
        out[f"dense narrowed to EUGen's speed (width {by_speed.width})"] = by_speed
    baseline_seeds = list(config.seeds if config.baseline_seeds is None else config.baseline_seeds)
    out = {
        name: (sdf, list(config.seeds) if index < 2 else baseline_seeds)
        for index, (name, sdf) in enumerate(out.items())
    }
    if config.front:
        for width in FRONT_WIDTHS:
            out.setdefault(f"dense (width {width})", (dense_isdf_config(width), list(config.front_seeds)))
        for m in FRONT_FEATURES:
            spec = replace(config.eugen, num_features=m)
            out.setdefault(
                describe(spec, config.eugen_lr), (ISDFFieldConfig(eugen=spec), list(config.front_seeds))
            )
        for m in FRONT_HIGHER_DEGREE:
            spec = replace(config.eugen, num_features=m, degree=config.eugen.degree + 1)
            spec.validate()
            out.setdefault(
                describe(spec, config.eugen_lr), (ISDFFieldConfig(eugen=spec), list(config.front_seeds))
            )
    return out


def macs_per_point(field_: ISDFField) -> int:
    """Multiply-accumulates per point of the MLP as it runs at inference: its merged form (a dense MLP's is
    the MLP itself)."""
    return field_.mlp.fused().macs_per_point()


def step_seconds(trainer: StreamingTrainer, repeats: int) -> float:
    """Median seconds of one training step on a fixed window (after warm-up)."""
    window = list(range(0, len(trainer.frames), len(trainer.frames) // trainer.config.keyframes.window_size))
    window = window[: trainer.config.keyframes.window_size]
    state = {k: v.clone() for k, v in trainer.field.state_dict().items()}
    seconds = benchmark(lambda: trainer.step(window), trainer.device, warmup=2, repeats=repeats).median
    trainer.field.load_state_dict(state)  # timing steps must not change the evaluated field
    return seconds


def sdf_db(error: float) -> float:
    """The SDF error in dB (``-20 log10``, as PSNR is of the RMSE): a fall of the error is a gain in dB."""
    return -20.0 * math.log10(max(error, 1e-12))


def plateau_rule(config: BenchISDF, min_steps: int, max_steps: int) -> PlateauRule:
    """The plateau rule on the SDF error in dB: a fall by less than ``min_gain`` over the last ``window``."""
    return PlateauRule(
        eval_every=config.settle_every,
        window=config.window,
        min_gain_db=-20.0 * math.log10(1.0 - config.min_gain),
        min_steps=min_steps,
        max_steps=max_steps,
        smooth=config.smooth,
    )


def status(rule: PlateauRule, history: list[dict]) -> str | None:
    """``rule.status`` on a run's history of SDF errors."""
    return rule.status([{"step": h["step"], "psnr": sdf_db(h["sdf_error"])} for h in history])


@dataclass
class Context:
    """What every run of one suite invocation shares: the stream, the ground truth, the evaluation points."""

    config: BenchISDF
    scene: object
    frames: list
    scene_hash: str
    ground_truth: GroundTruth
    surface: torch.Tensor
    free: torch.Tensor

    @classmethod
    def load(cls, config: BenchISDF) -> Context:
        scene, frames = load_stream(config.data)
        surface, free = evaluation_points(
            frames, scene.intrinsics, scene.height, scene.width, config.evaluation
        )
        return cls(
            config, scene, frames, content_hash(config.data), GroundTruth(scene.mesh_path), surface, free
        )

    def sdf_error(self, field_: ISDFField) -> float:
        field_.eval()
        return evaluate_sdf(
            lambda p: field_(p), self.ground_truth, self.surface, self.free, torch.device("cpu")
        )["sdf_error"]


def stream_config(sdf: ISDFFieldConfig, seed: int, config: BenchISDF) -> StreamingConfig:
    sdf = replace(sdf, eugen=replace(sdf.eugen, seed=seed))
    stream = StreamingConfig(
        sdf=sdf, frame_stride=config.frame_stride, steps_per_frame=config.steps_per_frame, seed=seed
    )
    is_eugen = bool(sdf.eugen.layers) and sdf.eugen.layer_type == "eugen"
    return replace(stream, lr=config.eugen_lr) if is_eugen and config.eugen_lr is not None else stream


def run_key(stream: StreamingConfig, context: Context) -> dict:
    """A run's identity: the scene's content, the stream, the settle schedule and the evaluation (not the
    step bounds: a larger budget continues a run)."""
    config = context.config
    return plain(
        {
            "scene": context.scene_hash,
            "stream": stream,
            "schedule": {
                "settle_every": config.settle_every,
                "window": config.window,
                "min_gain": config.min_gain,
                "smooth": config.smooth,
            },
            "evaluation": config.evaluation,
        }
    )


def same_run(saved: dict, key: dict) -> bool:
    """Whether a saved run key and ``key`` name the same run. A field without EUGen layers (the dense ones)
    ignores the EUGen knobs, so a changed EUGen default does not make its runs train again."""

    def identity(k: dict) -> dict:
        stream = k.get("stream")
        if not isinstance(stream, dict):
            return k
        return {**k, "stream": {**stream, "sdf": without_unused_eugen_knobs(stream.get("sdf"))}}

    return identity(saved) == identity(key)


def run_dir(config: BenchISDF, name: str, seed: int) -> Path:
    return config.mesh_dir / "runs" / file_stem(name) / f"seed{seed}"


def save(folder: Path, trainer: StreamingTrainer, record: dict) -> None:
    """The state first, then the record: a stop between them leaves a state the record does not score yet,
    which the next call scores (never a record ahead of its state)."""
    folder.mkdir(parents=True, exist_ok=True)
    state = io.BytesIO()
    torch.save(trainer.state_dict(), state)
    atomic_write_bytes(folder / STATE, state.getvalue())
    save_record(folder, record)


def save_record(folder: Path, record: dict) -> None:
    atomic_write_bytes(folder / RECORD, (json.dumps(record, indent=1) + "\n").encode())


def open_run(
    name: str, sdf: ISDFFieldConfig, seed: int, context: Context
) -> tuple[StreamingTrainer, dict, Path]:
    """The run's trainer (its saved state loaded when there is one), its record and its folder; a folder
    holding a run of another configuration is refused."""
    folder = run_dir(context.config, name, seed)
    stream = stream_config(sdf, seed, context.config)
    key = run_key(stream, context)
    record = {"name": name, "seed": seed, "key": key, "history": [], "finished": None, "result": None}
    if (folder / RECORD).is_file():
        saved = json.loads((folder / RECORD).read_text())
        if not same_run(saved.get("key") or {}, key):
            raise InputError(
                f"{folder} holds a run of another configuration (scene content, stream, schedule or "
                "evaluation); remove it or pass another --mesh-dir"
            )
        record = saved
    elif (folder / STATE).is_file():
        raise InputError(f"{folder} holds a state without its {RECORD}; remove it or pass another --mesh-dir")
    trainer = StreamingTrainer(stream, context.scene, context.frames, torch.device("cpu"))
    if (folder / STATE).is_file():
        trainer.load_state_dict(torch.load(folder / STATE, map_location="cpu", weights_only=True))
    return trainer, record, folder


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock: a second process training the same run waits instead of writing beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"[isdf] waiting for another process training {folder}", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def train_run(name: str, sdf: ISDFFieldConfig, seed: int, rule: PlateauRule, context: Context) -> dict:
    """Train one (variant, seed) run until ``rule`` stops it, continuing its saved state; returns its record."""
    with locked(run_dir(context.config, name, seed)):
        return train_locked(name, sdf, seed, rule, context)


def train_locked(name: str, sdf: ISDFFieldConfig, seed: int, rule: PlateauRule, context: Context) -> dict:
    trainer, record, folder = open_run(name, sdf, seed, context)
    label = f"{name} seed {seed}"
    done = trainer.steps_done
    if done > rule.max_steps and trainer.latest is not None:
        raise InputError(
            f"{folder} trained {done} steps, more than the {rule.max_steps} this run is given; remove it or "
            "pass another --mesh-dir"
        )
    history = [h for h in record["history"] if h["step"] <= done]
    known = history[-1] if history else {"train_seconds": 0.0, "train_cpu_seconds": 0.0}
    if trainer.latest is not None and (not history or history[-1]["step"] != done):
        # stopped between saving the state and scoring it
        history.append(
            {"step": done, "sdf_error": context.sdf_error(trainer.field), **seconds_of(known), "loss": None}
        )
    record["history"] = history
    if trainer.latest is None:  # the stream: all of it, then the first saved state
        wall, cpu = time.perf_counter(), time.process_time()
        log = trainer.run(progress=False)
        history.append(
            {
                "step": trainer.steps_done,
                "sdf_error": context.sdf_error(trainer.field),
                "train_seconds": log.train_seconds,
                "train_cpu_seconds": time.process_time() - cpu,
                "loss": statistics.fmean(log.losses[-8:]),
            }
        )
        record["stream_steps"] = trainer.steps_done
        record["stream_wall_seconds"] = time.perf_counter() - wall
        save(folder, trainer, record)
        print(
            f"[isdf] {label}: stream done, {trainer.steps_done} steps, SDF error {history[-1]['sdf_error']:.4f}",
            flush=True,
        )
    while not (finished := status(rule, history)):
        chunk = min(context.config.settle_every, rule.max_steps - trainer.steps_done)
        wall, cpu = time.perf_counter(), time.process_time()
        losses = trainer.settle(chunk)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        last = history[-1]
        history.append(
            {
                "step": trainer.steps_done,
                "sdf_error": context.sdf_error(trainer.field),
                "train_seconds": (last["train_seconds"] or 0.0) + wall,
                "train_cpu_seconds": (last["train_cpu_seconds"] or 0.0) + cpu,
                "loss": statistics.fmean(losses[-8:]),
            }
        )
        save(folder, trainer, record)
        gain = rule.gain([{"step": h["step"], "psnr": sdf_db(h["sdf_error"])} for h in history])
        print(
            f"[isdf] {label}: {trainer.steps_done} steps, SDF error {history[-1]['sdf_error']:.4f}"
            + (f" ({gain:+.3f} dB over the last {rule.window:.0%} of the steps)" if gain is not None else ""),
            flush=True,
        )
    record["finished"] = finished
    record["keyframes"] = list(trainer.buffer.keyframes)
    record["result"] = final_metrics(name, seed, trainer, record, context)
    save_record(folder, record)
    return record


def seconds_of(entry: dict) -> dict:
    return {"train_seconds": entry.get("train_seconds"), "train_cpu_seconds": entry.get("train_cpu_seconds")}


def check_finite(values: dict, label: str) -> None:
    bad = [path.removeprefix("figures.") for path in non_finite_figures(values, "figures")]
    if bad:
        raise NumericalError(f"{label}: non-finite {', '.join(bad)}; not publishing it")


def final_metrics(name: str, seed: int, trainer: StreamingTrainer, record: dict, context: Context) -> dict:
    """SDF error, Chamfer and F-score of the finished run (the first seed's mesh exported), reused from the
    record while the run's step count is unchanged and the exported mesh exists."""
    config = context.config
    export = config.mesh_dir / (file_stem(name) + ".ply") if seed == config.seeds[0] else None
    cached = record.get("result")
    if cached and cached.get("steps") == trainer.steps_done and (export is None or export.is_file()):
        return cached
    field_ = trainer.field.eval()
    metrics = evaluate_field(
        lambda points: field_(points),
        context.scene.mesh_path,
        context.frames,
        context.scene.intrinsics,
        context.scene.height,
        context.scene.width,
        config.evaluation,
        torch.device("cpu"),
        export_to=export,
        mesh_optional=True,
    )
    last = record["history"][-1]
    result = {
        "seed": seed,
        "steps": trainer.steps_done,
        "stream_steps": record["stream_steps"],
        "finished": record["finished"],
        "train_seconds": last["train_seconds"],
        "train_cpu_seconds": last["train_cpu_seconds"],
        "keyframes": len(trainer.buffer.keyframes),
        "final_loss": next(h["loss"] for h in reversed(record["history"]) if h.get("loss") is not None),
        **{k: None if metrics.get(k) is None else float(metrics[k]) for k in QUALITY_KEYS},
        "mesh_reason": metrics.get("mesh_reason"),
    }
    check_finite(result, f"{name} seed {seed}")
    return result


def load_trainer(name: str, sdf: ISDFFieldConfig, seed: int, context: Context) -> StreamingTrainer:
    trainer, _, _ = open_run(name, sdf, seed, context)
    return trainer


def time_to_reach(history: list[dict], target: float) -> dict | None:
    """Steps and training seconds at the first score at or below ``target`` (None: never reached)."""
    for h in history:
        if h["sdf_error"] <= target:
            return {"step": h["step"], "train_seconds": h["train_seconds"]}
    return None


@torch.no_grad()
def slices(fields: dict[str, ISDFField], context: Context, path: Path, resolution: int = 160) -> dict:
    """The ground truth's distance and each field's SDF on a horizontal slice (at a quarter of the ground
    truth's height, through the furniture) and a vertical one (through the middle), zero contours drawn; the
    ground truth's surface (distance under one pixel) is overlaid in every panel."""
    box = context.ground_truth.mesh.get_axis_aligned_bounding_box()
    low, high = np.asarray(box.min_bound) - 0.05, np.asarray(box.max_bound) + 0.05
    z = float(low[2] + 0.05 + 0.25 * (high[2] - low[2] - 0.1))
    y = float((low[1] + high[1]) / 2)
    planes = {
        f"horizontal slice z = {z:.2f}": (0, 1, 2, z),
        f"vertical slice y = {y:.2f}": (0, 2, 1, y),
    }
    fig, axes = plt.subplots(
        len(planes), 1 + len(fields), figsize=(4.6 * (1 + len(fields)), 4.2 * len(planes))
    )
    for row, (title, (a, b, c, value)) in enumerate(planes.items()):
        u = torch.linspace(float(low[a]), float(high[a]), resolution)
        v = torch.linspace(float(low[b]), float(high[b]), resolution)
        grid_u, grid_v = torch.meshgrid(u, v, indexing="xy")
        points = torch.zeros(resolution * resolution, 3)
        points[:, a], points[:, b], points[:, c] = grid_u.reshape(-1), grid_v.reshape(-1), value
        truth = context.ground_truth.distance(points).reshape(resolution, resolution).numpy()
        pixel = float(high[a] - low[a]) / resolution
        panels = {"ground truth (unsigned distance)": truth}
        for name, field_ in fields.items():
            panels[name] = field_.eval()(points).reshape(resolution, resolution).numpy()
        extent = (float(low[a]), float(high[a]), float(low[b]), float(high[b]))
        for column, (name, values) in enumerate(panels.items()):
            ax = axes[row, column]
            image = ax.imshow(values, origin="lower", extent=extent, cmap="RdBu", vmin=-0.3, vmax=0.3)
            ax.contour(grid_u.numpy(), grid_v.numpy(), truth, levels=[pixel], colors="lime", linewidths=0.6)
            if column:
                ax.contour(grid_u.numpy(), grid_v.numpy(), values, levels=[0.0], colors="k", linewidths=0.8)
            ax.set_title(f"{name}\n{title}", fontsize=8)
            ax.set_xlabel("xyz"[a])
            ax.set_ylabel("xyz"[b])
        fig.colorbar(image, ax=axes[row, -1], fraction=0.046)
    fig.suptitle(
        "SDF (blue outside, red inside, clipped at ±0.3); green: the ground-truth surface; black: each field's zero level"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return {"horizontal_z": z, "vertical_y": y}


def plot(results: list[dict], path: Path, title: str) -> None:
    fig, (front, curves, bars) = plt.subplots(1, 3, figsize=(20, 6.5))
    for index, r in enumerate(results):
        kind = r["name"].split(" ")[0]
        marker = {"dense": "s", "eugen": "o", "lowrank": "^", "snnk": "v"}.get(kind, "x")
        colour = plt.cm.tab20(index % 20)
        front.errorbar(
            r["inference_points_per_second"] / 1e6,
            r["mean"]["sdf_error"],
            yerr=r["std"]["sdf_error"],
            marker=marker,
            capsize=3,
            linestyle="none",
            color=colour,
            label=f"{r['name']} [seeds {', '.join(map(str, r['seeds']))}]",
        )
        curve = r["curve"]
        curves.plot(
            [h["step"] for h in curve], [h["sdf_error"] for h in curve], marker=marker, ms=3, color=colour
        )
    front.set_xscale("log")
    front.set_xlabel("inference (million points / s, fused, 1 thread; log scale)")
    front.set_ylabel("SDF error (mean |error|, mean ± std over seeds)")
    fig.legend(*front.get_legend_handles_labels(), fontsize=7, loc="lower center", ncol=3, frameon=False)
    front.set_title("quality / speed front (lower right is better)")
    curves.axvline(results[0]["curve"][0]["step"], color="grey", linestyle=":", label="end of the stream")
    curves.set_yscale("log")
    curves.set_xlabel("training steps (stream, then settle)")
    curves.set_ylabel("SDF error (first seed)")
    curves.set_title("SDF error while training (dotted: end of the stream)")
    names = [r["name"] for r in results]
    bars.barh(
        range(len(results)),
        [r["mean"]["sdf_error"] for r in results],
        xerr=[r["std"]["sdf_error"] for r in results],
    )
    bars.set_yticks(range(len(results)), names, fontsize=7)
    bars.set_xlabel("SDF error")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.2, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def check(config: BenchISDF) -> None:
    """One line on bad input, before anything is trained or written."""
    prog = "eugen-bench isdf"
    if not config.seeds or not config.front_seeds or config.baseline_seeds == []:
        usage_error(prog, "--seeds, --baseline-seeds and --front-seeds need at least one seed")
    if min(config.frame_stride, config.steps_per_frame, config.repeats, config.settle_every) < 1:
        usage_error(prog, "--frame-stride, --steps-per-frame, --settle-every and --repeats must be >= 1")
    if not 0.0 < config.min_gain < 1.0:
        usage_error(prog, f"--min-gain is a fraction in (0, 1), got {config.min_gain}")
    try:
        plateau_rule(config, config.min_steps, config.max_steps).check()
    except InputError as error:
        usage_error(prog, f"{error} (--settle-every, --max-steps, --window, --smooth)")
    if not config.data.is_dir():
        usage_error(
            prog,
            f"{config.data} is not a folder; make the room with: eugen-scenes rgbd-room --output {config.data}",
        )


def main(config: BenchISDF) -> None:
    check(config)
    torch.set_num_threads(config.threads)
    started_wall, started_cpu = time.perf_counter(), time.process_time()
    context = Context.load(config)
    chosen = variants(config)
    (reference, (reference_sdf, reference_seeds)) = next(iter(chosen.items()))
    # the dense field at the first seed trains to plateau; its step count is every run's budget
    dense_record = train_run(
        reference,
        reference_sdf,
        reference_seeds[0],
        plateau_rule(config, config.min_steps, config.max_steps),
        context,
    )
    steps = dense_record["result"]["steps"]
    fixed = plateau_rule(config, steps, steps)
    dense_final = dense_record["result"]["sdf_error"]
    # every variant's first seed before any second one: a stopped suite has its headline runs first
    for rank in range(max(len(seeds) for _, seeds in chosen.values())):
        for name, (sdf, seeds) in chosen.items():
            if rank < len(seeds) and not (name == reference and rank == 0):
                train_run(name, sdf, seeds[rank], fixed, context)
    results: list[dict] = []
    first_trainers: dict[str, StreamingTrainer] = {}
    for name, (sdf, seeds) in chosen.items():
        records = []
        for seed in seeds:
            if name == reference and seed == reference_seeds[0]:
                record = dense_record
            else:
                record = train_run(name, sdf, seed, fixed, context)
            records.append(record)
            run = record["result"]
            mesh = (
                f"Chamfer {run['chamfer']:.4f}  F@0.02 {run['f_score@0.02']:.3f}"
                if run.get("mesh_reason") is None
                else f"no mesh: {run['mesh_reason']}"
            )
            print(f"{name:52s} seed {seed}  SDF err {run['sdf_error']:.4f}  {mesh}", flush=True)
        runs = [r["result"] for r in records]
        means, spread = mean_and_std(runs, QUALITY_KEYS + ("final_loss",))
        first_trainers[name] = load_trainer(name, sdf, seeds[0], context)
        field_ = first_trainers[name].field
        results.append(
            {
                "name": name,
                "width": sdf.width,
                "eugen_layers": list(sdf.eugen.layers),
                "eugen": asdict(sdf.eugen),
                "parameters": sum(p.numel() for p in field_.parameters()),
                "inference_macs_per_point": macs_per_point(field_),
                "seeds": seeds,
                "runs": runs,
                "mean": means,
                "std": spread,
                "curve": records[0]["history"],
                "to_dense_final_sdf_error": time_to_reach(records[0]["history"], dense_final),
            }
        )
    print("[isdf] timing inference side by side", flush=True)
    torch.manual_seed(0)
    points = torch.rand(INFERENCE_POINTS, 3) * 2.0 - 1.0
    timings = benchmark_interleaved(
        {n: inference_fn(t.field, points) for n, t in first_trainers.items()},
        "cpu",
        warmup=1,
        repeats=config.repeats,
    )
    for r in results:
        r["inference_seconds_64k"] = timings[r["name"]].median
        r["inference_points_per_second"] = INFERENCE_POINTS / timings[r["name"]].median
        r["train_step_seconds"] = step_seconds(first_trainers[r["name"]], config.repeats)
    dense, eugen = results[0], results[1]
    for r in results:
        r["inference_speedup"] = dense["inference_seconds_64k"] / r["inference_seconds_64k"]
        r["sdf_error_ratio"] = r["mean"]["sdf_error"] / dense["mean"]["sdf_error"]
        check_finite(
            {k: r[k] for k in ("inference_seconds_64k", "train_step_seconds", "sdf_error_ratio")}, r["name"]
        )
    goal = {
        "goal": "inference >= 1.25x faster than dense, SDF error within 5% of dense (training speed reported)",
        "eugen": eugen["name"],
        "inference_speedup": eugen["inference_speedup"],
        "training_step_speedup": dense["train_step_seconds"] / eugen["train_step_seconds"],
        "sdf_error_ratio": eugen["sdf_error_ratio"],
        "chamfer_ratio": (
            eugen["mean"]["chamfer"] / dense["mean"]["chamfer"]
            if "chamfer" in eugen["mean"] and "chamfer" in dense["mean"]
            else None
        ),
        "inference_macs_ratio": dense["inference_macs_per_point"] / eugen["inference_macs_per_point"],
    }
    goal["speed_met"] = goal["inference_speedup"] >= 1.25
    goal["quality_met"] = goal["sdf_error_ratio"] <= 1.05
    goal["met"] = goal["speed_met"] and goal["quality_met"]
    config.output.mkdir(parents=True, exist_ok=True)
    slice_planes = slices(
        {
            dense["name"]: first_trainers[dense["name"]].field,
            eugen["name"]: first_trainers[eugen["name"]].field,
        },
        context,
        config.output / "isdf_slices.png",
    )
    every_run = [r for result in results for r in result["runs"]]
    rule = plateau_rule(config, config.min_steps, config.max_steps)
    payload = {
        "command": command_line(),
        "config": json.loads(json.dumps(asdict(config), default=str)),
        "provenance": provenance(config.data),
        "scene": {
            "path": str(config.data),
            "content_hash": context.scene_hash,
            "frames": len(context.frames),
            "streamed_frames": len(range(0, len(context.frames), config.frame_stride)),
            "resolution": [context.scene.width, context.scene.height],
            "near": context.scene.metadata.get("near"),
            "far": context.scene.metadata.get("far"),
        },
        "device": "cpu",
        "threads": config.threads,
        "seeds": config.seeds,
        "plateau": {
            "rule": (
                f"the dense field (seed {reference_seeds[0]}) trains until its SDF error falls by less than "
                f"{config.min_gain:.0%} over the last {config.window:.0%} of its steps (mean of the last "
                f"{config.smooth} scores, every {config.settle_every} settle steps after the stream), at most "
                f"{config.max_steps} steps; every run then trains that many steps"
            ),
            "plateau_rule": asdict(rule),
            "finished": dense_record["finished"],
            "steps": steps,
            "stream_steps": dense_record["stream_steps"],
            "dense_final_sdf_error": dense_final,
            "curve": dense_record["history"],
        },
        "cost": {
            "train_seconds_all_runs": sum(r["train_seconds"] for r in every_run),
            "train_cpu_seconds_all_runs": sum(r["train_cpu_seconds"] for r in every_run),
            "runs": len(every_run),
            "this_invocation_wall_seconds": time.perf_counter() - started_wall,
            "this_invocation_cpu_seconds": time.process_time() - started_cpu,
            "note": "training seconds summed over every run, including those an earlier invocation trained; "
            "the invocation figures cover what this call did (scoring, meshing and timing included)",
        },
        "slices": slice_planes,
        "goal": goal,
        "results": results,
    }
    publish_json(config.output / "isdf.json", payload)
    plot(
        results,
        config.output / "isdf.png",
        f"streaming iSDF on {config.data.name}, {len(config.seeds)} seeds"
        f"{' (front: seed ' + ', '.join(map(str, config.front_seeds)) + ')' if config.front else ''}, "
        f"{steps} steps ({dense_record['stream_steps']} streaming, plateau: {dense_record['finished']}) (CPU)",
    )
    print(json.dumps(goal, indent=2))


def entrypoint() -> None:
    config = tyro.cli(BenchISDF, description=__doc__)
    with one_line_errors("eugen-bench isdf"):
        main(config)


if __name__ == "__main__":
    entrypoint()
