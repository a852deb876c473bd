"""The student: the teacher model with chosen dense layers replaced by EUGen layers.

Layers are addressed by their module path in the model (``field_coarse.mlp_base.layers.3``). A
layer is replaceable when it is an ``nn.Linear`` of a known MLP: a nerfstudio ``MLP`` in its torch
implementation, or an :class:`EUGenMLP`. Each affected nerfstudio ``MLP`` is first converted into
an :class:`EUGenMLP` with the same weights (same output, same state-dict keys); the chosen layers
then become :class:`EUGenLinear`, which replaces ``activation(linear(x))`` as a whole.

:class:`StudentModelConfig` is what makes a student run directory load in ``ns-eval``,
``ns-viewer`` and ``ns-render``: its ``setup`` builds the teacher's model from the teacher's config
and applies the same conversion (EUGen layers randomly initialised), so the saved student state dict
loads into it strictly.
"""

from __future__ import annotations

import fnmatch
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from nerfstudio.engine.trainer import TrainerConfig
from nerfstudio.field_components.mlp import MLP
from nerfstudio.models.base_model import Model, ModelConfig
from torch import nn

from eugen_nerf.distill.options import DistillError, layer_width_fraction
from eugen_nerf.extensions import extend_model
from eugen_nerf.layers import EUGenLinear, EUGenMLP, EUGenSpec
from eugen_nerf.layers.baselines import LowRankLinear

KEYWORDS = ("twin", "hidden", "auto")


@dataclass(frozen=True)
class LayerRef:
    """Where a replaceable layer lives: its MLP's path and its index in ``mlp.layers``."""

    mlp_path: str
    index: int

    @property
    def path(self) -> str:
        return f"{self.mlp_path}.layers.{self.index}" if self.mlp_path else f"layers.{self.index}"


@dataclass
class LayerInfo:
    """One row of ``--list-layers``."""

    ref: LayerRef
    in_features: int
    out_features: int
    mlp_type: str
    kind: str
    activation: str
    hidden: bool


def _is_known_mlp(module: nn.Module) -> bool:
    return isinstance(module, EUGenMLP) or (
        isinstance(module, MLP) and getattr(module, "tcnn_encoding", 1) is None
    )


def known_mlps(model: nn.Module) -> dict[str, nn.Module]:
    """Every MLP of ``model`` the tool can convert, by module path, in registration order."""
    return {path: module for path, module in model.named_modules() if _is_known_mlp(module)}


def _activation_name(module: nn.Module | None) -> str:
    return type(module).__name__ if module is not None else "none"


def _hidden(mlp: nn.Module, index: int, last: int, skips: set[int]) -> bool:
    """Whether layer ``index`` maps hidden features to hidden features: not the MLP's first layer (it reads the
    input encoding), not a skip layer (it reads the input again), and not the last unless ``out_activation``
    is the MLP's own activation (a trunk whose activated output feeds the heads)."""
    if index == 0 or index in skips:
        return False
    if index < last:
        return True
    activation, out = mlp.activation, mlp.out_activation
    return activation is not None and out is not None and type(out) is type(activation)


def folds_out_activation(mlp: nn.Module, index: int) -> bool:
    """Whether a student may fit layer ``index`` of ``mlp`` to the teacher's activated output and drop the
    activation after it (``--fold-out-activation``): the MLP's last layer, activated like a hidden layer."""
    return index == len(mlp.layers) - 1 and _hidden(mlp, index, index, set())


