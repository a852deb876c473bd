"""A nerfacto-style field: multiresolution hash grid, then small density and colour MLPs with EUGen layers.

The structure follows nerfstudio's ``NerfactoField`` (hash grid -> density MLP giving density and geometry
features; spherical-harmonics direction encoding + geometry features -> colour MLP), without appearance
or transient embeddings (the shipped scenes have constant lighting). The hash grid uses tiny-cuda-nn when
it is installed and pure torch otherwise; the MLPs are always :class:`EUGenMLP` (dense twin: no EUGen layer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from nerfstudio.cameras.rays import RaySamples
from nerfstudio.data.scene_box import SceneBox
from nerfstudio.field_components.activations import trunc_exp
from nerfstudio.field_components.encodings import HashEncoding, SHEncoding
from nerfstudio.field_components.field_heads import FieldHeadNames
from nerfstudio.field_components.spatial_distortions import SpatialDistortion
from nerfstudio.fields.base_field import Field, get_normalized_directions
from torch import Tensor, nn

from eugen_nerf.fields.components import field_mlp, hash_implementation
from eugen_nerf.layers import EUGenSpec

DENSITY_LAYERS = 2
COLOR_LAYERS = 3


class EUGenNerfactoField(Field):
    """Hash-grid field whose density-MLP layers ``density_layers`` and colour-MLP layers ``color_layers`` are EUGen.

    Args:
        aabb: scene box the hash grid covers (used when there is no spatial distortion).
        eugen: EUGen hyper-parameters.
        density_layers: EUGen layer indices of the 2-layer density MLP.
        color_layers: EUGen layer indices of the 3-layer colour MLP.
        hidden_dim, hidden_dim_color, geo_feat_dim: MLP widths and geometry-feature width (nerfacto's).
        num_levels, base_res, max_res, log2_hashmap_size, features_per_level: hash grid.
        spatial_distortion: scene contraction for unbounded scenes (None for object scenes).
        average_init_density: density scale at initialisation.
        implementation: hash grid and SH encoding backend (tiny-cuda-nn when installed, else torch).
    """

    aabb: Tensor

    def __init__(
        self,
        aabb: Tensor,
        eugen: EUGenSpec,
        density_layers: Sequence[int] = (),
        color_layers: Sequence[int] = (),
        hidden_dim: int = 64,
        hidden_dim_color: int = 64,
        geo_feat_dim: int = 15,
        num_levels: int = 16,
        base_res: int = 16,
        max_res: int = 2048,
        log2_hashmap_size: int = 19,
        features_per_level: int = 2,
        spatial_distortion: SpatialDistortion | None = None,
        average_init_density: float = 1.0,
        implementation: Literal["tcnn", "torch"] = hash_implementation(),
    ) -> None:
        super().__init__()
        self.register_buffer("aabb", aabb)
        self.geo_feat_dim = geo_feat_dim
        self.spatial_distortion = spatial_distortion
        self.average_init_density = average_init_density
        self.encoding = HashEncoding(
            num_levels=num_levels,
            min_res=base_res,
            max_res=max_res,
            log2_hashmap_size=log2_hashmap_size,
            features_per_level=features_per_level,
            implementation=implementation,
        )
        self.direction_encoding = SHEncoding(levels=4, implementation=implementation)
        self.density_mlp = field_mlp(
            eugen,
            density_layers,
            in_dim=self.encoding.get_out_dim(),
            num_layers=DENSITY_LAYERS,
            layer_width=hidden_dim,
            out_dim=1 + geo_feat_dim,
        )
        self.color_mlp = field_mlp(
            eugen,
            color_layers,
            in_dim=self.direction_encoding.get_out_dim() + geo_feat_dim,
            num_layers=COLOR_LAYERS,
            layer_width=hidden_dim_color,
            out_dim=3,
            out_activation=nn.Sigmoid(),
            seed_offset=DENSITY_LAYERS,
        )

    def normalized_positions(self, ray_samples: RaySamples) -> Tensor:
        """Sample positions mapped to the hash grid's unit cube."""
        positions = ray_samples.frustums.get_positions()
        if self.spatial_distortion is not None:
            return (self.spatial_distortion(positions) + 2.0) / 4.0
        return SceneBox.get_normalized_positions(positions, self.aabb)

    def get_density(self, ray_samples: RaySamples) -> tuple[Tensor, Tensor]:
        positions = self.normalized_positions(ray_samples)
        # Points outside the grid get zero density (and are clamped into it for the lookup).
        inside = ((positions > 0.0) & (positions < 1.0)).all(dim=-1, keepdim=True)
        positions = positions * inside
        features = self.encoding(positions.view(-1, 3)).float()
        h = self.density_mlp(features).view(*ray_samples.frustums.shape, -1)
        density_before_activation, geo_features = torch.split(h, [1, self.geo_feat_dim], dim=-1)
        density = self.average_init_density * trunc_exp(density_before_activation) * inside
        return density, geo_features

    def get_outputs(
        self, ray_samples: RaySamples, density_embedding: Tensor | None = None
    ) -> dict[FieldHeadNames, Tensor]:
        assert density_embedding is not None
        directions = get_normalized_directions(ray_samples.frustums.directions)
        encoded_dir = self.direction_encoding(directions.view(-1, 3)).float()
        h = [encoded_dir, density_embedding.view(-1, self.geo_feat_dim)]
        rgb = self.color_mlp.forward_concat(h).view(*ray_samples.frustums.shape, 3)
        return {FieldHeadNames.RGB: rgb}
