"""SIREN (Sitzmann et al. 2020) with EUGen hidden layers.

A SIREN layer computes ``sin(ω₀ (W x + b))`` with ω₀ = 30 and an initialisation (first layer
``U(-1/d, 1/d)``, later layers ``U(-√(6/d)/ω₀, √(6/d)/ω₀)``) that keeps every pre-activation roughly
arcsine-distributed whatever the depth. :func:`siren_mlp` builds it as an :class:`EUGenMLP` whose
activation is :class:`Sine`: dense layers are sine layers, the output layer is linear, and any hidden
layer can be an EUGen layer with feature map ``sin``, which computes ``A sin(G x⁺) + c``: a trainable
random-Fourier-feature layer whose projections ``G`` (scaled by a frequency ω) play the role of ``ω₀ W``.
Being an ``EUGenMLP``, the network runs its merged form in eval mode: a stack of EUGen sine layers runs
feature to feature (``G_{l+1} A_l`` is one ``m × m`` matrix).

Two details make EUGen sine layers train like sine layers:

* ``A`` starts at ``U(-√(3/M), √(3/M))``: with sine features of variance 1/2 the output has variance 1/2,
  a sine layer's, so the next layer's pre-activation stays in SIREN's regime.
* SIREN's ω₀ multiplies every step Adam takes on ``W``; ``G`` has no such factor, so its learning rate is
  multiplied by ``projection_lr_scale`` (see :func:`siren_param_groups`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import torch
from nerfstudio.cameras.rays import RaySamples
from nerfstudio.field_components.encodings import NeRFEncoding
from nerfstudio.field_components.field_heads import FieldHeadNames
from nerfstudio.field_components.mlp import MLP
from nerfstudio.fields.base_field import Field
from torch import Tensor, nn

from eugen_nerf.layers import EUGenLinear, EUGenMLP, EUGenSpec
from eugen_nerf.layers.baselines import LowRankLinear
from eugen_nerf.layers.eugen import FeatureMap, Scaling, check_choice, check_positive_float

SIREN_OMEGA_0 = 30.0
"""SIREN's frequency factor ω₀ (the paper's value)."""

SirenLayerType = Literal["dense", "eugen", "lowrank", "snnk"]
SIREN_LAYER_TYPES = ("dense", "eugen", "lowrank", "snnk")
"""Hidden layers a SIREN can have: sine layers, EUGen sine-feature layers, and the reviewers' baselines (a
low-rank sine layer ``sin(ω₀ (U V x + b))``, an SNNK layer ``A ReLU(G x⁺) + c``), sized from the spec as
:meth:`EUGenMLP.make_layer` sizes every head's baselines (rank ``eugen.lowrank-rank``, SNNK width ``k·m``)."""
SirenInit = Literal["eugen", "siren"]
SIREN_INITS = ("eugen", "siren")


