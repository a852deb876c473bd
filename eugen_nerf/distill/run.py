"""One distillation, end to end: load, plan, capture and solve stage by stage, fine-tune, evaluate, write.

**Stages.** With ``fit="sequential"`` (the default) the layers of one MLP are fitted in depth order,
one stage per depth: stage ``s`` captures with the layers of earlier stages already replaced, so
each layer learns to map the student's actual inputs to the teacher's outputs and errors do not
compound down the MLP. Layers of different MLPs share a stage. ``fit="parallel"`` fits every layer
in one pass on the teacher's own inputs. ``auto`` fits one candidate per stage and keeps it only if
the PSNR drop on held-out training views stays within the budget.

**Resuming.** After every batch the stage's normal equations and the progress are saved; a rerun
with the same options replays the finished stages' solutions and continues from the next batch,
accumulating in the same order, so it ends with the same statistics as an uninterrupted run.

**Processes.** Under ``torchrun`` (``WORLD_SIZE > 1``) rank ``r`` renders batches ``r, r + w, ...``
and the statistics are all-reduced before every solve (gloo on CPU, NCCL on CUDA): every rank solves
the same system, so the student is the one a single process would build. Rank 0 fine-tunes (on its own
batches' rays and the novel cameras'), evaluates and writes.

Capture and solve run under ``torch.no_grad()``: no gradient is ever computed before the optional
fine-tune.
"""

from __future__ import annotations

import contextlib
import copy
import fnmatch
import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction

import torch
from nerfstudio.cameras.rays import RayBundle
from rich.console import Console
from tqdm import tqdm

from eugen_nerf.distill.capture import BatchRecorded, Capture, LayerEquations, PreactivationProbe
from eugen_nerf.distill.field_match import named_fields
from eugen_nerf.distill.finetune import FinetuneLog, finetune
from eugen_nerf.distill.options import (
    DistillError,
    DistillInterrupted,
    DistillOptions,
    layer_width_fraction,
    parse_width_override,
)
from eugen_nerf.distill.output import (
    StateStore,
    check_output_dir,
    publish_checkpoint,
    publish_run,
    stage_checkpoint,
    work_dir,
    write_yaml_atomic,
)
from eugen_nerf.distill.report import (
    evaluate,
    print_report,
    render_share,
    side_by_side_fps,
    view_psnr,
    write_json_atomic,
)
from eugen_nerf.distill.sampling import (
    PixelRays,
    RaySet,
    batch_generator,
    cat_rays,
    novel_rays,
    sample_rays,
)
from eugen_nerf.distill.solve import LayerFit, refine_layer, solve_layer
from eugen_nerf.distill.student import (
    LayerRef,
    convert_mlps,
    folds_out_activation,
    install_layer,
    layer_features,
    layer_seed,
    list_layers,
    make_student_layer,
    resolve_layers,
    student_trainer_config,
)
from eugen_nerf.distill.teacher import load_teacher
from eugen_nerf.eval.runs import Run, final_rgb
from eugen_nerf.inputs.options import resolve_device
from eugen_nerf.layers import EUGenLinear, LowRankLinear, pivoted_units, unit_projections


@dataclass
class DistillResult:
    """What a run produced (the run directory is on disk; this is for callers and tests)."""

    run_dir: str | None
    fits: dict[str, LayerFit]
    statistics: dict[str, dict]
    """Final (all-reduced) normal equations per layer: ``{"train": ..., "heldout": ...}``."""
    report: dict
    teacher: Run


@dataclass
class StageTimer:
    """Wall seconds spent in each stage, summed over the processes that worked on the run: a resumed run
    starts from the seconds its saved state holds (:meth:`snapshot` at each save, stages still running
    included), so a run stopped and continued reports what all of it cost. Work a stopped process did
    after its last save is not counted; work redone after a resume is."""

    seconds: dict[str, float] = field(
        default_factory=lambda: dict.fromkeys(
            ("load", "probe", "capture", "solve", "refine", "build", "finetune", "evaluate"), 0.0
        )
    )
    running: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        self.running[stage] = start
        try:
            yield
        finally:
            self.running.pop(stage, None)
            self.seconds[stage] += time.perf_counter() - start

    def snapshot(self) -> dict[str, float]:
        """The seconds so far, with the elapsed part of the stages running now."""
        now = time.perf_counter()
        return {name: total + now - self.running.get(name, now) for name, total in self.seconds.items()}

    def add(self, earlier: dict[str, float]) -> None:
        """Count the seconds earlier processes of this run saved."""
        for name, total in earlier.items():
            self.seconds[name] = self.seconds.get(name, 0.0) + total


