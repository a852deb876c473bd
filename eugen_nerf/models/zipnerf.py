"""Zip-NeRF: proposal sampling and rendering of :class:`~eugen_nerf.fields.zipnerf.ZipNeRFField`.

The model is the nerfacto-style model's (near/far, background and contraction from the data; nerfstudio's
proposal schedule and renderers) with Zip-NeRF's parts: proposal networks and NeRF read multisampled,
anti-aliased hash-grid features of whole frustums (:class:`FrustumProposalSampler` hands them ray samples,
not points), the anti-aliased interlevel loss (:mod:`.interlevel`), the distortion loss, the grid's weight
decay, and Zip-NeRF's sizes (10-level grid to resolution 8192 with 4 features per level, a 64-wide density
MLP, a 256-wide bottleneck and view MLP; proposal grids with 1 feature per level to 512 and 2048, 64 + 64
proposal and 32 NeRF samples per ray). Scene contraction for unbounded data is mip-NeRF 360's (L2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from nerfstudio.cameras.rays import RayBundle, RaySamples
from nerfstudio.fields.base_field import Field
from nerfstudio.model_components.ray_samplers import ProposalNetworkSampler

from eugen_nerf.fields.components import check_layer_indices
from eugen_nerf.fields.zipnerf import DENSITY_LAYERS, VIEW_LAYERS, ZipNeRFDensityField, ZipNeRFField
from eugen_nerf.layers import MergedTrainingSpec
from eugen_nerf.models.interlevel import anti_aliased_interlevel_loss
from eugen_nerf.models.nerfacto import EUGenNerfactoModel, EUGenNerfactoModelConfig
from eugen_nerf.scenes.framing import Framing


@dataclass
class ZipNeRFEUGenConfig(MergedTrainingSpec):
    """EUGen knobs of the Zip-NeRF field, plus which of its layers are EUGen."""

    num_features: int = 48
    """m: 48 features per order (96 wide at degree 2) against the 256-wide view layers: the merged view MLP
    costs a fraction of the dense one's MACs. A wider map trains closer to the dense twin and keeps less of the
    speed-up: its merged chain costs about (k*m)² a point per link; a narrower one trails the dense twin
    (docs/benchmarks.md, Zip-NeRF)."""

    density_layers: tuple[int, ...] = ()
    """EUGen layers of the 2-layer density MLP (1 is the 256-wide bottleneck). Empty by default: an EUGen
    bottleneck's 256-wide output is built anyway (its first channel is the density), so it saves no time and
    costs quality."""
    view_layers: tuple[int, ...] = (0, 1)
    """EUGen layers of the 3-layer view-dependent MLP (0 and 1 are 256 wide, 2 outputs RGB)."""

    def has_mergeable_layers(self) -> bool:
        return bool(self.view_layers)  # the density MLP's EUGen layers train apart

    def __post_init__(self) -> None:
        super().__post_init__()
        self.density_layers = check_layer_indices("eugen.density-layers", self.density_layers, DENSITY_LAYERS)
        self.view_layers = check_layer_indices("eugen.view-layers", self.view_layers, VIEW_LAYERS)


def zipnerf_proposal_args() -> list[dict]:
    """Zip-NeRF's two proposal grids: 1 feature per level, resolution 16 up to 512 and to 2048."""
    return [
        {"hidden_dim": 64, "log2_hashmap_size": 19, "num_levels": 6, "max_res": 512, "features_per_level": 1},
        {
            "hidden_dim": 64,
            "log2_hashmap_size": 19,
            "num_levels": 8,
            "max_res": 2048,
            "features_per_level": 1,
        },
    ]


FIELD_MLPS = "field_mlps"
"""Optimiser group of the NeRF field's MLPs (the hash grid stays in ``fields``)."""

PROPOSAL_ARGS = ("hidden_dim", "log2_hashmap_size", "num_levels", "max_res", "features_per_level")


