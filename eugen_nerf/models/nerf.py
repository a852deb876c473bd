"""Vanilla NeRF (coarse + fine sampling) over :class:`EUGenNeRFField`; the dense twin has no EUGen layer.

The model reuses nerfstudio's ``NeRFModel`` sampling, rendering and losses and replaces its fields and
metrics: it builds no LPIPS network (see :mod:`eugen_nerf.models.metrics`) and also returns
``rgb``/``depth``/``accumulation`` (the fine pass) so that the viewer and ``ns-render`` work unchanged.
Near/far, background and scene contraction come from the data unless given (:mod:`.framing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import torch
from nerfstudio.cameras.rays import RayBundle
from nerfstudio.model_components.losses import MSELoss
from nerfstudio.model_components.ray_samplers import (
    PDFSampler,
    UniformLinDispPiecewiseSampler,
    UniformSampler,
)
from nerfstudio.model_components.renderers import AccumulationRenderer, DepthRenderer, RGBRenderer
from nerfstudio.model_components.scene_colliders import NearFarCollider
from nerfstudio.models.vanilla_nerf import NeRFModel, VanillaModelConfig
from nerfstudio.utils import colormaps
from torch import Tensor

from eugen_nerf.extensions import extend_model
from eugen_nerf.fields.components import check_layer_indices
from eugen_nerf.fields.nerf import HEAD_LAYERS, TRUNK_LAYERS, EUGenNeRFField
from eugen_nerf.layers import MergedTrainingSpec
from eugen_nerf.models.framing import ContractedSampler, FramedModelMixin, check_collider, check_planes
from eugen_nerf.models.metrics import image_metrics, psnr

FINE_SEED_OFFSET = 1000
"""The fine field draws its projections from ``seed + 1000`` so the two fields' features are independent."""


@dataclass
class NeRFEUGenConfig(MergedTrainingSpec):
    """EUGen knobs of the NeRF field, plus which of its layers are EUGen."""

    num_features: int = 64
    """Random projections m of each trunk EUGen layer. With the projected scaling a merged layer is k*m = 128
    rows against the dense layer's 256, so the trunk renders faster than the dense twin's at this m; at m = 32
    the trunk trails the dense twin's PSNR (docs/benchmarks.md, NeRF)."""
    trunk_layers: tuple[int, ...] = (1, 2, 3, 5, 6, 7)
    """EUGen layers of the 8-layer trunk (0: encoding -> width, 4: skip layer, 7: last). An EUGen last layer is
    followed by no ReLU, so at inference the density and colour heads absorb its A and the trunk hands on its
    k*m features, not its 256-wide output (eugen_nerf.fields.nerf)."""
    head_layers: tuple[int, ...] = ()
    """EUGen layers of the 2-layer colour head (1 outputs RGB)."""

    def has_mergeable_layers(self) -> bool:
        return bool(self.trunk_layers or self.head_layers)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.trunk_layers = check_layer_indices("eugen.trunk-layers", self.trunk_layers, TRUNK_LAYERS)
        self.head_layers = check_layer_indices("eugen.head-layers", self.head_layers, HEAD_LAYERS)


@dataclass
class EUGenNeRFModelConfig(VanillaModelConfig):
    """NeRF with EUGen layers; ``eugen.trunk_layers = eugen.head_layers = ()`` is the dense twin."""

    _target: type = field(default_factory=lambda: EUGenNeRFModel)
    eugen: NeRFEUGenConfig = field(default_factory=NeRFEUGenConfig)
    """EUGen layers: which ones, and their hyper-parameters."""
    trunk_width: int = 256
    """Width of the 8-layer trunk."""
    head_width: int = 128
    """Width of the view-dependent colour head."""
    eval_num_rays_per_chunk: int = 1024
    near_plane: float | None = None
    """Near plane; None: from the data (see eugen_nerf.scenes.framing)."""
    far_plane: float | None = None
    """Far plane; None: from the data."""
    background_color: Literal["auto", "random", "last_sample", "black", "white"] = "auto"
    """Background; auto: from the data (the object scene's colour, else the ray's last sample)."""
    disable_scene_contraction: bool | None = None
    """None: contract space (and sample linearly in disparity) for unbounded data only."""
    collider_params: dict[str, float] | None = None
    """nerfstudio's near/far dict; when given it overrides near-plane/far-plane."""

    def __post_init__(self) -> None:
        check_planes(self.near_plane, self.far_plane)
        check_collider(self, reads_collider_params=True)
        if self.enable_temporal_distortion:  # vanilla NeRF's D-NeRF option: these fields have no time input
            raise ValueError(
                "enable-temporal-distortion is not supported by the EUGen NeRF fields (static scenes)"
            )
        for name in ("trunk_width", "head_width", "num_coarse_samples", "num_importance_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name.replace('_', '-')} must be an integer >= 1, got {value!r}")


