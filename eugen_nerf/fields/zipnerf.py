"""Zip-NeRF's field: anti-aliased hash-grid features of multisampled frustums, then Zip-NeRF's MLPs.

Following the reference implementation (Barron et al. 2023; zipnerf-pytorch), each sample interval is six
multisamples (:mod:`.multisample`); their hash-grid features are multiplied per level by
``erf(1 / sqrt(8 sigma^2 n^2))`` and averaged, so a level finer than the pixel's footprint fades out instead of
aliasing. A small density MLP (grid -> 64 -> bottleneck, the bottleneck's first channel is the raw density,
``softplus(raw - 1)``) feeds a wide view-dependent MLP ([bottleneck, direction encoding] -> 256 -> 256 with
the input concatenated again after the first layer -> RGB). That view MLP and the bottleneck are where the
field's MLP cost is, and where EUGen layers go (``density_layers``, ``view_layers``), merged at inference.

:class:`ZipNeRFDensityField` is the same featurisation with a density-only MLP: Zip-NeRF's proposal networks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from nerfstudio.cameras.rays import RaySamples
from nerfstudio.field_components.field_heads import FieldHeadNames
from nerfstudio.fields.base_field import Field
from torch import Tensor, nn

from eugen_nerf.fields.components import field_mlp, hash_implementation
from eugen_nerf.fields.hashgrid import GatherHashEncoding
from eugen_nerf.fields.multisample import (
    contract_gaussians,
    encode_directions,
    frustum_multisamples,
    level_weights,
    pixel_radius,
)
from eugen_nerf.layers import EUGenSpec

DENSITY_LAYERS = 2
"""grid -> width (ReLU) -> bottleneck."""
VIEW_LAYERS = 3
"""[bottleneck, direction] -> width -> [input, width] -> RGB."""
DIRECTION_FREQUENCIES = 4
DENSITY_BIAS = -1.0
RGB_PADDING = 0.001


class AntiAliasedHashGrid(nn.Module):
    """A multiresolution hash grid read at multisampled frustums, with Zip-NeRF's per-level down-weighting.

    Positions are in the unit cube ``[0, 1]^3``, blurs in the same units; the output is the features of each
    level, weighted by :func:`level_weights` and averaged over the multisamples.
    """

    def __init__(
        self,
        num_levels: int,
        base_res: int,
        max_res: int,
        log2_hashmap_size: int,
        features_per_level: int,
        implementation: Literal["tcnn", "torch"],
    ) -> None:
        super().__init__()
        self.num_levels = num_levels
        self.features_per_level = features_per_level
        self.encoding = GatherHashEncoding(
            num_levels=num_levels,
            min_res=base_res,
            max_res=max_res,
            log2_hashmap_size=log2_hashmap_size,
            features_per_level=features_per_level,
            implementation=implementation,
        )
        self.register_buffer("resolutions", self.encoding.scalings.clone().float(), persistent=False)

    def get_out_dim(self) -> int:
        return self.num_levels * self.features_per_level

    def forward(self, positions: Tensor, stds: Tensor) -> Tensor:
        """positions ``[..., S, 3]`` in ``[0, 1]``, stds ``[..., S]`` -> features ``[..., L * F]``."""
        features = self.encoding(positions.reshape(-1, 3)).float()
        features = features.view(*positions.shape[:-1], self.num_levels, self.features_per_level)
        weights = level_weights(2 * stds, self.resolutions)  # [0, 1] -> the reference's [-1, 1] units
        # without autograd the encoding's fresh output is weighted in place: one [..., S, L, F] buffer fewer
        if torch.is_grad_enabled():
            features = features * weights[..., None]
        else:
            features.mul_(weights[..., None])
        return features.mean(dim=-3).flatten(-2)

    def decay_loss(self) -> Tensor:
        """Zip-NeRF's weight decay on the grid (mean squared feature), which keeps unseen cells near zero."""
        return sum(p.pow(2).mean() for p in self.encoding.parameters())  # type: ignore[return-value]


