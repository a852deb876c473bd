"""The merged inference form of an :class:`EUGenMLP` (spec section 2, "Merging").

An EUGen layer's output ``h = A F + c`` is linear in its features ``F``, so whatever consumes
``h`` can absorb ``A``: a dense layer computes ``(W A) F + (W c + b)``, a following EUGen layer
projects with ``(G A) F + (G c + g₁)``. Its norm entry ``‖h‖`` is recovered without ``h``:
``‖A F + c‖ = ‖R [F; 1]‖`` where ``R`` is the triangular factor of ``[A, c]`` (QR), so the norm
costs ``(M+1)·M`` instead of ``l·M``. When ``R`` is square its last row is ``(0, …, 0, ρ)``: it is kept
as the number ``ρ`` (``‖h‖ = hypot(‖R' [F; 1]‖, ρ)``), so a chain step is ``k·m + M`` wide, an even width
(``M + 1`` norm rows made the CPU's matrix product ~40% slower). A chain of EUGen layers therefore runs
feature to feature and the ``l``-wide hidden activation is never built.

When every order's projection rows are rows of the first order's (``eugen-distill --projections teacher``
builds such layers: order ``i`` is a unit's pre-activation to the power ``i``, or with ``teacher-pairs`` its
product with the units pivoted before it), the fused form projects onto the ``m`` rows once and multiplies
(permuted) copies of them, so those layers cost ``m`` projection rows, not ``k·m``.

An all-dense MLP has nothing to merge: its fused form is its own layers run by the same executor, so an
EUGen MLP and its dense twin are run by one implementation at inference. Without autograd the executor
works in place where it can (activations, skip products added into the matmul output) and never
concatenates: a skip adds ``W_skip · input`` to the layer's product, and an input given as parts
(``fused([a, b])`` for ``torch.cat([a, b], -1)``, a colour head's direction encoding and trunk features)
is multiplied part by part with its columns of the weights, by the first layer and by every skip, its
norm summed from the parts' norms.

All merged matrices are computed once in float64 and cast to the MLP's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch
from torch import nn

from eugen_nerf.layers.alignment import order_rows
from eugen_nerf.layers.baselines import LowRankLinear
from eugen_nerf.layers.eugen import _FEATURE_MAP_FNS, FEATURE_MAPS_IN_PLACE, EUGenLinear, activate, input_norm


@dataclass
class _Step:
    """One layer of the fused MLP.

    ``weight``/``bias`` map the layer's source (features ``F`` of the previous EUGen layer, or the
    materialised previous output) to its pre-activation (dense/low-rank) or to its projections
    followed by ``norm_rows`` rows whose squared norm is ``‖h‖²`` (EUGen). ``skip_weight`` maps the
    MLP input when the layer has a skip connection.
    """

    weight: torch.Tensor
    bias: torch.Tensor
    skip_weight: torch.Tensor | None = None  # projection rows only
    activation: Callable | None = None
    layer: EUGenLinear | None = None
    norm_rows: int = 0
    norm_constant: torch.Tensor | None = None  # ρ (0-d), R's constant last row: ‖h‖ = hypot(‖norm rows‖, ρ)
    norm_projection: torch.Tensor | None = None  # EUGen: the projections' column for ‖x‖
    out_weight: torch.Tensor | None = None  # EUGen last layer: A, c materialise the output
    out_bias: torch.Tensor | None = None
    # EUGen whose orders reuse the first order's rows: per order, the index of its factor's columns among the
    # m projected ones (None where it is the first order's own order); only the first order's are projected
    factors: list[torch.Tensor | None] | None = None


def _linear_parts(layer: nn.Module) -> tuple:
    """``(W, b)`` in float64 for a dense or low-rank layer."""
    if isinstance(layer, LowRankLinear):
        weight = layer.up.double() @ layer.down.double()
    else:
        weight = layer.weight.double()
    bias = (
        layer.bias.double()
        if layer.bias is not None
        else torch.zeros(weight.shape[0], dtype=torch.float64, device=weight.device)
    )
    return weight, bias


def _norm_factor(weight: torch.Tensor, bias: torch.Tensor) -> tuple:
    """``(R, ρ)`` with ``‖W F + b‖² = ‖R [F; 1]‖² + ρ²`` for every ``F`` (QR of ``[W, b]``).

    A square triangular factor's last row is ``(0, …, 0, ρ)``: it is dropped and returned as ``ρ``, a 0-d
    tensor on the weights' device (None when ``R`` is wide), so no call builds it again.
    """
    r = torch.linalg.qr(torch.cat([weight, bias.unsqueeze(1)], dim=1), mode="r").R
    if r.shape[0] < r.shape[1]:
        return r, None
    return r[:-1], r[-1, -1].abs()


def _feature_map(layer: EUGenLinear, products: torch.Tensor, inplace: bool) -> torch.Tensor:
    """``Φ(products)``, in place for the maps that have an in-place form when ``inplace``."""
    in_place = FEATURE_MAPS_IN_PLACE.get(layer.feature_map) if inplace else None
    return in_place(products) if in_place is not None else _FEATURE_MAP_FNS[layer.feature_map](products)


def _norm(source: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    """``‖source‖`` (a tensor, or the concatenation of a list of parts) over the last dimension."""
    if isinstance(source, torch.Tensor) or len(source) == 1:
        return input_norm(source if isinstance(source, torch.Tensor) else source[0])
    return _squared_norm(source).sqrt()


def _squared_norm(parts: list[torch.Tensor]) -> torch.Tensor:
    """``‖cat(parts)‖²`` over the last dimension, from the parts' norms."""
    total = input_norm(parts[0]).square()
    for part in parts[1:]:
        total = total + input_norm(part).square()
    return total