def list_layers(model: nn.Module) -> list[LayerInfo]:
    """Every layer of every known MLP of ``model``, in depth order."""
    rows = []
    for mlp_path, mlp in known_mlps(model).items():
        last = len(mlp.layers) - 1
        skips = set(mlp.skip_connections or ())
        for index, layer in enumerate(mlp.layers):
            if isinstance(layer, EUGenLinear):
                kind, after = "eugen", "(its feature map)"
            else:
                kind = "dense" if isinstance(layer, nn.Linear) else type(layer).__name__
                after = _activation_name(mlp.activation if index < last else None)
            if index == last and mlp.out_activation is not None:
                after = f"out {_activation_name(mlp.out_activation)}"
            rows.append(
                LayerInfo(
                    ref=LayerRef(mlp_path, index),
                    in_features=getattr(layer, "in_features", 0),
                    out_features=getattr(layer, "out_features", 0),
                    mlp_type=type(mlp).__name__,
                    kind=kind,
                    activation=after,
                    hidden=_hidden(mlp, index, last, skips) and isinstance(layer, nn.Linear),
                )
            )
    return rows


def _describe(model: nn.Module, path: str) -> str:
    """The type name of what sits at ``path`` (for error messages), ``""`` when nothing does."""
    try:
        module = model.get_submodule(path)
    except AttributeError:
        return ""
    return type(module).__name__


def twin_layers(model: nn.Module) -> list[str] | None:
    """The dense layers of ``model`` its EUGen twin method makes EUGen (the model's ``eugen_twin_layers()``, for a
    teacher of an eugen-nerf method), by path; None for a model that names none (stock nerfstudio, SIREN)."""
    named = getattr(model, "eugen_twin_layers", None)
    paths = named() if callable(named) else None
    if paths is None:
        return None
    dense = {row.ref.path for row in list_layers(model) if row.kind == "dense"}
    return [path for path in paths if path in dense]


def resolve_layers(model: nn.Module, patterns: Sequence[str]) -> list[LayerRef]:
    """Turn layer paths, glob patterns, ``twin`` or ``hidden`` into replaceable layers, in depth order.

    ``twin``: the layers the teacher's EUGen twin makes EUGen (:func:`twin_layers`: eugen-nerf's trunk layers
    of a ``dense-nerf`` teacher, eugen-zipnerf's view layers of a ``dense-zipnerf`` one, eugen-nerfacto's
    colour layer of a ``dense-nerfacto`` one), ``hidden`` for a teacher without one.

    Raises :class:`DistillError` naming the path for anything that does not exist, is not a linear
    layer, or is a linear layer outside a known MLP.
    """
    rows = list_layers(model)
    by_path = {row.ref.path: row for row in rows}
    chosen: dict[str, LayerRef] = {}
    for pattern in patterns:
        twin = twin_layers(model) if pattern == "twin" else None
        if twin is not None:
            matches = twin
        elif pattern in ("hidden", "twin"):
            matches = [row.ref.path for row in rows if row.hidden]
        elif any(char in pattern for char in "*?["):
            matches = [path for path in by_path if fnmatch.fnmatchcase(path, pattern)]
            if not matches:
                raise DistillError(
                    f"layer pattern {pattern!r} matches no replaceable layer (see --list-layers)"
                )
        else:
            matches = [pattern]
        for path in matches:
            row = by_path.get(path)
            if row is None:
                found = _describe(model, path)
                if not found:
                    raise DistillError(
                        f"layer {path!r} does not exist in the teacher model (see --list-layers)"
                    )
                if isinstance(model.get_submodule(path), nn.Linear):
                    raise DistillError(
                        f"layer {path!r} is a Linear outside any supported MLP (a nerfstudio MLP with the torch "
                        "implementation, or an EUGenMLP): it cannot be replaced"
                    )
                raise DistillError(f"layer {path!r} is a {found}, not a linear layer")
            if row.kind != "dense":
                raise DistillError(f"layer {path!r} is already a {row.kind} layer, not a dense linear layer")
            chosen[path] = row.ref
    order = {row.ref.path: i for i, row in enumerate(rows)}
    return sorted(chosen.values(), key=lambda ref: order[ref.path])