def setup_distributed(device: str | None) -> tuple:
    """``(rank, world_size, device)``; joins the ``torchrun`` process group when ``WORLD_SIZE > 1``."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    chosen = resolve_device(device)  # an unknown name or a missing CUDA device: one line, before any work
    cuda = chosen.type == "cuda"
    if world_size == 1:
        return 0, 1, chosen
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    return dist.get_rank(), dist.get_world_size(), torch.device(f"cuda:{local_rank}" if cuda else "cpu")


def state_bytes(state: dict) -> int:
    """Size of a checkpoint holding ``state`` alone (the teacher's file also holds optimiser state)."""
    buffer = io.BytesIO()
    torch.save({"pipeline": state}, buffer)
    return buffer.tell()


def plan_stages(refs: list[LayerRef], options: DistillOptions) -> list[list[LayerRef]]:
    """The layers fitted by each stage (see the module docstring)."""
    if options.auto:
        return [[ref] for ref in refs]
    if options.fit == "parallel":
        return [list(refs)]
    depth: dict[str, int] = {}
    stages: list[list[LayerRef]] = []
    for ref in refs:
        s = depth[ref.mlp_path] = depth.get(ref.mlp_path, -1) + 1
        if s == len(stages):
            stages.append([])
        stages[s].append(ref)
    return stages


def auto_candidates(model) -> list[LayerRef]:
    """``auto``'s candidates: every hidden dense layer, in depth order, so each is fitted on the
    inputs of the student as chosen so far."""
    return [row.ref for row in list_layers(model) if row.hidden]


def selection_views(rays: RaySet, num_cameras: int, count: int, seed: int) -> list[int]:
    """Training views not used for capture (all views when every one was), seeded."""
    used = set(rays.camera_indices)
    unused = [i for i in range(num_cameras) if i not in used] or list(range(num_cameras))
    order = torch.randperm(len(unused), generator=torch.Generator().manual_seed(seed + 1)).tolist()
    return sorted(unused[i] for i in order[:count])


class Distillation:
    """The state of one run; :func:`distill` drives it."""

    def __init__(self, options: DistillOptions, console: Console) -> None:
        self.options = options
        self.console = console
        self.timer = StageTimer()
        self.batches_this_run = 0

    def barrier(self) -> None:
        if self.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def say(self, message: str) -> None:
        if self.rank == 0:
            self.console.print(message)

    def save_state(self) -> None:
        """Save the resumable state with the seconds spent so far (see :class:`StageTimer`)."""
        self.state["seconds"] = self.timer.snapshot()
        self.store.save(self.state)

    # ------------------------------------------------------------------ setup
    def load(self) -> None:
        options = self.options
        check_output_dir(options.output_dir, options.overwrite, options.teacher)
        if options.refine_steps and int(os.environ.get("WORLD_SIZE", "1")) > 1:
            raise DistillError(
                "--refine-steps runs in one process (its rows are not shared across processes): "
                "run without torchrun, or with --refine-steps 0"
            )
        if options.fps_clock == "cpu" and (options.device or "cpu").split(":")[0] not in ("cpu", "auto"):
            # refused as asked, whether or not this machine has the device
            raise DistillError(f"--fps-clock cpu times CPU work only: the student runs on {options.device}")
        self.rank, self.world_size, self.device = setup_distributed(options.device)
        if options.fps_clock == "cpu" and self.device.type != "cpu":
            raise DistillError(f"--fps-clock cpu times CPU work only: the student runs on {self.device}")
        with self.timer("load"):
            self.teacher = load_teacher(options.teacher, str(self.device))
            self.teacher_state_bytes = state_bytes(self.teacher.pipeline.state_dict())
            model = self.teacher.model
            self.refs = auto_candidates(model) if options.auto else resolve_layers(model, options.layers)
            if not self.refs:
                raise DistillError(
                    f"{self.teacher.config_path}: no replaceable layer selected (see --list-layers)"
                )
            for entry in options.width_fraction_of:
                pattern = parse_width_override(entry)[0]
                if not any(fnmatch.fnmatchcase(ref.path, pattern) for ref in self.refs):
                    raise DistillError(
                        f"width-fraction-of {entry!r}: {pattern!r} matches none of the layers replaced "
                        f"({', '.join(ref.path for ref in self.refs)})"
                    )
            if options.finetune_steps and options.finetune_target == "fields" and not named_fields(model):
                raise DistillError(
                    f"{self.teacher.config_path}: finetune-target 'fields' matches the teacher's "
                    f"nerfstudio fields and this model has none (use --finetune-target colour)"
                )
            train = self.teacher.pipeline.datamanager.train_dataset
            self.rays = sample_rays(
                train.cameras,
                options.image_fraction,
                options.resolution_scale,
                options.batch_rays,
                options.eugen.seed,
                options.max_rays,
            )
            self.heldout_cameras = self.rays.heldout_cameras(options.heldout_fraction, options.eugen.seed)
        self.say(
            f"teacher {self.teacher.checkpoint} (step {self.teacher.step}); "
            f"{len(self.rays.rays):,d} rays from {len(self.rays.camera_indices)} training views "
            f"({len(self.heldout_cameras) or 'none'} held out for R² and the ridge) in "
            f"{self.rays.num_batches} batches; {len(self.refs)} layer(s)"
            + (" as auto candidates" if options.auto else "")
        )

    def prepare(self) -> None:
        """Convert the MLPs, keep dense copies as targets, and replay any saved state."""
        options, model = self.options, self.teacher.model
        self.work_dir = work_dir(options.output_dir)  # staged beside a complete run that --overwrite replaces
        if self.rank == 0:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        self.barrier()
        fingerprint = {
            **options.capture_fingerprint(),
            "teacher": str(self.teacher.checkpoint.resolve()),
            "step": self.teacher.step,
            "world_size": self.world_size,
        }
        self.store = StateStore(self.work_dir, self.rank, self.world_size, fingerprint)
        self.state = self.store.load(discard_other=options.overwrite) or {
            "stage": 0,
            "next_batch": 0,
            "equations": {},
            "fits": {},
            "decisions": [],
            "teacher_rgb": {},
            "narrowed": [],
        }
        if self.state["stage"] or self.state["next_batch"]:
            self.say(
                f"resuming from {self.store.path}: stage {self.state['stage']}, batch {self.state['next_batch']}"
            )
        self.timer.add(self.state.get("seconds", {}))
        resumed = bool(self.state["stage"] or self.state["next_batch"])
        earlier = self.state.get("processes", None if resumed else 0)  # None: a state that did not count them
        self.state["processes"] = None if earlier is None else earlier + 1
        # an untouched teacher (the model itself becomes the student) renders the fine-tune's novel and validation
        # views, or every batch of a fields fine-tune, and is timed beside the student: on rank 0, which does both
        needs_reference = options.finetune_steps or options.evaluate
        self.reference = copy.deepcopy(model) if needs_reference and self.rank == 0 else None
        self.mlps = convert_mlps(model, self.refs)
        self.teachers = {path: copy.deepcopy(mlp) for path, mlp in self.mlps.items()}
        self.dense = {ref.path: self.mlps[ref.mlp_path].layers[ref.index] for ref in self.refs}
        self.fits = {path: LayerFit.from_state_dict(fit) for path, fit in self.state["fits"].items()}
        for ref in self.refs:
            if ref.path in self.fits:
                self.install(ref, self.fits[ref.path])
        self.statistics: dict[str, dict] = {}

    def student_layer(self, ref: LayerRef):
        """The unfitted layer replacing ``ref``: seeded, or with the teacher's units as projections."""
        options = self.options
        layer = make_student_layer(
            self.mlps[ref.mlp_path], ref, options.spec, options.width_fraction, self.widths()
        )
        units = self.state.get("units", {}).get(ref.path)
        if units is not None:
            with torch.no_grad():
                shift = int(options.projections == "teacher-pairs")  # z_j z_(j-1) in order 2
                rows = unit_projections(layer, self.dense[ref.path], units, pair_shift=shift)
                layer.projections.copy_(rows)
        return layer

    def choose_units(self) -> None:
        """``--projections teacher``: the units of each layer, from its teacher pre-activations on the first
        ``--probe-batches`` batches (every process renders the same ones, so all choose alike); saved in the
        state so a resumed run builds the same layers."""
        options, model = self.options, self.teacher.model
        if "units" in self.state:
            return
        probe = PreactivationProbe(self.mlps, self.teachers, self.refs, options.pair_fraction)
        with self.timer("probe"), torch.no_grad(), probe:
            for b in tqdm(
                range(min(options.probe_batches, self.rays.num_batches)),
                desc="probe units",
                disable=self.rank != 0,
                leave=False,
            ):
                probe.generator = batch_generator(options.eugen.seed, b)
                probe.held_rays = self.held_rays(b)
                model(self.rays.batch(b, self.device))
        self.state["units"] = {
            path: pivoted_units(
                gram,
                layer_features(
                    options.eugen,
                    self.dense[path].out_features,
                    layer_width_fraction(path, options.width_fraction, options.width_fraction_of),
                ),
            )
            for path, gram in probe.grams().items()
        }
        self.save_state()

    def held_rays(self, batch: int) -> torch.Tensor | None:
        """Per ray of ``batch``: whether its camera is held out (None without held-out cameras)."""
        return self.rays.heldout_mask(batch, self.heldout_cameras) if self.heldout_cameras else None

    def widths(self) -> tuple[str, ...]:
        """``--width-fraction-of`` entries of the student: the user's, then those of the layers --narrow-fraction
        narrowed (exact paths, so they win)."""
        narrowed = [f"{d['path']}={d['fraction']}" for d in self.state.get("narrowed", []) if d["kept"]]
        return (*self.options.width_fraction_of, *narrowed)

    def narrowed(self, eq: LayerEquations, fit: LayerFit) -> tuple[LayerEquations, LayerFit]:
        """``--narrow-fraction``: the layer of ``eq`` with only its first units (those of the narrow fraction),
        solved from ``eq``'s statistics restricted to their features, with that solution, when its held-out R²
        in closed form reaches ``--narrow-r2``; ``(eq, fit)`` unchanged otherwise. Recorded in the state."""
        options, layer = self.options, eq.layer
        count = layer_features(options.eugen, self.dense[eq.ref.path].out_features, options.narrow_fraction)
        if not isinstance(layer, EUGenLinear) or count >= layer.num_features:
            return eq, fit
        fraction = str(Fraction(options.narrow_fraction).limit_denominator(1000))
        narrow = make_student_layer(
            self.mlps[eq.ref.mlp_path],
            eq.ref,
            options.spec,
            options.width_fraction,
            (*self.widths(), f"{eq.ref.path}={fraction}"),
        )
        m = layer.num_features
        with torch.no_grad():  # the first ``count`` rows of every projection block, their features' columns
            blocks = layer.projections.detach().view(-1, m, layer.projections.shape[-1])
            narrow.projections.copy_(blocks[:, :count].reshape(-1, blocks.shape[-1]))
        columns = torch.cat([torch.arange(count) + order * m for order in range(layer.degree)])
        narrow_eq = LayerEquations(
            eq.ref,
            narrow,
            eq.train.restrict(columns),
            eq.heldout.restrict(columns),
            eq.rows,
            eq.heldout_rows,
        )
        narrow_fit = solve_layer(narrow_eq, options.ridges)
        narrow_fit.projections = narrow.projections.detach().clone()
        kept = narrow_fit.r2_heldout >= options.narrow_r2
        self.state.setdefault("narrowed", []).append(
            {
                "path": eq.ref.path,
                "fraction": fraction,
                "features": [m, count],
                "r2_heldout_closed_form": [fit.r2_heldout, narrow_fit.r2_heldout],
                "kept": kept,
            }
        )
        self.say(
            f"  {eq.ref.path}: {count} of {m} units, R² held-out in closed form {narrow_fit.r2_heldout:.5f} "
            f"(all {m}: {fit.r2_heldout:.5f}) -> {'narrowed' if kept else 'kept at ' + str(m)}"
        )
        return (narrow_eq, narrow_fit) if kept else (eq, fit)

    def folding(self, refs: list[LayerRef]) -> list[str]:
        """``--fold-out-activation``: the MLPs of ``refs`` whose last layer is among them, fitted to the
        teacher's activated output and run without the activation after it, where the field that holds the MLP
        merges that layer into the layers reading it (eugen-nerf's NeRF field, its trunk into its heads):
        elsewhere dropping the activation would save nothing."""
        if not self.options.fold_out_activation:
            return []
        model = self.teacher.model
        return sorted(
            {
                ref.mlp_path
                for ref in refs
                if folds_out_activation(self.teachers[ref.mlp_path], ref.index)
                and hasattr(model.get_submodule(ref.mlp_path.rpartition(".")[0]), "fold_heads")
            }
        )

    def install(self, ref: LayerRef, fit: LayerFit) -> None:
        mlp = self.mlps[ref.mlp_path]
        options = self.options
        layer = make_student_layer(mlp, ref, options.spec, options.width_fraction, self.widths())
        with torch.no_grad():
            # fit.weight has the layer's rank: its SVD factors it exactly
            if isinstance(layer, LowRankLinear):
                layer.load_product_(fit.weight, fit.bias)
            else:
                layer.weight.copy_(fit.weight)
                layer.bias.copy_(fit.bias)
                if fit.projections is not None:
                    layer.projections.copy_(fit.projections)
        install_layer(mlp, ref.index, layer)
        if self.folding([ref]):  # fitted to the activated output: the student runs it as its config will say
            mlp.out_activation = None

    # ------------------------------------------------------------------ capture and solve
    def capture(self, stage: int, equations: list[LayerEquations]) -> None:
        """Render this rank's remaining batches with the hooks on, saving the state after each."""
        options, model = self.options, self.teacher.model
        batches = [
            b
            for b in range(self.state["next_batch"], self.rays.num_batches)
            if b % self.world_size == self.rank
        ]
        record_rgb = stage == 0
        with (
            torch.no_grad(),
            Capture(
                self.mlps,
                self.teachers,
                equations,
                options.pair_fraction,
                options.heldout_fraction,
                unactivated=self.folding([eq.ref for eq in equations]),
            ) as capture,
        ):
            # the first stage renders whole (the teacher's colours are kept); later ones stop once recorded
            capture.stop_when_recorded = not record_rgb
            for b in tqdm(batches, desc=f"capture stage {stage + 1}", disable=self.rank != 0, leave=False):
                capture.begin_batch(batch_generator(options.eugen.seed, b), self.held_rays(b))
                try:
                    outputs = model(self.rays.batch(b, self.device))
                except BatchRecorded:
                    outputs = None
                if record_rgb:
                    self.state["teacher_rgb"][b] = final_rgb(outputs).float().cpu()
                self.state["next_batch"] = b + 1
                self.state["equations"] = {eq.ref.path: eq.state_dict() for eq in equations}
                self.save_state()
                self.batches_this_run += 1
                if (
                    options.stop_after_batches is not None
                    and self.batches_this_run >= options.stop_after_batches
                ):
                    raise DistillInterrupted(
                        f"stopped after {self.batches_this_run} batches; rerun the same command to resume"
                    )

    def run_stages(self) -> None:
        options, model = self.options, self.teacher.model
        stages = plan_stages(self.refs, options)
        if options.auto:
            self.views = selection_views(
                self.rays,
                len(self.teacher.pipeline.datamanager.train_dataset),
                options.auto_views,
                options.eugen.seed,
            )
            if "auto_teacher_psnr" not in self.state:
                self.state["auto_teacher_psnr"] = self.selection_psnr()
        if options.projections != "seeded":
            self.choose_units()
        for s, stage in enumerate(stages):
            if s < self.state["stage"]:
                continue
            equations = [
                LayerEquations.create(
                    ref, self.student_layer(ref), options.refine_rows if options.refine_steps else 0
                )
                for ref in stage
            ]
            for eq in equations:
                if eq.ref.path in self.state["equations"]:
                    eq.load_state_dict(self.state["equations"][eq.ref.path])
            with self.timer("capture"):
                self.capture(s, equations)
            for eq in equations:
                with self.timer("solve"), torch.no_grad():
                    if self.world_size > 1:
                        eq.all_reduce()
                    fit = solve_layer(eq, options.ridges)
                    if "units" in self.state:  # the teacher's units are this layer's G: stored with its fit
                        fit.projections = eq.layer.projections.detach().clone()
                    if options.narrow_fraction is not None:
                        eq, fit = self.narrowed(eq, fit)
                if options.refine_steps:
                    with self.timer("refine"):
                        fit = refine_layer(
                            eq,
                            fit,
                            options.refine_steps,
                            options.refine_lr,
                            layer_seed(options.spec, eq.ref.path),
                        )
                self.statistics[eq.ref.path] = {k: v for k, v in eq.state_dict().items() if "rows" not in k}
                self.fits[fit.path] = fit
                self.install(eq.ref, fit)
            for fit in (self.fits[eq.ref.path] for eq in equations):
                refined = (
                    ""
                    if fit.r2_heldout_closed_form is None
                    else f" (closed form {fit.r2_heldout_closed_form:.5f}, refined)"
                )
                self.say(
                    f"  {fit.path}: R² held-out {fit.r2_heldout:.5f}{refined} (ridge {fit.ridge:.0e}, "
                    f"{fit.pairs_train:,d} + {fit.pairs_heldout:,d} pairs)"
                )
            if options.auto:
                self.decide(stage[0])
            self.state.update(
                stage=s + 1,
                next_batch=0,
                equations={},
                fits={path: fit.state_dict() for path, fit in self.fits.items()},
            )
            self.save_state()
        if options.auto:
            kept = [d["path"] for d in self.state["decisions"] if d["kept"]]
            self.say(f"auto kept {len(kept)} of {len(self.refs)} candidate layers: {kept}")
        model.eval()
        self.barrier()  # every rank's last state is saved before rank 0 writes (and removes the states)

    def selection_psnr(self) -> float:
        with self.timer("evaluate"):
            dataset = self.teacher.pipeline.datamanager.train_dataset
            return view_psnr(self.teacher.model, self.teacher.pipeline, dataset, self.views)

    def decide(self, ref: LayerRef) -> None:
        """``auto``: keep ``ref`` if the held-out PSNR drop stays within the budget, else restore it."""
        drop = self.state["auto_teacher_psnr"] - self.selection_psnr()
        kept = drop <= self.options.psnr_budget
        if not kept:
            install_layer(self.mlps[ref.mlp_path], ref.index, self.dense[ref.path])
            self.mlps[ref.mlp_path].out_activation = copy.deepcopy(self.teachers[ref.mlp_path].out_activation)
            del self.fits[ref.path]
        self.state["decisions"].append({"path": ref.path, "drop_db": drop, "kept": kept})
        self.say(f"  auto: {ref.path} PSNR drop {drop:+.4f} dB -> {'kept' if kept else 'rejected'}")

    # ------------------------------------------------------------------ fine-tune, evaluate, write
    def finetune(self) -> FinetuneLog | None:
        """Fine-tune on the capture rays of the fitted cameras and of novel views (their teacher colours, or
        with ``--finetune-target fields`` the teacher's render and fields of each batch;
        ``--finetune-camera-rays all``: every training pixel; ``--finetune-novel-rays fresh``: new novel
        cameras every step), keeping the state that renders the validation rays best (see
        :mod:`~eugen_nerf.distill.finetune`)."""
        if not self.fits:
            self.say("no layer was replaced: nothing to fine-tune")
            return None
        options = self.options
        rgb = self.state["teacher_rgb"]
        batches = sorted(rgb)
        ray_indices = torch.cat(
            [
                torch.arange(b * self.rays.batch_rays, b * self.rays.batch_rays + rgb[b].shape[0])
                for b in batches
            ]
        )
        rays, targets = self.rays.rays[ray_indices], torch.cat([rgb[b] for b in batches])
        validation = None
        if self.heldout_cameras:
            held = torch.cat([self.held_rays(b)[: rgb[b].shape[0]] for b in batches])
            validation = (rays[held], targets[held])
            rays, targets = rays[~held], targets[~held]
        match_fields = options.finetune_target == "fields"  # the teacher renders each batch as it is drawn
        fresh, fresh_rays = None, 0
        with self.timer("finetune"):
            capture_rays, novel = len(rays), None
            if options.finetune_novel_rays == "fresh":
                # new cameras every step, as large a share of the batch as fixed cameras would have among the
                # capture rays (also with ``all``, whose 200,000 rays would leave them 4%); their seeds are
                # apart from the fixed cameras' (seed) and the validation cameras' (seed + 1)
                count, seed = options.finetune_novel_views, options.eugen.seed
                novel_share = 1 - capture_rays / (capture_rays + len(self.novel_camera_rays(count, seed)))
                share = round(options.finetune_rays * novel_share)
                fresh_rays = min(max(1, share), options.finetune_rays - 1)
                first = (seed + 1) * 1_000_003
                # each step its own novel cameras
                fresh = lambda step: self.novel_camera_rays(count, first + step)
            elif options.finetune_novel_views and match_fields:  # no colours rendered ahead
                novel = self.novel_camera_rays(options.finetune_novel_views, options.eugen.seed)
            elif options.finetune_novel_views:
                novel, novel_rgb = self.novel_targets(options.finetune_novel_views, options.eugen.seed)
                targets = torch.cat([targets, novel_rgb])
            if options.finetune_camera_rays == "all":  # the teacher renders each batch: any pixel will do
                cameras = self.teacher.pipeline.datamanager.train_dataset.cameras
                trained = [i for i in range(len(cameras)) if i not in self.heldout_cameras]
                rays = PixelRays(cameras, trained, extra=novel)  # generated as drawn: a batch's memory
            elif novel is not None:
                rays = cat_rays(rays, novel)
            if options.finetune_validation_views:  # other novel cameras (another seed), never trained on
                views, views_rgb = self.novel_targets(
                    options.finetune_validation_views, options.eugen.seed + 1, near_heldout=True
                )
                validation = (
                    (views, views_rgb)
                    if validation is None
                    else (cat_rays(validation[0], views), torch.cat([validation[1], views_rgb]))
                )
            log = finetune(
                self.teacher.model,
                rays,
                None if match_fields else targets,
                options.finetune_steps,
                options.finetune_lr,
                options.finetune_rays,
                options.eugen.seed,
                self.device,
                options.finetune_parameters,
                validation=validation,
                teacher=self.reference if match_fields else None,
                fresh=fresh,
                fresh_rays=fresh_rays,
                average=options.finetune_average,
            )
        if log.kept_step is not None:
            kept = "the parameters' moving average" if options.finetune_average else "the state"
            self.say(
                f"fine-tune: kept {kept} after step {log.kept_step} of {options.finetune_steps} "
                f"(best on the held-out cameras' rays against the teacher)"
            )
        return log

    def novel_camera_rays(self, count: int, seed: int, near_heldout: bool = False) -> RayBundle:
        """Rays of ``count`` cameras near the training ones (drawn from ``seed``): near those the fit and the
        fine-tune train on only, unless ``near_heldout`` (validation views: the held-out cameras decide which
        fine-tuning step is kept, so no trained view may stand beside them)."""
        cameras = self.teacher.pipeline.datamanager.train_dataset.cameras
        trained = [i for i in range(len(cameras)) if i not in self.heldout_cameras]
        sources = None if near_heldout or not trained else trained
        return novel_rays(cameras, count, self.rays.resolution_scale, seed, sources=sources)

    def novel_targets(self, count: int, seed: int, near_heldout: bool = False):
        """Rays of ``count`` cameras near the training ones (drawn from ``seed``; see :meth:`novel_camera_rays`)
        and the teacher's colours of them."""
        options = self.options
        rays = self.novel_camera_rays(count, seed, near_heldout)
        colours = []
        with torch.no_grad():
            for start in tqdm(
                range(0, len(rays), options.batch_rays), desc="teacher renders novel views", leave=False
            ):
                colours.append(
                    final_rgb(self.reference(rays[start : start + options.batch_rays].to(self.device)))
                    .float()
                    .cpu()
                )
        return rays, torch.cat(colours)

    def evaluate(self, label: str) -> dict | None:
        if not self.options.evaluate:
            return None
        with self.timer("evaluate"):
            return evaluate(self.teacher.pipeline, self.options.eval_views, label)

    def side_by_side_fps(self) -> dict[str, float] | None:
        """Frame rates of an untouched teacher and of the student, timed side by side (``None`` without
        ``evaluate``)."""
        if not self.options.evaluate or self.rank != 0:
            return None
        with self.timer("evaluate"):
            fps = side_by_side_fps(
                self.reference,
                self.teacher.model,
                self.teacher.pipeline,
                repeats=self.options.fps_repeats,
                clock=self.options.fps_clock,
            )
        self.say(
            f"render speed-up over the teacher, timed side by side ({self.options.fps_clock} clock): "
            f"{fps['student'] / fps['teacher']:.2f}x"
        )
        return fps

    def changed_mlps_share(self) -> dict[str, object] | None:
        """How much of the untouched teacher's render the MLPs holding replaced layers take (``None`` without
        ``evaluate`` or with nothing replaced): what bounds the student's speed-up."""
        if not self.options.evaluate or self.rank != 0 or not self.fits:
            return None
        mlps = sorted({ref.mlp_path for ref in self.refs if ref.path in self.fits})
        with self.timer("evaluate"):
            share = render_share(self.reference, self.teacher.pipeline, mlps)
        self.say(
            f"the MLPs the student changes take {share['share']:.0%} of the teacher's render: no student of "
            f"them renders more than {share['speedup_bound']:.2f}x faster"
        )
        return share

    def write(self, report: dict) -> None:
        options, teacher = self.options, self.teacher
        work = self.work_dir
        step = teacher.step + options.finetune_steps
        with self.timer("build"):
            config = student_trainer_config(
                teacher.config,
                options.output_dir,
                sorted(self.fits),
                options.spec,
                options.width_fraction,
                self.widths(),
                self.folding([ref for ref in self.refs if ref.path in self.fits]),
            )
            partial = stage_checkpoint(work, teacher.pipeline.state_dict(), step)
        report["student_checkpoint_bytes"] = partial.stat().st_size
        report["seconds"] = dict(self.timer.seconds)
        # the seconds are summed over these (None: resumed from a state that kept no seconds, only this one's)
        report["processes"] = self.state.get("processes")
        write_yaml_atomic(config, work / "config.yml")
        write_json_atomic(work / "distill_report.json", report)
        report["checkpoint"] = str(
            options.output_dir / "nerfstudio_models" / publish_checkpoint(partial).name
        )
        self.store.remove()
        publish_run(work, options.output_dir)


def distill(options: DistillOptions, console: Console | None = None) -> DistillResult:
    """Run one distillation (see the module docstring); return what it produced."""
    run = Distillation(options, console or Console())
    run.load()
    teacher_scores = run.evaluate("teacher") if run.rank == 0 else None
    run.prepare()
    run.run_stages()
    report: dict = {
        "teacher_run": str(run.teacher.config_path),
        "teacher_checkpoint_bytes": run.teacher_state_bytes,
        "options": options.recorded(),
        "world_size": run.world_size,
        # the float sums' order follows torch's thread count, and the fits carry its rounding on: a student is
        # reproduced bit for bit on as many threads
        "torch_threads": torch.get_num_threads(),
        "capture": {
            "rays": len(run.rays.rays),
            "cameras": len(run.rays.camera_indices),
            "resolution_scale": run.rays.resolution_scale,
        },
        "layers": [fit.summary() for fit in run.fits.values()],
        "auto": {
            "budget_db": options.psnr_budget,
            "views": run.views,
            "teacher_psnr": run.state["auto_teacher_psnr"],
            "decisions": run.state["decisions"],
        }
        if options.auto
        else None,
        "teacher": teacher_scores,
    }
    if options.narrow_fraction is not None:
        report["narrowed"] = run.state.get("narrowed", [])
    report["folded"] = run.folding([ref for ref in run.refs if ref.path in run.fits])
    result = DistillResult(None, run.fits, run.statistics, report, run.teacher)
    if run.rank != 0:
        return result
    if options.finetune_steps:
        report["student_closed_form"] = run.evaluate("student (closed form)")
        log = run.finetune()
        report["finetune_losses"] = log.losses if log else []
        report["finetune_validation_mse"] = log.validation if log else []
        report["finetune_kept_step"] = log.kept_step if log else None
    report["student"] = run.evaluate("student")
    fps = run.side_by_side_fps()
    report["render_speedup"] = None
    if fps is not None:  # one timing for the report's FPS row and its ratio
        report["teacher"]["fps"], report["student"]["fps"] = fps["teacher"], fps["student"]
        report["render_speedup"] = fps["student"] / fps["teacher"]
        report["fps_clock"] = options.fps_clock
    report["changed_mlps_render_share"] = run.changed_mlps_share()
    run.write(report)
    result.run_dir = str(options.output_dir)
    print_report(report, run.console)
    run.console.print(f"[bold green]student run directory: {options.output_dir}[/]")
    return result
