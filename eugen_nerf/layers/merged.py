"""MergedMLP: an :class:`EUGenMLP` trained in its merged form.

The merged form of :mod:`eugen_nerf.layers.fused` runs a chain of EUGen layers feature to feature: the
projections of layer ``l + 1`` read layer ``l``'s features through one matrix ``G_{l+1} A_l`` (``k·m`` by
``k·m``, 128 × 128 at ``m = 64``, ``k = 2``), and the ``l``-wide activation between them is never built.
A :class:`MergedMLP` makes those matrices its parameters and trains them directly, so a training step costs
what inference costs instead of what the unmerged layers (``A`` and ``G`` apart) cost. The function class is
the same wherever ``G_{l+1}`` has full row rank (every ``k·m`` by ``k·m`` matrix is some ``G_{l+1} A_l``), but
the optimiser sees other coordinates: Adam's steps on ``G_{l+1} A_l`` are not its steps on ``A_l``.

It starts as the MLP it is built from (the same function, float rounding aside) and keeps that MLP's layer
kinds, activations and feature maps; its parameters are the fused steps' weights and biases (the first EUGen
layer's projections ``G`` and the last one's ``A`` included, so they are trained too). Forward is the fused
executor, with autograd in training and in place under ``torch.no_grad``; :meth:`MergedMLP.fused` is the
merged form export and inference read.

Only chains whose steps need no norm rows can be trained so: an EUGen layer fed by another EUGen layer must
not need its input's norm (``scaling="projected"`` and ``use_norm=False``): the norm rows are a QR factor of
``A``, which has no trainable form.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from eugen_nerf.layers.fused import FusedMLP

STEP_TENSORS = ("weight", "bias", "skip_weight", "norm_projection", "out_weight", "out_bias")
"""The tensors of a fused step that become parameters (those a step has: None elsewhere)."""


class _StepParameters(nn.Module):
    """The trainable tensors of one fused step (state-dict keys ``steps.<i>.<tensor>``)."""

    def __init__(self, step) -> None:
        super().__init__()
        for name in STEP_TENSORS:
            tensor = getattr(step, name)
            setattr(self, name, None if tensor is None else nn.Parameter(tensor.detach().clone()))


class MergedMLP(nn.Module):
    """An MLP with EUGen layers whose parameters are its merged form's matrices (see the module docstring).

    Args:
        mlp: the :class:`~eugen_nerf.layers.EUGenMLP` it starts as. Its EUGen layers' hyper-parameters are
            kept; its weights are read once.
    """

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self._fused = FusedMLP.from_mlp(mlp)
        for i, step in enumerate(self._fused.steps):
            if step.norm_rows or step.factors is not None:
                raise ValueError(
                    f"layer {i} cannot be trained in merged form: "
                    + (
                        "an EUGen layer fed by another EUGen layer needs its input's norm; use "
                        "scaling 'projected' without the norm entry (use_norm False)"
                        if step.norm_rows
                        else "its orders reuse the first order's rows (teacher projections)"
                    )
                )
        self.steps = nn.ModuleList(_StepParameters(step) for step in self._fused.steps)
        for step in self._fused.steps:
            if step.layer is not None:  # the executor reads its hyper-parameters only: drop A and G
                step.layer = copy.deepcopy(step.layer).to("meta")
        self.in_dim = mlp.in_dim
        self.out_dim = mlp.out_dim
        self.out_activation = mlp.out_activation

    def fused(self) -> FusedMLP:
        """The merged form, its steps holding this module's parameters (as they are now)."""
        for step, params in zip(self._fused.steps, self.steps, strict=True):
            for name in STEP_TENSORS:
                setattr(step, name, getattr(params, name))
        return self._fused

    def forward(self, in_tensor: torch.Tensor) -> torch.Tensor:
        if in_tensor.shape[-1] != self.in_dim:
            raise ValueError(
                f"MergedMLP expected last dimension in_dim={self.in_dim}, got {tuple(in_tensor.shape)}"
            )
        return self.fused()(in_tensor)

    def forward_concat(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """``self(torch.cat(parts, dim=-1))``, each part multiplied by its columns (never concatenated). With
        forward hooks on the module the call goes through ``self`` on the concatenation, as
        :meth:`EUGenMLP.forward_concat` does, so the hooks see the whole input."""
        parts = list(parts)
        if self._forward_hooks or self._forward_pre_hooks:
            return self(torch.cat(parts, dim=-1))
        return self.fused()(parts)

    def macs_per_point(self) -> int:
        """Multiply-accumulates per point (of training and inference alike)."""
        return self.fused().macs_per_point()
