"""Train each EUGen method beside its dense twin (and a dense twin narrowed to the EUGen parameter count;
with ``--baselines`` the reviewers' low-rank and SNNK layers in EUGen's place) on a shipped scene for the
same number of steps and seeds, then measure quality, speed and size.

Writes the JSON report given by ``--out`` (merged with the families measured before) and its plot beside
it. Measured on the test split from the saved
checkpoint (``eugen_nerf.eval.runs.load_run``): PSNR/SSIM (LPIPS when its offline weights exist), render
FPS and rays per second (one warm-up render, median of ``--repeats`` timed renders per view, median over
views, metrics computed outside the timed region), parameters, model and checkpoint bytes, peak memory.
EUGen models are also timed with fused inference off, to show what the merged form buys.

Render speed and memory are then measured once more for the first seed's run of every variant, side by side
(:func:`side_by_side`): test view ``--timing-view`` rendered whole by each in turn, ``--timing-repeats``
times, on the CPU counting CPU seconds (``--clock``; with OMP_NUM_THREADS=1 waiting for the core is not counted,
but other jobs still slow a render through shared caches and memory: time with nothing else running), and each run's render memory of that view in a fresh process. These are the
rows' ``fps`` and ``render_memory_bytes``, and what the speed goals compare; the scoring pass's own timings,
taken when each run finished, stay beside them as ``fps_scoring_pass``.

Quality is the mean (and population std) over ``--seeds`` (the seed sets the initialisation, the ray
batches and the EUGen projections; ``--baseline-seeds`` for the narrowed twin and the baselines); speed and
size are measured on the first seed's run. Finished runs are
reused, and so are their scores (``--retrain`` trains afresh).

The default invocation uses the small CPU configuration; ``--steps`` and ``--full-size`` for longer runs.
``eugen-bench nerf`` runs the NeRF family with the protocol's setting; by hand:
``python -m eugen_nerf.bench.suites.methods --families nerf --steps 300 --seeds 0 1 2 --baselines``.
"""

from __future__ import annotations

import copy
import io
import json
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import tyro
from nerfstudio.engine.trainer import TrainerConfig

from eugen_nerf.bench.merge import write_report
from eugen_nerf.bench.provenance import provenance
from eugen_nerf.bench.seeds import mean_and_std, paired_gap, with_seed
from eugen_nerf.bench.suites import command_line
from eugen_nerf.bench.training import (
    PLATEAU_RECORD,
    PlateauRule,
    benchmark_run,
    cached_for_checkpoint,
    last_checkpoint_steps,
    step_seconds,
    train_in_process,
    train_to_plateau,
)
from eugen_nerf.eval.evaluate import score_test_views
from eugen_nerf.eval.lpips import lpips_unavailable_reason
from eugen_nerf.eval.memory import render_memory
from eugen_nerf.eval.runs import final_rgb, load_run
from eugen_nerf.eval.size import count_parameters
from eugen_nerf.eval.timing import benchmark_interleaved
from eugen_nerf.inputs.errors import InputError, usage_error
from eugen_nerf.layers import EUGenMLP
from eugen_nerf.layers.eugen import FeatureMap, Scaling
from eugen_nerf.methods import nerf as nerf_methods  # also installs offline LPIPS / checkpoint loading
from eugen_nerf.methods import nerfacto as nerfacto_methods
from eugen_nerf.methods import zipnerf as zipnerf_methods

GOAL_SPEEDUP = {"nerf": 1.5, "zipnerf": 1.25, "nerfacto": 1.25}
"""Render FPS over the dense twin's each family's EUGen method aims at (with at most GOAL_MAX_PSNR_LOSS_DB lost)."""
GOAL_MAX_PSNR_LOSS_DB = 0.1


def small_nerf(config: TrainerConfig) -> None:
    """The small CPU configuration for the NeRF methods: 256 rays a step, 32 + 32 samples. It keeps the methods'
    learning rate (NeRF's 5e-4): at 2e-3 the field of a scene of small objects on white empties within 300
    steps (every density driven to zero, nothing left to recover from), the white background's gradient
    outweighing the objects' at 256 rays a step."""
    config.pipeline.datamanager.train_num_rays_per_batch = 256
    config.pipeline.model.num_coarse_samples = 32
    config.pipeline.model.num_importance_samples = 32


def small_nerfacto(config: TrainerConfig) -> None:
    """The small CPU configuration for the nerfacto-style methods."""
    config.pipeline.datamanager.train_num_rays_per_batch = 512
    model = config.pipeline.model
    model.num_proposal_samples_per_ray = (64, 32)
    model.num_nerf_samples_per_ray = 32
    model.max_res = 512
    model.log2_hashmap_size = 16


def small_zipnerf(config: TrainerConfig) -> None:
    """The CPU preset for Zip-NeRF: a 6-level grid to 512 (2^16 entries), proposal grids to 128 and 256,
    256 rays a step with 64 + 32 proposal and 32 NeRF samples (the 256-wide MLPs stay)."""
    config.pipeline.datamanager.train_num_rays_per_batch = 256
    model = config.pipeline.model
    model.num_proposal_samples_per_ray, model.num_nerf_samples_per_ray = (64, 32), 32
    model.num_levels, model.max_res, model.log2_hashmap_size = 6, 512, 16
    model.proposal_net_args_list = [
        {"hidden_dim": 16, "log2_hashmap_size": 16, "num_levels": 4, "max_res": 128, "features_per_level": 1},
        {"hidden_dim": 16, "log2_hashmap_size": 16, "num_levels": 5, "max_res": 256, "features_per_level": 1},
    ]


SCENE_MLP_LR = 3e-3
"""The field MLPs' learning rate of both Zip-NeRF twins on the realistic scenes (:func:`scene_zipnerf`), three
times the method's (``MLP_LR``). At 256 rays a step on ``garden200`` the method's rate trains both twins
more slowly (its validation curve lags this rate's by thousands of steps) and ends lower at the 12,000-step
cap, so the suites would compare twins still far from converged (docs/benchmarks.md, "Learning rate and
width"); 1e-2 saturates the view MLP's sigmoid."""


def scene_zipnerf(config: TrainerConfig) -> None:
    """The CPU preset of the realistic-scene suites (``fields*`` and the ``distill-zipnerf`` teacher):
    :func:`small_zipnerf` with the field MLPs at :data:`SCENE_MLP_LR`, decaying tenfold as the method's."""
    small_zipnerf(config)
    group = config.optimizers[zipnerf_methods.FIELD_MLPS]
    group["optimizer"].lr = SCENE_MLP_LR
    group["scheduler"].lr_final = SCENE_MLP_LR / 10


