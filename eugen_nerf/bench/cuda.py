"""``python -m eugen_nerf.bench.cuda``: EUGen against dense on a GPU, with torch alone.

Needs torch and numpy only (no nerfstudio, tyro or yaml), so it runs on a machine that has PyTorch and
nothing else of the training stack. One run measures, side by side:

* **mlps**: every head's MLP at its default sizes and EUGen spec (NeRF trunk, Zip-NeRF view MLP, nerfacto
  colour MLP, iSDF MLP): the dense twin, the EUGen MLP layer by layer and its fused inference form; points/s
  in fp32, TF32, and under bf16 and fp16 autocast, each eager and through ``torch.compile``;
* **training**: one training step (forward, loss, backward) of each head's dense and EUGen MLP, fp32 and bf16
  autocast, eager and compiled (iSDF's with its eikonal term, which differentiates the first backward);
* **renders**: whole views of exported fields (files of ``eugen-export``), each dense teacher beside its EUGen
  student (:data:`PAIRS`: the shipped NeRF pair, and the unbounded Zip-NeRF pair when its exports are present)
  through the torch-only reference renderer of :mod:`eugen_nerf.export`, in each of
  those precisions (autocast on the field MLPs only, compositing in fp32): frames/s and render memory (the
  allocator's peak above what was allocated before the render) at 200 and 400
  pixels, and 800 pixels extrapolated from timed ray batches (labelled as such).

Every output is checked finite before any time counts; a measurement that fails is recorded with its
error, never dropped. The result is ``OUT/cuda.json`` (machine, torch and CUDA versions, the code's
commit, every figure). ``--device cpu --tiny`` runs small sizes with few repeats, for tests and smoke runs.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from eugen_nerf.eval.timing import synchronize
from eugen_nerf.export import Sampling, load_export, render_view
from eugen_nerf.export.field import MLP, run_mlp
from eugen_nerf.export.format import FILE_NAME, ExportFormatError
from eugen_nerf.export.render import camera_radii, camera_rays, render_rays
from eugen_nerf.layers import EUGenMLP, EUGenSpec

PROG = "python -m eugen_nerf.bench.cuda"
NO_CUDA = "no CUDA device here: this command measures GPUs; use --device cpu --tiny for a smoke run"
DEFAULT_FIELDS = Path("benchmarks/cuda/fields")
FIELDS = {
    "dense-nerf": "eugen-export teachers/shiny128/dense-nerf/paper/config.yml --output {dir} --dtype float16",
    "eugen-distill": (
        "eugen-export teachers/shiny128/dense-nerf/paper-student/config.yml --output {dir} --dtype float16"
    ),
}
"""The exported fields rendered (subfolders of ``--fields``) and the commands that make each."""
OPTIONAL_FIELDS = {
    "dense-zipnerf": "eugen-export teachers/garden200/dense-zipnerf/cpu --output {dir} --dtype float16",
    "eugen-distill-zipnerf": (
        "eugen-distill --teacher teachers/garden200/dense-zipnerf/cpu --output-dir outputs/garden200-student "
        "--no-evaluate && eugen-export outputs/garden200-student --output {dir} --dtype float16"
    ),
}
"""Exported fields rendered when present (the unbounded garden200 Zip-NeRF teacher and its default student:
10 MB in all, left out of the repository); a missing one is recorded with the command that makes it."""
PAIRS = {
    "student_over_teacher": ("dense-nerf", "eugen-distill"),
    "zipnerf_student_over_teacher": ("dense-zipnerf", "eugen-distill-zipnerf"),
}
"""Each comparison in ``renders``: its key, then (teacher, student)."""
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
"""fp32: float32 throughout (PyTorch's default, no TF32); tf32: float32 with matrix products on TF32 tensor
cores; bf16/fp16: ``torch.autocast`` to that type (renders: the field MLPs only, compositing in fp32)."""
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Head:
    """One head's MLP at its default sizes and EUGen spec (the defaults of ``eugen_nerf.models`` /
    ``eugen_nerf.fields``, restated here because those modules import nerfstudio; a test checks they agree)."""

    name: str
    in_dim: int
    num_layers: int
    width: int
    out_dim: int
    skips: tuple[int, ...]
    eugen_layers: tuple[int, ...]
    spec: EUGenSpec
    activation: str = "relu"
    out_activation: str | None = None
    eikonal: bool = False
    """Its training loss holds the eikonal term, a gradient of the output with respect to the input."""

    def mlp(self, eugen: bool, width: int | None = None) -> EUGenMLP:
        activation = nn.Softplus(beta=100.0) if self.activation == "softplus100" else nn.ReLU()
        out = {"relu": nn.ReLU(), "sigmoid": nn.Sigmoid(), None: None}[self.out_activation]
        layers = self.eugen_layers if eugen else ()
        if self.num_layers - 1 in layers and self.out_activation == "relu":
            out = None  # an EUGen last layer replaces the hidden layer's ReLU(W x + b) whole (the NeRF trunk)
        return EUGenMLP(
            in_dim=self.in_dim,
            num_layers=self.num_layers,
            layer_width=width or self.width,
            out_dim=self.out_dim,
            skip_connections=self.skips,
            activation=activation,
            out_activation=out,
            layer_types=tuple("eugen" if i in layers else "dense" for i in range(self.num_layers)),
            eugen=self.spec,
        )


HEADS = (
    # NeRF trunk: 10-octave encoding of positions (63), 8 x 256, skip at 4; NeRFEUGenConfig's defaults
    Head("nerf-trunk", 63, 8, 256, 256, skips=(4,), eugen_layers=(1, 2, 3, 5, 6, 7),
         spec=EUGenSpec(num_features=64, feature_map="identity", use_norm=False, scaling="projected"),
         out_activation="relu"),
    # Zip-NeRF view MLP: bottleneck 256 + 4-octave directions (27), 3 x 256, skip at 1; ZipNeRFEUGenConfig
    Head("zipnerf-view", 283, 3, 256, 3, skips=(1,), eugen_layers=(0, 1),
         spec=EUGenSpec(num_features=48, feature_map="identity", use_norm=False, scaling="projected"),
         out_activation="sigmoid"),
    # nerfacto colour MLP: SH directions (16) + geometry features (15), 3 x 64; NerfactoEUGenConfig
    Head("nerfacto-color", 31, 3, 64, 3, skips=(), eugen_layers=(1,),
         spec=EUGenSpec(num_features=16), out_activation="sigmoid"),
    # iSDF: 5-octave embedding (33), 5 x 256, skip at 2, softplus(beta=100); ISDFEUGenConfig
    Head("isdf", 33, 5, 256, 1, skips=(2,), eugen_layers=(1, 2, 3),
         spec=EUGenSpec(num_features=64, feature_map="softplus", use_norm=False), activation="softplus100",
         eikonal=True),
)  # fmt: skip


@dataclass
class Settings:
    device: torch.device
    tiny: bool
    points: int
    warmup: int
    repeats: int
    resolutions: tuple[int, ...]
    extrapolate_to: int
    ray_batches: int
    ray_batch: int
    compile_backend: str | None
    compile_budget_s: float
    sampling: str
    render_warmup: int
    render_repeats: int
    render_chunk: int
    """Rays per renderer call (its batch): large on a GPU, where small batches time kernel launches."""
    time_limit_s: float
    render_samples: tuple[int, int] | None = None
    """(coarse, importance) samples of the nerfstudio sampling; None: the run's own."""
    compile_spent_s: float = 0.0
    started: float = field(default_factory=time.perf_counter)


