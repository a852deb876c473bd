"""Field components shared by the EUGen fields: the MLP factory and its layer-index check.

Every field builds its MLPs through :func:`field_mlp`, so an EUGen field and its dense twin are the same
class and differ only in which layer indices are EUGen (none for the twin), and an MLP with EUGen layers is
trained in its merged form (:class:`~eugen_nerf.layers.MergedMLP`) when its head asks for it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Literal

from torch import nn

from eugen_nerf.layers import EUGenMLP, EUGenSpec, MergedMLP


def check_layer_indices(option: str, indices: Sequence[int], num_layers: int) -> tuple[int, ...]:
    """Validate EUGen layer indices of an ``num_layers``-deep MLP; negative indices count from the end."""
    for index in indices:
        if not -num_layers <= index < num_layers:
            raise ValueError(
                f"{option}: layer index {index} does not exist (this MLP has layers 0..{num_layers - 1})"
            )
    return tuple(sorted({index % num_layers for index in indices}))


def field_mlp(
    eugen: EUGenSpec,
    eugen_layers: Sequence[int],
    in_dim: int,
    num_layers: int,
    layer_width: int,
    out_dim: int,
    skip_connections: Sequence[int] = (),
    out_activation: nn.Module | None = None,
    seed_offset: int = 0,
    activation: nn.Module | None = None,
    train_merged: bool = False,
) -> EUGenMLP | MergedMLP:
    """An MLP (ReLU unless ``activation`` is given) whose layers ``eugen_layers`` are of type
    ``eugen.layer_type`` (EUGen by default, or a baseline), the rest dense.

    ``seed_offset`` keeps the projections of different MLPs of one field independent. ``train_merged``: an
    MLP with EUGen layers is returned as the :class:`~eugen_nerf.layers.MergedMLP` it starts as, whose
    parameters are the merged form's matrices (the spec must allow it: ``EUGenSpec.check_merged_training``).
    """
    selected = set(check_layer_indices("eugen layers", eugen_layers, num_layers))
    mlp = EUGenMLP(
        in_dim=in_dim,
        num_layers=num_layers,
        layer_width=layer_width,
        out_dim=out_dim,
        skip_connections=tuple(skip_connections),
        activation=activation if activation is not None else nn.ReLU(),
        out_activation=out_activation,
        layer_types=tuple(eugen.layer_type if i in selected else "dense" for i in range(num_layers)),
        eugen=eugen.offset_seed(seed_offset),
    )
    return MergedMLP(mlp) if train_merged and selected else mlp


def hash_implementation() -> Literal["tcnn", "torch"]:
    """tiny-cuda-nn when it is installed, pure torch otherwise."""
    return "tcnn" if importlib.util.find_spec("tinycudann") is not None else "torch"