def _model_params(config: TrainerConfig) -> int:
    """Trainable parameters of the model ``config`` builds (frozen projections are buffers, not counted)."""
    from nerfstudio.data.scene_box import SceneBox

    model = config.pipeline.model.setup(
        scene_box=SceneBox(torch.tensor([[-1.0] * 3, [1.0] * 3])), num_train_data=1, metadata={}
    )
    return count_parameters(model)


def at_width(config: TrainerConfig, width_field: str, width: int) -> TrainerConfig:
    """A copy of ``config`` with its model's ``width_field`` set to ``width``."""
    config = copy.deepcopy(config)
    setattr(config.pipeline.model, width_field, width)
    return config


def narrowed(dense: TrainerConfig, width_field: str, target: int) -> TrainerConfig:
    """``dense`` with ``width_field`` shrunk until its parameter count is closest to ``target``."""
    best, best_gap = dense, None
    for width in range(8, getattr(dense.pipeline.model, width_field) + 1, 4):
        candidate = at_width(dense, width_field, width)
        gap = abs(_model_params(candidate) - target)
        if best_gap is None or gap < best_gap:
            best, best_gap = candidate, gap
    return best


VARIANT_KINDS = ("eugen", "dense", "narrowed", "lowrank", "snnk", "narrowed-speed")
"""The names ``--variants`` takes: what ``variants`` returns, in order (low-rank and SNNK with ``baselines``),
then the dense twin narrowed to EUGen's render speed (:func:`narrowed_to_speed`, which times renders)."""


BASELINE_KINDS = ("lowrank", "snnk")
DEFAULT_VARIANTS = ("eugen", "dense", "narrowed")
"""The variants trained without ``--variants`` (with ``--baselines`` also the baselines and ``narrowed-speed``)."""


def baseline_label(method_name: str, kind: str, overrides: dict[str, object] | None = None) -> str:
    """The row label of ``method_name`` with its EUGen layers replaced by a reviewers' baseline ``kind``, naming
    the EUGen knobs of ``overrides`` that still apply to it (all but the feature map it replaces)."""
    knobs = {key: value for key, value in (overrides or {}).items() if key != "feature_map"}
    return eugen_label(method_name, {"layer_type": kind, **knobs})


def eugen_label(method_name: str, overrides: dict[str, object]) -> str:
    """The row label of ``method_name`` with its EUGen knobs ``overrides`` (spec field -> value) set: each knob
    given is named, as its command-line flag, so the run folder says what it trained."""
    if not overrides:
        return method_name
    knobs = ", ".join(f"{name.replace('_', '-')}={value}" for name, value in overrides.items())
    return f"{method_name} ({knobs})"


def variants(
    family: str,
    full_size: bool,
    baselines: bool = False,
    eugen_overrides: dict[str, object] | None = None,
    speed_from: tuple[Path, Path, str] | None = None,
) -> dict[str, tuple[str, TrainerConfig]]:
    """Variant kind -> (label, trainer config): the EUGen method, its dense twin and the dense twin narrowed to
    EUGen's parameter count; with ``baselines``, also the EUGen method with its EUGen layers made low-rank and
    SNNK layers; with ``speed_from = (scene, cache, clock)``, the dense twin narrowed to EUGen's render speed on that
    scene (:func:`narrowed_to_speed`): the narrowed twin's own (label, config) when its width is that one, so
    one run stands for both. ``eugen_overrides`` (an :class:`~eugen_nerf.layers.EUGenSpec` field ->
    value, e.g. ``{"feature_map": "relu"}``) sets the EUGen method's knobs; every knob given is in the label
    (:func:`eugen_label`), so the run folder names it whatever the method's default is. The narrowed twins
    are sized from the EUGen method as configured, so they follow a knob that changes its parameter count."""
    if family == "nerf":
        eugen, dense = nerf_methods.eugen_nerf.config, nerf_methods.dense_nerf.config
        shrink, width_field = small_nerf, "trunk_width"
    elif family == "zipnerf":
        eugen, dense = zipnerf_methods.eugen_zipnerf.config, zipnerf_methods.dense_zipnerf.config
        shrink, width_field = scene_zipnerf, "hidden_dim_color"
    else:
        eugen, dense = nerfacto_methods.eugen_nerfacto.config, nerfacto_methods.dense_nerfacto.config
        shrink, width_field = small_nerfacto, "hidden_dim_color"
    eugen, dense = copy.deepcopy(eugen), copy.deepcopy(dense)
    overrides = dict(eugen_overrides or {})
    for name, value in overrides.items():
        if not hasattr(eugen.pipeline.model.eugen, name):
            raise ValueError(f"--{name.replace('_', '-')} is not a knob of {eugen.method_name}")
        setattr(eugen.pipeline.model.eugen, name, value)
    eugen.pipeline.model.eugen.validate()
    label = eugen_label(eugen.method_name, overrides)
    if not full_size:
        shrink(eugen)
        shrink(dense)
    eugen_params = _model_params(eugen)
    narrow = narrowed(dense, width_field, eugen_params)
    narrow.method_name = dense.method_name
    width = getattr(narrow.pipeline.model, width_field)
    out = {
        "eugen": (label, eugen),
        "dense": (dense.method_name, dense),
        "narrowed": (f"{dense.method_name} ({width_field}={width})", narrow),
    }
    if baselines:
        for kind in BASELINE_KINDS:
            baseline = copy.deepcopy(eugen)
            baseline.pipeline.model.eugen.layer_type = kind
            baseline.pipeline.model.eugen.feature_map = "relu"
            if hasattr(baseline.pipeline.model.eugen, "train_merged"):  # no merged form to train
                baseline.pipeline.model.eugen.train_merged = False
            baseline.pipeline.model.eugen.validate()
            out[kind] = (baseline_label(eugen.method_name, kind, overrides), baseline)
    if speed_from is not None:
        by_speed = narrowed_to_speed(eugen, dense, width_field, eugen_params, *speed_from)
        if getattr(by_speed[1].pipeline.model, width_field) == width:
            # the width of EUGen's parameters also renders at its speed: one run stands for both
            by_speed = out["narrowed"]
        out["narrowed-speed"] = by_speed
    return out


