"""The vanilla NeRF field with EUGen layers: positional encoding, 8-layer trunk, density and colour heads.

Same structure as nerfstudio's ``NeRFField`` (trunk with a skip at layer 4, softplus density head on the
trunk output, 128-wide view-dependent colour head), but every MLP is an :class:`EUGenMLP`, so any trunk or
head layer can be EUGen; with no EUGen layer it is the dense twin.
"""

from __future__ import annotations

from collections.abc import Sequence

from nerfstudio.cameras.rays import RaySamples
from nerfstudio.field_components.encodings import NeRFEncoding
from nerfstudio.field_components.field_heads import FieldHeadNames
from nerfstudio.fields.base_field import Field
from torch import Tensor, nn

from eugen_nerf.fields.components import field_mlp
from eugen_nerf.layers import EUGenSpec

TRUNK_LAYERS = 8
TRUNK_SKIP = 4
HEAD_LAYERS = 2


class EUGenNeRFField(Field):
    """NeRF field whose trunk layers ``trunk_layers`` and colour-head layers ``head_layers`` are EUGen.

    Args:
        eugen: EUGen hyper-parameters.
        trunk_layers: EUGen layer indices of the 8-layer trunk.
        head_layers: EUGen layer indices of the 2-layer colour head (the last one outputs RGB).
        trunk_width: trunk width (256 in NeRF).
        head_width: colour head width (128 in NeRF).
        train_merged: hold the trunk and colour head, where they have EUGen layers, as
            :class:`~eugen_nerf.layers.MergedMLP`: trained in their merged form.
    """

    def __init__(
        self,
        eugen: EUGenSpec,
        trunk_layers: Sequence[int] = (),
        head_layers: Sequence[int] = (),
        trunk_width: int = 256,
        head_width: int = 128,
        train_merged: bool = False,
    ) -> None:
        super().__init__()
        # NeRF's encodings with nerfstudio's frequency ranges: 10 frequencies for positions, 4 for directions.
        self.position_encoding = NeRFEncoding(
            in_dim=3, num_frequencies=10, min_freq_exp=0.0, max_freq_exp=8.0, include_input=True
        )
        self.direction_encoding = NeRFEncoding(
            in_dim=3, num_frequencies=4, min_freq_exp=0.0, max_freq_exp=4.0, include_input=True
        )
        self.trunk = field_mlp(
            eugen,
            trunk_layers,
            in_dim=self.position_encoding.get_out_dim(),
            num_layers=TRUNK_LAYERS,
            layer_width=trunk_width,
            out_dim=trunk_width,
            skip_connections=(TRUNK_SKIP,),
            out_activation=nn.ReLU(),
            train_merged=train_merged,
        )
        self.density_head = nn.Linear(trunk_width, 1)
        self.color_head = field_mlp(
            eugen,
            head_layers,
            in_dim=trunk_width + self.direction_encoding.get_out_dim(),
            num_layers=HEAD_LAYERS,
            layer_width=head_width,
            out_dim=3,
            out_activation=nn.Sigmoid(),
            seed_offset=TRUNK_LAYERS,
            train_merged=train_merged,
        )

    def get_density(self, ray_samples: RaySamples) -> tuple[Tensor, Tensor]:
        features = self.trunk(self.position_encoding(ray_samples.frustums.get_positions()))
        density = nn.functional.softplus(self.density_head(features))
        return density, features

    def get_outputs(
        self, ray_samples: RaySamples, density_embedding: Tensor | None = None
    ) -> dict[FieldHeadNames, Tensor]:
        assert density_embedding is not None
        encoded_dir = self.direction_encoding(ray_samples.frustums.directions)
        rgb = self.color_head.forward_concat([encoded_dir, density_embedding])
        return {FieldHeadNames.RGB: rgb}