class EUGenNeRFModel(FramedModelMixin, NeRFModel):
    """nerfstudio's NeRF model with :class:`EUGenNeRFField` coarse and fine fields."""

    config: EUGenNeRFModelConfig
    renders_in_object_frame = True  # the positional encoding reads raw positions

    def eugen_twin_layers(self) -> list[str] | None:
        """The layers ``eugen-nerf`` makes EUGen (its default trunk and colour-head layers, in both fields), by
        module path: what ``eugen-distill --layers twin`` replaces in a teacher of this model."""
        default = type(self.config.eugen)()
        return [
            f"{name}.{mlp}.layers.{i}"
            for name in ("field_coarse", "field_fine")
            for mlp, indices in (("trunk", default.trunk_layers), ("color_head", default.head_layers))
            for i in indices
        ]

    def populate_modules(self) -> None:
        # NeRFModel's own populate_modules would build stock fields and LPIPS; the collider is the data's.
        config = self.config
        planes = config.collider_params or {}
        framing = self.data_framing(
            planes.get("near_plane", config.near_plane),
            planes.get("far_plane", config.far_plane),
            config.background_color,
            config.disable_scene_contraction,
        )
        near, far = self.collider_planes()
        self.collider = NearFarCollider(near_plane=near, far_plane=far)
        eugen = config.eugen
        self.field_coarse = self._make_field(eugen)
        self.field_fine = self._make_field(replace(eugen, seed=eugen.seed + FINE_SEED_OFFSET))
        self.sampler_uniform = UniformSampler(num_samples=config.num_coarse_samples)
        self.sampler_pdf = PDFSampler(num_samples=config.num_importance_samples)
        if framing.contraction:
            piecewise = UniformLinDispPiecewiseSampler(num_samples=config.num_coarse_samples)
            self.sampler_uniform = ContractedSampler(piecewise)
            self.sampler_pdf = ContractedSampler(self.sampler_pdf)
        self.renderer_rgb = RGBRenderer(background_color=framing.background)
        self.renderer_accumulation = AccumulationRenderer()
        self.renderer_depth = DepthRenderer()
        self.rgb_loss = MSELoss()
        extend_model(self)  # the viewer's "EUGen fused inference" (eugen_nerf.extensions)

    def _make_field(self, eugen: NeRFEUGenConfig) -> EUGenNeRFField:
        return EUGenNeRFField(
            eugen,
            eugen.trunk_layers,
            eugen.head_layers,
            self.config.trunk_width,
            self.config.head_width,
            train_merged=eugen.merged_training,
        )

    def get_outputs(self, ray_bundle: RayBundle) -> dict[str, Tensor]:
        outputs = super().get_outputs(ray_bundle)
        for name in ("rgb", "accumulation", "depth"):
            outputs[name] = outputs[f"{name}_fine"]
        return outputs

    def get_metrics_dict(self, outputs, batch) -> dict[str, Tensor]:
        image = self.renderer_rgb.blend_background(batch["image"].to(self.device))
        return {"psnr": -10.0 * torch.log10(torch.mean((outputs["rgb_fine"].detach() - image) ** 2))}

    def get_image_metrics_and_images(
        self, outputs: dict[str, Tensor], batch: dict[str, Tensor]
    ) -> tuple[dict[str, float], dict[str, Tensor]]:
        image = self.renderer_rgb.blend_background(batch["image"].to(outputs["rgb_fine"].device))
        metrics = image_metrics(image, outputs["rgb_fine"])
        metrics["coarse_psnr"] = psnr(image, outputs["rgb_coarse"])
        bounded = self.framing.kind == "object"  # unbounded depth: the colormap's own range
        near, far = (self.framing.near, self.framing.far) if bounded else (None, None)
        depths = [
            colormaps.apply_depth_colormap(
                outputs[f"depth_{level}"],
                accumulation=outputs[f"accumulation_{level}"],
                near_plane=near,
                far_plane=far,
            )
            for level in ("coarse", "fine")
        ]
        images = {
            "img": torch.cat([image, outputs["rgb_coarse"], outputs["rgb_fine"]], dim=1),
            "accumulation": torch.cat(
                [colormaps.apply_colormap(outputs[f"accumulation_{level}"]) for level in ("coarse", "fine")],
                dim=1,
            ),
            "depth": torch.cat(depths, dim=1),
        }
        return metrics, images