def narrowed_to_speed(
    eugen: TrainerConfig,
    dense: TrainerConfig,
    width_field: str,
    eugen_params: int,
    scene: Path,
    cache: Path,
    clock: str = "cpu",
    repeats: int = 3,
) -> tuple[str, TrainerConfig]:
    """(label, config) of the dense twin at the width whose model renders a test view closest to EUGen's
    fused render time, the untrained models timed side by side (the cost is the shapes, not the weights) and
    the width read off a line fitted through every width's time (:func:`closest_in_time` with sizes), by
    ``clock`` (the suite's ``--clock``: CPU seconds on one thread are a render's cost whatever else runs).
    The width found is kept in ``cache`` (with its timings), so a rerun trains and reuses the same run."""
    from eugen_nerf.eval.timing import closest_in_time
    from eugen_nerf.scenes import dataparser_config

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # where the runs train and render
    clock = clock if device.type == "cpu" else "wall"
    key = (
        f"{eugen.method_name} vs {dense.method_name}, {width_field}, {eugen_params} parameters, {scene.name}"
        + ("" if device.type == "cpu" and clock == "cpu" else f", {device.type}, {clock} clock")
    )
    try:
        found = json.loads(cache.read_text())
    except (OSError, ValueError):
        found = {}
    if key not in found:
        outputs = dataparser_config(data=scene).setup().get_dataparser_outputs("test")
        view = outputs.cameras[0:1]
        view.rescale_output_resolution(0.5)
        view = view.to(device)
        widths = range(32, getattr(dense.pipeline.model, width_field) + 1, 16)

        def renderer(config: TrainerConfig):
            torch.manual_seed(0)
            model = (
                config.pipeline.model.setup(scene_box=outputs.scene_box, num_train_data=8, metadata={})
                .to(device)
                .eval()
            )
            return lambda: model.get_outputs_for_camera(view)["rgb"]

        print(
            f"[bench_methods] timing {len(widths)} dense widths against {eugen.method_name}'s render",
            flush=True,
        )
        with torch.no_grad():
            width, timings = closest_in_time(
                renderer(eugen),
                {str(w): renderer(at_width(dense, width_field, w)) for w in widths},
                device,
                warmup=1,
                repeats=repeats,
                sizes={str(w): w for w in widths},
                clock=clock,
            )
        found[key] = {
            "width": int(width),
            "render_seconds_median": {name: t.median for name, t in timings.items()},
            "view": "first test view at half resolution",
            "chosen_by": "a straight line fitted through the widths' median times, nearest EUGen's",
            "threads": torch.get_num_threads(),
            "clock": clock,
        }
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(found, indent=1) + "\n")
    width = found[key]["width"]
    narrow = at_width(dense, width_field, width)
    return f"{dense.method_name} ({width_field}={width}, EUGen's render speed)", narrow


def timestamp(label: str, seed: int = 0) -> str:
    """The run folder of a variant: its label without spaces, brackets, commas and apostrophes (seeds other
    than 0 suffixed)."""
    name = (
        label.replace(" ", "_")
        .replace("(", "")
        .replace(")", "")
        .replace("=", "")
        .replace(",", "")
        .replace("'", "")
    )
    return name if seed == 0 else f"{name}_seed{seed}"


def time_to_dense_final(curves: dict[str, list[dict]], dense: list[dict]) -> dict[str, object]:
    """When each variant (first seed) reached the final validation PSNR of the dense twin (``dense``: its
    validation curve), on the same evaluation schedule (``None``: it never did): its training step, its
    training wall seconds, and ``cpu_seconds``, that step times the run's median CPU seconds per step (one
    thread: the cost of the run alone, where wall seconds also count whatever else shared the machine)."""
    target = dense[-1]["psnr"]
    reached = {
        label: next((h for h in curve if h["psnr"] >= target), None) for label, curve in curves.items()
    }

    def cpu_seconds(label: str) -> float | None:
        per_step = [h["cpu_seconds_per_step"] for h in curves[label] if h.get("cpu_seconds_per_step")]
        if reached[label] is None or not per_step:
            return None
        return reached[label]["step"] * statistics.median(per_step)

    return {
        "dense_final_validation_psnr": target,
        "steps": {label: h["step"] if h else None for label, h in reached.items()},
        "seconds": {label: h["train_seconds"] if h else None for label, h in reached.items()},
        "cpu_seconds": {label: cpu_seconds(label) for label in reached},
    }


def quality(config_path: Path) -> dict[str, float]:
    """Test-view quality only (no timing): the runs of the seeds after the first (kept beside the run's
    checkpoint, so a rerun that adds seeds or variants does not score the finished runs again)."""

    def score() -> dict[str, float]:
        run = load_run(config_path)
        return score_test_views(run.pipeline, warmup=0, repeats=1, label=run.name).means()

    return cached_for_checkpoint(config_path, "bench_quality.json", score, usable=has_lpips_if_available)


def has_lpips_if_available(scores: dict) -> bool:
    """Whether scores kept from an earlier pass hold LPIPS, or LPIPS cannot be computed now either: scores taken
    before its weights were installed are taken again, so that every seed's row holds the same metrics."""
    return "lpips" in scores or lpips_unavailable_reason() is not None


def over_seeds(first: dict[str, object], per_seed: list[dict[str, object]]) -> dict[str, object]:
    """The first seed's row with its quality replaced by the mean over seeds (std and each seed beside)."""
    row = dict(first)
    means, spread = mean_and_std(per_seed, ("psnr", "ssim", "lpips"))
    row.update(means)
    if len(per_seed) > 1:
        row.update({f"{key}_std": value for key, value in spread.items()})
    row["seeds"] = [s["seed"] for s in per_seed]
    row["per_seed"] = per_seed
    return row


def set_fused(model: torch.nn.Module, fused: bool) -> None:
    for module in model.modules():
        if isinstance(module, EUGenMLP):
            module.fuse_in_eval = fused


def earlier_families(path: Path) -> dict[str, dict[str, object]]:
    """The families of the report already at ``path`` (none if it is absent or unreadable)."""
    try:
        return json.loads(path.read_text()).get("families", {})
    except (OSError, ValueError, AttributeError):
        return {}


def kind_by_label(configs: dict[str, tuple[str, TrainerConfig]]) -> dict[str, str]:
    """Row label -> variant kind for this run's ``configs`` (``variants``), and the baselines' labels when this run
    trains none: rows written before rows carried their kind are recognised by their label."""
    method_name = configs["eugen"][1].method_name
    known = {baseline_label(method_name, kind): kind for kind in BASELINE_KINDS}
    known.update({label: kind for kind, (label, _) in configs.items()})
    return known