@dataclass
class ZipNeRFModelConfig(EUGenNerfactoModelConfig):
    """Zip-NeRF with EUGen layers in its bottleneck and view MLP; no EUGen layer is the dense twin."""

    _target: type = field(default_factory=lambda: ZipNeRFModel)
    eugen: ZipNeRFEUGenConfig = field(default_factory=ZipNeRFEUGenConfig)  # type: ignore[assignment]
    """EUGen layers: which ones, and their hyper-parameters."""
    hidden_dim: int = 64
    """Width of the density MLP's hidden layer."""
    average_init_density: float | None = None
    """Not used by Zip-NeRF, whose density is softplus(raw - 1): leave it unset."""
    bottleneck_width: int = 256
    """Width of the density MLP's output (its first channel is the density), the view MLP's input."""
    hidden_dim_color: int = 256
    """Width of the view-dependent MLP."""
    num_levels: int = 10
    base_res: int = 16
    max_res: int = 8192
    log2_hashmap_size: int = 21
    features_per_level: int = 4
    proposal_net_args_list: list[dict] = field(default_factory=zipnerf_proposal_args)
    """Proposal grids and MLPs (keys: hidden_dim, log2_hashmap_size, num_levels, max_res, features_per_level)."""
    num_proposal_samples_per_ray: tuple[int, ...] = (64, 64)
    num_nerf_samples_per_ray: int = 32
    interlevel_pulse_widths: tuple[float, ...] = (0.03, 0.003)
    """Half-widths of the box blur of each proposal level in the anti-aliased interlevel loss (ray distance in [0, 1])."""
    hash_decay_loss_mult: float = 0.1
    """Weight decay of the NeRF's and proposals' hash grids (Zip-NeRF's 0.1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.average_init_density is not None:
            raise ValueError(
                "average-init-density is a nerfacto-style knob: Zip-NeRF's density is softplus(raw - 1)"
            )
        if self.bottleneck_width < 1 or isinstance(self.bottleneck_width, bool):
            raise ValueError(f"bottleneck-width must be an integer >= 1, got {self.bottleneck_width!r}")
        if any(n < 1 for n in self.num_proposal_samples_per_ray):
            raise ValueError(
                f"num-proposal-samples-per-ray must be >= 1, got {self.num_proposal_samples_per_ray}"
            )
        if len(self.interlevel_pulse_widths) < self.num_proposal_iterations or any(
            not w > 0 for w in self.interlevel_pulse_widths
        ):
            raise ValueError(
                f"interlevel-pulse-widths needs one width > 0 per proposal level "
                f"({self.num_proposal_iterations}), got {self.interlevel_pulse_widths}"
            )
        if self.hash_decay_loss_mult < 0:
            raise ValueError(f"hash-decay-loss-mult must be >= 0, got {self.hash_decay_loss_mult}")
        for args in self.proposal_net_args_list:
            unknown = set(args) - set(PROPOSAL_ARGS)
            if unknown:
                raise ValueError(
                    f"proposal-net-args-list: unknown keys {sorted(unknown)} (known: {PROPOSAL_ARGS})"
                )
        self.check_eugen_widths()

    def check_eugen_widths(self) -> None:
        """EUGen features wider than a layer they replace would cost more than the dense layer: refuse them."""
        if self.eugen.layer_type != "eugen":
            return
        feature_width = self.eugen.num_features * self.eugen.degree
        features = f"EUGen features (num-features {self.eugen.num_features} x degree {self.eugen.degree} = {feature_width})"
        feeds_view = 0 in self.eugen.view_layers
        if (self.eugen.density_layers or feeds_view) and feature_width > self.bottleneck_width:
            where = "EUGen bottleneck" if self.eugen.density_layers else "input of the EUGen view layer 0"
            raise ValueError(
                f"{features} are wider than the bottleneck ({self.bottleneck_width}, the {where}): EUGen would cost "
                "more than the dense layer it replaces; lower eugen.num-features or widen the bottleneck"
            )
        if self.eugen.view_layers and feature_width > self.hidden_dim_color:
            raise ValueError(
                f"{features} are wider than the view MLP (hidden-dim-color {self.hidden_dim_color}): EUGen would "
                "cost more than the dense layers it replaces; lower eugen.num-features or widen the view MLP"
            )


class FrustumProposalSampler(ProposalNetworkSampler):
    """nerfstudio's proposal sampler whose density functions receive ray samples (frustums), not points.

    Zip-NeRF's proposal networks multisample each interval, which needs its extent and pixel footprint.
    """

    def generate_ray_samples(
        self, ray_bundle: RayBundle | None = None, density_fns: list[Callable] | None = None
    ) -> tuple[RaySamples, list, list]:
        assert ray_bundle is not None and density_fns is not None
        weights_list: list[torch.Tensor] = []
        ray_samples_list: list[RaySamples] = []
        levels = self.num_proposal_network_iterations
        update = self._steps_since_update > self.update_sched(self._step) or self._step < 10
        ray_samples: RaySamples | None = None
        weights: torch.Tensor | None = None
        for level in range(levels + 1):
            proposal = level < levels
            count = self.num_proposal_samples_per_ray[level] if proposal else self.num_nerf_samples_per_ray
            if level == 0:
                ray_samples = self.initial_sampler(ray_bundle, num_samples=count)
            else:
                assert weights is not None
                ray_samples = self.pdf_sampler(
                    ray_bundle, ray_samples, torch.pow(weights, self._anneal), num_samples=count
                )
            if proposal:
                with torch.set_grad_enabled(update and torch.is_grad_enabled()):
                    density = density_fns[level](ray_samples)
                weights = ray_samples.get_weights(density)
                weights_list.append(weights)
                ray_samples_list.append(ray_samples)
        if update:
            self._steps_since_update = 0
        assert ray_samples is not None
        return ray_samples, weights_list, ray_samples_list


class ZipNeRFModel(EUGenNerfactoModel):
    """The nerfacto-style model's pipeline with Zip-NeRF's fields, sampler and losses."""

    config: ZipNeRFModelConfig
    sampler_class = FrustumProposalSampler
    twin_mlps = (("density_mlp", "density_layers"), ("view_mlp", "view_layers"))

    def build_field(self, framing: Framing) -> Field:
        config = self.config
        return ZipNeRFField(
            self.scene_box.aabb,
            contraction=framing.contraction,
            eugen=config.eugen,
            density_layers=config.eugen.density_layers,
            view_layers=config.eugen.view_layers,
            bottleneck_width=config.bottleneck_width,
            view_width=config.hidden_dim_color,
            train_merged=config.eugen.merged_training,
            hidden_dim=config.hidden_dim,
            **config.grid_args(),
        )

    def build_proposal_network(self, framing: Framing, args: dict) -> Field:
        return ZipNeRFDensityField(
            self.scene_box.aabb,
            contraction=framing.contraction,
            base_res=self.config.base_res,
            implementation=self.config.implementation,
            **args,
        )

    def get_param_groups(self) -> dict[str, list[torch.nn.Parameter]]:
        """nerfacto's groups, with the NeRF field's MLPs apart from its hash grid (``field_mlps``).

        Adam moves every weight by about its learning rate whatever the gradient's noise; at the rays per step
        a CPU (or one GPU) affords, Zip-NeRF's 1e-2 drives the 256-wide view MLP's sigmoid into saturation
        (speckled red and black objects), while the hash-grid entries, each touched by few rays, need it.
        """
        groups = super().get_param_groups()
        mlps = [p for name, p in self.field.named_parameters() if not name.startswith("grid.")]
        taken = {id(p) for p in mlps}
        groups["fields"] = [p for p in groups["fields"] if id(p) not in taken]
        groups[FIELD_MLPS] = mlps
        return groups

    def get_loss_dict(self, outputs, batch, metrics_dict=None) -> dict[str, torch.Tensor]:
        config = self.config
        pred_rgb, gt_rgb = self.renderer_rgb.blend_background_for_loss_computation(
            pred_image=outputs["rgb"],
            pred_accumulation=outputs["accumulation"],
            gt_image=batch["image"].to(self.device),
        )
        loss_dict = {"rgb_loss": self.rgb_loss(gt_rgb, pred_rgb)}
        if self.training:
            loss_dict["interlevel_loss"] = config.interlevel_loss_mult * anti_aliased_interlevel_loss(
                outputs["weights_list"], outputs["ray_samples_list"], config.interlevel_pulse_widths
            )
            assert metrics_dict is not None and "distortion" in metrics_dict
            loss_dict["distortion_loss"] = config.distortion_loss_mult * metrics_dict["distortion"]
            if config.hash_decay_loss_mult > 0:
                grids = [self.field.grid] + [network.grid for network in self.proposal_networks]
                loss_dict["hash_decay_loss"] = config.hash_decay_loss_mult * sum(
                    g.decay_loss() for g in grids
                )
        return loss_dict
