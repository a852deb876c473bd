"""What a distillation run is asked to do, validated before anything is loaded or written."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Literal, Optional

import tyro

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.layers import EUGenSpec

RENDER_ONLY = ("fused_inference", "compile_fused")
"""EUGenSpec fields that change how the student runs, not what is fitted."""

RIDGE_GRID = (1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1.0)
"""Ridge strengths (relative to the mean diagonal of the centred Gram matrix) tried by ``--ridge auto``."""


FINETUNE_PARAMETERS = ("all", "eugen")
"""What the fine-tune trains: every field parameter, or only the EUGen layers."""

FINETUNE_TARGETS = ("colour", "fields")
"""What the fine-tune matches: the teacher's rendered colours, or those and its fields at its own samples."""

FINETUNE_NOVEL_RAYS = ("fixed", "fresh")
"""Where the fine-tune's novel-camera rays come from: cameras drawn once, or new cameras every step."""

FINETUNE_CAMERA_RAYS = ("capture", "all")
"""Which training-camera rays the fine-tune draws from: the capture's, or every pixel of every camera."""

FINETUNE_OPTIONS = (
    "finetune_steps",
    "finetune_target",
    "finetune_lr",
    "finetune_rays",
    "finetune_parameters",
    "finetune_average",
    "finetune_camera_rays",
    "finetune_novel_views",
    "finetune_novel_rays",
    "finetune_validation_views",
)
"""The fine-tune's options, recorded in the report beside the capture's (which fine-tune made this student)."""

PROJECTIONS = ("seeded", "teacher", "teacher-pairs")
"""Where the EUGen layers' ``G`` comes from: the seeded Gaussian draw, or the teacher layer's own units."""


class DistillError(InputError):
    """Bad input to a distillation run; raised before anything is written."""


class DistillInterrupted(RuntimeError):
    """The run stopped on request (``stop_after_batches``); its state is saved and a rerun resumes it."""


def fraction(text: str) -> float:
    """A number such as ``0.1`` or ``1/16`` (how the fraction flags are parsed); the range check is
    :class:`DistillOptions`' own, one message for the command line and the API."""
    try:
        return float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise DistillError(f"not a number: {text!r}") from None


FractionArg = Annotated[
    float,
    tyro.constructors.PrimitiveConstructorSpec(
        nargs=1,
        metavar="FRACTION",
        instance_from_str=lambda args: fraction(args[0]),
        is_instance=lambda value: isinstance(value, (int, float)),
        str_from_instance=lambda value: [f"{value:g}"],
    ),
]
"""A float flag that also reads ``1/16``."""

OptionalFractionArg = Annotated[
    Optional[float],  # noqa: UP045 (tyro reads the annotation at run time)
    tyro.constructors.PrimitiveConstructorSpec(
        nargs=1,
        metavar="{None}|FRACTION",
        instance_from_str=lambda args: None if args[0] == "None" else fraction(args[0]),
        is_instance=lambda value: value is None or isinstance(value, (int, float)),
        str_from_instance=lambda value: ["None" if value is None else f"{value:g}"],
    ),
]
""":data:`FractionArg` that also reads ``None`` (one constructor, so a bad value gets :func:`fraction`'s message
instead of tyro's description of a union)."""


DEFAULT_REFINE_STEPS = 300
"""Refinement steps per layer by default (EUGen and SNNK layers)."""

DEFAULT_WIDTH_FRACTION = 5 / 8
"""``m`` per layer by default: 160 of a 256-wide layer (with :data:`DEFAULT_LAYERS`, the narrowest width that
keeps 99% of a paper-sized NeRF teacher's PSNR in closed form)."""

DEFAULT_NARROW_R2 = 0.99
"""The held-out R² in closed form a narrowed layer must reach to be kept."""

DEFAULT_LAYERS = ("hidden", "twin")
"""The layers replaced by default: every hidden layer, and the teacher's EUGen twin's layers where it has no
hidden one (a dense-zipnerf teacher)."""


