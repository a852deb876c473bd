"""NeRF with a SIREN trunk (``eugen-siren`` / ``dense-siren``): the NeRF model of :mod:`.nerf` with
:class:`SirenRadianceField` coarse and fine fields.

Sampling, rendering, losses and metrics are the NeRF model's. The EUGen knobs are ``--pipeline.model.siren.*``
(the NeRF ``eugen`` knobs do not apply, only its ``seed``); EUGen projections form their own parameter group,
``projections``, whose learning rate the method sets to ``projection_lr_scale`` times the fields' one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from torch.nn import Parameter

from eugen_nerf.fields.siren import SirenEUGenSpec, SirenLayerType, SirenRadianceField, siren_param_groups
from eugen_nerf.models.nerf import EUGenNeRFModel, EUGenNeRFModelConfig, NeRFEUGenConfig


@dataclass
class SirenNeRFModelConfig(EUGenNeRFModelConfig):
    _target: type = field(default_factory=lambda: SirenNeRFModel)
    layers: SirenLayerType = "eugen"
    """Hidden layers of the SIREN trunk: sine layers (dense-siren), EUGen sine-feature layers, or a reviewers'
    baseline: ``lowrank`` (sine layers of rank ``siren.lowrank-rank``, default EUGen's ``l·k·m/(d+l)``) or
    ``snnk`` (``A ReLU(G x⁺) + c``, width ``k·m``)."""
    eugen: NeRFEUGenConfig = field(default_factory=NeRFEUGenConfig)
    """Only ``seed`` applies (it seeds the coarse and fine fields): the SIREN trunk's layers take
    ``--pipeline.model.layers`` and ``--pipeline.model.siren.*``."""
    siren: SirenEUGenSpec = field(default_factory=SirenEUGenSpec)
    """EUGen sine-layer hyper-parameters."""
    hidden_layers: int = 3
    """Hidden layers between the SIREN's first sine layer and its linear output."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check()  # as the command line is parsed (one line), before the run has written anything

    def check(self) -> None:
        """Raise one ``ValueError`` for an option the method cannot honour."""
        if (
            isinstance(self.hidden_layers, bool)
            or not isinstance(self.hidden_layers, int)
            or self.hidden_layers < 1
        ):
            raise ValueError(
                f"--pipeline.model.hidden-layers must be an integer >= 1, got {self.hidden_layers!r}"
            )
        default = NeRFEUGenConfig()
        ignored = [
            f.name
            for f in fields(NeRFEUGenConfig)
            if f.name != "seed" and getattr(self.eugen, f.name) != getattr(default, f.name)
        ]
        if ignored:
            raise ValueError(
                f"--pipeline.model.eugen.{ignored[0].replace('_', '-')}: the SIREN trunk's layers take "
                "--pipeline.model.siren.* and --pipeline.model.layers; of --pipeline.model.eugen.* only seed applies"
            )
        if self.siren.projection_lr_scale != SirenEUGenSpec.projection_lr_scale:
            raise ValueError(  # the method's optimizer sets that rate: nerfstudio reads it, not the group's
                "--pipeline.model.siren.projection-lr-scale: set --optimizers.projections.optimizer.lr instead "
                "(the method's default is the fields' rate times 30)"
            )
        if self.siren.weight_lr_scale != 1:  # no optimizer of the method takes that group
            raise ValueError(
                "--pipeline.model.siren.weight-lr-scale: the method has optimizers for the "
                "fields and the projections only; leave it at 1 (eugen-fit-image "
                "--eugen.weight-lr-scale has it)"
            )


class SirenNeRFModel(EUGenNeRFModel):
    config: SirenNeRFModelConfig

    def eugen_twin_layers(self) -> list[str] | None:
        """None: SIREN's sine layers are not distilled by layer path (``--layers twin`` reads as ``hidden``)."""
        return None

    def _make_field(self, eugen: NeRFEUGenConfig) -> SirenRadianceField:
        self.config.check()  # again: a config changed after it was parsed
        # The coarse and fine fields differ by eugen.seed (the fine one is offset by the NeRF model).
        spec = replace(self.config.siren, seed=self.config.siren.seed + eugen.seed)
        hidden = (self.config.layers,) * self.config.hidden_layers
        return SirenRadianceField(self.config.trunk_width, hidden, spec, self.config.head_width)

    def get_param_groups(self) -> dict[str, list[Parameter]]:
        groups: dict[str, list[Parameter]] = {"fields": [], "projections": []}  # the method's two optimizers
        for field_ in (self.field_coarse, self.field_fine):
            for group in siren_param_groups(field_, 1.0, self.config.siren):
                groups[group["name"]] += group["params"]
        return {name: params for name, params in groups.items() if params}