def keep_earlier_rows(
    earlier: dict[str, object] | None,
    rows: dict[str, dict[str, object]],
    labels: dict[str, str],
    steps: int,
    scene: str,
    kinds: dict[str, str],
) -> list[str]:
    """Add to ``rows``/``labels`` the rows an earlier run of the same family, steps and scene measured and this
    run did not, so variants trained later (a narrowed twin) are judged against the EUGen rows measured before.
    Quality is comparable across runs (the same seeds train the same runs); each row names the command that
    timed it (``measured_by``), so speeds are compared only where they were timed together. Returns the labels
    kept; ``kinds`` maps today's labels to variant kinds for rows written before rows carried their kind."""
    if not earlier or earlier.get("steps") != steps or earlier.get("scene") != scene:
        return []
    kept = []
    for label, row in earlier.get("runs", {}).items():
        kind = row.get("kind") or kinds.get(label)
        if label in rows or kind is None or kind in labels:
            continue
        rows[label] = {"kind": kind, "measured_by": row.get("measured_by", earlier.get("command")), **row}
        labels[kind] = label
        kept.append(label)
    return kept


def measure(config_path: Path, repeats: int) -> dict[str, object]:
    """Quality, speed and size of a trained run on its test split (the shared evaluation loop), taken once per
    checkpoint (kept beside it, like :func:`quality`: a rerun over finished runs does not score them again)."""
    return cached_for_checkpoint(
        config_path,
        "bench_measure.json",
        lambda: _measure(config_path, repeats),
        usable=has_lpips_if_available,
        repeats=repeats,
    )


def _measure(config_path: Path, repeats: int) -> dict[str, object]:
    run = load_run(config_path)
    model = run.pipeline.model
    scored = score_test_views(run.pipeline, warmup=1, repeats=repeats, label=run.name)
    state = io.BytesIO()
    torch.save(model.state_dict(), state)
    result = {
        "config": str(config_path),
        "step": run.step,
        **scored.means(),
        "fps": scored.fps,
        "rays_per_sec": scored.rays_per_second,
        "parameters": count_parameters(model),
        "model_bytes": state.getbuffer().nbytes,
        "checkpoint_bytes": run.checkpoint.stat().st_size,
    }
    if any(isinstance(m, EUGenMLP) and m.has_eugen for m in model.modules()):
        set_fused(model, False)
        unfused = score_test_views(run.pipeline, warmup=1, repeats=repeats, label=f"{run.name} (unfused)")
        result["rays_per_sec_unfused"], result["fps_unfused"] = unfused.rays_per_second, unfused.fps
        set_fused(model, True)
    return result


def side_by_side(
    configs: dict[str, Path],
    view: int = 0,
    repeats: int = 2,
    clock: str = "cpu",
    memory: bool = True,
    size: int | None = None,
) -> dict[str, dict[str, object]]:
    """Render speed of the trained runs ``configs`` (label -> ``config.yml``) timed side by side: test view
    ``view`` rendered whole by each run in turn, ``repeats`` rounds after one warm-up round on a 16-pixel-wide
    copy of the view, every render checked finite (:func:`benchmark_interleaved`; ``clock`` on the CPU, the wall
    clock on CUDA). With ``memory``, each run's render memory of the same view, in a fresh process
    (:func:`eugen_nerf.eval.memory.render_memory`). ``size``: render the view this many pixels wide (default:
    its own size). Returns label -> figures."""
    from eugen_nerf.eval.memory import view_at_size

    runs = {label: load_run(path) for label, path in configs.items()}
    device = next(iter(runs.values())).pipeline.device
    clock = clock if torch.device(device).type == "cpu" else "wall"
    cameras = next(iter(runs.values())).pipeline.datamanager.eval_dataset.cameras.to(device)
    camera, small = view_at_size(cameras, view, size), view_at_size(cameras, view, 16)
    for run in runs.values():
        run.pipeline.model.eval()

    def render(run, cam):
        return lambda: final_rgb(run.pipeline.model.get_outputs_for_camera(cam))

    with torch.no_grad():
        benchmark_interleaved({k: render(r, small) for k, r in runs.items()}, device, 0, 1, clock=clock)
        timings = benchmark_interleaved(
            {k: render(r, camera) for k, r in runs.items()}, device, 0, repeats, clock=clock
        )
    height, width = int(camera.height.flatten()[0]), int(camera.width.flatten()[0])
    out: dict[str, dict[str, object]] = {}
    for label, timing in timings.items():
        out[label] = {
            "fps": 1.0 / timing.median,
            "rays_per_sec": height * width / timing.median,
            "timing": {
                "view": view,
                "resolution": [height, width],
                "clock": clock,
                "seconds": timing.seconds,
            },
        }
    del runs
    if memory:
        for label, path in configs.items():
            measured = render_memory(path, view, size=size, device=torch.device(device).type)
            out[label]["render_memory_bytes"] = measured["render_memory_bytes"]
            out[label]["render_memory_kind"] = measured["render_memory_kind"]
    return out


def goals(
    rows: dict[str, dict[str, object]], labels: dict[str, str], speedup_goal: float = 1.5
) -> dict[str, object]:
    """The goals from the rows (``labels``: variant kind -> row label). Quality against every other variant, the
    dense twin included, is the per-seed paired gap over the seeds both were trained at (the means' difference
    when the seeds agree; baselines trained at fewer seeds, ``--baseline-seeds``, are compared on those seeds
    only; rows sharing no seed are compared by their means and listed under ``compared_unpaired``). A goal is
    judged only when the variants it compares were measured."""
    row = {kind: rows[label] for kind, label in labels.items()}
    if "eugen" not in row:
        return {}
    e = row["eugen"]
    eugen_psnr = {s["seed"]: s["psnr"] for s in e["per_seed"]}
    gaps = {
        labels[kind]: paired_gap(eugen_psnr, {s["seed"]: s["psnr"] for s in row[kind]["per_seed"]})
        for kind in row
        if kind != "eugen"
    }
    gain = {
        kind: (gaps[labels[kind]] or {"mean": e["psnr"] - row[kind]["psnr"]})["mean"]
        for kind in row
        if kind != "eugen"
    }
    out: dict[str, object] = {}
    if "dense" in row:
        d = row["dense"]
        together = e.get("measured_by") == d.get("measured_by")
        # frame rates timed in different runs (a row kept from an earlier run) make no ratio: none is published
        speedup, psnr_loss = (e["fps"] / d["fps"] if together else None), -gain["dense"]
        out.update(
            {
                "fps_speedup_vs_dense": speedup,
                "eugen_and_dense_timed_together": together,
                "psnr_loss_vs_dense_db": psnr_loss,
                "goal_quality_met": psnr_loss <= GOAL_MAX_PSNR_LOSS_DB,
                "goal_speedup": speedup_goal,
                "goal_speed_and_quality_met": (
                    speedup >= speedup_goal and psnr_loss <= GOAL_MAX_PSNR_LOSS_DB if together else None
                ),
            }
        )
        if e.get("render_memory_bytes") and d.get("render_memory_bytes"):
            out["render_memory_ratio_vs_dense"] = e["render_memory_bytes"] / d["render_memory_bytes"]
    if "narrowed" in row:
        out["psnr_gain_vs_narrowed_dense_db"] = gain["narrowed"]
        out["goal_equal_parameters_met"] = gain["narrowed"] >= 0
    if "narrowed-speed" in row:
        out["psnr_gain_vs_speed_matched_dense_db"] = gain["narrowed-speed"]
        out["goal_equal_speed_met"] = gain["narrowed-speed"] >= 0
    baselines = [kind for kind in ("narrowed", "narrowed-speed", *BASELINE_KINDS) if kind in row]
    if baselines:
        out["psnr_gain_vs_baselines_db"] = {labels[b]: gain[b] for b in baselines}
        out["goal_ahead_of_every_baseline_met"] = all(gain[b] >= 0 for b in baselines)
    unpaired = [label for label, gap in gaps.items() if gap is None]
    if unpaired:
        out["compared_unpaired"] = unpaired
    out["eugen_minus_variant_per_seed_db"] = {label: gap for label, gap in gaps.items() if gap is not None}
    return out


