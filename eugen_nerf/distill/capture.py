"""Forward hooks that stream each target layer's (features, target) pairs into normal equations.

A hook sits on every MLP that holds a layer being fitted. It receives the MLP's input, keeps a
seeded ``pair_fraction`` of its rows, and walks the kept rows through two copies of the MLP:

* the **teacher** copy (all dense) gives the target ``Y`` of every layer: its output after the
  MLP's activation (hidden layers) or before ``out_activation`` (last layer, whose EUGen
  replacement is followed by ``out_activation`` just the same; after it where the student drops it);
* the **student so far** (earlier layers already EUGen when fitting sequentially) gives the input
  ``X`` of the layer, including the skip concatenation.

``F = Φ(f(X))`` of the (frozen, seeded) EUGen layer and ``Y`` go into two :class:`NormalEquations`
per layer, a training one and a held-out one (R², ridge selection). The held-out rows are those of whole
held-out cameras (``Capture.held_rays``, set per batch): other samples of the same rays would overstate how
well a layer generalises to a new view. Nothing else is kept: memory
is ``O(M²)`` per layer whatever the number of rays.

The hooks read an MLP's input before it runs. Once every hooked MLP has recorded its batch, the rest of the
render is of no use to the fit (the rows come from the traces above, not from the model's outputs): with
``stop_when_recorded`` the last hook raises :class:`BatchRecorded` and the render stops there. A NeRF's fine
field, called last, then never runs its own MLPs: most of the cost of a capture after the first, whose colours
the fine-tune keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from typing_extensions import Self  # typing.Self needs Python 3.11

from eugen_nerf.distill.student import LayerRef
from eugen_nerf.layers import EUGenLinear, EUGenMLP, LowRankLinear, NormalEquations


def ray_rows(held_rays: Tensor | None, rows: int) -> Tensor | None:
    """The flag of each of an MLP call's ``rows`` from a flag per ray (``None`` when the rows are not a whole
    number of samples per ray): samples are ray-major (``rays × samples`` flattened, as nerfstudio's fields
    call their MLPs), so a ray's flag covers its ``rows / rays`` samples."""
    if held_rays is None or not held_rays.numel() or rows % held_rays.numel():
        return None
    return held_rays.cpu().repeat_interleave(rows // held_rays.numel())


class BatchRecorded(Exception):
    """Every MLP the capture hooks has recorded the batch being rendered: the render may stop."""


@dataclass
class RowStore:
    """The first ``capacity`` (input, target) rows of a layer, kept for the refinement (which needs rows,
    not statistics)."""

    capacity: int
    inputs: list[Tensor] = field(default_factory=list)
    targets: list[Tensor] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(t.shape[0] for t in self.inputs)

    def add(self, inputs: Tensor, targets: Tensor) -> None:
        room = self.capacity - self.count
        if room > 0 and inputs.shape[0]:
            self.inputs.append(inputs[:room].float().cpu())
            self.targets.append(targets[:room].float().cpu())

    def tensors(self) -> tuple[Tensor, Tensor]:
        return torch.cat(self.inputs), torch.cat(self.targets)

    def state_dict(self) -> dict[str, list[Tensor]]:
        return {"inputs": list(self.inputs), "targets": list(self.targets)}

    def load_state_dict(self, state: dict[str, list[Tensor]]) -> None:
        self.inputs, self.targets = list(state["inputs"]), list(state["targets"])


def fitted_inputs(layer: nn.Module, x: Tensor) -> Tensor:
    """What the closed form regresses on: an EUGen (or SNNK) layer's features ``Φ(f(x))``; a low-rank layer's
    input itself (its rank is imposed after the solve)."""
    return x if isinstance(layer, LowRankLinear) else layer.features(x)


def fits_pre_activation(layer: nn.Module) -> bool:
    """A low-rank layer keeps the MLP's activation after it, so it fits the teacher's pre-activation; an EUGen
    layer replaces ``activation(linear(x))`` as a whole."""
    return isinstance(layer, LowRankLinear)


@dataclass
class LayerEquations:
    """The layer being fitted for ``ref`` (EUGen, or a baseline: SNNK, low-rank), its training / held-out
    statistics and, when the run refines, the rows the refinement trains on (``rows``) and measures on
    (``heldout_rows``)."""

    ref: LayerRef
    layer: nn.Module
    train: NormalEquations
    heldout: NormalEquations
    rows: RowStore | None = None
    heldout_rows: RowStore | None = None

    @classmethod
    def create(cls, ref: LayerRef, layer: nn.Module, refine_rows: int = 0) -> LayerEquations:
        device = layer.bias.device
        width = layer.in_features if isinstance(layer, LowRankLinear) else layer.feature_dim
        make = lambda: NormalEquations(width, layer.out_features, device=device)
        stores = (RowStore(refine_rows), RowStore(max(1, refine_rows // 8))) if refine_rows else (None, None)
        return cls(ref, layer, make(), make(), *stores)

    def state_dict(self) -> dict[str, dict]:
        state: dict[str, dict] = {"train": self.train.state_dict(), "heldout": self.heldout.state_dict()}
        if self.rows is not None:
            state.update(rows=self.rows.state_dict(), heldout_rows=self.heldout_rows.state_dict())
        return state

    def load_state_dict(self, state: dict[str, dict]) -> None:
        self.train.load_state_dict(state["train"])
        self.heldout.load_state_dict(state["heldout"])
        if self.rows is not None:
            self.rows.load_state_dict(state["rows"])
            self.heldout_rows.load_state_dict(state["heldout_rows"])

    def all_reduce(self) -> None:
        self.train.all_reduce()
        self.heldout.all_reduce()


def trace(
    mlp: EUGenMLP, x: Tensor, upto: int, activate_out: bool = False
) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    """Inputs, outputs and pre-activations of layers ``0..upto`` of ``mlp`` on ``x`` (unfused).

    An output is taken after the MLP's activation when one follows the layer; the last layer's before
    ``out_activation``, or after it with ``activate_out`` (a student that drops it fits the activated output).
    """
    inputs, outputs, pre = [], [], []
    h = x
    for i in range(upto + 1):
        if i in mlp.skip_connections:
            h = torch.cat([x, h], dim=-1)
        inputs.append(h)
        h = mlp.layers[i](h)
        pre.append(h)
        if mlp.applies_activation(i):
            h = mlp.activation(h)
        elif activate_out and i == len(mlp.layers) - 1 and mlp.out_activation is not None:
            h = mlp.out_activation(h)
        outputs.append(h)
    return inputs, outputs, pre


class Capture:
    """Context manager: while active, every forward pass of the model feeds ``equations``.

    Args:
        mlps: the student's MLPs by path (hooks go on those holding a target layer).
        teachers: dense copies of the same MLPs, taken before any layer was replaced.
        equations: the layers to fit.
        pair_fraction: fraction of each MLP call's rows that enter the fit.
        heldout_fraction: fraction of the kept rows that go to the held-out statistics when no ray-level
            split is given (``held_rays`` is ``None``: a single sampled camera).
        unactivated: paths of the MLPs the student runs without their output activation: the target of their
            last layer is the teacher's activated output.
    """

    def __init__(
        self,
        mlps: dict[str, EUGenMLP],
        teachers: dict[str, EUGenMLP],
        equations: list[LayerEquations],
        pair_fraction: float,
        heldout_fraction: float,
        unactivated: Sequence[str] = (),
    ) -> None:
        self.mlps = mlps
        self.unactivated = set(unactivated)
        self.teachers = teachers
        self.by_mlp: dict[str, list[LayerEquations]] = {}
        for eq in equations:
            self.by_mlp.setdefault(eq.ref.mlp_path, []).append(eq)
        self.pair_fraction = pair_fraction
        self.heldout_fraction = heldout_fraction
        self.generator: torch.Generator | None = None
        self.held_rays: Tensor | None = None
        """Per ray of the batch being rendered: held out (its camera is a held-out one). Set per batch."""
        self.stop_when_recorded = False
        """Raise :class:`BatchRecorded` once every hooked MLP has recorded the batch (each MLP is called once
        a render, as nerfstudio's models call their fields' MLPs)."""
        self.recorded: set[str] = set()
        """The hooked MLPs that have recorded the batch being rendered (cleared per batch)."""
        self._handles: list = []

    def __enter__(self) -> Self:
        for mlp_path in self.by_mlp:
            self._handles.append(self.mlps[mlp_path].register_forward_pre_hook(self._hook(mlp_path)))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def begin_batch(self, generator: torch.Generator, held_rays: Tensor | None) -> None:
        """Set what the batch about to be rendered is recorded with."""
        self.generator, self.held_rays = generator, held_rays
        self.recorded.clear()

    def _hook(self, mlp_path: str):
        def hook(module: EUGenMLP, args: tuple) -> None:
            self.record(mlp_path, args[0])
            self.recorded.add(mlp_path)
            if self.stop_when_recorded and self.recorded.issuperset(self.by_mlp):
                raise BatchRecorded

        return hook

    def held_rows(self, rows: int) -> Tensor:
        """Held-out flag of each of an MLP call's ``rows``: those of the held-out cameras' rays, or a random
        ``heldout_fraction`` without a ray-level split."""
        held = ray_rows(self.held_rays, rows)
        return (
            held if held is not None else torch.rand(rows, generator=self.generator) < self.heldout_fraction
        )

    @torch.no_grad()
    def record(self, mlp_path: str, in_tensor: Tensor) -> None:
        """Add the kept rows of one MLP call to the statistics of the layers it holds."""
        if self.generator is None:
            raise RuntimeError("Capture.generator must be set (per batch) before rendering")
        x = in_tensor.reshape(-1, in_tensor.shape[-1])
        keep = torch.rand(x.shape[0], generator=self.generator) < self.pair_fraction
        held = self.held_rows(x.shape[0])
        x = x[keep.to(x.device)]
        held = held[keep].to(x.device)
        if x.shape[0] == 0:
            return
        targets = self.by_mlp[mlp_path]
        upto = max(eq.ref.index for eq in targets)
        student = self.mlps[mlp_path]
        teacher_in, teacher_out, teacher_pre = trace(
            self.teachers[mlp_path], x, upto, activate_out=mlp_path in self.unactivated
        )
        student_in = teacher_in  # until a layer before these is replaced, the inputs are the teacher's
        if any(isinstance(layer, (EUGenLinear, LowRankLinear)) for layer in student.layers[:upto]):
            student_in = trace(student, x, upto)[0]
        for eq in targets:
            features = fitted_inputs(eq.layer, student_in[eq.ref.index])
            target = (teacher_pre if fits_pre_activation(eq.layer) else teacher_out)[eq.ref.index]
            eq.train.update(features[~held], target[~held])
            eq.heldout.update(features[held], target[held])
            if eq.rows is not None:
                eq.rows.add(student_in[eq.ref.index][~held], target[~held])
                eq.heldout_rows.add(student_in[eq.ref.index][held], target[held])


class PreactivationProbe:
    """Context manager: while active, every forward pass accumulates the centred Gram matrix of the teacher's
    pre-activations of each layer in ``refs`` (what ``--projections teacher`` picks its units from).

    Only the statistics' Gram part is read (:meth:`NormalEquations.centred_gram`); rows are subsampled by
    ``pair_fraction`` with the generator set per batch, as in :class:`Capture`. The rays of held-out cameras
    (``held_rays``, set per batch) are left out: the units chosen here build the layers whose held-out R²
    picks the ridge, so those cameras must not choose them.
    """

    def __init__(
        self,
        mlps: dict[str, EUGenMLP],
        teachers: dict[str, EUGenMLP],
        refs: list[LayerRef],
        pair_fraction: float,
    ) -> None:
        self.mlps, self.teachers, self.pair_fraction = mlps, teachers, pair_fraction
        self.by_mlp: dict[str, list[LayerRef]] = {}
        for ref in refs:
            self.by_mlp.setdefault(ref.mlp_path, []).append(ref)
        self.statistics = {
            ref.path: NormalEquations(teachers[ref.mlp_path].layers[ref.index].out_features, 1)
            for ref in refs
        }
        self.generator: torch.Generator | None = None
        self.held_rays: Tensor | None = None
        """Per ray of the batch being rendered: held out (left out of the statistics). Set per batch."""
        self._handles: list = []

    def __enter__(self) -> Self:
        for mlp_path in self.by_mlp:
            self._handles.append(
                self.mlps[mlp_path].register_forward_hook(
                    lambda module, args, output, path=mlp_path: self.record(path, args[0])
                )
            )
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    @torch.no_grad()
    def record(self, mlp_path: str, in_tensor: Tensor) -> None:
        if self.generator is None:
            raise RuntimeError("PreactivationProbe.generator must be set (per batch) before rendering")
        x = in_tensor.reshape(-1, in_tensor.shape[-1])
        keep = torch.rand(x.shape[0], generator=self.generator) < self.pair_fraction
        held = ray_rows(self.held_rays, x.shape[0])
        if held is not None:
            keep &= ~held
        x = x[keep.to(x.device)]
        if x.shape[0] == 0:
            return
        refs = self.by_mlp[mlp_path]
        _, _, pre = trace(self.teachers[mlp_path], x, max(ref.index for ref in refs))
        for ref in refs:
            z = pre[ref.index]
            self.statistics[ref.path].update(z, z.new_zeros(z.shape[0], 1))

    def grams(self) -> dict[str, Tensor]:
        """The centred Gram matrix of each layer's pre-activations, by layer path."""
        return {path: stats.centred_gram().cpu() for path, stats in self.statistics.items()}
