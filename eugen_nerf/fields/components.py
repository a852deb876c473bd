"""Field components shared by the EUGen fields: the EUGen knobs and the MLP factory.

Every field builds its MLPs through :func:`field_mlp`, so an EUGen field and its dense twin are the same
class and differ only in which layer indices are EUGen (none for the twin).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal, Optional, Sequence, Tuple

from torch import nn

from eugen_nerf.layers import FEATURE_MAPS, LAYER_TYPES, PROJECTION_KINDS, SCALINGS, EUGenMLP, EUGenSpec

MAX_DEGREE = 4
"""Highest polynomial order accepted from the command line (the paper uses k <= 3)."""
MAX_FEATURES = 4096


@dataclass
class EUGenConfig:
    """EUGen layer hyper-parameters, settable as ``--pipeline.model.eugen.<name>``."""

    layer_type: Literal["eugen", "lowrank", "snnk", "dense"] = "eugen"
    """What the selected layers become: EUGen, or a reviewers' baseline at EUGen's parameter count
    (lowrank: learned U V of rank l*k*m/(d+l); snnk: ReLU random features of width k*m, degree 1, no norm;
    dense: the twin)."""
    num_features: int = 64
    """m, random features per polynomial order (feature width m * degree)."""
    degree: int = 2
    """k, the highest polynomial order."""
    feature_map: Literal["identity", "relu", "softplus", "sin"] = "relu"
    """Phi, applied to the random features (the layer's non-linearity)."""
    use_norm: bool = True
    """Append ||x|| to the projected input."""
    scaling: Literal["unit", "linear", "polynomial"] = "linear"
    """linear: features of the direction of x+ times rms(x+) (degree 1, like a ReLU layer; safe when
    stacked); unit: the direction's features alone (bounded at any depth); polynomial: products of x+ itself (the unbiased estimate's form; overflows when stacked)."""
    projection: Literal["gaussian", "orthogonal"] = "gaussian"
    """How the random projection rows are drawn."""
    trainable_projections: bool = False
    """Learn the projections G (stored in checkpoints) instead of keeping them frozen and seeded."""
    shared_projections: bool = True
    """Orders share their projections (cost m*d*k instead of m*d*k^2/2)."""
    seed: int = 0
    """Seed of the frozen projections (layer i of an MLP uses seed + i)."""
    fused_inference: bool = True
    """In eval mode, run the merged feature-to-feature form of each EUGen MLP."""
    compile_fused: bool = False
    """Run the fused form through torch.compile (first render compiles: tens of seconds on a CPU)."""

    def __post_init__(self) -> None:
        for name, top in (("num_features", MAX_FEATURES), ("degree", MAX_DEGREE)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ValueError(f"eugen.{name.replace('_', '-')} must be an integer in 1..{top}, got {value!r}")
        for name, allowed in (
            ("layer_type", LAYER_TYPES), ("feature_map", FEATURE_MAPS), ("projection", PROJECTION_KINDS),
            ("scaling", SCALINGS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"eugen.{name.replace('_', '-')} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.layer_type == "snnk" and self.feature_map != "relu":
            raise ValueError(f"eugen.feature-map {self.feature_map!r} is not supported by layer-type snnk "
                             "(SNNK layers are ReLU random features)")

    def spec(self, seed_offset: int = 0) -> EUGenSpec:
        """The layer package's spec; ``seed_offset`` keeps different MLPs' projections independent."""
        return EUGenSpec(
            num_features=self.num_features,
            degree=self.degree,
            use_norm=self.use_norm,
            feature_map=self.feature_map,
            projection=self.projection,
            trainable_projections=self.trainable_projections,
            shared_projections=self.shared_projections,
            seed=self.seed + seed_offset,
            scaling=self.scaling,
        )


def check_layer_indices(option: str, indices: Sequence[int], num_layers: int) -> Tuple[int, ...]:
    """Validate EUGen layer indices of an ``num_layers``-deep MLP; negative indices count from the end."""
    for index in indices:
        if not -num_layers <= index < num_layers:
            raise ValueError(
                f"{option}: layer index {index} does not exist (this MLP has layers 0..{num_layers - 1})"
            )
    return tuple(sorted({index % num_layers for index in indices}))


def field_mlp(
    eugen: EUGenConfig,
    eugen_layers: Sequence[int],
    in_dim: int,
    num_layers: int,
    layer_width: int,
    out_dim: int,
    skip_connections: Sequence[int] = (),
    out_activation: Optional[nn.Module] = None,
    seed_offset: int = 0,
    activation: Optional[nn.Module] = None,
) -> EUGenMLP:
    """An MLP (ReLU unless ``activation`` is given) whose layers ``eugen_layers`` are of type
    ``eugen.layer_type`` (EUGen by default, or a baseline), the rest dense.

    ``seed_offset`` keeps the projections of different MLPs of one field independent.
    """
    selected = set(check_layer_indices("eugen layers", eugen_layers, num_layers))
    return EUGenMLP(
        in_dim=in_dim,
        num_layers=num_layers,
        layer_width=layer_width,
        out_dim=out_dim,
        skip_connections=tuple(skip_connections),
        activation=activation if activation is not None else nn.ReLU(),
        out_activation=out_activation,
        layer_types=tuple(eugen.layer_type if i in selected else "dense" for i in range(num_layers)),
        eugen=eugen.spec(seed_offset),
        fuse_in_eval=eugen.fused_inference,
        compile_fused=eugen.compile_fused,
    )


def hash_implementation() -> Literal["tcnn", "torch"]:
    """tiny-cuda-nn when it is installed, pure torch otherwise."""
    return "tcnn" if importlib.util.find_spec("tinycudann") is not None else "torch"
