"""Training an EUGen SIREN in its sine units' basis (``eugen-fit-image --sine-basis``, experimental).

A frozen ``G`` reads each EUGen layer's output ``A f + c``, so the next sine pre-activation is ``G (A f + c)``.
Adam scales every coordinate's step by that coordinate's own gradient history, so it depends on the basis:
a coordinate of ``A`` is a rotated mix of the next layer's sine units, one of a dense SIREN's ``W`` a pair of
sine units. Held for training as ``V = G A / ω`` and ``u = G c / ω`` (one entry per pair of sine units, SIREN's ``W`` and
``b``), the layer computes ``ω G⁺ V``: the same function, with Adam in the sine units' basis. A step on ``V``
moves ``G A`` by its projection onto ``G``'s columns. ``V`` is a training-time form (``m × m`` a layer);
:func:`store_weights` writes ``A = ω G⁺ V`` back, so what is stored and merged is the EUGen network.
"""

from __future__ import annotations

from itertools import pairwise

import torch
from torch import nn

from eugen_nerf.layers import EUGenLinear, EUGenMLP


class SineBasisWeights(nn.Module):
    """An EUGen layer whose ``A`` and ``c`` are held as ``V = G A / ω`` and ``u = G c / ω``, ``G`` the next
    layer's frozen projections. ``rate`` multiplies Adam's step on ``V`` (``V`` is held divided by it), as
    ``weight_lr_scale`` multiplies the step on ``A``."""

    def __init__(self, layer: EUGenLinear, after: EUGenLinear, omega: float, rate: float = 1.0) -> None:
        super().__init__()
        self.layer = layer
        dtype = layer.weight.dtype  # worked out in float64, held in the layer's own precision
        g = after.projections[:, : after.in_features].detach().double()
        self.register_buffer("back", (omega * rate * torch.linalg.pinv(g)).to(dtype))  # ω G⁺, times the rate
        self.sine_weight = nn.Parameter((g @ layer.weight.detach().double() / (omega * rate)).to(dtype))
        self.sine_bias = nn.Parameter((g @ layer.bias.detach().double() / (omega * rate)).to(dtype))
        layer.register_parameter("weight", None)  # A and c live in V and u while training
        layer.register_parameter("bias", None)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(
            self.layer.features(h), self.back @ self.sine_weight, self.back @ self.sine_bias
        )

    @property
    def training_only(self) -> int:
        """Parameters held for training beyond the stored ``A`` and ``c`` (``h × m`` and ``h``)."""
        h, m = self.back.shape[0], self.sine_weight.shape[1]
        return self.sine_weight.numel() + self.sine_bias.numel() - h * (m + 1)

    def stored_layer(self) -> EUGenLinear:
        """The wrapped layer with ``A = ω G⁺ V`` and ``c = ω G⁺ u`` written back (the same function)."""
        with torch.no_grad():
            self.layer.weight = nn.Parameter(self.back @ self.sine_weight)
            self.layer.bias = nn.Parameter(self.back @ self.sine_bias)
        return self.layer


def hold_in_sine_basis(model: EUGenMLP, omega: float, rate: float = 1.0) -> int:
    """Wrap every EUGen layer whose output a frozen ``G`` reads in :class:`SineBasisWeights` (in place) and
    return how many were wrapped (0: nothing to change, e.g. a dense SIREN or trainable ``G``)."""
    wrapped = 0
    for i, (layer, after) in enumerate(pairwise(list(model.layers))):  # the layers before any is wrapped
        if (
            isinstance(layer, EUGenLinear)
            and isinstance(after, EUGenLinear)
            and not after.trainable_projections
        ):
            model.layers[i] = SineBasisWeights(layer, after, omega, rate)
            wrapped += 1
    return wrapped


def store_weights(model: EUGenMLP) -> None:
    """Undo :func:`hold_in_sine_basis`: every wrapped layer becomes its EUGen layer, ``A`` and ``c`` written
    back from ``V`` and ``u``."""
    for i, layer in enumerate(model.layers):
        if isinstance(layer, SineBasisWeights):
            model.layers[i] = layer.stored_layer()
