"""The EUGen layer: a dense layer ``σ(Wx + b)`` replaced by ``A · Φ(f(x)) + c``.

``f(x)`` concatenates, for each polynomial order ``i = 1..k``, the element-wise product of ``i``
random projections of ``x⁺ = [x; 1; ‖x‖]`` (``m`` features per order). Order 0 is the constant
block, carried by the bias ``c``. With identity ``Φ`` and Gaussian projections,
:meth:`EUGenLinear.from_dense` builds the unbiased estimate of ``poly(Wx + b)`` (spec section 1).

Two ways to draw the projections:

* ``shared_projections=True`` (default): ``k`` matrices ``G_1..G_k``; order ``i`` is the running
  product ``G_1 x⁺ ⊙ … ⊙ G_i x⁺``. One ``(k·m) x (d+2)`` matmul and ``k - 1`` running products: cost
  ``m·d·k``. Each order is still a product of independent projections, so each order's estimate
  is unbiased; orders are correlated with each other.
* ``shared_projections=False``: every order owns its ``i`` matrices (``k(k+1)/2`` in all, cost
  ``m·d·k²/2``): the paper's literal form, orders independent.

``x⁺`` is never materialised: ``G x⁺ = G_x x + g_1 + ‖x‖ g_norm``.

Scaling (why stacked EUGen layers cannot overflow). Order ``i`` of ``G x⁺`` grows as ``‖x⁺‖^i``, so
``L`` stacked layers form a polynomial of degree ``k^L``: at ``k = 2`` and an input RMS of 1.5 an
8-layer stack reaches inf. ``scaling="unit"`` projects the *direction* ``u = x⁺/‖x⁺‖``
instead. Nothing is lost: ``x⁺`` carries the constant 1, so ``x = u[:d] / u[d]`` is recovered from
``u`` (and ``‖x‖`` from ``u[d+1] / u[d]``). Every factor ``g·u`` is then ``N(0, 1)`` and bounded by
``‖g‖``, so every feature of every order is O(1), whatever the input's scale, the depth or the degree.
The default ``scaling="linear"`` multiplies the unit features by ``rms(x⁺)``: the layer is then
positively homogeneous of degree 1 for large inputs, exactly as ``ReLU(Wx + b)`` is, so a stack
grows no faster than a dense ReLU stack, and feature magnitudes still carry the input's scale
(it fits dense ReLU layers better than ``unit``); ``scaling="polynomial"`` keeps the theorem's homogeneous products of ``x⁺`` (what
:meth:`EUGenLinear.from_dense` estimates without bias; unsafe to stack).

``scaling="projected"`` is ``linear`` with ``rms(x⁺)`` estimated from the projections the layer computes
anyway: ``rms(G x⁺)`` over its rows, which for the ``1/sqrt(d+2)``-scaled Gaussian rows has ``rms(x⁺)²``
as its expected square (Johnson-Lindenstrauss), and is still positively homogeneous of degree 1 in
``x⁺``. The layer then never needs ``‖x‖``. That is what makes it cheaper merged: a chain step of
``linear`` layers recovers ``‖x‖ = ‖A F + c‖`` from the previous layer's features with a second
``k·m``-row product (see :mod:`eugen_nerf.layers.fused`), as large as the projections themselves, where
``projected`` takes one pass over the projections.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from eugen_nerf.layers.projections import PROJECTION_KINDS, ProjectionKind, draw_projections

FeatureMap = Literal["identity", "relu", "softplus", "sin"]
FEATURE_MAPS = ("identity", "relu", "softplus", "sin")
Scaling = Literal["unit", "linear", "projected", "polynomial"]
SCALINGS = ("unit", "linear", "projected", "polynomial")

_FEATURE_MAP_FNS = {
    "identity": lambda z: z,
    "relu": torch.relu,
    "softplus": nn.functional.softplus,
    "sin": torch.sin,
}


def softplus_(x: torch.Tensor, beta: float = 1.0, threshold: float = 20.0) -> torch.Tensor:
    """``softplus(x)`` written over ``x`` (torch has no ``softplus_``; its ``out=`` form with ``out=x`` is the
    same kernel, element by element, so the result equals ``nn.functional.softplus`` bit for bit)."""
    return torch.ops.aten.softplus.out(x, beta, threshold, out=x)


FEATURE_MAPS_IN_PLACE = {"relu": torch.relu_, "sin": torch.sin_, "softplus": softplus_}
"""The feature maps that can write over their input (identity needs no pass at all)."""

_IN_PLACE_ACTIVATIONS = {
    nn.ReLU: lambda module, x: x.relu_(),
    nn.Sigmoid: lambda module, x: x.sigmoid_(),
    nn.Tanh: lambda module, x: x.tanh_(),
    nn.Softplus: lambda module, x: softplus_(x, module.beta, module.threshold),
}


def activate(activation: nn.Module | None, x: torch.Tensor, inplace: bool) -> torch.Tensor:
    """``activation(x)`` (``x`` itself when there is none); with ``inplace``, ReLU, sigmoid, tanh and softplus
    overwrite ``x``, which must then be a buffer no one else reads (a layer's fresh output, without autograd):
    an out-of-place activation holds a second buffer as wide as the layer's output, and allocating it costs
    about as much as the activation itself on a CPU."""
    if activation is None:
        return x
    in_place = _IN_PLACE_ACTIVATIONS.get(type(activation)) if inplace else None
    return in_place(activation, x) if in_place is not None else activation(x)


HOMOGENEOUS_MAPS = ("identity", "relu")
"""Feature maps with ``Φ(a·z) = a·Φ(z)`` for every ``a > 0``."""


def scales_higher_orders(scaling: str, feature_map: str, shared_projections: bool = True) -> bool:
    """Whether a layer's scale by ``rms`` reduces to dividing its higher orders by it: a degree-1 scaling
    (``linear``, ``projected``) with a homogeneous map (``Φ(∏ p_j / rms)·rms = Φ(p_1 ∏_{j>1} p_j / rms)``)
    and orders that are running products of shared projection rows. The training form, the fused form and
    the export's ``run_mlp`` all read it."""
    return scaling in ("linear", "projected") and feature_map in HOMOGENEOUS_MAPS and shared_projections


def input_norm(x: torch.Tensor) -> torch.Tensor:
    """``‖x‖`` over the last dimension, kept in float32 or wider (a half-precision sum overflows)."""
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    return torch.linalg.vector_norm(wide, dim=-1, keepdim=True)


class _SquaredNorm(torch.autograd.Function):
    """``‖x‖²`` over the last dimension: the norm's one-pass reduction forward, ``2x`` backward (one pass over
    ``x``, where the norm's own backward takes three), written in differentiable operations so that a
    gradient of the gradient (iSDF's eikonal term) goes through it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.linalg.vector_norm(x, dim=-1, keepdim=True).square()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return x * (2.0 * grad)


def squared_input_norm(x: torch.Tensor) -> torch.Tensor:
    """``‖x‖²`` over the last dimension, kept in float32 or wider."""
    wide = x if x.dtype in (torch.float32, torch.float64) else x.float()
    return _SquaredNorm.apply(wide)


TINY_SQUARE = 1e-30
"""``‖x‖²`` below which the layer's ``‖x‖`` is held constant (its gradient there is 0)."""


def check_int(name: str, value: int, low: int = 1, high: int | None = None) -> None:
    """``value`` is an integer in ``low..high`` (the one range check of the layer hyper-parameters)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f">= {low}" if high is None else f"in {low}..{high}"
        raise ValueError(f"{name} must be an integer {bounds}, got {value!r}")


def check_choice(name: str, value: str, allowed: tuple) -> None:
    """``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}")


