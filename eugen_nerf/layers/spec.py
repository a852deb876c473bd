"""EUGenSpec: the one set of EUGen hyper-parameters, validated in one place.

Every EUGen head's config (``--pipeline.model.eugen.<name>``), the distiller (``eugen-distill --eugen.<name>``),
the SIREN image fit and the layer API read their EUGen knobs from an :class:`EUGenSpec`. A head subclasses it
only to change defaults and to add which of its layers are EUGen; the validation below is never repeated.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Literal

from eugen_nerf.layers.eugen import (
    FEATURE_MAPS,
    SCALINGS,
    FeatureMap,
    Scaling,
    check_choice,
    check_int,
    check_positive_float,
)
from eugen_nerf.layers.projections import PROJECTION_KINDS, ProjectionKind

LayerType = Literal["dense", "eugen", "lowrank", "snnk"]
LAYER_TYPES = ("dense", "eugen", "lowrank", "snnk")

MAX_DEGREE = 4
"""Highest polynomial order accepted (the paper uses k <= 3)."""
MAX_FEATURES = 4096


@dataclass
class EUGenSpec:
    """EUGen layer hyper-parameters (see :class:`~eugen_nerf.layers.EUGenLinear` for what each one does)."""

    layer_type: LayerType = "eugen"
    """What the selected layers become: EUGen, or a reviewers' baseline at EUGen's parameter count
    (lowrank: learned U V of rank l*k*m/(d+l), as many weights as EUGen's A; snnk: ReLU random features of
    width k*m, degree 1, no norm; dense: the dense layer itself, as the method's dense twin has)."""
    num_features: int = 64
    """m, random features per polynomial order (feature width m * degree)."""
    degree: int = 2
    """k, the highest polynomial order."""
    feature_map: FeatureMap = "relu"
    """Phi, applied to the random features (the layer's non-linearity)."""
    use_norm: bool = True
    """Append ||x|| to the projected input."""
    scaling: Scaling = "linear"
    """linear: features of the direction of x+ times rms(x+) (degree 1, like a ReLU layer; safe when
    stacked); unit: the direction's features alone (bounded at any depth); polynomial: products of x+ itself
    (the unbiased estimate's form; overflows when stacked); projected: linear with rms(x+) estimated by the rms
    of the projections G x+ (no ||x||: a merged chain of EUGen layers then needs no norm rows, half as wide)."""
    projection: ProjectionKind = "gaussian"
    """How the random projection rows are drawn."""
    trainable_projections: bool = False
    """Learn the projections G (stored in checkpoints) instead of keeping them frozen and seeded. Layers trained
    in their merged form (``train-merged``) learn the merged matrices, the first layer's G among them, whatever
    this says."""
    shared_projections: bool = True
    """Orders share their projections (cost m*d*k instead of m*d*k^2/2)."""
    seed: int = 0
    """Seed of the seeded projections; each layer's own seed derives from it (in a method's MLP, layer i
    uses seed + i)."""
    projection_scale: float = 1.0
    """Multiplies the projections: a frequency for feature-map sin (SIREN), 1 otherwise."""
    lowrank_rank: int | None = None
    """Rank of lowrank layers; None: as many weights as EUGen's A (l*k*m), rank l*k*m / (d + l)."""
    fused_inference: bool = True
    """In eval mode, run the merged feature-to-feature form of each EUGen MLP."""
    compile_fused: bool = False
    """Run the fused form through torch.compile (first render compiles: tens of seconds on a CPU)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise one ``ValueError`` naming the first bad option (as its command-line flag)."""
        check_choice(flag("layer_type"), self.layer_type, LAYER_TYPES)
        check_int(flag("num_features"), self.num_features, 1, MAX_FEATURES)
        check_int(flag("degree"), self.degree, 1, MAX_DEGREE)
        check_choice(flag("feature_map"), self.feature_map, FEATURE_MAPS)
        check_choice(flag("scaling"), self.scaling, SCALINGS)
        check_choice(flag("projection"), self.projection, PROJECTION_KINDS)
        check_int(flag("seed"), self.seed, low=0)
        check_positive_float(flag("projection_scale"), self.projection_scale)
        if self.lowrank_rank is not None:
            check_int(flag("lowrank_rank"), self.lowrank_rank)
        # SNNK layers are ReLU random features whatever the map: a head's default map (the field's default,
        # meant for its EUGen layers) gives way to ReLU there, and only a map chosen against it is refused
        head_default = next(f.default for f in fields(self) if f.name == "feature_map")
        if self.layer_type == "snnk" and self.feature_map not in ("relu", head_default):
            raise ValueError(
                f"eugen.feature-map {self.feature_map!r} is not supported by layer-type snnk "
                "(SNNK layers are ReLU random features)"
            )

    def can_train_merged(self) -> bool:
        """Whether MLPs of this spec can be trained in their merged form (:class:`~eugen_nerf.layers.MergedMLP`):
        EUGen layers with the projected scaling and no norm entry. The norm rows a merged chain needs otherwise
        have no trainable form, and low-rank and SNNK layers have no merged chain."""
        return self.layer_type == "eugen" and self.scaling == "projected" and not self.use_norm

    def resolve_train_merged(self, train_merged: bool | None, has_layers: bool) -> bool:
        """Whether a head trains its EUGen layers merged, from its ``train-merged`` knob: None merges where the
        layers allow it (:meth:`can_train_merged`) and trains them apart otherwise, True merges (the head's
        ``validate`` refuses layers that cannot), False never merges; a head without EUGen layers
        (``has_layers`` False) has nothing to merge."""
        if not has_layers or train_merged is False:
            return False
        return self.can_train_merged()

    def check_merged_training(self) -> None:
        """Raise one ``ValueError`` unless :meth:`can_train_merged`: a head whose config has a ``train-merged``
        knob calls it when the knob is on."""
        if not self.can_train_merged():
            raise ValueError(
                "eugen.train-merged needs eugen.layer-type eugen, eugen.scaling projected and eugen.use-norm "
                f"False (got {self.layer_type}, {self.scaling}, {self.use_norm}): the norm rows a merged chain "
                "needs otherwise have no trainable form"
            )

    def offset_seed(self, offset: int) -> EUGenSpec:
        """The same spec with ``seed + offset`` (keeps different MLPs' projections independent)."""
        return replace(self, seed=self.seed + offset)


@dataclass
class MergedTrainingSpec(EUGenSpec):
    """EUGen knobs of a head that trains its EUGen layers in their merged form by default (NeRF's trunk,
    Zip-NeRF's view MLP): the identity map, the projected scaling without the norm entry, and the
    ``train_merged`` knob. A head subclasses it to set its width and to say which of its layers are EUGen."""

    feature_map: FeatureMap = "identity"
    """Phi of the EUGen layers of this method (the trunk's of eugen-nerf, the view MLP's of eugen-zipnerf).
    Identity: each layer is a polynomial of its input (degree k), and no pass over every feature is needed."""
    use_norm: bool = False
    """Append the input's norm to x+ before projecting. Off: the projected scaling already carries the input's
    scale."""
    scaling: Scaling = "projected"
    """How the features are kept at the input's scale (docs/method.md, section 3). Projected: the input's RMS
    estimated from the layer's own projections, so a merged chain needs no norm rows: each link is k*m rows,
    not 2*k*m as with linear, and has a trainable form."""
    train_merged: bool | None = None
    """Train the EUGen layers in their merged form: the parameters are the matrices inference runs (one EUGen
    layer's projections read the previous one's features through a k*m by k*m matrix; the layer after the
    last EUGen layer absorbs its A), trained directly instead of A and G apart, so a training step costs about
    what inference does. Same function class, other optimiser coordinates (docs/method.md, section 2). None:
    merged where the layers allow it (EUGen layers, projected scaling, no norm entry), as they by default do;
    True: refuse layers that do not; False: train A and G apart."""

    def has_mergeable_layers(self) -> bool:
        """Whether the head selects EUGen layers that merged training applies to."""
        raise NotImplementedError

    @property
    def merged_training(self) -> bool:
        """Whether the head trains its EUGen layers in their merged form (see ``train_merged``)."""
        return self.resolve_train_merged(self.train_merged, self.has_mergeable_layers())

    def validate(self) -> None:
        super().validate()
        if self.train_merged:
            self.check_merged_training()
        if self.merged_training and (not self.fused_inference or self.compile_fused):
            raise ValueError(
                f"{flag('fused_inference')} False and {flag('compile_fused')} need the EUGen layers trained apart "
                f"({flag('train_merged')} False): layers trained merged have only their merged form"
            )


def flag(name: str) -> str:
    """The command-line spelling of an EUGenSpec field, as errors name it."""
    return "eugen." + name.replace("_", "-")