@dataclass
class SirenEUGenSpec(EUGenSpec):
    """EUGen sine layers: :class:`EUGenSpec` with SIREN's defaults (chosen by measurement) and the
    learning-rate factor of ``G``."""

    layer_type: Literal["eugen"] = "eugen"  # type: ignore[assignment]
    """Fixed: the SIREN's layers are chosen by ``--layers`` (eugen-fit-image) or ``--pipeline.model.layers``."""
    num_features: int = 128
    """m, random features per order (128 at width 256 with trainable G: the dense layer's parameter count)."""
    degree: int = 1
    """k; order 1 is a random-Fourier-feature layer (order 2 measured worse at equal parameters)."""
    feature_map: FeatureMap = "sin"
    """Φ; ``sin`` keeps the layer periodic like the sine layer it replaces (identity measured far worse)."""
    projection_scale: float = 3.0
    """ω, the frequency that scales the unit-variance projections ``G x⁺`` (1: too smooth, 3-10 similar;
    3 measured best)."""
    use_norm: bool = False
    """Append ``‖x‖``; off (measured no better for SIREN, and it costs the merged form a QR and a norm)."""
    trainable_projections: bool = True
    """Learn ``G`` as SIREN learns ``W`` (frozen ``G`` measured worse at equal parameters)."""
    scaling: Scaling = "polynomial"
    """``sin(ω G x⁺)`` of ``x⁺`` itself: the frequency keeps its meaning."""
    projection_lr_scale: float = 30.0
    """Learning-rate factor of ``G`` (SIREN's ω₀, which scales ``W``'s steps); 1 trains far slower."""
    learn_first_projections: bool = False
    """With frozen ``G``: learn the first EUGen layer's ``G`` all the same. It follows the dense input sine
    layer, whose output no ``A`` feeds, so frozen it would leave that transition a fixed random matrix; every
    later frozen ``G_{l+1}`` still merges with a learned ``A_l`` into one learned matrix."""
    readout: bool = False
    """When the last hidden layer is EUGen, its ``A`` is the output layer (``out_dim`` rows) instead of a
    separate linear layer after it: the two would merge into one ``out_dim × m`` matrix anyway, so the
    separate layer's ``width²`` parameters buy nothing."""
    weight_lr_scale: float = 1.0
    """Learning-rate factor of the EUGen layers' ``A`` (and ``c``): a step on ``A_l`` moves the next
    pre-activation ``‖G_{l+1}‖`` times, where SIREN's ω₀ moves a sine layer's 30 times."""
    init: SirenInit = "eugen"
    """How EUGen sine layers start. ``eugen``: ``A ~ U(±√(3/M))``, ``c = 0`` (a sine layer's output variance).
    ``siren``: as the SIREN they stand for (see :func:`siren_eugen_init_`), in the parity layout only (every
    hidden layer EUGen, frozen ``G`` but the first, readout, degree 1, no norm, polynomial scaling); with
    ``projection_scale`` = ω₀ (30) a frozen ``G`` is about ω₀ times an orthogonal matrix, so ``G (A h + c)``
    starts as SIREN's ``ω₀ (W h + b)`` and takes steps of the same size, every rate factor 1 but the learned
    ``G``'s (ω₀)."""

    def validate(self) -> None:
        super().validate()
        # a SIREN's dense layers are sine layers
        check_choice("eugen.layer-type", self.layer_type, ("eugen",))
        check_positive_float("eugen.projection-lr-scale", self.projection_lr_scale)
        check_positive_float("eugen.weight-lr-scale", self.weight_lr_scale)
        check_choice("eugen.init", self.init, SIREN_INITS)
        layout = {
            "trainable-projections": (self.trainable_projections, False),
            "learn-first-projections": (self.learn_first_projections, True),
            "readout": (self.readout, True),
            "degree": (self.degree, 1),
            "use-norm": (self.use_norm, False),
            "scaling": (self.scaling, "polynomial"),
        }
        wrong = [f"{name}={got!r} (needs {need!r})" for name, (got, need) in layout.items() if got != need]
        if self.init == "siren" and wrong:
            raise ValueError(
                "eugen.init 'siren' starts the parity layout only (frozen G, the first one "
                f"learned, readout, degree 1, no norm, polynomial scaling): {', '.join(wrong)}"
            )


class Sine(nn.Module):
    """``sin(ω₀ x)``: the activation that makes a dense layer a SIREN layer."""

    def __init__(self, omega_0: float = SIREN_OMEGA_0) -> None:
        super().__init__()
        self.omega_0 = omega_0

    def forward(self, x: Tensor) -> Tensor:
        return torch.sin(self.omega_0 * x)


def siren_lowrank_init_(layer: LowRankLinear, omega_0: float) -> None:
    """A low-rank sine layer started as SIREN's: ``V ~ U(±√(3/d))`` keeps ``V x`` at ``x``'s scale and
    ``U ~ U(±√(6/r)/ω₀)`` gives ``U V x`` the variance SIREN's hidden ``W x`` has (``2/ω₀²`` per unit)."""
    with torch.no_grad():
        layer.down.uniform_(-math.sqrt(3.0 / layer.in_features), math.sqrt(3.0 / layer.in_features))
        layer.up.uniform_(-math.sqrt(6.0 / layer.rank) / omega_0, math.sqrt(6.0 / layer.rank) / omega_0)


def siren_init_(linear: nn.Linear, omega_0: float, is_first: bool) -> None:
    """SIREN's weight initialisation (biases keep nn.Linear's default, as in the reference code)."""
    bound = 1.0 / linear.in_features if is_first else math.sqrt(6.0 / linear.in_features) / omega_0
    with torch.no_grad():
        linear.weight.uniform_(-bound, bound)


def eugen_sine_init_(layer: EUGenLinear) -> None:
    """``A ~ U(-√(3/M), √(3/M))``, ``c = 0``: the output variance of a sine layer (see the module docstring)."""
    bound = math.sqrt(3.0 / layer.feature_dim)
    with torch.no_grad():
        layer.weight.uniform_(-bound, bound)
        if layer.bias is not None:
            layer.bias.zero_()


