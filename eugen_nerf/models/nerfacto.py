"""nerfacto-style model: proposal-network sampling over :class:`EUGenNerfactoField`.

It reuses nerfstudio's ``NerfactoModel`` (proposal sampler schedule, interlevel and distortion losses,
rendering) and replaces its field and LPIPS-free metrics. Near/far, background, scene contraction and the
initial proposal sampler come from the data unless given (:mod:`.framing`): for our object scenes white,
near 2 / far 6, no contraction, uniform samples; for unbounded data nerfacto's settings. No camera optimiser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
from nerfstudio.cameras.camera_optimizers import CameraOptimizerConfig
from nerfstudio.field_components.spatial_distortions import SceneContraction
from nerfstudio.fields.base_field import Field
from nerfstudio.fields.density_fields import HashMLPDensityField
from nerfstudio.model_components.losses import MSELoss
from nerfstudio.model_components.ray_samplers import ProposalNetworkSampler, UniformSampler
from nerfstudio.model_components.renderers import AccumulationRenderer, DepthRenderer, RGBRenderer
from nerfstudio.model_components.scene_colliders import NearFarCollider
from nerfstudio.models.base_model import Model
from nerfstudio.models.nerfacto import NerfactoModel, NerfactoModelConfig
from nerfstudio.utils import colormaps
from torch import Tensor
from torchmetrics.image import PeakSignalNoiseRatio

from eugen_nerf.extensions import extend_model
from eugen_nerf.fields.components import check_layer_indices, hash_implementation
from eugen_nerf.fields.nerfacto import COLOR_LAYERS, DENSITY_LAYERS, EUGenNerfactoField
from eugen_nerf.layers import EUGenSpec
from eugen_nerf.models.framing import FramedModelMixin, check_collider, check_planes
from eugen_nerf.models.metrics import image_metrics
from eugen_nerf.scenes.framing import Framing


@dataclass
class NerfactoEUGenConfig(EUGenSpec):
    """EUGen knobs of the nerfacto-style field, plus which of its layers are EUGen."""

    num_features: int = 16
    density_layers: tuple[int, ...] = ()
    """EUGen layers of the 2-layer density MLP (1 outputs density and geometry features)."""
    color_layers: tuple[int, ...] = (1,)
    """EUGen layers of the 3-layer colour MLP (2 outputs RGB)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.density_layers = check_layer_indices("eugen.density-layers", self.density_layers, DENSITY_LAYERS)
        self.color_layers = check_layer_indices("eugen.color-layers", self.color_layers, COLOR_LAYERS)


@dataclass
class EUGenNerfactoModelConfig(NerfactoModelConfig):
    """Hash grid + proposal sampling with EUGen MLP layers; no EUGen layer is the dense twin."""

    _target: type = field(default_factory=lambda: EUGenNerfactoModel)
    eugen: NerfactoEUGenConfig = field(default_factory=NerfactoEUGenConfig)
    """EUGen layers: which ones, and their hyper-parameters."""
    near_plane: float | None = None
    """Near plane; None: from the data (see eugen_nerf.scenes.framing)."""
    far_plane: float | None = None
    """Far plane; None: from the data."""
    background_color: Literal["auto", "random", "last_sample", "black", "white"] = "auto"
    """Background; auto: from the data (the object scene's colour, else the ray's last sample)."""
    disable_scene_contraction: bool | None = None
    """None: scene contraction for unbounded data only."""
    proposal_initial_sampler: Literal["auto", "piecewise", "uniform"] = "auto"
    """auto: uniform between the planes of an object scene, nerfacto's piecewise for unbounded data."""
    use_appearance_embedding: bool = False
    average_init_density: float | None = None
    """Density scale at initialisation; None: 1.0 on a solid (white/black) background, nerfacto's 0.01 otherwise.
    On a solid background 0.01 leaves every ray nearly empty, so the loss pushes every sample's colour
    towards the background's opposite until the sigmoid saturates (measured: a black bunny, dense and EUGen);
    a fog of density 1 lets colour fit before density carves the object out."""
    implementation: Literal["tcnn", "torch"] = field(default_factory=hash_implementation)
    camera_optimizer: CameraOptimizerConfig = field(default_factory=lambda: CameraOptimizerConfig(mode="off"))
    eval_num_rays_per_chunk: int = 4096

    def __post_init__(self) -> None:
        check_planes(self.near_plane, self.far_plane)
        check_collider(self, reads_collider_params=False)
        if self.average_init_density is not None and not self.average_init_density > 0:
            raise ValueError(f"average-init-density must be > 0, got {self.average_init_density}")
        if self.use_appearance_embedding or self.predict_normals:
            raise ValueError(
                "use-appearance-embedding and predict-normals are not supported by the EUGen nerfacto field"
            )
        for name in ("hidden_dim", "hidden_dim_color", "num_levels", "num_nerf_samples_per_ray"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name.replace('_', '-')} must be an integer >= 1, got {value!r}")

    def grid_args(self) -> dict[str, object]:
        """The NeRF field's hash-grid keyword arguments (every field built from this config takes them)."""
        return {
            name: getattr(self, name)
            for name in (
                "num_levels",
                "base_res",
                "max_res",
                "log2_hashmap_size",
                "features_per_level",
                "implementation",
            )
        }