MIN_PSNR_SPAN_DB = 1.0
"""The smallest PSNR range the report's quality panels show."""


def plot(report: dict[str, object], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = report["families"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 6.5), gridspec_kw={"width_ratios": (1, 1, 1.2)})
    timed_apart, index = False, 0
    for data in families.values():
        eugen_timing = next(
            (row.get("measured_by") for row in data["runs"].values() if row.get("kind") == "eugen"), None
        )
        for label, row in data["runs"].items():
            marker = "o" if label.startswith("eugen") else ("s" if "=" not in label else "^")
            # timed by another command than EUGen
            apart = row.get("measured_by", eugen_timing) != eugen_timing
            timed_apart |= apart
            colour, index = f"C{index % 10}", index + 1
            # hollow: its FPS was not timed beside EUGen's, so its x position is only indicative
            axes[0].scatter(
                row["fps"],
                row["psnr"],
                marker=marker,
                edgecolors=colour,
                facecolors="none" if apart else colour,
                label=label + (" (timed apart)" if apart else ""),
            )
            axes[1].scatter(row["parameters"], row["psnr"], marker=marker, color=colour, label=label)
            bars = axes[2].barh(label, row["rays_per_sec"], color=colour, hatch="//" if apart else None)
            axes[2].bar_label(bars, fmt="%.0f", fontsize=8, padding=2)
    rows = [row for data in families.values() for row in data["runs"].values()]

    def scale(key: str) -> str:
        """log where the values span a decade or more (several families), else linear (readable ticks)."""
        values = [row[key] for row in rows]
        return "log" if max(values) >= 10 * min(values) else "linear"

    axes[0].set(
        xlabel="render FPS (test views)",
        ylabel="test PSNR (dB)",
        xscale=scale("fps"),
        title="quality vs speed",
    )
    axes[1].set(
        xlabel="trainable parameters",
        ylabel="test PSNR (dB)",
        xscale=scale("parameters"),
        title="quality vs size",
    )
    # at least MIN_PSNR_SPAN_DB of PSNR axis: autoscaled to a few hundredths of a dB, a tie looks like a gap
    psnrs = [row["psnr"] for row in rows]
    centre = (max(psnrs) + min(psnrs)) / 2
    half = max(0.55 * (max(psnrs) - min(psnrs)), MIN_PSNR_SPAN_DB / 2)
    for axis in axes[:2]:
        axis.set_ylim(centre - half, centre + half)
    axes[2].set(xlabel="rays / s", xscale=scale("rays_per_sec"), title="render throughput")
    # the bars are named by the legend's colours (the order top to bottom is the legend's): a variant's full
    # name beside its bar squeezes the other panels
    axes[2].tick_params(axis="y", left=False, labelleft=False)
    axes[2].margins(x=0.15)
    axes[2].invert_yaxis()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3, frameon=False)
    runs = sorted(
        {
            f"{data.get('scene', report['scene'])} {data.get('steps', report['steps'])} steps"
            for data in families.values()
        }
    )
    fig.suptitle(
        f"{', '.join(runs)}; {report['device']}"
        + (
            "\nhollow markers and hatched bars: timed by another command than EUGen (speed comparable only roughly)"
            if timed_apart
            else ""
        )
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass
class BenchMethods:
    scene: Path = Path("scenes/bunny64")
    """the scene every run trains on and is evaluated on."""
    steps: int = 100
    """training steps of every run (with --plateau: the most the dense twin trains)."""
    families: list[Literal["nerf", "nerfacto", "zipnerf"]] = field(
        default_factory=lambda: ["nerf", "nerfacto"]
    )
    """method families to train and measure."""
    repeats: int = 3
    """timed renders per test view"""
    full_size: bool = False
    """the methods' default sizes, not the CPU ones"""
    output_dir: Path = Path("outputs/bench/nerf")
    """where the training runs go."""
    out: Path = Path("benchmarks/nerf/nerf.json")
    """the JSON written (merged with the families measured before; the plot goes beside it as .png)."""
    seeds: list[int] = field(default_factory=lambda: [0])
    """training seeds of every variant (quality: mean ± std over them; speed: the first)."""
    baselines: bool = False
    """also train the reviewers' baselines (low-rank, SNNK) in place of the EUGen layers"""
    baseline_seeds: list[int] | None = None
    """seeds of the narrowed dense twin and the baselines (default: ``--seeds``; fewer saves CPU time)"""
    retrain: bool = False
    """train every run afresh (otherwise a finished run of the same steps is reused); not with --plateau"""
    feature_map: FeatureMap | None = None
    """feature map of the EUGen variant (default: the method's own)"""
    num_features: int | None = None
    """random projections m of the EUGen variant's layers (default: the method's own)"""
    scaling: Scaling | None = None
    """scaling of the EUGen variant's layers (default: the method's own); projected with --use-norm False drops
    the norm from every merged step (docs/layers.md)"""
    use_norm: bool | None = None
    """whether the EUGen variant's features take the input's norm (default: the method's own)"""
    train_merged: bool | None = None
    """nerf and zipnerf: train the EUGen variant's layers in their merged form (default: the method's own;
    zipnerf's needs --scaling projected --use-norm False)"""
    variants: tuple[str, ...] = ()
    """variants to train and measure, of eugen, dense, narrowed, lowrank, snnk, narrowed-speed (default: the
    first three, and the last three with --baselines); rows of an earlier run of the same steps and scene in
    ``--out`` that this run does not measure are kept, and the goals judged over all rows"""
    plateau: bool = False
    """train the dense twin (first seed) until it plateaus, at most --steps (< --min-gain dB validation PSNR
    gained over the last 20% of its steps, scored every --eval-every steps), then every other run for the
    steps it took, each scored on the same schedule (time to the dense twin's final PSNR; see
    --eval-every-others) and at its last step; resumable"""
    dense_run: Path | None = None
    """with --plateau and one family: the dense twin's first-seed run is trained (or continued) in this folder,
    ``<dir>/<scene>/<method>/<name>``, instead of under --output-dir, for a run of the same configuration and
    seed that another suite trains (the ``distill-zipnerf`` teacher at seed 42): one training serves both."""
    eval_every: int = 500
    """with --plateau: steps between validation scores (and checkpoints)."""
    eval_every_others: int | None = None
    """with --plateau: steps between validation scores of every run whose curve is not the comparison's: all
    but EUGen's and the dense twin's at the first seed (the other seeds and the baselines). None: --eval-every.
    Their final PSNR is scored all the same; their curves (and the baselines' time to the dense twin's final
    PSNR) are as coarse as this. On a 200-pixel Zip-NeRF scene scoring the validation views costs about half
    of what training 500 steps does, so a coarser schedule saves much of these runs' time. While the dense twin
    is still training, --train-only leaves runs on a coarser schedule until its final steps are known."""
    min_steps: int = 2000
    """with --plateau: the fewest steps the dense twin trains."""
    min_gain: float = 0.1
    """with --plateau: the validation PSNR gain (dB) over the last 20% of the steps below which it stops."""
    train_only: bool = False
    """train the runs of --variants and stop, nothing scored or timed: with --plateau the dense twin until it
    plateaus when it is among them, every other variant as many steps as the dense twin's run trained. Without
    the dense twin among them the variants follow its run, trained by another process: each goes as far as
    the dense twin has been scored and waits for it to go further, until it has finished. The suite's command
    without this option then scores and times them all (a run that trained other steps than the dense twin is
    refused there)."""
    timing_view: int = 0
    """the test view every run renders whole, side by side with the others, for the rows' render FPS and memory."""
    timing_repeats: int = 2
    """timed rounds of the side-by-side renders (the median is reported)."""
    step_time: int = 0
    """time this many training steps of each variant from its initial weights, the variants taking turns
    (--repeats rounds), print the seconds per step and stop: no training to keep, nothing else measured."""
    clock: Literal["cpu", "wall"] = "cpu"
    """what the side-by-side CPU timings count: cpu, this process's CPU seconds (with OMP_NUM_THREADS=1, waiting
    for the core is not counted), or wall, elapsed seconds (meaningful only on an idle machine); CUDA is
    timed by the wall clock."""


def overrides(args: BenchMethods) -> dict[str, object]:
    """The EUGen knobs set on the command line, spec field -> value, in a fixed order (the run's label)."""
    knobs = {
        "feature_map": args.feature_map,
        "num_features": args.num_features,
        "scaling": args.scaling,
        "use_norm": args.use_norm,
        "train_merged": args.train_merged,
    }
    return {name: value for name, value in knobs.items() if value is not None}


def speed_source(args: BenchMethods, wanted: tuple[str, ...]) -> tuple[Path, Path, str] | None:
    """``variants``'s ``speed_from`` when the dense twin narrowed to EUGen's speed is wanted: the scene its
    width is timed on (the models render on the CPU), the file that keeps the width found and ``--clock``."""
    if "narrowed-speed" not in wanted:
        return None
    return args.scene, args.output_dir / "narrowed_to_speed.json", args.clock


def print_step_times(args: BenchMethods) -> None:
    """``--step-time``: seconds per training step of each variant, side by side (see :func:`step_seconds`), and
    each one's speed against the dense twin's when it is among them."""
    threads = torch.get_num_threads()
    clock = "wall seconds (CUDA)" if torch.cuda.is_available() else f"CPU seconds, {threads} thread(s)"
    for family in args.families:
        wanted = args.variants or ("eugen", "dense")
        configs = variants(
            family, args.full_size, args.baselines, overrides(args), speed_source(args, wanted)
        )
        chosen = {configs[kind][0]: with_seed(configs[kind][1], args.seeds[0]) for kind in wanted}
        times = step_seconds(chosen, args.scene, args.step_time, args.repeats, args.output_dir)
        medians = {label: statistics.median(rounds) for label, rounds in times.items()}
        dense = medians.get(configs["dense"][0])
        print(f"{family} on {args.scene}, {args.step_time} steps a round, {args.repeats} rounds ({clock}):")
        for label, median in medians.items():
            versus = f" ({dense / median:.2f}x the dense twin's speed)" if dense else ""
            print(f"  {label}: {median:.3f} s a step{versus}")


def dense_run_place(args: BenchMethods, method: str, label: str) -> tuple[Path, str]:
    """Where the dense twin's first-seed run trains: (output folder, run name) for :func:`train_to_plateau`,
    ``--dense-run`` split into its parts, or ``--output-dir`` and the variant's own name."""
    if args.dense_run is None:
        return args.output_dir, timestamp(label, args.seeds[0])
    run = args.dense_run
    if run.parent.name != method or run.parent.parent.name != args.scene.name:
        usage_error(
            "eugen-bench nerf",
            f"--dense-run {run} is not a {method} run on {args.scene.name} "
            f"(expected a folder <dir>/{args.scene.name}/{method}/<name>)",
        )
    return run.parent.parent.parent, run.name


def seeds_of(args: BenchMethods, kind: str) -> list[int]:
    """The seeds a variant trains at: ``--seeds`` for EUGen and the dense twin, else ``--baseline-seeds``."""
    if kind in ("eugen", "dense") or args.baseline_seeds is None:
        return list(args.seeds)
    return list(args.baseline_seeds)


def train_dense_to_plateau(args: BenchMethods, configs: dict) -> tuple[Path, dict]:
    """``--plateau``: the dense twin's first-seed run trained (or continued) until it plateaus."""
    rule = PlateauRule(args.eval_every, 0.2, args.min_gain, args.min_steps, args.steps)
    label, config = configs["dense"]
    where, name = dense_run_place(args, config.method_name, label)
    return train_to_plateau(with_seed(config, args.seeds[0]), args.scene, where, rule, name, label)


FOLLOW_POLL_SECONDS = 60.0
"""How often ``--train-only`` without the dense twin looks whether the dense twin's run has gone further."""


def dense_run_record(args: BenchMethods, configs: dict) -> tuple[Path, dict]:
    """The dense twin's first-seed run folder and its plateau record (empty before its first score)."""
    label, config = configs["dense"]
    where, name = dense_run_place(args, config.method_name, label)
    run = benchmark_run(with_seed(config, args.seeds[0]), args.scene, where, name, args.steps).get_base_dir()
    record_path = run / PLATEAU_RECORD
    return run, json.loads(record_path.read_text()) if record_path.is_file() else {}


def dense_progress(args: BenchMethods, configs: dict) -> tuple[int, bool]:
    """The steps at which the dense twin's first-seed run was last scored (0 before its first score) and
    whether it has finished."""
    record = dense_run_record(args, configs)[1]
    scored = [h["step"] for h in record.get("history", []) if h.get("psnr") is not None]
    return (scored[-1] if scored else 0), bool(record.get("finished"))


def variant_steps(args: BenchMethods, label: str, config: TrainerConfig, seed: int) -> int:
    """The steps a variant's run at ``seed`` has trained (its newest checkpoint; 0 before its first)."""
    run = benchmark_run(
        with_seed(config, seed), args.scene, args.output_dir, timestamp(label, seed), args.steps
    )
    return last_checkpoint_steps(run.get_base_dir())


def eval_schedule(args: BenchMethods, kind: str, seed: int) -> int:
    """Steps between the validation scores of a run: ``--eval-every`` for EUGen's and the dense twin's
    first-seed runs (the curves compared), ``--eval-every-others`` (when given) for every other run."""
    if (kind in ("eugen", "dense") and seed == args.seeds[0]) or args.eval_every_others is None:
        return args.eval_every
    return args.eval_every_others


def train_variant(
    args: BenchMethods, kind: str, label: str, config: TrainerConfig, seed: int, steps: int
) -> tuple[Path, dict | None, float]:
    """One run of a variant (``kind``) at ``seed``, trained (or continued, or found finished) for ``steps``
    steps: with ``--plateau`` scored on the validation views on its schedule (:func:`eval_schedule`) and at
    its last step. Returns its ``config.yml``, its plateau record (None without ``--plateau``) and its training
    seconds a step."""
    if not args.plateau:
        config_path, sec_per_iter = train_in_process(
            with_seed(config, seed),
            args.scene,
            steps,
            args.output_dir,
            timestamp(label, seed),
            reuse=not args.retrain,
        )
        return config_path, None, sec_per_iter
    fixed = PlateauRule(eval_schedule(args, kind, seed), 0.2, args.min_gain, steps, steps)
    config_path, record = train_to_plateau(
        with_seed(config, seed), args.scene, args.output_dir, fixed, timestamp(label, seed), label
    )
    trained = record["history"][-1]["step"]
    if trained != steps:
        raise InputError(
            f"{config_path.parent} trained {trained} steps and the dense twin {steps}: remove it and "
            "rerun to train it again"
        )
    return config_path, record, record["history"][-1]["train_seconds"] / steps


def train_only(args: BenchMethods) -> None:
    """``--train-only``: train the runs of ``--variants`` (see the option) and stop."""
    for family in args.families:
        wanted = args.variants or DEFAULT_VARIANTS + (
            (*BASELINE_KINDS, "narrowed-speed") if args.baselines else ()
        )
        configs = variants(
            family, args.full_size, args.baselines, overrides(args), speed_source(args, wanted)
        )
        if args.plateau and "dense" not in wanted:
            steps = follow_dense(args, configs, wanted)
        else:
            steps = args.steps
            if args.plateau:
                steps = train_dense_to_plateau(args, configs)[1]["history"][-1]["step"]
            train_others(args, configs, wanted, steps)
        print(f"[bench_methods] {family}: trained {', '.join(wanted)} ({steps} steps); nothing scored")


def train_others(
    args: BenchMethods, configs: dict, wanted: tuple[str, ...], steps: int, following: bool = False
) -> None:
    """Train every run of ``wanted`` (each at its seeds) to ``steps``, the dense twin's first-seed run
    excepted (with --plateau it sets the steps). ``following``: the dense twin is still training and ``steps``
    is how far it has been scored; leave alone the runs already past it, and those on a coarser schedule than
    the dense twin's (stopped here, they would be scored off their schedule)."""
    for kind in wanted:
        label, config = configs[kind]
        for seed in seeds_of(args, kind):
            if args.plateau and kind == "dense" and seed == args.seeds[0]:
                continue
            if following and (
                eval_schedule(args, kind, seed) != args.eval_every
                or variant_steps(args, label, config, seed) > steps
            ):
                continue
            train_variant(args, kind, label, config, seed, steps)


def follow_dense(args: BenchMethods, configs: dict, wanted: tuple[str, ...]) -> int:
    """``--train-only --plateau`` without the dense twin: train the variants behind the dense twin's first-seed
    run, which another process trains. Each run goes as far as that run has been scored, then waits for it to
    go further (looking every ``FOLLOW_POLL_SECONDS``), until it has finished: no run trains a step past the
    dense twin's last, so none is trained longer than the comparison uses. Returns the dense twin's steps."""
    trained, waiting = -1, False
    while True:
        steps, finished = dense_progress(args, configs)
        if steps > trained:
            if steps:
                train_others(args, configs, wanted, steps, following=not finished)
            trained, waiting = steps, False
            if not finished:
                continue  # look again at once: the dense twin may have gone on meanwhile
        if finished:
            return steps
        if not waiting:
            run = dense_run_record(args, configs)[0]
            print(
                f"[bench_methods] waiting for the dense twin's run {run} to go past {steps} steps "
                "(another process trains it: the same command with --variants dense)",
                flush=True,
            )
            waiting = True
        time.sleep(FOLLOW_POLL_SECONDS)


def main() -> None:
    args = tyro.cli(BenchMethods, description=__doc__)
    if not args.families:
        usage_error("eugen-bench nerf", "--families needs at least one family")
    if not args.seeds or args.baseline_seeds == []:
        usage_error("eugen-bench nerf", "--seeds and --baseline-seeds need at least one seed")
    if args.steps < 1 or args.repeats < 1:
        usage_error("eugen-bench nerf", "--steps and --repeats must be >= 1")
    if args.eval_every < 1 or (args.eval_every_others is not None and args.eval_every_others < 1):
        usage_error("eugen-bench nerf", "--eval-every and --eval-every-others must be >= 1")
    unknown = [name for name in args.variants if name not in VARIANT_KINDS]
    if unknown:
        usage_error(
            "eugen-bench nerf", f"unknown --variants {' '.join(unknown)} (known: {' '.join(VARIANT_KINDS)})"
        )
    if not args.baselines and any(name in BASELINE_KINDS for name in args.variants):
        usage_error("eugen-bench nerf", "--variants lowrank and snnk need --baselines")

    if args.retrain and args.plateau:
        usage_error(
            "eugen-bench nerf",
            "--retrain does not apply to --plateau runs, which continue where they stopped: "
            "remove the runs' folders under --output-dir to train them afresh",
        )
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.baseline_seeds or ())) != len(
        args.baseline_seeds or ()
    ):
        usage_error("eugen-bench nerf", "--seeds and --baseline-seeds must not repeat a seed")
    if args.dense_run is not None and (not args.plateau or len(args.families) != 1):
        usage_error("eugen-bench nerf", "--dense-run needs --plateau and one --families")
    if args.step_time:
        print_step_times(args)
        return
    if args.train_only:
        train_only(args)
        return

    started = time.time()
    report: dict[str, object] = {
        "command": command_line(),
        "scene": str(args.scene),
        "steps": args.steps,
        "size": "full" if args.full_size else "small-cpu",
        "device": "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)",
        "host": platform.node(),
        "torch": torch.__version__,
        "lpips": "computed"
        if lpips_unavailable_reason() is None
        else f"omitted: {lpips_unavailable_reason()}",
        "goal": f"EUGen >= {', '.join(f'{v}x ({k})' for k, v in GOAL_SPEEDUP.items())} render FPS of its dense "
        f"twin at <= {GOAL_MAX_PSNR_LOSS_DB} dB PSNR loss; "
        "PSNR >= the dense twin narrowed to the EUGen parameter count",
        "families": {},
    }
    for family in args.families:
        wanted = args.variants or DEFAULT_VARIANTS + (
            (*BASELINE_KINDS, "narrowed-speed") if args.baselines else ()
        )
        configs = variants(
            family, args.full_size, args.baselines, overrides(args), speed_source(args, wanted)
        )
        rows: dict[str, dict[str, object]] = {}
        labels: dict[str, str] = {}
        steps, dense_run = args.steps, None
        if args.plateau:  # the dense twin sets the steps every run trains
            dense_run = train_dense_to_plateau(args, configs)
            steps = dense_run[1]["history"][-1]["step"]
            plateau = {"rule": dense_run[1]["rule"], "finished": dense_run[1]["finished"]}
            if len(args.families) == 1:  # the report's own (the tables read it); each family keeps its own
                report["plateau"] = plateau
        curves: dict[str, list[dict]] = {}
        for kind in wanted:
            label, config = configs[kind]
            if label in rows:  # a run that stands for two kinds (narrowed to EUGen's parameters and speed)
                labels[kind] = label
                continue
            per_seed = []
            seeds = seeds_of(args, kind)
            for seed in seeds:
                if dense_run is not None and kind == "dense" and seed == seeds[0]:
                    config_path, record = dense_run
                    sec_per_iter = record["history"][-1]["train_seconds"] / steps
                else:
                    config_path, record, sec_per_iter = train_variant(args, kind, label, config, seed, steps)
                if record is not None and seed == seeds[0]:
                    curves[label] = record["history"]
                if seed == seeds[0]:
                    # the run's place now, not where it was scored (a work folder moved since keeps its caches)
                    first = {
                        "train_sec_per_iter": sec_per_iter,
                        **measure(config_path, args.repeats),
                        "config": str(config_path),
                    }
                    scores = {key: first.get(key) for key in ("psnr", "ssim", "lpips")}
                else:
                    scores = quality(config_path)
                entry = {"seed": seed, "config": str(config_path), **scores}
                if record is not None and seed != seeds[0]:  # the first seed's is the row's (what it cost)
                    entry["validation_curve"] = record["history"]
                per_seed.append(entry)
                print(f"[bench_methods] {label} seed {seed}: PSNR {scores['psnr']:.2f}", flush=True)
            rows[label] = {"kind": kind, "measured_by": report["command"], **over_seeds(first, per_seed)}
            if label in curves:
                rows[label]["validation_curve"] = curves[label]
            labels[kind] = label
            print(json.dumps({label: rows[label]}, indent=1), flush=True)
        # read now, not at the start: another run writing this report meanwhile keeps its rows
        kept = keep_earlier_rows(
            earlier_families(args.out).get(family),
            rows,
            labels,
            steps,
            str(args.scene),
            kind_by_label(configs),
        )
        report["families"][family] = {
            "command": report["command"],
            "scene": str(args.scene),
            "steps": steps,
            "seeds": args.seeds,
            "runs": rows,
            "goals": goals(rows, labels, GOAL_SPEEDUP[family]),
            **(
                {
                    "plateau": plateau,
                    "training_to_dense_final": time_to_dense_final(curves, dense_run[1]["history"]),
                }
                if dense_run is not None
                else {}
            ),
        }
        if kept:
            report["families"][family]["rows_kept_from_earlier_runs"] = kept
        timed = {
            label: Path(row["config"])
            for label, row in rows.items()
            if Path(str(row.get("config"))).is_file()
        }
        print(
            f"[bench_methods] {family}: render speed and memory of {len(timed)} runs side by side", flush=True
        )
        for label, figures in side_by_side(timed, args.timing_view, args.timing_repeats, args.clock).items():
            row = rows[label]
            if (
                label not in kept
            ):  # a kept row's fps is its earlier side-by-side figure, its scoring pass kept
                row["fps_scoring_pass"], row["rays_per_sec_scoring_pass"] = (
                    row.get("fps"),
                    row.get("rays_per_sec"),
                )
            row.update(figures, measured_by=report["command"])
        report["families"][family]["goals"] = goals(rows, labels, GOAL_SPEEDUP[family])
    report["provenance"] = provenance(args.scene)
    report["wall_seconds"] = time.time() - started
    report = write_report(args.out, report, [("families",)])  # families not run here stay as measured before
    plot(report, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