def to_eugen_mlp(mlp: nn.Module) -> EUGenMLP:
    """An all-dense :class:`EUGenMLP` computing exactly what the nerfstudio ``mlp`` computes."""
    if isinstance(mlp, EUGenMLP):
        return mlp
    first = mlp.layers[0]
    converted = EUGenMLP(
        in_dim=mlp.in_dim,
        num_layers=mlp.num_layers,
        layer_width=mlp.layer_width,
        out_dim=mlp.out_dim,
        skip_connections=tuple(mlp.skip_connections or ()),
        activation=mlp.activation,
        out_activation=mlp.out_activation,
    ).to(device=first.weight.device, dtype=first.weight.dtype)
    converted.layers.load_state_dict(mlp.layers.state_dict(), strict=True)
    converted.train(mlp.training)
    return converted


def _set_submodule(model: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, name, module)


def convert_mlps(model: nn.Module, refs: Sequence[LayerRef]) -> dict[str, EUGenMLP]:
    """Convert the MLPs holding ``refs`` into :class:`EUGenMLP` in place; return them by path."""
    converted = {}
    for mlp_path in dict.fromkeys(ref.mlp_path for ref in refs):
        mlp = to_eugen_mlp(model.get_submodule(mlp_path))
        _set_submodule(model, mlp_path, mlp)
        converted[mlp_path] = mlp
    return converted


def layer_seed(spec: EUGenSpec, path: str) -> int:
    """A seed per layer path, stable across processes, so no two layers share projections."""
    return (spec.seed + zlib.crc32(path.encode())) % 2**31


def layer_features(spec: EUGenSpec, out_features: int, width_fraction: float | None = None) -> int:
    """``m`` of the layer replacing one with ``out_features`` outputs: ``width_fraction`` of them (rounded, at
    least 1), so one setting suits a 64-wide and a 256-wide teacher; ``spec.num_features`` without it."""
    if width_fraction is None:
        return spec.num_features
    return max(1, round(width_fraction * out_features))


def make_student_layer(
    mlp: EUGenMLP,
    ref: LayerRef,
    spec: EUGenSpec,
    width_fraction: float | None = None,
    width_fraction_of: Sequence[str] = (),
) -> nn.Module:
    """The (unfitted) layer that will replace ``ref``, of ``spec.layer_type`` (EUGen, or a reviewers' baseline:
    SNNK, low-rank), on its MLP's device and dtype; ``m`` from :func:`layer_features`, at the width fraction
    ``width_fraction_of`` gives the layer's path, else ``width_fraction``."""
    dense = mlp.layers[ref.index]
    fraction = layer_width_fraction(ref.path, width_fraction, width_fraction_of)
    spec = replace(
        spec,
        seed=layer_seed(spec, ref.path),
        num_features=layer_features(spec, dense.out_features, fraction),
    )
    layer = EUGenMLP.make_layer(spec.layer_type, dense.in_features, dense.out_features, spec)
    return layer.to(device=dense.weight.device, dtype=dense.weight.dtype)


def install_layer(mlp: EUGenMLP, index: int, layer: nn.Module) -> None:
    """Put ``layer`` at ``mlp.layers[index]`` (the fused form is rebuilt on the next eval call)."""
    mlp.layers[index] = layer
    types = list(mlp.layer_types)
    types[index] = (
        "eugen"
        if isinstance(layer, EUGenLinear)
        else "lowrank"
        if isinstance(layer, LowRankLinear)
        else "dense"
    )
    mlp.layer_types = tuple(types)


def apply_student(
    model: nn.Module,
    paths: Sequence[str],
    spec: EUGenSpec,
    width_fraction: float | None = None,
    width_fraction_of: Sequence[str] = (),
    unactivated: Sequence[str] = (),
) -> list[LayerRef]:
    """Replace the layers at ``paths`` by ``spec.layer_type`` layers (randomly initialised) in ``model``, and drop
    the output activation of the MLPs at ``unactivated``; return the layers' refs."""
    refs = resolve_layers(model, paths)
    mlps = convert_mlps(model, refs)
    for ref in refs:
        layer = make_student_layer(mlps[ref.mlp_path], ref, spec, width_fraction, width_fraction_of)
        install_layer(mlps[ref.mlp_path], ref.index, layer)
    for path in unactivated:  # their last layer was fitted to the teacher's activated output
        model.get_submodule(path).out_activation = None
    return refs


