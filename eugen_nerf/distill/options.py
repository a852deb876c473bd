"""What a distillation run is asked to do, validated before anything is loaded or written."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Tuple, Union

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.layers import FEATURE_MAPS, PROJECTION_KINDS, SCALINGS, EUGenSpec

RIDGE_GRID = (1e-10, 1e-8, 1e-6, 1e-4, 1e-2, 1.0)
"""Ridge strengths (relative to the mean diagonal of the centred Gram matrix) tried by ``--ridge auto``."""


FINETUNE_PARAMETERS = ("all", "eugen")
"""What the fine-tune trains: every field parameter, or only the EUGen layers."""


class DistillError(InputError):
    """Bad input to a distillation run; raised before anything is written."""


class DistillInterrupted(RuntimeError):
    """The run stopped on request (``stop_after_batches``); its state is saved and a rerun resumes it."""


@dataclass
class DistillOptions:
    """Options of one ``eugen-distill`` run (see :mod:`eugen_nerf.distill.cli` for the flags)."""

    teacher: Path
    """The teacher's ``config.yml`` or the run directory holding it."""
    output_dir: Path
    """The student run directory to write."""
    layers: Tuple[str, ...] = ("hidden",)
    """Layer paths or glob patterns, ``hidden`` (every hidden, non-skip layer but the first of each MLP),
    or ``auto`` (greedy selection within ``psnr_budget``)."""
    num_features: int = 64
    degree: int = 2
    feature_map: str = "identity"
    """Φ. ``identity`` (the unbiased estimate's map) fits the paper-sized teacher's trunk better than ``relu``:
    held-out R² 0.980 vs 0.971 on its hardest layer, +1.3 dB rendered (``scripts/ablate_distill.py``)."""
    projection: str = "gaussian"
    use_norm: bool = True
    scaling: str = "linear"
    """How the input's scale enters the features (see :class:`~eugen_nerf.layers.EUGenLinear`)."""
    seed: int = 0
    image_fraction: float = 1 / 16
    """Fraction of the training images whose rays are rendered."""
    resolution_scale: float = 1 / 8
    """Camera resolution scale of the rendered images."""
    pair_fraction: float = 0.1
    """Fraction of the recorded (input, output) pairs that enter the fit."""
    heldout_fraction: float = 0.1
    """Fraction of the kept pairs held out for R² and ridge selection."""
    ridge: Union[float, str] = "auto"
    """Relative ridge strength, or ``auto``: best held-out R² over :data:`RIDGE_GRID`."""
    fit: str = "sequential"
    """``sequential``: each layer's inputs come from the student so far (earlier layers replaced);
    ``parallel``: every layer is fitted on the teacher's own inputs in one pass."""
    psnr_budget: float = 0.1
    """``auto`` only: largest accepted PSNR drop (dB) on the held-out views."""
    auto_views: int = 2
    """``auto`` only: number of held-out training views the PSNR drop is measured on."""
    finetune_steps: int = 0
    finetune_lr: float = 1e-3
    """Adam learning rate of the fine-tune at its start (cosine-decayed to 1% of it)."""
    finetune_rays: int = 256
    """Rays per fine-tune step, drawn from the distillation's rays and the novel views."""
    finetune_parameters: str = "all"
    """``all``: every field parameter (density head included); ``eugen``: only the EUGen layers."""
    finetune_novel_views: int = 8
    """Cameras near the training ones that the teacher renders as extra fine-tune targets (0: none)."""
    refine_steps: int = 0
    """The paper's refinement: Adam steps per layer on ``G`` and ``A`` (from the closed form) on the same layer
    loss, over up to ``refine_rows`` captured (input, target) rows; 0: the closed form alone. The student's
    projections are then stored in its checkpoint (trainable ``G``)."""
    refine_rows: int = 65536
    """Training rows kept per layer for the refinement (the first ones captured; 1/8 as many held out)."""
    refine_lr: float = 1e-3
    """Adam learning rate of the refinement at its start (cosine-decayed)."""
    batch_rays: int = 1024
    """Rays per rendered batch (the unit of progress, of resumption and of the split across processes)."""
    eval_views: Optional[int] = None
    """Test views scored in the report (all when ``None``)."""
    fps_repeats: int = 3
    device: Optional[str] = None
    overwrite: bool = False
    stop_after_batches: Optional[int] = None
    """Stop (state saved, :class:`DistillInterrupted`) after this many batches: interrupts deterministically."""
    evaluate: bool = True
    """Score teacher and student on the test split (the report's quality, speed and size)."""

    def __post_init__(self) -> None:
        self.teacher = Path(self.teacher)
        self.output_dir = Path(self.output_dir)
        self.layers = tuple(self.layers)
        for name in ("image_fraction", "resolution_scale", "pair_fraction"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= 1:
                raise DistillError(f"{name.replace('_', '-')} must be in (0, 1], got {value!r}")
        if not 0 < self.heldout_fraction < 1:
            raise DistillError(f"heldout-fraction must be in (0, 1), got {self.heldout_fraction!r}")
        for name in ("num_features", "degree", "batch_rays", "finetune_rays", "fps_repeats", "auto_views",
                     "refine_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DistillError(f"{name.replace('_', '-')} must be an integer >= 1, got {value!r}")
        for name in ("finetune_novel_views", "refine_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DistillError(f"{name.replace('_', '-')} must be an integer >= 0, got {value!r}")
        if self.finetune_parameters not in FINETUNE_PARAMETERS:
            raise DistillError(f"finetune-parameters must be one of {FINETUNE_PARAMETERS}, "
                               f"got {self.finetune_parameters!r}")
        if not math.isfinite(self.refine_lr) or self.refine_lr <= 0:
            raise DistillError(f"refine-lr must be a number > 0, got {self.refine_lr!r}")
        if self.finetune_steps < 0:
            raise DistillError(f"finetune-steps must be >= 0, got {self.finetune_steps}")
        if self.feature_map not in FEATURE_MAPS:
            raise DistillError(f"feature-map must be one of {FEATURE_MAPS}, got {self.feature_map!r}")
        if self.scaling not in SCALINGS:
            raise DistillError(f"scaling must be one of {SCALINGS}, got {self.scaling!r}")
        if self.projection not in PROJECTION_KINDS:
            raise DistillError(f"projection must be one of {PROJECTION_KINDS}, got {self.projection!r}")
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
            raise DistillError("no layers given: pass layer paths, 'hidden' or 'auto'")
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
        return EUGenSpec(
            num_features=self.num_features, degree=self.degree, use_norm=self.use_norm,
            feature_map=self.feature_map, projection=self.projection, seed=self.seed,  # type: ignore[arg-type]
            scaling=self.scaling,  # type: ignore[arg-type]
            trainable_projections=self.refine_steps > 0,  # refined G lives in the checkpoint
        )

    @property
    def ridges(self) -> Tuple[float, ...]:
        return RIDGE_GRID if self.ridge == "auto" else (float(self.ridge),)

    def capture_fingerprint(self) -> dict:
        """The options that determine the captured statistics: a saved state resumes only if they match."""
        keys = ("layers", "num_features", "degree", "feature_map", "projection", "use_norm", "scaling", "seed",
                "image_fraction", "resolution_scale", "pair_fraction", "heldout_fraction", "ridge", "fit",
                "psnr_budget", "auto_views", "batch_rays", "refine_steps", "refine_rows", "refine_lr")
        values = asdict(self)
        return {key: values[key] if not isinstance(values[key], tuple) else list(values[key]) for key in keys}