class EUGenNerfactoModel(FramedModelMixin, NerfactoModel):
    """nerfstudio's nerfacto model around :class:`EUGenNerfactoField`."""

    config: EUGenNerfactoModelConfig

    twin_mlps: tuple[tuple[str, str], ...] = (
        ("density_mlp", "density_layers"),
        ("color_mlp", "color_layers"),
    )
    """(field MLP, EUGen config field naming its EUGen layers) of :meth:`eugen_twin_layers`."""

    def eugen_twin_layers(self) -> list[str] | None:
        """The layers this method's EUGen twin makes EUGen (the EUGen config's default layers of each field MLP),
        by module path: what ``eugen-distill --layers twin`` replaces in a teacher of this model."""
        default = type(self.config.eugen)()
        return [f"field.{mlp}.layers.{i}" for mlp, knob in self.twin_mlps for i in getattr(default, knob)]

    def populate_modules(self) -> None:
        Model.populate_modules(self)  # NerfactoModel's own would build a stock field and LPIPS
        config = self.config
        framing = self.data_framing(
            config.near_plane, config.far_plane, config.background_color, config.disable_scene_contraction
        )
        self.field = self.build_field(framing)
        self.camera_optimizer = config.camera_optimizer.setup(num_cameras=self.num_train_data, device="cpu")
        num_networks = 1 if config.use_same_proposal_network else config.num_proposal_iterations
        args = config.proposal_net_args_list
        self.proposal_networks = torch.nn.ModuleList(
            self.build_proposal_network(framing, args[min(i, len(args) - 1)]) for i in range(num_networks)
        )
        self.density_fns = [
            self.proposal_networks[min(i, num_networks - 1)].density_fn
            for i in range(config.num_proposal_iterations)
        ]

        def update_schedule(step: int) -> float:
            return np.clip(
                np.interp(step, [0, config.proposal_warmup], [0, config.proposal_update_every]),
                1,
                config.proposal_update_every,
            )

        initial_sampler = config.proposal_initial_sampler
        if initial_sampler == "auto":
            initial_sampler = "piecewise" if framing.contraction else "uniform"
        self.proposal_sampler = self.sampler_class(
            num_nerf_samples_per_ray=config.num_nerf_samples_per_ray,
            num_proposal_samples_per_ray=config.num_proposal_samples_per_ray,
            num_proposal_network_iterations=config.num_proposal_iterations,
            single_jitter=config.use_single_jitter,
            update_sched=update_schedule,
            initial_sampler=UniformSampler(single_jitter=config.use_single_jitter)
            if initial_sampler == "uniform"
            else None,
        )
        self.collider = NearFarCollider(near_plane=framing.near, far_plane=framing.far)
        self.renderer_rgb = RGBRenderer(background_color=framing.background)
        self.renderer_accumulation = AccumulationRenderer()
        self.renderer_depth = DepthRenderer(method="median")
        self.renderer_expected_depth = DepthRenderer(method="expected")
        self.rgb_loss = MSELoss()
        self.psnr = PeakSignalNoiseRatio(data_range=1.0)  # training-batch PSNR, used by NerfactoModel
        self.step = 0
        extend_model(self)  # the viewer's "EUGen fused inference" (eugen_nerf.extensions)

    sampler_class: type[ProposalNetworkSampler] = ProposalNetworkSampler
    """The proposal sampler (a subclass may pass whole frustums to its proposal networks)."""

    def initial_density(self, framing: Framing) -> float:
        """``average_init_density``, or the data's default (1 on a solid background, else nerfacto's 0.01)."""
        if self.config.average_init_density is not None:
            return self.config.average_init_density
        return 1.0 if framing.background in ("white", "black") else 0.01

    def build_field(self, framing: Framing) -> Field:
        """The NeRF field: :class:`EUGenNerfactoField` at the config's sizes."""
        config = self.config
        return EUGenNerfactoField(
            self.scene_box.aabb,
            config.eugen,
            density_layers=config.eugen.density_layers,
            color_layers=config.eugen.color_layers,
            hidden_dim=config.hidden_dim,
            hidden_dim_color=config.hidden_dim_color,
            spatial_distortion=SceneContraction(order=float("inf")) if framing.contraction else None,
            average_init_density=self.initial_density(framing),
            **config.grid_args(),
        )

    def build_proposal_network(self, framing: Framing, args: dict) -> Field:
        """One proposal network: nerfstudio's ``HashMLPDensityField`` with ``args``."""
        return HashMLPDensityField(
            self.scene_box.aabb,
            spatial_distortion=SceneContraction(order=float("inf")) if framing.contraction else None,
            **args,
            average_init_density=self.initial_density(framing),
            implementation=self.config.implementation,
        )

    def get_image_metrics_and_images(
        self, outputs: dict[str, Tensor], batch: dict[str, Tensor]
    ) -> tuple[dict[str, float], dict[str, Tensor]]:
        image = self.renderer_rgb.blend_background(batch["image"].to(self.device))
        metrics = image_metrics(image, outputs["rgb"])
        images = {
            "img": torch.cat([image, outputs["rgb"]], dim=1),
            "accumulation": colormaps.apply_colormap(outputs["accumulation"]),
            "depth": colormaps.apply_depth_colormap(outputs["depth"], accumulation=outputs["accumulation"]),
        }
        for i in range(self.config.num_proposal_iterations):
            images[f"prop_depth_{i}"] = colormaps.apply_depth_colormap(
                outputs[f"prop_depth_{i}"], accumulation=outputs["accumulation"]
            )
        return metrics, images