@dataclass
class StudentModelConfig(ModelConfig):
    """A teacher model config plus the layers that are EUGen: builds the student's architecture."""

    _target: type = field(default_factory=lambda: Model)
    teacher: ModelConfig = field(default_factory=ModelConfig)
    """The teacher's model config (builds the architecture before the replacement)."""
    layers: tuple[str, ...] = ()
    """Paths of the EUGen layers."""
    eugen: EUGenSpec = field(default_factory=EUGenSpec)
    """Hyper-parameters of the EUGen layers (each layer's seed is saved in the checkpoint)."""
    width_fraction: float | None = None
    """``m`` of each layer as a fraction of the replaced layer's outputs (None: ``eugen.num_features``)."""
    width_fraction_of: tuple[str, ...] = ()
    """``PATTERN=FRACTION``: the width fraction of the layers whose path matches PATTERN, instead of
    ``width_fraction`` (eugen-distill --width-fraction-of)."""
    unactivated: tuple[str, ...] = ()
    """Paths of the MLPs run without their output activation: their last layer was fitted to the teacher's
    activated output (eugen-distill --fold-out-activation)."""

    def setup(self, **kwargs) -> Model:
        self.teacher.eval_num_rays_per_chunk = self.eval_num_rays_per_chunk
        model = self.teacher.setup(**kwargs)
        apply_student(
            model, self.layers, self.eugen, self.width_fraction, self.width_fraction_of, self.unactivated
        )
        extend_model(model)  # after the swap (viewer controls): populate_modules saw only dense layers
        return model


@dataclass
class DistilledTrainerConfig(TrainerConfig):
    """The teacher's trainer config, living in a run directory chosen by the user.

    nerfstudio finds checkpoints under ``output_dir/experiment/method/timestamp``; a distilled run
    lives wherever ``--output-dir`` says, so its base directory is stored as given (relative paths
    resolve against the current directory, as nerfstudio's own ``output_dir`` does).
    """

    run_dir: Path = Path(".")

    def get_base_dir(self) -> Path:
        return Path(self.run_dir)

    def get_checkpoint_dir(self) -> Path:
        # as SceneTrainerConfig: ns-eval/ns-viewer read this run's checkpoint through the shared check
        from eugen_nerf.eval.checkpoints import install_checkpoint_checks

        install_checkpoint_checks()
        return super().get_checkpoint_dir()


def student_trainer_config(
    teacher_config: TrainerConfig,
    run_dir: Path,
    layers: Sequence[str],
    spec: EUGenSpec,
    width_fraction: float | None = None,
    width_fraction_of: Sequence[str] = (),
    unactivated: Sequence[str] = (),
) -> DistilledTrainerConfig:
    """The ``config.yml`` of a student run: the teacher's, with the student model and new paths.

    The method name stays the teacher's: ``ns-eval``/``ns-viewer`` look the datamanager up by it.
    """
    values = {name: getattr(teacher_config, name) for name in TrainerConfig.__dataclass_fields__}
    config = DistilledTrainerConfig(**values, run_dir=Path(run_dir))
    config.pipeline = replace(
        teacher_config.pipeline,
        model=StudentModelConfig(
            teacher=teacher_config.pipeline.model,
            layers=tuple(layers),
            eugen=spec,
            width_fraction=width_fraction,
            width_fraction_of=tuple(width_fraction_of),
            unactivated=tuple(unactivated),
            eval_num_rays_per_chunk=teacher_config.pipeline.model.eval_num_rays_per_chunk,
        ),
    )
    config.relative_model_dir = Path("nerfstudio_models")
    config.load_dir = None
    config.load_checkpoint = None
    config.timestamp = ""
    return config