class ZipNeRFDensityField(Field):
    """Anti-aliased hash grid -> small MLP -> density (and, for :class:`ZipNeRFField`, a bottleneck vector).

    Args:
        aabb: scene box mapped to the grid when there is no contraction.
        contraction: contract unbounded scenes (mip-NeRF 360, L2) into the grid; False for object scenes.
        num_levels, base_res, max_res, log2_hashmap_size, features_per_level: the hash grid.
        hidden_dim: width of the density MLP's hidden layer (Zip-NeRF: 64).
        out_dim: 1 (a proposal network) or the bottleneck width.
        eugen, eugen_layers: which density-MLP layers are EUGen (none by default).
        implementation: hash-grid backend (tiny-cuda-nn when installed).
    """

    aabb: Tensor

    def __init__(
        self,
        aabb: Tensor,
        contraction: bool,
        num_levels: int = 10,
        base_res: int = 16,
        max_res: int = 8192,
        log2_hashmap_size: int = 21,
        features_per_level: int = 4,
        hidden_dim: int = 64,
        out_dim: int = 1,
        eugen: EUGenSpec | None = None,
        eugen_layers: Sequence[int] = (),
        implementation: Literal["tcnn", "torch"] = hash_implementation(),
    ) -> None:
        super().__init__()
        self.register_buffer("aabb", aabb)
        self.contraction = contraction
        self.grid = AntiAliasedHashGrid(
            num_levels, base_res, max_res, log2_hashmap_size, features_per_level, implementation
        )
        self.density_mlp = field_mlp(
            eugen or EUGenSpec(),
            eugen_layers,
            in_dim=self.grid.get_out_dim(),
            num_layers=DENSITY_LAYERS,
            layer_width=hidden_dim,
            out_dim=out_dim,
        )

    def unit_gaussians(self, ray_samples: RaySamples) -> tuple[Tensor, Tensor, Tensor]:
        """Multisamples of each frustum in the grid's unit cube: means, stds, and whether inside the grid."""
        frustums = ray_samples.frustums
        if frustums.pixel_area is None:
            raise ValueError("Zip-NeRF's multisampling needs each ray's pixel_area (camera intrinsics)")
        means, stds = frustum_multisamples(
            frustums.origins,
            frustums.directions,
            frustums.starts,
            frustums.ends,
            pixel_radius(frustums.pixel_area),
            randomize=self.training,
        )
        if self.contraction:
            means, stds = contract_gaussians(means, stds)
            return (means + 2.0) / 4.0, stds / 4.0, torch.ones_like(frustums.starts, dtype=torch.bool)
        low, high = self.aabb[0], self.aabb[1]
        extent = high - low
        unit = (means - low) / extent
        # per coordinate, then over the three (a reduction over a dimension of 3 is slow)
        within = (unit > 0) & (unit < 1)
        inside = (within[..., 0] & within[..., 1] & within[..., 2]).all(dim=-1, keepdim=True)
        return unit.clamp(0.0, 1.0), stds / extent.prod() ** (1 / 3), inside

    def get_density(self, ray_samples: RaySamples) -> tuple[Tensor, Tensor]:
        means, stds, inside = self.unit_gaussians(ray_samples)
        features = self.grid(means, stds)
        h = self.density_mlp(features.view(-1, features.shape[-1])).view(*ray_samples.frustums.shape, -1)
        density = nn.functional.softplus(h[..., :1] + DENSITY_BIAS) * inside
        return density, h

    def density_fn(self, ray_samples: RaySamples) -> Tensor:  # type: ignore[override]
        """Density of whole frustums (the proposal sampler passes samples, not points)."""
        return self.get_density(ray_samples)[0]

    def get_outputs(self, ray_samples: RaySamples, density_embedding: Tensor | None = None):
        return {}


class ZipNeRFField(ZipNeRFDensityField):
    """Zip-NeRF's NeRF MLP: :class:`ZipNeRFDensityField` with a bottleneck, then the view-dependent MLP.

    Args (beyond :class:`ZipNeRFDensityField`'s):
        bottleneck_width: the density MLP's output width (Zip-NeRF: 256).
        view_width: width of the view-dependent MLP (Zip-NeRF: 256).
        density_layers: EUGen layers of the density MLP (1 is the bottleneck).
        view_layers: EUGen layers of the view MLP (0 and 1 are the two wide layers, 2 the RGB output).
        train_merged: hold the view MLP, where it has EUGen layers, as a :class:`~eugen_nerf.layers.MergedMLP`:
            trained in its merged form.
    """

    def __init__(
        self,
        aabb: Tensor,
        contraction: bool,
        eugen: EUGenSpec,
        density_layers: Sequence[int] = (),
        view_layers: Sequence[int] = (),
        bottleneck_width: int = 256,
        view_width: int = 256,
        train_merged: bool = False,
        **grid_args,
    ) -> None:
        super().__init__(
            aabb, contraction, out_dim=bottleneck_width, eugen=eugen, eugen_layers=density_layers, **grid_args
        )
        self.bottleneck_width = bottleneck_width
        direction_dim = 3 * (1 + 2 * DIRECTION_FREQUENCIES)
        self.view_mlp = field_mlp(
            eugen,
            view_layers,
            in_dim=bottleneck_width + direction_dim,
            num_layers=VIEW_LAYERS,
            layer_width=view_width,
            out_dim=3,
            skip_connections=(1,),
            out_activation=nn.Sigmoid(),
            seed_offset=DENSITY_LAYERS,
            train_merged=train_merged,
        )

    def get_outputs(
        self, ray_samples: RaySamples, density_embedding: Tensor | None = None
    ) -> dict[FieldHeadNames, Tensor]:
        assert density_embedding is not None
        directions = encode_directions(ray_samples.frustums.directions.reshape(-1, 3), DIRECTION_FREQUENCIES)
        h = [density_embedding.reshape(-1, self.bottleneck_width), directions]
        rgb = self.view_mlp.forward_concat(h).view(*ray_samples.frustums.shape, 3)
        return {FieldHeadNames.RGB: rgb * (1 + 2 * RGB_PADDING) - RGB_PADDING}