def siren_eugen_init_(layer: EUGenLinear, omega_0: float, output: bool) -> None:
    """Start an EUGen sine layer as the SIREN layers it stands for (``init="siren"``).

    ``A`` and ``c`` are SIREN's ``W`` and ``b`` (``U(±√(6/M)/ω₀)``, ``U(±1/√M)``) times ω₀/ω, ω the scale of
    ``G``: a frozen ``G`` is about ω times an orthogonal matrix, so the next pre-activation ``G (A h + c)``
    has the distribution of SIREN's ``ω₀ (W h + b)``. The output ``A`` (``readout``) is SIREN's linear output
    layer, unscaled. A learned ``G`` is ω₀ times SIREN's hidden weights and bias (its constant column), which
    is what the sine is applied to. :func:`siren_mlp` draws the frozen ``G`` without a constant column (a
    fixed random phase as wide as the rest), so the ``c`` before it is the bias (``eugen-bench siren``
    compares this start with the dense SIREN)."""
    fan_in = layer.feature_dim
    gain = 1.0 if output else omega_0 / layer.projection_scale
    with torch.no_grad():
        bound = gain * math.sqrt(6.0 / fan_in) / omega_0
        layer.weight.uniform_(-bound, bound)
        if layer.bias is not None:
            layer.bias.uniform_(-gain / math.sqrt(fan_in), gain / math.sqrt(fan_in))
        if layer.trainable_projections:
            d, g = layer.in_features, layer.projections
            g.zero_()  # the norm column (when used) starts at 0
            g[:, :d].uniform_(-math.sqrt(6.0 / d), math.sqrt(6.0 / d))
            g[:, d].uniform_(-omega_0 / math.sqrt(d), omega_0 / math.sqrt(d))


def siren_start_(layer: EUGenLinear, omega_0: float, output: bool) -> None:
    """Start an EUGen layer of an ``init="siren"`` network: a frozen ``G`` is redrawn without its constant column
    (the ``c`` before it is the bias, as SIREN's ``b``; so on load too), then :func:`siren_eugen_init_`."""
    if not layer.trainable_projections:
        layer.constant_projection = False
        layer.regenerate_projections()
    siren_eugen_init_(layer, omega_0, output=output)


def siren_mlp(
    in_dim: int,
    width: int,
    out_dim: int,
    hidden_types: Sequence[SirenLayerType] = ("dense",) * 3,
    eugen: SirenEUGenSpec | None = None,
    omega_0: float = SIREN_OMEGA_0,
    out_activation: nn.Module | None = None,
) -> EUGenMLP:
    """SIREN: a first sine layer, ``len(hidden_types)`` hidden layers (sine or EUGen), a linear output.

    Hidden layer ``i`` is layer ``i + 1`` of the returned MLP; EUGen layer ``j`` uses seed ``eugen.seed + j``.
    """
    for kind in hidden_types:
        if kind not in SIREN_LAYER_TYPES:
            raise ValueError(f"SIREN hidden layer type must be one of {SIREN_LAYER_TYPES}, got {kind!r}")
    spec = eugen if eugen is not None else SirenEUGenSpec()
    if spec.init == "siren" and (not hidden_types or any(kind != "eugen" for kind in hidden_types)):
        raise ValueError(
            "eugen.init 'siren' needs every hidden layer EUGen (the layout it starts as SIREN), "
            f"got {tuple(hidden_types)}"
        )
    layer_types = ("dense", *hidden_types) + (() if has_readout(hidden_types, spec) else ("dense",))
    mlp = EUGenMLP(
        in_dim=in_dim,
        num_layers=len(layer_types),
        layer_width=width,
        out_dim=out_dim,
        activation=Sine(omega_0),
        out_activation=out_activation,
        layer_types=layer_types,
        eugen=spec,
    )
    if spec.learn_first_projections and not spec.trainable_projections and "eugen" in hidden_types:
        index = layer_types.index("eugen")
        # the same draw, learned (a learned G alone is not the layout init "siren" checks)
        learned = replace(spec.offset_seed(index), trainable_projections=True, init="eugen")
        mlp.layers[index] = EUGenMLP.make_layer("eugen", *mlp.layer_dims(index), learned)
    for index, layer in enumerate(mlp.layers):
        if isinstance(layer, EUGenLinear) and spec.init == "siren":
            siren_start_(layer, omega_0, output=index == len(mlp.layers) - 1)
        elif isinstance(layer, EUGenLinear):
            eugen_sine_init_(layer)
        elif isinstance(layer, LowRankLinear):
            siren_lowrank_init_(layer, omega_0)
        else:
            siren_init_(layer, omega_0, is_first=index == 0)
    return mlp


