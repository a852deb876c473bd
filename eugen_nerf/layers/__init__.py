"""EUGen layers in pure PyTorch (no nerfstudio import): the ground floor of eugen-nerf."""

from eugen_nerf.layers.alignment import order_rows, pivoted_units, tie_order_gradients_, unit_projections
from eugen_nerf.layers.baselines import LowRankLinear, snnk_linear
from eugen_nerf.layers.eugen import FEATURE_MAPS, SCALINGS, EUGenLinear
from eugen_nerf.layers.fit import NormalEquations, RidgeSolution
from eugen_nerf.layers.fused import FusedMLP
from eugen_nerf.layers.merged import MergedMLP
from eugen_nerf.layers.mlp import EUGenMLP, resolve_layer_types
from eugen_nerf.layers.projections import PROJECTION_KINDS, draw_projections
from eugen_nerf.layers.spec import LAYER_TYPES, MAX_DEGREE, MAX_FEATURES, EUGenSpec, MergedTrainingSpec

__all__ = [
    "FEATURE_MAPS",
    "LAYER_TYPES",
    "MAX_DEGREE",
    "MAX_FEATURES",
    "PROJECTION_KINDS",
    "SCALINGS",
    "EUGenLinear",
    "EUGenMLP",
    "EUGenSpec",
    "FusedMLP",
    "LowRankLinear",
    "MergedMLP",
    "MergedTrainingSpec",
    "NormalEquations",
    "RidgeSolution",
    "draw_projections",
    "order_rows",
    "pivoted_units",
    "resolve_layer_types",
    "snnk_linear",
    "tie_order_gradients_",
    "unit_projections",
]
