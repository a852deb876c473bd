"""iSDF's signed-distance field (Ortiz et al. 2022) with EUGen hidden layers.

iSDF maps a positional embedding of a 3D point to its signed distance with a 256-wide MLP: an input
layer, one hidden layer, a layer that re-reads the embedding (skip), one more hidden layer and a linear
output, all with softplus (β = 100) activations. Here the MLP is an :class:`EUGenMLP`, so any of its
layers can be EUGen (trained as they are, or in their merged form: ``eugen.train_merged``); the dense
twin has none. The SDF's gradient (surface normal, eikonal loss) comes from autograd through whichever form
the MLP runs in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from nerfstudio.field_components.encodings import NeRFEncoding
from torch import Tensor, nn

from eugen_nerf.fields.components import check_layer_indices, field_mlp
from eugen_nerf.layers import EUGenSpec
from eugen_nerf.layers.eugen import FeatureMap

ISDF_LAYERS = 5
"""input, hidden, skip (re-reads the embedding), hidden, output."""
ISDF_SKIP = 2
SOFTPLUS_BETA = 100.0


@dataclass
class ISDFEUGenConfig(EUGenSpec):
    """EUGen knobs of the iSDF MLP and which of its layers are EUGen (``eugen-bench isdf`` measures them)."""

    num_features: int = 64
    """m = 64: close to the dense field's SDF error at a clear inference speed-up, where m = 32 loses more
    accuracy than it saves time."""
    feature_map: FeatureMap = "softplus"
    """Softplus of the products, as iSDF's own network is softplus throughout: the SDF is smooth in its input
    (a ReLU feature's gradient jumps wherever it switches off, and the eikonal term differentiates that
    gradient), and on the benchmark's room its SDF error came closer to the dense field's than with the
    products themselves (``identity``, which saves a pass over every feature at inference)."""
    use_norm: bool = False
    trainable_projections: bool = True
    """An online SDF is trained from scratch, where trained projections fit the surface as well as the dense
    layers do and frozen ones do not (the ``isdf`` benchmark's room); inference costs the same either way."""
    layers: tuple[int, ...] = (1, 2, 3)
    """EUGen layers of the 5-layer MLP (0: embedding -> width, 2: skip layer, 4: output)."""
    train_merged: bool = False
    """Train the MLP in its merged form (the matrices inference runs, trained directly): a training step and
    inference cost less, the SDF errs more on the benchmark's room (docs/benchmarks.md, iSDF). Needs
    eugen.scaling projected without the norm entry."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.layers = check_layer_indices("eugen.layers", self.layers, ISDF_LAYERS)

    def validate(self) -> None:
        super().validate()
        if self.train_merged:
            self.check_merged_training()


@dataclass
class ISDFFieldConfig:
    """Shape of the iSDF field."""

    width: int = 256
    """Hidden width (256 in iSDF)."""
    num_frequencies: int = 5
    """Sine/cosine octaves of the positional embedding (iSDF: 5)."""
    input_scale: float = 0.1
    """Points are scaled by this before the embedding (iSDF's ``scale_input``). The embedding is kept
    smooth, as iSDF's: at 0.1 the highest octave has a period of 0.6 (the object spans 2). A much larger scale
    lets the field meet the eikonal term by oscillating (|∇sdf| ≈ 1 with sdf ≈ 0 everywhere)."""
    eugen: ISDFEUGenConfig = field(default_factory=ISDFEUGenConfig)


def dense_isdf_config(width: int = 256) -> ISDFFieldConfig:
    """The dense twin (no EUGen layer) at ``width``: iSDF itself at 256, the narrowed baseline below it."""
    return ISDFFieldConfig(width=width, eugen=ISDFEUGenConfig(layers=()))


class ISDFField(nn.Module):
    """``sdf(x)``: positional embedding -> 5-layer softplus MLP (skip at layer 2) -> signed distance."""

    def __init__(self, config: ISDFFieldConfig) -> None:
        super().__init__()
        self.config = config
        self.input_scale = config.input_scale
        self.embedding = NeRFEncoding(
            in_dim=3,
            num_frequencies=config.num_frequencies,
            min_freq_exp=0.0,
            max_freq_exp=float(config.num_frequencies - 1),
            include_input=True,
        )
        eugen = config.eugen
        self.mlp = field_mlp(
            eugen,
            eugen.layers,
            in_dim=self.embedding.get_out_dim(),
            num_layers=ISDF_LAYERS,
            layer_width=config.width,
            out_dim=1,
            skip_connections=(ISDF_SKIP,),
            activation=nn.Softplus(beta=SOFTPLUS_BETA),
            train_merged=eugen.train_merged,
        )

    def forward(self, points: Tensor) -> Tensor:
        """Signed distance ``(..., 1)`` of points ``(..., 3)``."""
        return self.mlp(self.embedding(points * self.input_scale))

    def sdf_and_gradient(self, points: Tensor, create_graph: bool) -> tuple[Tensor, Tensor]:
        """``sdf (..., 1)`` and ``∇sdf (..., 3)``; ``create_graph`` when the gradient enters a loss."""
        with torch.enable_grad():
            points = points.detach().requires_grad_(True)
            sdf = self(points)
            (gradient,) = torch.autograd.grad(sdf.sum(), points, create_graph=create_graph)
        return sdf, gradient