def _column_blocks(parts: list[torch.Tensor], weight: torch.Tensor):
    """``(part, its columns of weight)`` for each part of an input ``cat(parts)`` multiplied by ``weight.T``."""
    start = 0
    for part in parts:
        yield part, weight[:, start : start + part.shape[1]]
        start += part.shape[1]


def _product(
    bias: torch.Tensor | None, source: torch.Tensor | list[torch.Tensor], weight: torch.Tensor, inplace: bool
) -> torch.Tensor:
    """``bias + cat(source) @ weight.T`` for a tensor or a list of parts, without building the concatenation:
    the first part's product starts the output, the others' are added into it (in place when allowed)."""
    parts = [source] if isinstance(source, torch.Tensor) else source
    z = None
    for part, columns in _column_blocks(parts, weight):
        if z is None:
            z = part @ columns.T if bias is None else torch.addmm(bias, part, columns.T)
        elif inplace:
            _add_product(z, part, columns)
        else:
            z = z + part @ columns.T
    return z


def _add_product(out: torch.Tensor, part: torch.Tensor, columns: torch.Tensor) -> None:
    """``out += part @ columns.T`` in place. Autocast does not cast in-place operations: the operands take
    ``out``'s dtype (bf16 under autocast)."""
    out.addmm_(part.to(out.dtype), columns.T.to(out.dtype))


CPU_ROWS = 4096
"""Rows a pass of the chain runs on a CPU without autograd. Each step's ``(rows, width)`` buffers then stay in
the processor's cache (4 MB at 256 wide) while its element-wise passes (bias, activation, products, norms)
and the next matrix product read them, where a whole batch's buffers (hundreds of MB for a NeRF render's
chunk) stream through memory at every pass and are paged in afresh at every allocation: dense and EUGen MLPs
both run faster so, EUGen more where its element-wise passes are a larger part of its cost (the benchmarks'
``inference`` suite times both). A GPU runs the batch whole: there each pass is a kernel launch."""


def default_rows_per_pass(tensor: torch.Tensor) -> int:
    """:data:`CPU_ROWS` for a CPU tensor without autograd, else 0 (the whole batch in one pass)."""
    return CPU_ROWS if not torch.is_grad_enabled() and tensor.device.type == "cpu" else 0


def run_in_passes(
    fn: Callable[[list[torch.Tensor]], torch.Tensor], inputs: list[torch.Tensor], rows_per_pass: int
) -> torch.Tensor:
    """``fn(inputs)`` for 2-D ``inputs`` of equal rows and a row-wise ``fn``, computed ``rows_per_pass`` rows at
    a time into one output (all at once for 0, or when there are no more rows than that)."""
    if rows_per_pass < 0:
        raise ValueError(f"rows_per_pass must be 0 (all at once) or positive, got {rows_per_pass}")
    rows = inputs[0].shape[0]
    if not rows_per_pass or rows <= rows_per_pass:
        return fn(inputs)
    out = None
    for start in range(0, rows, rows_per_pass):
        part = fn([tensor[start : start + rows_per_pass] for tensor in inputs])
        if out is None:
            out = part.new_empty(rows, part.shape[1])
        out[start : start + part.shape[0]] = part
        del part
    return out