def has_readout(hidden_types: Sequence[str], eugen: SirenEUGenSpec) -> bool:
    """Whether the last EUGen layer's ``A`` is the output layer (``readout``, last hidden layer EUGen)."""
    return eugen.readout and len(hidden_types) > 0 and hidden_types[-1] == "eugen"


def siren_param_groups(module: nn.Module, lr: float, eugen: SirenEUGenSpec) -> list[dict]:
    """Adam parameter groups, each with its ``name``: ``fields`` at ``lr``; ``weights``, the EUGen layers'
    ``A`` and ``c`` at ``lr · weight_lr_scale`` (only when that is not 1); ``projections``, trainable ``G`` at
    ``lr · projection_lr_scale`` (only when there are any)."""
    layers = [m for m in module.modules() if isinstance(m, EUGenLinear)]
    projections = [m.projections for m in layers if m.trainable_projections]
    scaled = eugen.weight_lr_scale != 1
    weights = [p for m in layers for p in (m.weight, m.bias) if p is not None] if scaled else []
    ids = {id(p) for p in projections + weights}
    groups = [{"name": "fields", "params": [p for p in module.parameters() if id(p) not in ids], "lr": lr}]
    if weights:
        groups.append({"name": "weights", "params": weights, "lr": lr * eugen.weight_lr_scale})
    if projections:
        groups.append({"name": "projections", "params": projections, "lr": lr * eugen.projection_lr_scale})
    return groups


def siren_parameters(
    in_dim: int, width: int, out_dim: int, hidden_types: Sequence[str], eugen: SirenEUGenSpec
) -> int:
    """Trainable parameters of :func:`siren_mlp` without building it (for parameter-matched baselines)."""
    features = eugen.degree * eugen.num_features
    matrices = eugen.degree if eugen.shared_projections else eugen.degree * (eugen.degree + 1) // 2
    projections = matrices * eugen.num_features * (width + 1 + int(eugen.use_norm))
    readout = has_readout(hidden_types, eugen)
    total, first_eugen = (in_dim + 1) * width, True
    for index, kind in enumerate(hidden_types):
        if kind == "dense":
            total += width * width + width
            continue
        if kind == "lowrank":
            total += EUGenMLP.lowrank_rank(eugen, width, width) * 2 * width + width
            continue
        if kind == "snnk":  # ReLU features of width k·m on [x; 1]
            total += width * features + width + (features * (width + 1) if eugen.trainable_projections else 0)
            continue
        rows = out_dim if readout and index == len(hidden_types) - 1 else width
        total += rows * features + rows
        if eugen.trainable_projections or (eugen.learn_first_projections and first_eugen):
            total += projections
        first_eugen = False
    return total + (0 if readout else (width + 1) * out_dim)


class SirenRadianceField(Field):
    """A NeRF-style radiance field whose position trunk is a SIREN (dense or with EUGen hidden layers).

    The trunk maps positions (the object's unit sphere is SIREN's ``[-1, 1]`` domain) to ``width``
    features; density is ``softplus`` of a linear head on them, colour a 2-layer ReLU head on the features
    and NeRF's 4-octave view-direction encoding, as in NeRF.
    """

    def __init__(
        self,
        width: int = 256,
        hidden_types: Sequence[SirenLayerType] = ("dense",) * 3,
        eugen: SirenEUGenSpec | None = None,
        head_width: int = 128,
    ) -> None:
        super().__init__()
        self.trunk = siren_mlp(3, width, width, hidden_types, eugen)
        self.density_head = nn.Linear(width, 1)
        self.direction_encoding = NeRFEncoding(
            in_dim=3, num_frequencies=4, min_freq_exp=0.0, max_freq_exp=4.0, include_input=True
        )
        self.color_head = MLP(
            in_dim=width + self.direction_encoding.get_out_dim(),
            num_layers=2,
            layer_width=head_width,
            out_dim=3,
            activation=nn.ReLU(),
            out_activation=nn.Sigmoid(),
        )

    def get_density(self, ray_samples: RaySamples) -> tuple[Tensor, Tensor]:
        features = self.trunk(ray_samples.frustums.get_positions())
        return nn.functional.softplus(self.density_head(features)), features

    def get_outputs(
        self, ray_samples: RaySamples, density_embedding: Tensor | None = None
    ) -> dict[FieldHeadNames, Tensor]:
        assert density_embedding is not None
        directions = self.direction_encoding(ray_samples.frustums.directions)
        return {FieldHeadNames.RGB: self.color_head(torch.cat([density_embedding, directions], dim=-1))}