def parse_width_override(entry: str) -> tuple[str, float]:
    """``PATTERN=FRACTION`` (one entry of ``--width-fraction-of``) as ``(pattern, fraction)``."""
    pattern, equals, value = str(entry).rpartition("=")
    if not equals or not pattern:
        raise DistillError(f"width-fraction-of: expected PATTERN=FRACTION, got {entry!r}")
    number = fraction(value)
    if not 0 < number <= 1:
        raise DistillError(f"width-fraction-of: the fraction of {pattern!r} must be in (0, 1], got {value}")
    return pattern, number


def layer_width_fraction(
    path: str, width_fraction: float | None, overrides: Sequence[str] = ()
) -> float | None:
    """The width fraction of the layer at ``path``: the last of ``overrides`` (``PATTERN=FRACTION``) whose glob
    pattern matches it, else ``width_fraction``."""
    chosen = width_fraction
    for entry in overrides:
        pattern, number = parse_width_override(entry)
        if fnmatch.fnmatchcase(path, pattern):
            chosen = number
    return chosen


def distill_spec() -> EUGenSpec:
    """The EUGen layers a distillation creates by default, the best measured with the teacher's units as ``G``
    (the default ``--projections``): degree 1 and the ReLU map, so each feature is one of the teacher's own
    units, activated as the teacher does, and the layer refits how its outputs are made from them (at the
    same fused cost it reproduces the teacher's render far more closely than ``k = 2``). Polynomial scaling
    needs no ``||x||`` and a unit row's norm entry is 0, so the fused student carries no norm rows. With
    ``--projections seeded``, ``--eugen.degree 2 --eugen.feature-map identity --eugen.scaling linear
    --eugen.use-norm`` fits better than the ReLU map."""
    return EUGenSpec(feature_map="relu", scaling="polynomial", use_norm=False, degree=1)


def width_fraction_conflict(num_features: int, width_fraction: float) -> DistillError:
    """The error for ``m`` given twice: ``--eugen.num-features`` (every layer's) and a width fraction."""
    fraction = Fraction(width_fraction).limit_denominator(1000)
    return DistillError(
        f"eugen.num-features {num_features} sets one m for every layer, width-fraction "
        f"{fraction} one per layer: add --width-fraction None"
    )