FULL = dict(
    points=1 << 19,
    warmup=3,
    repeats=10,
    resolutions=(200, 400),
    extrapolate_to=800,
    ray_batches=2,
    ray_batch=65536,
    compile_backend="inductor",
    render_warmup=2,
    render_repeats=10,
    render_chunk=65536,
)
"""The measurement on a GPU: sizes and repeats that fit one call of about four minutes."""
TINY = dict(
    points=512,
    warmup=0,
    repeats=2,
    resolutions=(8, 12),
    extrapolate_to=24,
    ray_batches=2,
    ray_batch=32,
    compile_backend="eager",
    render_warmup=0,
    render_repeats=1,
    render_chunk=64,
    render_samples=(8, 8),
)
"""``--tiny``: every code path at toy sizes (tests, CPU smoke runs)."""


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def autocast(device: torch.device, precision: str):
    """The context a measurement in ``precision`` (one of :data:`PRECISIONS`) runs in."""
    if precision in AUTOCAST_DTYPES:
        with torch.autocast(device_type=device.type, dtype=AUTOCAST_DTYPES[precision]):
            yield
    elif precision == "tf32":
        saved = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = True
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
    else:
        yield


def all_finite(output: torch.Tensor) -> bool:
    return bool(torch.isfinite(output.float()).all())