class FusedMLP:
    """Callable merged form of an :class:`EUGenMLP`; equal to its unfused forward (float rounding aside)."""

    def __init__(self, steps: list[_Step], in_dim: int, out_activation) -> None:
        self.steps = steps
        self.in_dim = in_dim
        self.out_activation = out_activation

    @classmethod
    @torch.no_grad()
    def from_mlp(cls, mlp) -> FusedMLP:
        dtype = next(mlp.parameters()).dtype
        steps: list[_Step] = []
        # The previous EUGen layer's (A, c) when the current source is its features, else None.
        carried = None
        last = mlp.num_layers - 1
        for i, layer in enumerate(mlp.layers):
            has_skip = i in mlp.skip_connections
            split = mlp.in_dim if has_skip else 0  # skip inputs come first: cat([input, hidden])
            is_eugen = isinstance(layer, EUGenLinear)
            norm_weight, norm_constant = None, None
            rows = order_rows(layer) if is_eugen else None
            factors = None
            identity = torch.arange(layer.num_features, device=rows.device) if rows is not None else None
            # the projected scaling's rms is over every order's rows: only when each order's rows are a
            # permutation of the first order's is it the rms of those m rows
            if rows is not None and (
                layer.scaling != "projected" or all(torch.equal(r.sort().values, identity) for r in rows)
            ):
                factors = [None if torch.equal(r, identity) else r.to(layer.projections.device) for r in rows]
            if is_eugen:
                g = layer.projections.double()
                if factors is not None:
                    g = g[: layer.num_features]
                d = layer.in_features
                weight, bias = g[:, :d], g[:, d].clone()
            else:
                weight, bias = _linear_parts(layer)
            skip_weight, hidden_weight = weight[:, :split], weight[:, split:]
            if carried is not None:
                a, c = carried
                bias = bias + hidden_weight @ c
                hidden_weight = hidden_weight @ a
                if is_eugen and layer.needs_input_norm:
                    r, norm_constant = _norm_factor(a, c)
                    norm_weight, norm_bias = r[:, :-1], r[:, -1]
            norm_rows = 0
            if norm_weight is not None:
                hidden_weight = torch.cat([hidden_weight, norm_weight], dim=0)
                bias = torch.cat([bias, norm_bias], dim=0)
                norm_rows = norm_weight.shape[0]  # the skip input feeds the projections, not these rows
            step = _Step(
                weight=hidden_weight.to(dtype),
                bias=bias.to(dtype),
                skip_weight=skip_weight.to(dtype) if has_skip else None,
                activation=mlp.activation if mlp.applies_activation(i) else None,
                layer=layer if is_eugen else None,
                norm_rows=norm_rows,
                norm_constant=norm_constant.to(dtype) if norm_constant is not None else None,
                factors=factors,
            )
            carried = None
            if is_eugen:
                if layer.use_norm:
                    step.norm_projection = g[:, layer.in_features + 1].to(dtype).contiguous()
                a = layer.weight.double()
                c = layer.bias.double() if layer.bias is not None else a.new_zeros(a.shape[0])
                if i == last:
                    step.out_weight, step.out_bias = a.to(dtype), c.to(dtype)
                carried = (a, c)
            steps.append(step)
        return cls(steps, mlp.in_dim, mlp.out_activation)

    def __call__(
        self, in_tensor: torch.Tensor | Sequence[torch.Tensor], rows_per_pass: int | None = None
    ) -> torch.Tensor:
        """The MLP's output for ``in_tensor``, or for the concatenation of the tensors ``in_tensor`` lists
        along their last dimension (never built: each part is multiplied by its columns of the weights).

        ``rows_per_pass``: how many rows (points) run through the chain at a time; default :data:`CPU_ROWS` on
        a CPU without autograd, all of them otherwise (and with 0). Every row's result is the same either way, up to
        float rounding (a short last pass may take another matrix-product kernel).
        """
        parts = [in_tensor] if isinstance(in_tensor, torch.Tensor) else list(in_tensor)
        width = sum(part.shape[-1] for part in parts)
        if width != self.in_dim:
            raise ValueError(f"the fused MLP expects inputs {self.in_dim} wide in all, got {width}")
        lead = parts[0].shape[:-1]
        # Without autograd, element-wise work runs in place on the matmul output: on a CPU the fused
        # layers are memory-bound, so every avoided pass over the (N, rows) buffer counts.
        inplace = not torch.is_grad_enabled()
        inputs = [part.reshape(-1, part.shape[-1]) for part in parts]
        del parts
        if rows_per_pass is None:
            rows_per_pass = default_rows_per_pass(inputs[0])
        x = run_in_passes(lambda rows: self._chain(rows, inplace), inputs, rows_per_pass)
        return x.reshape(*lead, x.shape[-1])

    def _chain(self, inputs: list[torch.Tensor], inplace: bool) -> torch.Tensor:
        """The chain of steps on ``inputs`` (the MLP input's parts, 2-D), the output activation applied."""
        norms: dict[str, torch.Tensor] = {}  # ‖input‖², computed once for every skip step
        x = inputs  # the first step's source: the input, as its parts
        for step in self.steps:
            # One call per step, handed its source in a list it empties once its matmul has read it: the
            # step's temporaries (the matmul output, views of it, norms) and its source are freed as soon as
            # they are dead, as a layer-by-layer forward frees each activation once the next layer read it.
            source = [x]
            del x
            x = self._step(step, source, inputs, inplace, norms)
        return activate(self.out_activation, x, inplace)

    def _step(
        self,
        step: _Step,
        source: list[torch.Tensor | list[torch.Tensor]],
        inputs: list[torch.Tensor],
        inplace: bool,
        norms: dict[str, torch.Tensor],
    ) -> torch.Tensor:
        """One layer of the chain: its output from its source (``source``'s one item, taken out of the list: the
        previous step's output, or the MLP input's parts) and the MLP's ``inputs`` (parts) for a skip."""
        x = source.pop()
        layer = step.layer
        source_norm = None
        if layer is not None and layer.needs_input_norm and not step.norm_rows:
            # the source is a materialised activation or the input: its norm, before it dies
            source_norm = _norm(x)
        z = _product(step.bias, x, step.weight, inplace)
        del x
        # into the projection rows only (the norm rows are ||h||'s factor)
        if step.skip_weight is not None:
            rows = z[:, : z.shape[1] - step.norm_rows]
            if inplace:
                for part, columns in _column_blocks(inputs, step.skip_weight):
                    _add_product(rows, part, columns)
            else:
                skip = _product(None, inputs, step.skip_weight, inplace)
                z = torch.cat([rows + skip, z[:, rows.shape[1] :]], dim=1) if step.norm_rows else z + skip
            del rows
        if layer is None:  # dense / low-rank
            return activate(step.activation, z, inplace)
        projected, rms = z, None
        if layer.needs_input_norm:
            if step.norm_rows:  # source is the previous layer's features: ‖h‖ = hypot(‖R [F; 1]‖, ρ)
                projected, norm_part = z[:, : -step.norm_rows], z[:, -step.norm_rows :]
                norm = input_norm(norm_part)
                del norm_part
                if step.norm_constant is not None:
                    norm = torch.hypot(norm, step.norm_constant)
            else:
                norm = source_norm
            if step.skip_weight is not None:
                if "input" not in norms:
                    norms["input"] = _squared_norm(inputs)
                norm = (norm.square() + norms["input"]).sqrt()
            if layer.use_norm:
                if inplace:
                    projected.addcmul_(norm.to(projected.dtype), step.norm_projection)
                else:
                    projected = projected + norm.to(projected.dtype) * step.norm_projection
            if layer.scaling in ("unit", "linear"):
                rms = layer.input_rms(norm).to(projected.dtype)
            del norm
        if layer.scaling == "projected":
            rms = layer.projected_rms(projected).to(projected.dtype)
        del z  # ``projected`` holds the buffer the features are computed in
        if rms is not None and inplace and layer.scales_higher_orders and step.factors is None:
            # Φ(a·z) = a·Φ(z) (a > 0): Φ(∏ (p_j / rms))·rms = Φ(p_1 · ∏_{j>1} (p_j / rms)), so only the
            # higher orders' blocks are divided, one pass each, and the feature block is never rescaled
            blocks = projected.view(projected.shape[0], layer.degree, layer.num_features)
            for order in range(1, layer.degree):
                blocks[:, order].mul_(blocks[:, order - 1]).div_(rms)
            features = _feature_map(layer, projected, inplace=True)
        else:
            if rms is not None:
                projected = projected.div_(rms) if inplace else projected / rms
            features = self._features(layer, projected, inplace, step.factors)
            if rms is not None and layer.scaling != "unit":
                features = features.mul_(rms) if inplace else features * rms
        del projected
        if step.out_weight is not None:
            features = torch.addmm(step.out_bias, features, step.out_weight.T)
        return features

    @staticmethod
    def _features(
        layer: EUGenLinear,
        projected: torch.Tensor,
        inplace: bool,
        factors: list[torch.Tensor | None] | None = None,
    ) -> torch.Tensor:
        """``Φ(products)``; in place (running products by successive ``mul_``) when allowed. With ``factors``,
        ``projected`` holds the first order's ``m`` rows only and order ``i`` multiplies order ``i - 1`` by
        its columns ``factors[i]`` (all of them, in order, where None: then the orders are powers)."""
        n, m, k = projected.shape[0], layer.num_features, layer.degree
        if factors is not None:
            columns = [projected if index is None else projected.index_select(1, index) for index in factors]
            if not inplace:
                running = [columns[0]]
                for order in range(1, k):
                    running.append(running[-1] * columns[order])
                return _feature_map(layer, torch.cat(running, 1), inplace=False)
            blocks = projected.new_empty(n, k, m)
            blocks[:, 0] = columns[0]
            for order in range(1, k):
                torch.mul(blocks[:, order - 1], columns[order], out=blocks[:, order])
            return _feature_map(layer, blocks.view(n, k * m), inplace=True)  # a new buffer: no one else's
        if not (inplace and layer.shared_projections):
            return _feature_map(layer, layer.products(projected), inplace=False)
        blocks = projected.view(n, k, m)
        for order in range(1, k):
            blocks[:, order].mul_(blocks[:, order - 1])
        return _feature_map(layer, projected, inplace=True)

    def split_output(self) -> tuple[FusedMLP, torch.Tensor, torch.Tensor]:
        """``(features form, A, c)``: this MLP's output is ``A F + c``, where ``F`` is what the features form
        returns, the last EUGen layer's features (``k·m`` wide). Whatever reads the output linearly can absorb
        ``A`` and ``c`` (:meth:`absorb_input`), so the ``l``-wide output is never built.

        Only for an MLP whose last layer is EUGen and that has no output activation (its output is then
        linear in ``F``)."""
        last = self.steps[-1]
        if last.out_weight is None or self.out_activation is not None:
            raise ValueError(
                "split_output needs an MLP whose last layer is EUGen and that has no output activation"
            )
        features = FusedMLP(
            [*self.steps[:-1], replace(last, out_weight=None, out_bias=None)], self.in_dim, None
        )
        return features, last.out_weight, last.out_bias

    def absorb_input(self, start: int, weight: torch.Tensor, bias: torch.Tensor) -> FusedMLP:
        """This MLP reading, in place of its input columns ``start : start + weight.shape[0]``, ``weight F +
        bias`` computed from ``F`` (``weight.shape[1]`` wide): a copy whose first layer multiplies ``F``
        by its columns times ``weight`` (merged in float64). The copy's input has ``F`` where those columns
        were.

        The first layer must read its input linearly (dense, or EUGen without the input's norm), and no
        later layer may read the input again (no skip connections)."""
        first = self.steps[0]
        width = weight.shape[0]
        if not 0 <= start <= self.in_dim - width:
            raise ValueError(f"columns {start}:{start + width} are not within the input's {self.in_dim}")
        if not self.reads_input_linearly():
            raise ValueError(
                "absorb_input: the MLP reads its input other than through its first layer's matrix "
                "(a skip connection, or the input's norm)"
            )
        w = first.weight.double()
        columns = w[:, start : start + width]
        merged = torch.cat([w[:, :start], columns @ weight.double(), w[:, start + width :]], dim=1)
        step = replace(
            first,
            weight=merged.to(first.weight.dtype),
            bias=(first.bias.double() + columns @ bias.double()).to(first.bias.dtype),
        )
        in_dim = self.in_dim - width + weight.shape[1]
        return FusedMLP([step, *self.steps[1:]], in_dim, self.out_activation)

    def reads_input_linearly(self) -> bool:
        """Whether the input is read only through the first layer's matrix (what :meth:`absorb_input` needs): no
        skip connection reads it again, and the first layer does not read its norm."""
        first = self.steps[0]
        return all(step.skip_weight is None for step in self.steps) and not (
            first.layer is not None and first.layer.needs_input_norm
        )

    @classmethod
    def from_linear(cls, linear: nn.Linear, out_activation=None) -> FusedMLP:
        """A one-step fused form of a dense layer (a field's density head), for :meth:`absorb_input`."""
        weight, bias = _linear_parts(linear)
        dtype = linear.weight.dtype
        return cls([_Step(weight=weight.to(dtype), bias=bias.to(dtype))], linear.in_features, out_activation)

    def macs_per_point(self) -> int:
        """Multiply-accumulates per point of the merged form."""
        total = 0
        for step in self.steps:
            total += step.weight.numel() + (step.skip_weight.numel() if step.skip_weight is not None else 0)
            if step.layer is not None:
                total += step.layer.feature_dim * (step.layer.degree - 1) + step.norm_rows
            if step.out_weight is not None:
                total += step.out_weight.numel()
        return total