@dataclass
class DistillOptions:
    """Options of one ``eugen-distill`` run, validated before anything is loaded or written."""

    teacher: Path
    """The teacher's config.yml or the run directory holding it."""
    output_dir: Path | None = None
    """The student run directory to write (required unless --list-layers)."""
    layers: tuple[str, ...] = DEFAULT_LAYERS
    """Layer paths or glob patterns (see --list-layers), 'hidden' (every layer from hidden features to hidden
    features: not the first of an MLP, not a skip layer, not the last unless its output is activated like a
    hidden layer's; trunk layers 1, 2, 3, 5, 6, 7 of a dense-nerf teacher, none of a dense-zipnerf one), 'twin'
    (the layers the teacher's EUGen twin method makes EUGen: eugen-nerf's trunk layers 1, 2, 3, 5, 6, 7 of
    a dense-nerf teacher, eugen-zipnerf's view layers 0, 1 of a dense-zipnerf one, eugen-nerfacto's colour layer 1
    of a dense-nerfacto one; 'hidden' for a teacher with no EUGen twin: stock nerfstudio, SIREN), or 'auto' (greedy selection among the hidden layers within --psnr-budget, given alone). Several
    select their union."""
    eugen: EUGenSpec = field(default_factory=distill_spec)
    """The EUGen layers created (eugen.seed also seeds the ray sampling); each layer's projections are seeded by
    eugen.seed and its path in the model (a hash of it), so layers never share a draw.
    eugen.layer-type snnk or lowrank fits a reviewers' baseline the same way instead: SNNK's features in closed
    form (refinable), or low-rank by reduced-rank regression of the teacher's pre-activation, its ReLU kept.
    eugen.num-features counts only with --width-fraction None."""
    width_fraction: OptionalFractionArg = DEFAULT_WIDTH_FRACTION
    """``m`` of each new layer as a fraction of the replaced layer's outputs (rounded): the default 5/8 gives
    m = 160 on a 256-wide teacher and m = 40 on a 64-wide one. None: --eugen.num-features for every layer."""
    width_fraction_of: Annotated[tuple[str, ...], tyro.conf.arg(metavar="PATTERN=FRACTION ...")] = ()
    """``PATTERN=FRACTION`` entries giving the layers whose path matches the glob PATTERN (see --list-layers)
    their own width fraction instead of --width-fraction, the last match winning: a layer the teacher's next
    layers read easily can be narrower (``'field_*.trunk.layers.[67]=1/2'``). Each pattern must match a
    replaced layer."""
    narrow_fraction: OptionalFractionArg = None
    """Try every EUGen layer narrower: once a layer is solved at its width, its first units, this fraction of
    the replaced layer's outputs (the first pivots of ``--projections teacher``; 7/16: 112 of 256), are solved
    again from the same statistics, and that narrower layer is kept (then refined) when its held-out R² in
    closed form is at least --narrow-r2. The widths chosen are stored in the config as --width-fraction-of
    entries. None: every layer keeps its width. Only EUGen layers with the teacher's units
    (--projections teacher, the default), a --width-fraction and a scaling other than projected (whose rms is
    over all the wide layer's rows) can be narrowed."""
    narrow_r2: float = DEFAULT_NARROW_R2
    """--narrow-fraction only: the held-out R² a narrower layer must reach in closed form to be kept."""
    fold_out_activation: bool = True
    """Fit a replaced last layer whose output the MLP activates like a hidden layer's (a NeRF trunk's ReLU before
    its heads) to the teacher's activated output, and drop that activation from the student. Nothing non-linear
    then sits between the layer's ``A`` and the layers that read its output, so a field that can merges them at
    render time (eugen-nerf's NeRF field folds the trunk's last ``A`` into its density and colour heads) and the
    layer costs only its features. Off: the student keeps the activation after the layer, as the teacher has it.
    EUGen layers only (the baselines, eugen.layer-type snnk or lowrank, keep the teacher's activation after
    them); nothing folds where no replaced layer is such a last layer, or where the field does not merge it
    (stock nerfstudio fields: dropping the activation would save nothing)."""
    projections: Annotated[
        Literal["seeded", "teacher", "teacher-pairs"] | None, tyro.conf.arg(help_behavior_hint="")
    ] = None
    """``G`` of the EUGen layers (default: ``teacher`` for EUGen layers, ``seeded`` for the baselines, which
    keep their own): ``seeded`` (the Gaussian draw of each layer's seed: the unbiased estimate's), or
    ``teacher``: every order's rows are the teacher layer's own weight rows of the ``m`` units a pivoted
    Cholesky of its pre-activations picks (on the first ``--probe-batches`` batches), so order ``i`` carries a
    unit's pre-activation to the power ``i``; stored in the student's checkpoint (refined, the orders stay one
    projection). With the ReLU map, polynomial scaling and no norm (the default ``--eugen``) order 1 is the
    teacher's own ReLU of those units, and the fused student projects once for all orders and carries no norm
    rows; its closed form keeps far more of the teacher's PSNR than seeded ``G``.
    ``teacher-pairs`` (``--eugen.degree`` 2 or more): the same units, but order ``i`` multiplies a unit's
    pre-activation by those of the ``i - 1`` units pivoted just before it (``z_j z_{j-1}`` for ``k = 2``)
    instead of its own power; still ``m`` projection rows in the fused form."""
    probe_batches: int = 2
    """``--projections teacher`` and ``teacher-pairs`` only: batches whose teacher pre-activations choose the
    units."""
    image_fraction: FractionArg = 1 / 4
    """Fraction of the training images whose rays are rendered."""
    resolution_scale: FractionArg = 1 / 2
    """Camera resolution scale of the rendered images (lowered further by --max-rays)."""
    max_rays: int | None = 16384
    """At most about this many rays are rendered: where the sampled cameras have more pixels at
    --resolution-scale, the scale is lowered until they do not (None: no cap). The defaults (1/4 of the images
    at 1/2 resolution, 1/4 of the pairs, at most 16,384 rays) are the benchmark's sampling; fewer rays leave
    too few pairs for a 256-wide layer on small scenes."""
    pair_fraction: FractionArg = 1 / 4
    """Fraction of the recorded (input, output) pairs that enter the fit."""
    heldout_fraction: FractionArg = 0.1
    """Fraction of the sampled cameras held out, whole, for R² and ridge selection (at least one; with a
    single sampled camera, this fraction of its pairs)."""
    ridge: float | Literal["auto"] = "auto"
    """Relative ridge strength, or auto: the best held-out R² over 1e-10, 1e-8, ..., 1."""
    fit: Literal["sequential", "parallel"] = "sequential"
    """``sequential``: each layer's inputs come from the student so far (earlier layers replaced);
    ``parallel``: every layer is fitted on the teacher's own inputs in one pass."""
    psnr_budget: float = 0.1
    """``auto`` only: largest accepted PSNR drop (dB) on the held-out views."""
    auto_views: int = 2
    """``auto`` only: number of held-out training views the PSNR drop is measured on."""
    finetune_steps: int = 0
    """Steps of the whole-student fine-tune on teacher renders after the closed form (0: none)."""
    finetune_lr: float = 1e-4
    """Adam learning rate of the fine-tune at its start (cosine-decayed to 1% of it). 1e-4 suits the default
    student (k = 1): larger rates can undo a closed form that is already close to the teacher; k = 2 students
    take 3e-4."""
    finetune_rays: int = 512
    """Rays per fine-tune step, drawn from the distillation's rays and the novel views."""
    finetune_average: float = 0.99
    """Decay per step of an exponential moving average of the fine-tuned parameters; the average is what is
    validated and kept (0: the parameters themselves). Smooths the step-to-step noise of small batches."""
    finetune_parameters: Literal["all", "eugen"] = "all"
    """``all``: every field parameter (density head included); ``eugen``: only the EUGen layers."""
    finetune_target: Literal["colour", "fields"] = "fields"
    """``colour``: the teacher's rendered colours; ``fields``: those, and each of the student's fields matches the
    teacher's at the samples the teacher drew for the batch (colour weighted by the teacher's rendering weight,
    opacity by its transmittance, so that a floater in front of the surface costs what it shows)."""
    finetune_camera_rays: Literal["capture", "all"] | None = None
    """The training-camera rays the fine-tune draws from: ``capture``, those the closed form rendered
    (``image-fraction`` of the cameras at ``resolution-scale``); ``all`` (``fields`` only: the teacher renders
    each batch), every pixel of every training camera at full resolution, the held-out cameras excepted (each
    ray generated when drawn: no more memory than a batch's). Default: ``all`` with ``fields``, ``capture``
    with ``colour``. With ``fresh`` novel rays, long fine-tunes do not over-fit the way a fixed pool does."""
    finetune_novel_views: int = 8
    """Cameras near the training ones whose rays the fine-tune also trains on (0: none); with ``colour`` the teacher
    renders them ahead, with ``fields`` it renders each batch as it is drawn."""
    finetune_novel_rays: Literal["fixed", "fresh"] | None = None
    """``fixed``: the novel cameras are drawn once and their rays join the pool every step draws from;
    ``fresh`` (``fields`` only: the teacher renders each batch): every step draws ``finetune-novel-views`` new
    cameras and takes the share of its batch that fixed cameras would have among the capture rays from them,
    so no novel camera is trained on twice (a fixed pool can be over-fitted: its held-out error rises after a
    few hundred steps). Default: ``fresh`` with ``fields`` (given novel views and at least 2 rays a step),
    ``fixed`` otherwise."""
    finetune_validation_views: int = 4
    """Cameras near the training ones, apart from the novel views trained on, that the teacher renders to choose
    which fine-tune state is kept, beside the held-out cameras' rays (0: those rays alone, which from few
    held-out cameras can choose a state worse on other views)."""
    refine_steps: int | None = None
    """The paper's refinement: Adam steps per layer on ``G`` and ``A`` (from the closed form) on the same layer
    loss, over up to ``refine_rows`` captured (input, target) rows; 0: the closed form alone. The student's
    projections are then stored in its checkpoint (trainable ``G``). Default: 300 for EUGen and SNNK layers,
    0 for low-rank ones (nothing to refine); one process only (give 0 under torchrun)."""
    refine_rows: int = 65536
    """Training rows kept per layer for the refinement (the first ones captured; 1/8 as many held out)."""
    refine_lr: float = 1e-3
    """Adam learning rate of the refinement at its start (cosine-decayed)."""
    batch_rays: int = 1024
    """Rays per rendered batch (the unit of progress, of resumption and of the split across processes)."""
    eval_views: int | None = None
    """Test views scored in the report (all when ``None``)."""
    fps_repeats: int = 3
    """Timed renders per view when teacher and student are timed side by side for the report's frame rates."""
    fps_clock: Literal["wall", "cpu"] = "wall"
    """What those timings count: wall-clock seconds, or this process's CPU seconds (CPU only). With
    OMP_NUM_THREADS=1, ``cpu`` leaves out the time a render waits for the core while other jobs run (they
    still slow it through shared caches and memory)."""
    device: Annotated[str | None, tyro.conf.arg(help_behavior_hint="")] = None
    """Torch device (default: cuda if available, else cpu)."""
    overwrite: bool = False
    """Replace an existing run in output-dir (the old one stays until the new one is complete)."""
    stop_after_batches: int | None = None
    """Stop (state saved, exit status 3) after this many batches: interrupts deterministically."""
    evaluate: bool = True
    """Score teacher and student on the test split (the report's quality, speed and size)."""

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Normalise the options' types and refuse bad values (:class:`DistillError`): on construction, and
        again by the command line after parsing, where the error is one line instead of the parser's box."""
        self.teacher = Path(self.teacher)
        self.layers = tuple(self.layers)
        for name in ("image_fraction", "resolution_scale", "pair_fraction"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= 1:
                raise DistillError(f"{name.replace('_', '-')} must be in (0, 1], got {value!r}")
        if not 0 < self.heldout_fraction < 1:
            raise DistillError(f"heldout-fraction must be in (0, 1), got {self.heldout_fraction!r}")
        if self.output_dir is not None:
            self.output_dir = Path(self.output_dir)
        try:
            self.eugen.validate()
        except ValueError as error:
            raise DistillError(str(error)) from None
        self.width_fraction_of = tuple(str(entry) for entry in self.width_fraction_of)
        for entry in self.width_fraction_of:
            parse_width_override(entry)
        if self.narrow_fraction is not None:
            value = self.narrow_fraction
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise DistillError(f"narrow-fraction must be in (0, 1] or None, got {value!r}")
        r2 = self.narrow_r2
        if isinstance(r2, bool) or not isinstance(r2, (int, float)) or not r2 <= 1:
            raise DistillError(f"narrow-r2 must be a number <= 1, got {r2!r}")
        if self.width_fraction is not None:
            value = self.width_fraction
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise DistillError(f"width-fraction must be in (0, 1] or None, got {value!r}")
            if self.eugen.num_features != EUGenSpec.num_features:
                raise width_fraction_conflict(self.eugen.num_features, value)
        if self.eugen.layer_type == "dense":
            raise DistillError(
                "eugen.layer-type 'dense' replaces nothing: choose eugen, or a baseline (snnk, lowrank)"
            )
        if self.refine_steps is None:
            self.refine_steps = 0 if self.eugen.layer_type == "lowrank" else DEFAULT_REFINE_STEPS
        if self.eugen.layer_type == "lowrank" and self.refine_steps:
            raise DistillError(
                "refine-steps: the refinement trains the projections G of EUGen/SNNK layers; "
                "eugen.layer-type lowrank has none (use --refine-steps 0)"
            )
        if self.eugen.layer_type != "eugen":
            # the baselines keep the teacher's activation after their layers: a low-rank layer replaces only
            # the product before it, and SNNK layers fit the teacher less closely without it
            self.fold_out_activation = False
        if self.projections is None:
            self.projections = "teacher" if self.eugen.layer_type == "eugen" else "seeded"
        if self.projections not in PROJECTIONS:
            raise DistillError(f"projections must be one of {PROJECTIONS}, got {self.projections!r}")
        if self.projections != "seeded" and self.eugen.layer_type != "eugen":
            raise DistillError(
                f"projections {self.projections!r} sets the projections of EUGen layers; "
                f"eugen.layer-type {self.eugen.layer_type} keeps its own "
                "(use --projections seeded)"
            )
        why = self.narrow_conflict()
        if why is not None:
            raise DistillError(why)
        if self.projections == "teacher-pairs" and self.eugen.degree < 2:
            raise DistillError(
                "projections 'teacher-pairs' multiplies units in orders 2 and up; "
                "eugen.degree is 1 (use --projections teacher, or --eugen.degree 2)"
            )
        rays = self.max_rays
        if rays is not None and (isinstance(rays, bool) or not isinstance(rays, int) or rays < 1):
            raise DistillError(f"max-rays must be an integer >= 1 or None, got {self.max_rays!r}")
        for name in (
            "batch_rays",
            "finetune_rays",
            "fps_repeats",
            "auto_views",
            "refine_rows",
            "probe_batches",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DistillError(f"{name.replace('_', '-')} must be an integer >= 1, got {value!r}")
        for name in ("finetune_novel_views", "finetune_validation_views", "refine_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DistillError(f"{name.replace('_', '-')} must be an integer >= 0, got {value!r}")
        if self.finetune_target not in FINETUNE_TARGETS:
            raise DistillError(
                f"finetune-target must be one of {FINETUNE_TARGETS}, got {self.finetune_target!r}"
            )
        renders_each_batch = self.finetune_target == "fields"
        if self.finetune_camera_rays is None:
            self.finetune_camera_rays = "all" if renders_each_batch else "capture"
        if self.finetune_novel_rays is None:
            fresh = renders_each_batch and self.finetune_novel_views >= 1 and self.finetune_rays >= 2
            self.finetune_novel_rays = "fresh" if fresh else "fixed"
        pools = (
            ("finetune-camera-rays", self.finetune_camera_rays, FINETUNE_CAMERA_RAYS),
            ("finetune-novel-rays", self.finetune_novel_rays, FINETUNE_NOVEL_RAYS),
        )
        for name, value, choices in pools:
            if value not in choices:
                raise DistillError(f"{name} must be one of {choices}, got {value!r}")
            if value == choices[1] and self.finetune_target != "fields":
                raise DistillError(
                    f"{name} '{value}' needs --finetune-target fields (the teacher renders "
                    f"each batch as it is drawn; with 'colour' its colours come ahead)"
                )
        if self.finetune_novel_rays == "fresh" and self.finetune_rays < 2:
            raise DistillError(
                f"finetune-novel-rays 'fresh' shares each batch between the pool and new "
                f"cameras: give --finetune-rays >= 2, got {self.finetune_rays}"
            )
        if self.finetune_novel_rays == "fresh" and not self.finetune_novel_views:
            raise DistillError(
                "finetune-novel-rays 'fresh' draws finetune-novel-views cameras a step: give "
                "--finetune-novel-views >= 1"
            )
        if self.finetune_parameters not in FINETUNE_PARAMETERS:
            raise DistillError(
                f"finetune-parameters must be one of {FINETUNE_PARAMETERS}, got {self.finetune_parameters!r}"
            )
        if not math.isfinite(self.refine_lr) or self.refine_lr <= 0:
            raise DistillError(f"refine-lr must be a number > 0, got {self.refine_lr!r}")
        if isinstance(self.finetune_average, bool) or not 0.0 <= self.finetune_average < 1.0:
            raise DistillError(f"finetune-average must be in [0, 1), got {self.finetune_average!r}")
        if self.finetune_steps < 0:
            raise DistillError(f"finetune-steps must be >= 0, got {self.finetune_steps}")
        if not math.isfinite(self.finetune_lr) or self.finetune_lr <= 0:
            raise DistillError(f"finetune-lr must be a number > 0, got {self.finetune_lr!r}")
        if self.finetune_steps and self.finetune_parameters == "eugen" and self.eugen.layer_type == "lowrank":
            raise DistillError(
                "finetune-parameters eugen trains the EUGen layers, and eugen.layer-type lowrank makes none: "
                "use --finetune-parameters all"
            )
        if self.eval_views is not None and (isinstance(self.eval_views, bool) or self.eval_views < 1):
            raise DistillError(f"eval-views must be >= 1 (or None: every test view), got {self.eval_views!r}")
        if self.fit not in ("sequential", "parallel"):
            raise DistillError(f"fit must be 'sequential' or 'parallel', got {self.fit!r}")
        if isinstance(self.ridge, str) and self.ridge != "auto":
            try:
                self.ridge = float(self.ridge)
            except ValueError:
                raise DistillError(f"ridge must be a number >= 0 or 'auto', got {self.ridge!r}") from None
        if not isinstance(self.ridge, str) and (not math.isfinite(self.ridge) or self.ridge < 0):
            raise DistillError(f"ridge must be a number >= 0 or 'auto', got {self.ridge!r}")
        if not self.layers:
            raise DistillError("no layers given: pass layer paths, 'twin', 'hidden' or 'auto'")
        if "auto" in self.layers and len(self.layers) > 1:
            raise DistillError("'auto' selects the layers itself: give it alone")
        if self.psnr_budget < 0:
            raise DistillError(f"psnr-budget must be >= 0, got {self.psnr_budget}")

    @property
    def auto(self) -> bool:
        return self.layers == ("auto",)

    @property
    def spec(self) -> EUGenSpec:
        """Hyper-parameters of every EUGen layer the run creates (each layer gets its own seed)."""
        # refined or teacher-aligned G lives in the checkpoint
        trainable = self.eugen.trainable_projections or self.refine_steps > 0 or self.projections != "seeded"
        return replace(self.eugen, trainable_projections=trainable)

    @property
    def ridges(self) -> tuple[float, ...]:
        return RIDGE_GRID if self.ridge == "auto" else (float(self.ridge),)

    def capture_fingerprint(self) -> dict:
        """The options that determine the captured statistics: a saved state resumes only if they match."""
        keys = (
            "layers",
            "image_fraction",
            "resolution_scale",
            "max_rays",
            "pair_fraction",
            "heldout_fraction",
            "ridge",
            "fit",
            "psnr_budget",
            "auto_views",
            "batch_rays",
            "refine_steps",
            "refine_rows",
            "refine_lr",
            "projections",
            "probe_batches",
            "width_fraction",
        )
        # absent when unused: fingerprints from before these options stay valid
        if self.width_fraction_of:
            keys += ("width_fraction_of",)
        if self.narrow_fraction is not None:
            keys += ("narrow_fraction", "narrow_r2")
        if self.fold_out_activation:
            keys += ("fold_out_activation",)
        values = asdict(self)
        eugen = {key: value for key, value in asdict(self.eugen).items() if key not in RENDER_ONLY}
        return {
            **{key: values[key] if not isinstance(values[key], tuple) else list(values[key]) for key in keys},
            "eugen": eugen,
        }

    def narrow_conflict(self) -> str | None:
        """Why --narrow-fraction cannot apply to these options (None when it can, or is None)."""
        if self.narrow_fraction is None:
            return None
        if self.eugen.layer_type != "eugen":
            return f"narrow-fraction narrows EUGen layers; eugen.layer-type {self.eugen.layer_type} has none"
        if self.projections != "teacher":
            return (
                f"narrow-fraction keeps the first of the teacher's pivoted units; projections "
                f"{self.projections!r} are not those (use --projections teacher)"
            )
        if self.width_fraction is None:
            return "narrow-fraction narrows the layers of --width-fraction: give one"
        if self.eugen.scaling == "projected":  # each feature is divided by the rms over every projection row
            return (
                "narrow-fraction fits a narrow layer from the wide one's statistics; with eugen.scaling "
                "projected a narrow layer's features differ from those (its rms is over fewer rows)"
            )
        return None

    def recorded(self) -> dict:
        """The options that make a student: the capture's and the fine-tune's (its report's ``options``)."""
        return {**self.capture_fingerprint(), **{key: getattr(self, key) for key in FINETUNE_OPTIONS}}