def timed(fn: Callable[[], torch.Tensor], settings: Settings, warmup: int, repeats: int) -> dict:
    """Seconds per call of ``fn`` (median and min of ``repeats``, after ``warmup`` calls), its first
    output checked finite before anything is timed."""
    synchronize(settings.device)
    start = time.perf_counter()
    output = fn()
    synchronize(settings.device)
    first_s = time.perf_counter() - start
    finite = all_finite(output)
    if not finite:
        return {"finite": False, "first_call_s": first_s}
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(settings.device)
        start = time.perf_counter()
        fn()
        synchronize(settings.device)
        times.append(time.perf_counter() - start)
    times.sort()
    return {"finite": True, "first_call_s": first_s, "median_s": times[len(times) // 2], "min_s": times[0]}


def compile_fn(fn: Callable, settings: Settings, dynamic: bool | None = None) -> Callable:
    return torch.compile(fn, backend=settings.compile_backend, dynamic=dynamic)


def measure(label: str, fn: Callable[[], torch.Tensor], settings: Settings, render: bool = False) -> dict:
    """:func:`timed`, with any failure recorded (one line) instead of raised; skipped (and recorded as such)
    once the run's time limit is reached."""
    elapsed = time.perf_counter() - settings.started
    if elapsed > settings.time_limit_s:
        result = {"skipped": f"time limit of {settings.time_limit_s:.0f} s reached"}
        progress(f"{label}: skipped ({result['skipped']})")
        return result
    warmup, repeats = (
        (settings.render_warmup, settings.render_repeats) if render else (settings.warmup, settings.repeats)
    )
    try:
        result = timed(fn, settings, warmup, repeats)
    except Exception as error:  # noqa: BLE001 - a backend or kernel failure is a result to record
        result = {"finite": None, "error": f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"}
    shown = (
        f"{result['median_s'] * 1e3:.2f} ms" if "median_s" in result else result.get("error", "NOT FINITE")
    )
    shown += f" ({elapsed:.0f} s into the run)"
    progress(f"{label}: {shown}")
    return result


def skipped(row: dict, label: str, settings: Settings) -> bool:
    """Whether the compiled measurement ``row`` is left out (not requested, or the compile budget spent), its
    reason recorded in the row (a reason already there stands) and shown."""
    if row["compile"] and "skipped" not in row:
        if settings.compile_backend is None:
            row["skipped"] = "not requested (--no-compile)"
        elif settings.compile_spent_s > settings.compile_budget_s:
            row["skipped"] = f"compile budget of {settings.compile_budget_s:.0f} s spent"
    if "skipped" in row:
        progress(f"{label}: skipped ({row['skipped']})")
    return "skipped" in row


def speedups(rows: list[dict], variant: str, precisions: tuple[str, ...]) -> dict[str, float]:
    """Dense's median seconds over ``variant``'s, per precision and compile mode (``fp32``, ``fp32-compiled``,
    ...), where both were measured."""
    by_key = {(r["variant"], r["precision"], r["compile"]): r for r in rows}
    out = {}
    for precision in precisions:
        for compiled in (False, True):
            dense, other = (
                by_key.get(("dense", precision, compiled)),
                by_key.get((variant, precision, compiled)),
            )
            if dense and other and "median_s" in dense and "median_s" in other:
                out[f"{precision}{'-compiled' if compiled else ''}"] = dense["median_s"] / other["median_s"]
    return out


def bench_mlps(settings: Settings) -> dict:
    """Points/s of each head's dense, unfused EUGen and fused EUGen MLP, per precision and compile mode."""
    device, out = settings.device, {}
    for head in HEADS:
        torch.manual_seed(0)
        dense = head.mlp(eugen=False).to(device).eval()
        eugen = head.mlp(eugen=True).to(device).eval()
        points = torch.rand(settings.points, head.in_dim, device=device) * 2 - 1
        with torch.no_grad():
            fused = eugen.fused()
        variants = {
            "dense": dense.forward_unfused,
            "eugen-unfused": eugen.forward_unfused,
            "eugen-fused": fused,
        }
        entry = {
            "sizes": {
                "in_dim": head.in_dim,
                "num_layers": head.num_layers,
                "width": head.width,
                "out_dim": head.out_dim,
                "skips": list(head.skips),
                "eugen_layers": list(head.eugen_layers),
                "num_features": head.spec.num_features,
                "degree": head.spec.degree,
                "feature_map": head.spec.feature_map,
                "use_norm": head.spec.use_norm,
            },
            "parameters": {
                "dense": sum(p.numel() for p in dense.parameters()),
                "eugen": sum(p.numel() for p in eugen.parameters() if p.requires_grad),
            },
            "macs_per_point": {"dense": dense.macs_per_point(), "eugen-unfused": eugen.macs_per_point()},
            "points": settings.points,
            "results": [],
        }
        for compiled in (False, True):
            for precision in PRECISIONS:
                for variant, fn in variants.items():
                    if compiled and variant == "eugen-unfused":
                        continue  # inference runs the fused form; the unfused one is the layer-by-layer reference
                    row = {"variant": variant, "precision": precision, "compile": compiled}
                    label = f"mlps {head.name} {variant} {precision}{' compiled' if compiled else ''}"
                    if skipped(row, label, settings):
                        entry["results"].append(row)
                        continue
                    call = compile_fn(fn, settings) if compiled else fn

                    def run(call=call, precision=precision, points=points):
                        with torch.no_grad(), autocast(device, precision):
                            return call(points)

                    row.update(measure(label, run, settings))
                    if compiled:
                        settings.compile_spent_s += row.get("first_call_s", 0.0)
                    if "median_s" in row:
                        row["points_per_s"] = settings.points / row["median_s"]
                    entry["results"].append(row)
        entry["fused_speedup_over_dense"] = speedups(entry["results"], "eugen-fused", PRECISIONS)
        out[head.name] = entry
    return out


TRAINING_PRECISIONS = ("fp32", "bf16")
"""Precisions of the training steps (fp32, and the mixed precision GPU training uses)."""


def training_step(mlp: EUGenMLP, points: torch.Tensor, precision: str, eikonal: bool) -> Callable:
    """One training step of ``mlp`` on ``points``: forward, a loss, backward (gradients set to None after, so
    no step adds to the last). ``eikonal``: the loss also holds ``(‖∇ₓ out‖ - 1)²``, whose backward differentiates
    the first backward, as iSDF's training does."""
    device = points.device

    def step() -> torch.Tensor:
        x = points.detach().requires_grad_(eikonal)
        with autocast(device, precision):
            out = mlp(x).float()
        loss = out.square().mean()
        if eikonal:
            (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
            loss = loss + (torch.linalg.vector_norm(grad, dim=-1) - 1).square().mean()
        loss.backward()
        for p in mlp.parameters():
            p.grad = None
        return loss.detach()

    return step


def bench_training(settings: Settings) -> dict:
    """Seconds of one training step of each head's dense and EUGen MLP (the layer-by-layer form that trains),
    at a quarter of the inference batch, fp32 and bf16 autocast, eager and compiled (iSDF's step, which
    differentiates a gradient, eagerly only: torch.compile does not compile a double backward)."""
    device, out = settings.device, {}
    points_per_step = max(settings.points // 4, 1)
    for head in HEADS:
        torch.manual_seed(0)
        points = torch.rand(points_per_step, head.in_dim, device=device) * 2 - 1
        eikonal = head.eikonal
        models = {name: head.mlp(eugen=name == "eugen").to(device).train() for name in ("dense", "eugen")}
        entry = {"points": points_per_step, "eikonal": eikonal, "results": []}
        for compiled in (False, True):
            for precision in TRAINING_PRECISIONS:
                for variant, mlp in models.items():
                    row = {"variant": variant, "precision": precision, "compile": compiled}
                    label = f"training {head.name} {variant} {precision}{' compiled' if compiled else ''}"
                    if compiled and eikonal:
                        row["skipped"] = "torch.compile does not compile a double backward"
                    if skipped(row, label, settings):
                        entry["results"].append(row)
                        continue
                    model = compile_fn(mlp, settings) if compiled else mlp
                    row.update(measure(label, training_step(model, points, precision, eikonal), settings))
                    if compiled:
                        settings.compile_spent_s += row.get("first_call_s", 0.0)
                    entry["results"].append(row)
        entry["eugen_speedup_over_dense"] = speedups(entry["results"], "eugen", TRAINING_PRECISIONS)
        out[head.name] = entry
    return out


class AutocastMLP:
    """An exported MLP run in ``precision``, its output left in that type (the renderer composites in fp32)."""

    def __init__(
        self, mlp: MLP, device: torch.device, call: Callable | None = None, precision: str = "bf16"
    ) -> None:
        self.mlp, self.device, self.call, self.precision = mlp, device, call or run_mlp, precision

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        with autocast(self.device, self.precision):
            # in the autocast type: the renderer casts densities and colours to float32 to composite, and
            # features passed between MLPs stay half-width (a float32 copy would set the render's peak memory)
            return self.call(self.mlp, inputs)


def load_fields(folder: Path, device: torch.device) -> dict:
    """The exported fields of :data:`FIELDS` under ``folder``, and those of :data:`OPTIONAL_FIELDS` present there;
    one line naming a missing required file and the command that makes it."""
    for name, command in FIELDS.items():
        path = folder / name / FILE_NAME
        if not path.is_file():
            raise SystemExit(
                f"{PROG}: error: missing exported field {path}; make it with: {command.format(dir=folder / name)}"
            )
    loaded = {}
    present = [name for name in OPTIONAL_FIELDS if (folder / name / FILE_NAME).is_file()]
    for name in [*FIELDS, *present]:
        try:
            loaded[name] = load_export(folder / name, device=device)
        except ExportFormatError as error:
            raise SystemExit(f"{PROG}: error: {error}") from None
    return loaded


def with_precision(exported, precision: str, device: torch.device):
    """``exported`` whose fields' MLPs run in ``precision`` (a shallow copy; fp32 is ``exported`` itself)."""
    if precision == "fp32":
        return exported
    return with_mlps(exported, lambda mlp: AutocastMLP(mlp, device, precision=precision))


def with_mlps(exported, wrap: Callable):
    """A shallow copy of ``exported`` whose fields call ``wrap(mlp)`` in place of each of their MLPs."""
    copied = copy.copy(exported)
    copied.fields = {}
    for name, nerf_field in exported.fields.items():
        wrapped = copy.copy(nerf_field)
        # NeRF's trunk, density and colour MLPs; Zip-NeRF's density and view MLPs (a proposal: density only)
        for part in ("trunk", "density", "color", "view"):
            if getattr(nerf_field, part, None) is not None:
                setattr(wrapped, part, wrap(getattr(nerf_field, part)))
        copied.fields[name] = wrapped
    return copied


class TimedCall:
    """A field MLP whose every call records its own time into ``spans``: a pair of CUDA events (the GPU time of
    the kernels it launches, without stalling the stream) or, on the CPU, its seconds."""

    def __init__(self, call: Callable, spans: list, device: torch.device) -> None:
        self.call, self.spans, self.device = call, spans, device

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.device.type != "cuda":
            start = time.perf_counter()
            output = self.call(inputs)
            self.spans.append(time.perf_counter() - start)
            return output
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        output = self.call(inputs)
        end.record()
        self.spans.append((start, end))
        return output


def mlp_split(exported, render: Callable, device: torch.device) -> dict:
    """One more frame of ``render(field)`` with every field MLP of ``exported`` timed: the seconds the MLPs
    take and the seconds of the rest (sampling, encodings, compositing), to say where a frame's time goes."""
    spans: list = []
    timed_field = with_mlps(exported, lambda mlp: TimedCall(mlp, spans, device))
    synchronize(device)
    start = time.perf_counter()
    render(timed_field)
    synchronize(device)
    frame = time.perf_counter() - start
    mlps = sum(s.elapsed_time(e) / 1e3 for s, e in spans) if device.type == "cuda" else sum(spans)
    return {"frame_s": frame, "field_mlps_s": mlps, "rest_s": frame - mlps}


def render_memory(fn: Callable[[], torch.Tensor], device: torch.device) -> float | None:
    """Bytes the allocator's peak rose above what was allocated just before ``fn`` (CUDA only)."""
    if device.type != "cuda":
        return None
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    synchronize(device)
    return float(torch.cuda.max_memory_allocated(device) - before)


def ratios(teacher: dict, student: dict) -> dict:
    """The student's render speed-up, field-MLP speed-up and render memory against its teacher's (one
    resolution and precision)."""
    split_t, split_s = teacher.get("time_split"), student.get("time_split")
    return {
        "render_speedup": teacher["median_s"] / student["median_s"],
        "field_mlps_speedup": (
            split_t["field_mlps_s"] / split_s["field_mlps_s"]
            if split_t and split_s and split_s["field_mlps_s"] > 0
            else None
        ),
        "extrapolated": teacher["extrapolated"],
        "render_memory_ratio": (
            student["render_memory_bytes"] / teacher["render_memory_bytes"]
            if teacher.get("render_memory_bytes") and student.get("render_memory_bytes") is not None
            else None
        ),
    }


def bench_renders(fields: dict, settings: Settings) -> dict:
    """Frames/s and render memory of each exported field, per resolution and precision."""
    device = settings.device
    coarse, importance = settings.render_samples or (None, None)
    sampling = Sampling(kind=settings.sampling, coarse_samples=coarse, importance_samples=importance)
    out = {}
    missing = {name: command for name, command in OPTIONAL_FIELDS.items() if name not in fields}
    if missing:
        out["not_rendered"] = {
            name: f"no export; make it with: {command}" for name, command in missing.items()
        }
    for name, exported in fields.items():
        camera = exported.cameras[0]
        entry = {
            "head": exported.head,
            "file": str(exported.path),
            "macs_per_point": {k: f.macs_per_point() for k, f in exported.fields.items()},
            "camera": camera.name,
            "results": [],
        }
        for precision in PRECISIONS:
            field_ = with_precision(exported, precision, device)
            for resolution in settings.resolutions:
                label = f"renders {name} {resolution}px {precision}"

                def frame(rendered, resolution=resolution, camera=camera):
                    return render_view(
                        rendered,
                        camera,
                        sampling,
                        width=resolution,
                        height=resolution,
                        chunk=settings.render_chunk,
                    )

                def run(field_=field_, frame=frame):
                    return frame(field_)

                row = {"resolution": resolution, "precision": precision, "extrapolated": False}
                row.update(measure(label, run, settings, render=True))
                if "median_s" in row:
                    row["fps"] = 1.0 / row["median_s"]
                    row["render_memory_bytes"] = render_memory(run, device)
                    row["time_split"] = mlp_split(field_, frame, device)
                entry["results"].append(row)
            entry["results"].append(extrapolated(name, field_, camera, sampling, precision, settings))
        out[name] = entry
    for key_name, (teacher_name, student_name) in PAIRS.items():
        if teacher_name not in out or student_name not in out:
            continue
        for precision in PRECISIONS:
            for resolution in (*settings.resolutions, settings.extrapolate_to):
                teacher, student = (
                    next(
                        (
                            r
                            for r in out[name]["results"]
                            if r["resolution"] == resolution and r["precision"] == precision
                        ),
                        None,
                    )
                    for name in (teacher_name, student_name)
                )
                if teacher and student and "median_s" in teacher and "median_s" in student:
                    out.setdefault(key_name, {})[f"{resolution}px-{precision}"] = ratios(teacher, student)
    return out


def extrapolated(name, field_, camera, sampling, precision, settings) -> dict:
    """A frame at ``extrapolate_to`` pixels, timed on ``ray_batches`` batches of its rays drawn across the whole
    image (seeded), scaled to every ray of the frame: labelled ``extrapolated``."""
    resolution = settings.extrapolate_to
    big = camera.resized(resolution, resolution)
    big.camera_to_world = big.camera_to_world.to(field_.device, field_.bounds.dtype)
    origins, directions = camera_rays(big)
    radii = camera_radii(big)  # the pixels' cones (Zip-NeRF's frustums)
    generator = torch.Generator().manual_seed(0)
    total = settings.ray_batches * settings.ray_batch
    chosen = torch.randperm(origins.shape[0], generator=generator)[:total].to(origins.device)
    o, d, r = origins[chosen], directions[chosen], radii[chosen]

    def run():
        batches = zip(o.split(settings.ray_batch), d.split(settings.ray_batch), r.split(settings.ray_batch))
        return torch.cat(
            [
                render_rays(field_, oo, dd, sampling, chunk=settings.render_chunk, radii=rr)
                for oo, dd, rr in batches
            ]
        )

    row = {
        "resolution": resolution,
        "precision": precision,
        "extrapolated": True,
        "timed_rays": total,
        "ray_batch": settings.ray_batch,
    }
    label = f"renders {name} {resolution}px {precision} (extrapolated from {total} rays)"
    row.update(measure(label, run, settings, render=True))
    if "median_s" in row:
        scale = origins.shape[0] / total
        row["median_s"] *= scale
        row["min_s"] *= scale
        row["fps"] = 1.0 / row["median_s"]
        row["render_memory_bytes"] = render_memory(run, settings.device)
        row["render_memory_note"] = "peak of the timed ray batches, not of a whole frame"
    return row


def code_commit(start: Path) -> str | None:
    """The checked-out commit of the git work tree holding ``start`` (read from ``.git``; None if absent)."""
    for folder in (start, *start.parents):
        git = folder / ".git"
        if not git.is_dir():
            continue
        try:
            head = (git / "HEAD").read_text().strip()
            if not head.startswith("ref: "):
                return head
            ref = head[5:]
            if (git / ref).is_file():
                return (git / ref).read_text().strip()
            packed = git / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
        except OSError:
            return None
        return None
    return None


def source_sha256() -> str:
    """SHA-256 over the package's Python sources (path and bytes, in path order): names the code that ran
    where ``.git`` is absent or stale, as on a machine sent a copy of the work tree."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def machine(device: torch.device) -> dict:
    info = {
        "device": str(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            gpu=props.name, gpu_memory_bytes=props.total_memory, capability=f"{props.major}.{props.minor}"
        )
    else:
        info["gpu"] = None
    return info


def failures(value) -> list[str]:
    """The error messages of every measurement that raised (nested dicts/lists)."""
    if isinstance(value, dict):
        own = [value["error"]] if "error" in value else []
        return own + [e for v in value.values() for e in failures(v)]
    if isinstance(value, list):
        return [e for v in value for e in failures(v)]
    return []


def count_skipped(value) -> int:
    """How many measurements were recorded as skipped (past the time limit or the compile budget)."""
    if isinstance(value, dict):
        return int("skipped" in value) + sum(count_skipped(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_skipped(v) for v in value)
    return 0


def finite_figures(value) -> bool:
    """Whether every float in ``value`` (nested dicts/lists) is finite and no measurement came out non-finite."""
    if isinstance(value, dict):
        if value.get("finite") is False:
            return False
        return all(finite_figures(v) for v in value.values())
    if isinstance(value, list):
        return all(finite_figures(v) for v in value)
    if isinstance(value, float):
        return math.isfinite(value)
    return True


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="EUGen against dense on a GPU with torch alone: every head's MLP (dense, EUGen, fused; fp32 "
        "TF32, bf16 and fp16 autocast; eager and torch.compile) and whole-view renders of exported teachers and their students. "
        "Writes OUT/cuda.json.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder of cuda.json (default: benchmarks/cuda, the published figures; outputs/cuda-tiny with --tiny)",
    )
    parser.add_argument(
        "--fields",
        type=Path,
        default=DEFAULT_FIELDS,
        help="folder of the exports: dense-nerf/ and eugen-distill/ (shipped); dense-zipnerf/ and "
        "eugen-distill-zipnerf/ rendered when present (cuda.json's not_rendered names the commands that make them)",
    )
    parser.add_argument(
        "--commit",
        default=None,
        help="the code's commit, recorded in cuda.json (default: read from the work tree's .git, which a copied "
        "tree may hold stale)",
    )
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (with --tiny, a smoke run)")
    parser.add_argument("--tiny", action="store_true", help="small sizes and few repeats (tests, smoke runs)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile measurements")
    parser.add_argument(
        "--compile-budget-s",
        type=float,
        default=150.0,
        help="compile time after which the remaining compiled measurements are recorded as skipped",
    )
    parser.add_argument(
        "--time-limit-s",
        type=float,
        default=270.0,
        help="seconds into the run after which the remaining measurements are recorded as skipped",
    )
    parser.add_argument(
        "--sampling",
        choices=("nerfstudio", "march"),
        default="nerfstudio",
        help="renderer sampling: the run's own (coarse + importance) or the web page's march",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.out is None:  # a smoke run never replaces the published figures
        args.out = Path("outputs/cuda-tiny") if args.tiny else Path("benchmarks/cuda")
    try:
        torch.device(args.device)
    except RuntimeError:
        print(
            f"{PROG}: error: --device {args.device!r} is not a torch device (cuda, cuda:1, cpu)",
            file=sys.stderr,
        )
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"{PROG}: error: {NO_CUDA}", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    if device.type == "cpu" and not args.tiny:
        print(
            f"{PROG}: error: the CPU run is a smoke run only: add --tiny (CPU figures: eugen-bench)",
            file=sys.stderr,
        )
        return 2
    try:
        fields = load_fields(args.fields, device)
    except SystemExit as error:
        print(error, file=sys.stderr)
        return 2
    settings = Settings(
        device,
        args.tiny,
        compile_budget_s=args.compile_budget_s,
        sampling=args.sampling,
        time_limit_s=args.time_limit_s,
        **(TINY if args.tiny else FULL),
    )
    if args.no_compile:
        settings.compile_backend = None
    progress(f"device {device}; {'tiny' if args.tiny else 'full'} run; writing {args.out / 'cuda.json'}")
    result = {
        "command": " ".join([PROG, *(sys.argv[1:] if argv is None else argv)]),
        "machine": machine(device),
        "commit": args.commit or code_commit(Path.cwd()),
        "source_sha256": source_sha256(),
        "tiny": args.tiny,
        "settings": {
            "points_per_batch": settings.points,
            "warmup": settings.warmup,
            "repeats": settings.repeats,
            "render_warmup": settings.render_warmup,
            "render_repeats": settings.render_repeats,
            "render_chunk_rays": settings.render_chunk,
            "render_samples": settings.render_samples or "the run's own",
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "time_limit_s": settings.time_limit_s,
            "timing": "median of repeats, after warmup; the first (compiling) call reported apart",
            "precisions": {
                "fp32": "float32, matrix products in full float32 (PyTorch's default)",
                "tf32": "float32, matrix products on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32)",
                "bf16": "torch.autocast bfloat16 (renders: field MLPs only)",
                "fp16": "torch.autocast float16 (renders: field MLPs only)",
            },
            "compile": {"backend": settings.compile_backend, "budget_s": settings.compile_budget_s},
            "render_sampling": settings.sampling,
            "renders_compiled": False,
            "render_memory": "torch.cuda.max_memory_allocated minus memory_allocated just before the render, "
            "after reset_peak_memory_stats (CUDA only; null on the CPU)",
        },
    }
    result["mlps"] = bench_mlps(settings)
    result["renders"] = bench_renders(fields, settings)
    result["training"] = bench_training(settings)
    result["compile_time_s"] = settings.compile_spent_s
    result["wall_s"] = time.perf_counter() - settings.started
    measured = {"mlps": result["mlps"], "renders": result["renders"], "training": result["training"]}
    result["finite"] = finite_figures(measured)
    result["errors"] = failures(measured)
    result["skipped"] = count_skipped(measured)
    args.out.mkdir(parents=True, exist_ok=True)
    path = result_path(args.out, result)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(result, indent=1) + "\n")
    partial.replace(path)  # whole or not at all
    progress(
        f"wrote {path} in {result['wall_s']:.0f} s (finite: {result['finite']}, "
        f"failed measurements: {len(result['errors'])}, skipped for time: {result['skipped']})"
    )
    return 0 if path.name == "cuda.json" else 1


def result_path(out: Path, result: dict) -> Path:
    """Where a run's result goes: ``cuda.json`` when every figure is finite and no measurement failed, else
    ``cuda.failed.json`` beside it, so a failed run never replaces the figures of a good one."""
    return out / ("cuda.json" if result["finite"] and not result["errors"] else "cuda.failed.json")


if __name__ == "__main__":
    raise SystemExit(main())
