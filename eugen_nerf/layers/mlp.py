"""EUGenMLP: nerfstudio's ``MLP`` signature with a per-layer choice of dense, EUGen or baseline.

Layer ``i`` follows nerfstudio's ``MLP`` exactly (first ``in_dim -> width``, skips concatenate
``[input, hidden]``, last ``width -> out_dim``), so a dense EUGenMLP loads a stock MLP's weights.
An EUGen layer replaces ``activation(linear(x))`` as a whole: no activation follows it, its feature
map is its non-linearity. ``out_activation`` is applied to the output in every case.

In eval mode (and unless ``fuse_in_eval=False``) the forward pass of an MLP with an EUGen layer, or of an
all-dense one, runs the fused form of :mod:`eugen_nerf.layers.fused`, rebuilt automatically whenever a
parameter changes (:attr:`EUGenMLP.runs_fused`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence

import torch
from torch import nn

from eugen_nerf.layers.baselines import LowRankLinear, snnk_linear
from eugen_nerf.layers.eugen import EUGenLinear, activate, check_int
from eugen_nerf.layers.spec import LAYER_TYPES, EUGenSpec, LayerType


def resolve_layer_types(
    layer_types: str | Sequence[str], num_layers: int, eugen_layers: Sequence[int] | None = None
) -> tuple[str, ...]:
    """Expand ``layer_types`` (one name for all, or one per layer) and ``eugen_layers`` (indices,
    negative allowed, turned to ``eugen``) into one validated type per layer."""
    if isinstance(layer_types, str):
        types = [layer_types] * num_layers
    else:
        types = list(layer_types)
        if len(types) != num_layers:
            raise ValueError(
                f"layer_types must have num_layers={num_layers} entries, got {len(types)}: {types}"
            )
    for index in eugen_layers or ():
        if not -num_layers <= index < num_layers:
            raise ValueError(
                f"eugen layer index {index} does not exist: valid indices are 0..{num_layers - 1}"
            )
        types[index] = "eugen"
    for t in types:
        if t not in LAYER_TYPES:
            raise ValueError(f"layer type must be one of {LAYER_TYPES}, got {t!r}")
    return tuple(types)


class EUGenMLP(nn.Module):
    """Multilayer perceptron whose layers are dense, EUGen, low-rank or SNNK-style.

    Args:
        in_dim, num_layers, layer_width, out_dim, skip_connections, activation, out_activation:
            as nerfstudio's ``MLP``.
        layer_types: one type for every layer, or one per layer.
        eugen_layers: indices of layers made EUGen on top of ``layer_types`` (negative allowed).
        eugen: hyper-parameters of EUGen/SNNK/low-rank layers (layer ``i`` uses ``seed + i``); its
            ``layer_type`` is not read here (``layer_types`` says which layer is what).
        fuse_in_eval: run the merged feature-to-feature form in eval mode (default: ``eugen.fused_inference``).
        compile_fused: run the fused form through ``torch.compile`` (fuses its element-wise work;
            the first call compiles, which takes tens of seconds on a CPU). Falls back to the eager
            fused form, with a warning, where compilation fails (default: ``eugen.compile_fused``).
    """

    def __init__(
        self,
        in_dim: int,
        num_layers: int,
        layer_width: int,
        out_dim: int | None = None,
        skip_connections: Sequence[int] | None = None,
        activation: nn.Module | None = nn.ReLU(),  # noqa: B008 - as nerfstudio's MLP (stateless)
        out_activation: nn.Module | None = None,
        layer_types: LayerType | Sequence[LayerType] = "dense",
        eugen_layers: Sequence[int] | None = None,
        eugen: EUGenSpec | None = None,
        fuse_in_eval: bool | None = None,
        compile_fused: bool | None = None,
    ) -> None:
        super().__init__()
        for name, value in [("in_dim", in_dim), ("num_layers", num_layers), ("layer_width", layer_width)]:
            check_int(name, value)
        self.in_dim = in_dim
        self.num_layers = num_layers
        self.layer_width = layer_width
        self.out_dim = out_dim if out_dim is not None else layer_width
        self.skip_connections = tuple(sorted(skip_connections or ()))
        for index in self.skip_connections:
            if not 0 < index < num_layers:
                raise ValueError(f"skip connection {index} must be in 1..{num_layers - 1}")
        self.activation = activation
        self.out_activation = out_activation
        self.layer_types = resolve_layer_types(layer_types, num_layers, eugen_layers)
        eugen = eugen if eugen is not None else EUGenSpec()
        eugen.validate()  # a spec changed after construction is checked here
        self.eugen = eugen
        self.fuse_in_eval = eugen.fused_inference if fuse_in_eval is None else fuse_in_eval
        self.compile_fused = eugen.compile_fused if compile_fused is None else compile_fused
        self.layers = nn.ModuleList(
            self.make_layer(kind, *self.layer_dims(i), eugen.offset_seed(i))
            for i, kind in enumerate(self.layer_types)
        )
        self._fused = None
        self._fused_key = None
        self._compiled = None

    def layer_dims(self, index: int) -> tuple[int, int]:
        """(input, output) width of layer ``index``, as in nerfstudio's ``MLP``."""
        if self.num_layers == 1:
            return self.in_dim, self.out_dim
        fan_in = self.in_dim if index == 0 else self.layer_width
        if index in self.skip_connections:
            fan_in += self.in_dim
        return fan_in, self.out_dim if index == self.num_layers - 1 else self.layer_width

    @staticmethod
    def make_layer(kind: str, fan_in: int, fan_out: int, spec: EUGenSpec) -> nn.Module:
        """One layer of ``kind`` as this MLP builds it (distillation and SIREN swap such layers in)."""
        if kind == "dense":
            return nn.Linear(fan_in, fan_out)
        feature_dim = spec.num_features * spec.degree  # baselines get EUGen's feature width / parameters
        if kind == "lowrank":
            return LowRankLinear(fan_in, fan_out, rank=EUGenMLP.lowrank_rank(spec, fan_in, fan_out))
        if kind == "snnk":
            return snnk_linear(
                fan_in,
                fan_out,
                num_features=feature_dim,
                seed=spec.seed,
                trainable_projections=spec.trainable_projections,
            )
        return EUGenLinear(
            fan_in,
            fan_out,
            num_features=spec.num_features,
            degree=spec.degree,
            use_norm=spec.use_norm,
            feature_map=spec.feature_map,
            projection=spec.projection,
            trainable_projections=spec.trainable_projections,
            shared_projections=spec.shared_projections,
            seed=spec.seed,
            projection_scale=spec.projection_scale,
            scaling=spec.scaling,
        )

    @staticmethod
    def lowrank_rank(spec: EUGenSpec, fan_in: int, fan_out: int) -> int:
        """Rank of a low-rank baseline layer: ``spec.lowrank_rank``, or the rank ``l·k·m / (d + l)`` at
        which ``U V`` has as many weights as EUGen's ``A`` (EUGen's learned weights when ``G`` is frozen and
        seeded; a trained ``G`` adds its own)."""
        feature_dim = spec.num_features * spec.degree
        return spec.lowrank_rank or max(1, round(fan_out * feature_dim / (fan_in + fan_out)))

    def get_out_dim(self) -> int:
        return self.out_dim

    def applies_activation(self, index: int) -> bool:
        """Hidden dense/low-rank layers are followed by ``activation``; EUGen layers carry their own, and so
        does a module that wraps one as ``.layer`` (a training-time form of it, e.g. ``--sine-basis``'s).

        Read from the layers on every call, not cached: distillation swaps layers after construction.
        """
        layer = self.layers[index]
        return (
            self.activation is not None
            and index < self.num_layers - 1
            and not isinstance(layer, EUGenLinear)
            and not isinstance(getattr(layer, "layer", None), EUGenLinear)
        )

    @property
    def has_eugen(self) -> bool:
        return any(isinstance(layer, EUGenLinear) for layer in self.layers)

    @property
    def runs_fused(self) -> bool:
        """Whether eval mode runs the fused form: with ``fuse_in_eval``, for an MLP with an EUGen layer (merged)
        and for an all-dense one (its own layers, run by the same executor as its EUGen twin's). An MLP with
        low-rank layers and no EUGen layer runs layer by layer: merging would undo their factorisation."""
        return self.fuse_in_eval and (
            self.has_eugen or all(type(layer) is nn.Linear for layer in self.layers)
        )

    def forward_unfused(self, in_tensor: torch.Tensor) -> torch.Tensor:
        inplace = not torch.is_grad_enabled()  # a layer's output is a fresh buffer: activate it in place
        x = in_tensor
        for i, layer in enumerate(self.layers):
            if i in self.skip_connections:
                x = torch.cat([in_tensor, x], dim=-1)
            x = layer(x)
            if self.applies_activation(i):
                x = activate(self.activation, x, inplace)
        return activate(self.out_activation, x, inplace)

    def fused(self):
        """The merged inference form, rebuilt when any parameter or buffer (frozen projections are buffers),
        device, dtype or the output activation changed."""
        from eugen_nerf.layers.fused import FusedMLP  # fused builds on this module

        tensors = [*self.parameters(), *self.buffers()]
        key = (id(self.out_activation), *((id(t), t._version, t.device, t.dtype) for t in tensors))
        if self._fused is None or key != self._fused_key:
            self._fused = FusedMLP.from_mlp(self)
            self._fused_key = key
            self._compiled = None
        return self._fused

    def _run_fused(self, in_tensor: torch.Tensor) -> torch.Tensor:
        fused = self.fused()
        if not self.compile_fused:
            return fused(in_tensor)
        if self._compiled is None:
            self._compiled = torch.compile(functools.partial(fused.__call__, rows_per_pass=0))  # one graph
        try:
            return self._compiled(in_tensor)
        except Exception as error:  # noqa: BLE001 - no compiler, backend...: warn once
            warnings.warn(
                f"torch.compile of the fused EUGen MLP failed ({type(error).__name__}: {error}); "
                "using the eager fused form"
            )
            self.compile_fused = False
            return fused(in_tensor)

    def forward(self, in_tensor: torch.Tensor) -> torch.Tensor:
        if in_tensor.shape[-1] != self.in_dim:
            raise ValueError(
                f"EUGenMLP expected last dimension in_dim={self.in_dim}, got {tuple(in_tensor.shape)}"
            )
        if not self.training and self.runs_fused:
            return self._run_fused(in_tensor)
        if not torch.is_grad_enabled() and not self.layers_hooked():
            # with hooks on its layers, whole (a hook sees the batch it was called with)
            return self._unfused_in_passes([in_tensor])
        return self.forward_unfused(in_tensor)

    def _unfused_in_passes(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """Layer by layer without autograd (a low-rank MLP, or fused inference off) in passes of rows as the
        fused form runs, so that both are timed alike; each pass concatenates its own rows of ``parts``."""
        from eugen_nerf.layers.fused import default_rows_per_pass, run_in_passes

        flat = [part.reshape(-1, part.shape[-1]) for part in parts]
        out = run_in_passes(
            lambda rows: self.forward_unfused(rows[0] if len(rows) == 1 else torch.cat(rows, dim=-1)),
            flat,
            default_rows_per_pass(flat[0]),
        )
        return out.reshape(*parts[0].shape[:-1], out.shape[-1])

    def layers_hooked(self) -> bool:
        """Whether a forward hook or pre-hook would see the layers' calls: one on a module inside this MLP, or a
        global one (``nn.modules.module.register_module_forward_hook``)."""
        from torch.nn.modules import module

        if module._global_forward_hooks or module._global_forward_pre_hooks:
            return True
        return any(sub._forward_hooks or sub._forward_pre_hooks for sub in self.modules() if sub is not self)

    def forward_concat(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """``self(torch.cat(parts, dim=-1))``. The eager fused form reads the parts apart (one matrix product
        per part in the first layer and in every skip), so the concatenation, the widest buffer of a colour
        head's render, is never built; without autograd the layer-by-layer form concatenates one pass of rows
        at a time (:data:`~eugen_nerf.layers.fused.CPU_ROWS`) as it runs them. With forward hooks on the module
        (distillation's probe and capture record each MLP's input through them) the call goes through ``self``
        on the concatenation, so the
        hooks see what they would see had the field called the module."""
        parts = list(parts)
        width = sum(part.shape[-1] for part in parts)
        if width != self.in_dim:
            raise ValueError(f"EUGenMLP expected parts {self.in_dim} wide in all, got {width}")
        hooked = bool(self._forward_hooks or self._forward_pre_hooks)
        fused = not self.training and self.runs_fused
        if not hooked and fused and not self.compile_fused:
            return self.fused()(parts)
        if not hooked and not fused and not torch.is_grad_enabled() and not self.layers_hooked():
            # the whole batch's concatenation is never built here either
            return self._unfused_in_passes(parts)
        return self(torch.cat(parts, dim=-1))

    def macs_per_point(self) -> int:
        """Multiply-accumulates per point of the unfused form."""
        total = 0
        for layer in self.layers:
            total += layer.macs_per_point() if hasattr(layer, "macs_per_point") else layer.weight.numel()
        return total