def check_positive_float(name: str, value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


class EUGenLinear(nn.Module):
    """``y = A · Φ(f(x)) + c``: a drop-in for ``nn.Linear`` followed by an activation.

    Args:
        in_features: input width ``d``.
        out_features: output width ``l``.
        num_features: ``m``, random features per polynomial order.
        degree: ``k``, the highest polynomial order (``>= 1``).
        use_norm: append ``‖x‖`` to ``x⁺`` (what lets EUGens depend on the input's norm directly).
        feature_map: ``Φ``, applied element-wise to the concatenated features.
        projection: ``"gaussian"`` (i.i.d. rows) or ``"orthogonal"`` (block-orthogonal rows).
        trainable_projections: learn ``G`` (stored in the state dict) instead of freezing it
            (regenerated from ``seed``, never stored).
        shared_projections: see the module docstring.
        seed: seed of the projections.
        bias: learn the constant block ``c``.
        projection_scale: multiplies the (already ``1/sqrt(d+2)``-normalised) projections; a
            frequency for ``feature_map="sin"`` (SIREN's ``ω₀``), 1 otherwise.
        scaling: ``"linear"`` (default: direction features times ``rms(x⁺)``, degree-1 like ReLU),
            ``"unit"`` (project the direction of ``x⁺``: bounded features, safe at any depth), ``"projected"``
            (``linear`` with ``rms(x⁺)`` estimated by ``rms(G x⁺)``: no ``‖x‖``) or ``"polynomial"`` (products
            of ``x⁺`` itself, the unbiased estimate's form); see the module docstring.
        constant_projection: ``False`` draws ``G``'s column for the constant entry of ``x⁺`` as zeros (set
            it before :meth:`regenerate_projections`): the offset of ``G x⁺`` is then the bias of the layer
            before, as in a SIREN started as SIREN (``eugen_nerf.fields.siren``).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        num_features: int = 64,
        degree: int = 2,
        *,
        use_norm: bool = True,
        feature_map: FeatureMap = "identity",
        projection: ProjectionKind = "gaussian",
        trainable_projections: bool = False,
        shared_projections: bool = True,
        seed: int = 0,
        bias: bool = True,
        projection_scale: float = 1.0,
        scaling: Scaling = "linear",
        constant_projection: bool = True,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        for name, value in [
            ("in_features", in_features),
            ("out_features", out_features),
            ("num_features", num_features),
            ("degree", degree),
        ]:
            check_int(name, value)
        check_choice("feature_map", feature_map, FEATURE_MAPS)
        check_choice("projection", projection, PROJECTION_KINDS)
        check_choice("scaling", scaling, SCALINGS)
        check_positive_float("projection_scale", projection_scale)
        self.scaling = scaling
        self.in_features = in_features
        self.out_features = out_features
        self.num_features = num_features
        self.degree = degree
        self.use_norm = use_norm
        self.feature_map = feature_map
        self.projection = projection
        self.trainable_projections = trainable_projections
        self.shared_projections = shared_projections
        self.seed = int(seed)
        self.projection_scale = float(projection_scale)
        self.constant_projection = bool(constant_projection)

        factory = {"device": device, "dtype": dtype}
        projections = self._draw(self.num_projection_matrices).to(
            **{k: v for k, v in factory.items() if v is not None}
        )
        if trainable_projections:
            self.projections = nn.Parameter(projections)
        else:
            # persistent=False: frozen projections come back from the seed, not from checkpoints.
            self.register_buffer("projections", projections, persistent=False)
        # Saved with the checkpoint so a loaded layer regenerates the projections it was trained with.
        self.register_buffer("projection_seed", torch.tensor(self.seed, dtype=torch.int64))
        self.weight = nn.Parameter(torch.empty(out_features, self.feature_dim, **factory))
        self.bias = nn.Parameter(torch.empty(out_features, **factory)) if bias else None
        bound = 1.0 / math.sqrt(self.feature_dim)  # nn.Linear's default range
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    # ------------------------------------------------------------------ construction helpers
    @property
    def augmented_dim(self) -> int:
        """Width of ``x⁺``: ``d + 1`` (constant) ``+ 1`` (norm, when used)."""
        return self.in_features + 1 + int(self.use_norm)

    @property
    def feature_dim(self) -> int:
        """Width ``M = k·m`` of ``f(x)`` (the constant order lives in the bias)."""
        return self.degree * self.num_features

    def _draw(self, num_matrices: int) -> torch.Tensor:
        """Projections scaled by ``1/sqrt(d+2)`` so ``G x⁺`` is O(rms(x)) whatever the width."""
        g = draw_projections(num_matrices, self.num_features, self.augmented_dim, self.seed, self.projection)
        if not self.constant_projection:
            g[..., self.in_features] = 0.0
        scale = self.projection_scale / math.sqrt(self.augmented_dim)
        return g.reshape(num_matrices * self.num_features, self.augmented_dim) * scale

    def regenerate_projections(self) -> None:
        """Redraw frozen projections from ``self.seed`` on the layer's current device and dtype."""
        if self.trainable_projections:
            raise RuntimeError("trainable projections are stored in the state dict, not regenerated")
        current = self.projections
        self.projections = self._draw(self.num_projection_matrices).to(current)

    @property
    def num_projection_matrices(self) -> int:
        return self.degree if self.shared_projections else self.degree * (self.degree + 1) // 2

    @classmethod
    def from_dense(
        cls,
        linear: nn.Linear,
        poly_coeffs: Sequence[float],
        num_features: int = 64,
        **kwargs,
    ) -> EUGenLinear:
        """Unbiased random-feature estimate of ``poly(linear(x))``, ``poly(z) = Σ_i a_i z^i``.

        ``poly_coeffs = (a_0, ..., a_k)`` fixes the degree ``k``. With ``w⁺ = [w; b; 0]`` we have
        ``w⁺ᵀx⁺ = wᵀx + b``; each order-``i`` feature is ``∏_j (g_jᵀx⁺)`` and its weight
        ``(a_i / m) ∏_j (g_jᵀw⁺)``, whose product has expectation ``a_i (w⁺ᵀx⁺)^i`` (times
        ``(d+2)^{-i}`` from the projections' scale, which the weight undoes).
        Identity feature map and Gaussian projections are what make it unbiased; other choices
        are accepted but then the estimate is biased.
        """
        coeffs = [float(a) for a in poly_coeffs]
        if len(coeffs) < 2:
            raise ValueError(f"poly_coeffs must have at least 2 entries (a_0, a_1, ...), got {coeffs}")
        kwargs.setdefault("feature_map", "identity")
        kwargs.setdefault("scaling", "polynomial")  # the estimate is of powers of x⁺ itself
        layer = cls(
            linear.in_features,
            linear.out_features,
            num_features=num_features,
            degree=len(coeffs) - 1,
            bias=True,
            device=linear.weight.device,
            dtype=linear.weight.dtype,
            **kwargs,
        )
        with torch.no_grad():
            w = linear.weight.detach().double()
            b = linear.bias.detach().double() if linear.bias is not None else torch.zeros(w.shape[0])
            w_plus = torch.cat([w, b.unsqueeze(1).to(w)], dim=1)
            if layer.use_norm:
                w_plus = torch.cat([w_plus, torch.zeros_like(b).unsqueeze(1).to(w)], dim=1)
            # Weight-side features: the same products of projections, applied to w⁺.
            weight_features = layer.products(w_plus @ layer.projections.double().T)  # (l, k·m)
            orders = torch.arange(1, layer.degree + 1, dtype=torch.float64)
            unscale = layer.augmented_dim / layer.projection_scale**2
            scale = torch.tensor(coeffs[1:], dtype=torch.float64) * unscale**orders
            scale = scale.repeat_interleave(num_features) / num_features
            layer.weight.copy_((weight_features * scale).to(layer.weight))
            layer.bias.fill_(coeffs[0])
        return layer

    # ------------------------------------------------------------------ forward
    @property
    def needs_input_norm(self) -> bool:
        """Whether ``‖x‖`` enters the layer (the norm entry, or the scale of ``x⁺``)."""
        return self.use_norm or self.scaling in ("unit", "linear")

    def input_rms(self, norm: torch.Tensor | None, square: torch.Tensor | None = None) -> torch.Tensor:
        """``rms(x⁺) = ‖x⁺‖ / sqrt(d+2)`` from ``‖x‖`` (or ``square``, ``‖x‖²``, when given); never 0 (``x⁺``
        holds the constant 1)."""
        square = (norm.square() if square is None else square) * (1 + int(self.use_norm)) + 1.0
        return (square / self.augmented_dim).sqrt()

    @staticmethod
    def projected_rms(projected: torch.Tensor) -> torch.Tensor:
        """``rms(G x⁺)`` over the projection rows, ``scaling="projected"``'s estimate of ``rms(x⁺)`` (kept in
        float32 or wider, as :func:`input_norm`, from one pass over the projections); floored so that ``G x⁺ = 0``
        divides by a tiny number, not 0."""
        return (squared_input_norm(projected) / projected.shape[-1] + TINY_SQUARE).sqrt()

    def projections_of(self, x: torch.Tensor, norm: torch.Tensor | None = None) -> torch.Tensor:
        """``G x⁺`` for every projection row, without building ``x⁺``.

        ``norm`` overrides ``‖x‖`` (the fused path knows it without having ``x``).
        """
        g = self.projections.to(x.dtype)
        d = self.in_features
        out = torch.addmm(g[:, d], x, g[:, :d].T)
        if self.use_norm:
            if norm is None:
                norm = input_norm(x)
            out = torch.addcmul(out, norm.to(out.dtype), g[:, d + 1])  # the norm is kept in float32
        return out

    def products(self, projected: torch.Tensor, rms: torch.Tensor | None = None) -> torch.Tensor:
        """Turn projections ``(N, rows)`` into the order-1..k products ``(N, k·m)``.

        Shared projections multiply running products block by block: ``cumprod``'s backward handles zeros
        with masks, flips and divisions and costs more than the layer's matrix products. With ``rms``
        (shared projections only), every factor after the first is divided by it: order ``i`` is then
        ``∏_j p_j / rms^(i-1)``.
        """
        n, m, k = projected.shape[0], self.num_features, self.degree
        if self.shared_projections:
            if k == 1:
                return projected
            factors = projected.split(m, dim=1)  # one backward for all blocks (a slice's zero-fills a copy)
            # multiplying by 1 / rms: a product's gradient is cheaper than a quotient's
            inverse = None if rms is None else rms.reciprocal()
            running = factors[0]
            blocks = [running]
            for factor in factors[1:]:
                running = running * (factor if inverse is None else factor * inverse)
                blocks.append(running)
            return torch.cat(blocks, dim=1)
        if rms is not None:
            raise ValueError("products with rms need shared projections")
        blocks, start = [], 0
        for order in range(1, k + 1):
            blocks.append(projected[:, start * m : (start + order) * m].view(n, order, m).prod(dim=1))
            start += order
        return torch.cat(blocks, dim=1)

    def features(self, x: torch.Tensor, norm: torch.Tensor | None = None) -> torch.Tensor:
        """``Φ(f(x))``, shape ``(..., k·m)``: what ``A`` multiplies (and what distillation fits)."""
        if x.shape[-1] != self.in_features:
            raise ValueError(
                f"EUGenLinear expected inputs with last dimension in_features={self.in_features}, "
                f"got shape {tuple(x.shape)}"
            )
        lead = x.shape[:-1]
        flat = x.reshape(-1, self.in_features)
        square = None
        if norm is not None:
            norm = norm.reshape(-1, 1)
        elif self.needs_input_norm:
            # from ‖x‖², whose gradient (2x) is one pass over x
            square = squared_input_norm(flat)
            if self.use_norm:
                norm = square.clamp_min(TINY_SQUARE).sqrt()  # the gradient at x = 0 is 0, as the norm's
        projected = self.projections_of(flat, norm)
        if self.scaling == "polynomial":
            feats = _FEATURE_MAP_FNS[self.feature_map](self.products(projected))
        elif self.scales_higher_orders:
            # Φ(a·z) = a·Φ(z) for a > 0, so Φ(∏_j (p_j / rms))·rms = Φ(p_1 · ∏_{j>1} p_j / rms): the same
            # features with one division per higher order and no scaling of the whole feature block.
            rms = self._rms(projected, norm, square).to(projected.dtype) if self.degree > 1 else None
            feats = _FEATURE_MAP_FNS[self.feature_map](self.products(projected, rms))
        else:
            rms = self._rms(projected, norm, square).to(projected.dtype)  # float32 for half weights: back
            feats = _FEATURE_MAP_FNS[self.feature_map](self.products(projected / rms))
            if self.scaling != "unit":
                feats = feats * rms
        return feats.reshape(*lead, self.feature_dim)

    @property
    def scales_higher_orders(self) -> bool:
        """:func:`scales_higher_orders` for this layer."""
        return scales_higher_orders(self.scaling, self.feature_map, self.shared_projections)

    def _rms(
        self, projected: torch.Tensor, norm: torch.Tensor | None, square: torch.Tensor | None
    ) -> torch.Tensor:
        """The scale of ``x⁺`` the features are divided by: estimated from ``projected`` or exact from ``‖x‖``."""
        if self.scaling == "projected":
            return self.projected_rms(projected)
        return self.input_rms(norm, square)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(self.features(x), self.weight, self.bias)

    # ------------------------------------------------------------------ bookkeeping
    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.seed = int(self.projection_seed)
        if not self.trainable_projections:
            self.regenerate_projections()

    def macs_per_point(self) -> int:
        """Multiply-accumulates per input point (projections, products, output)."""
        rows = self.projections.shape[0]
        products = (
            self.feature_dim * (self.degree - 1) if self.shared_projections else rows - self.feature_dim
        )
        return (
            rows * (self.in_features + int(self.use_norm)) + products + self.out_features * self.feature_dim
        )

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, m={self.num_features}, "
            f"k={self.degree}, norm={self.use_norm}, phi={self.feature_map}, proj={self.projection}, "
            f"trainable_G={self.trainable_projections}, shared_G={self.shared_projections}, seed={self.seed}"
            + (f", scale={self.projection_scale}" if self.projection_scale != 1.0 else "")
            + f", scaling={self.scaling}"
        )
