"""The vanilla NeRF field with EUGen layers: positional encoding, 8-layer trunk, density and colour heads.

Same structure as nerfstudio's ``NeRFField`` (trunk with a skip at layer 4, softplus density head on the
trunk output, 128-wide view-dependent colour head), but every MLP is an :class:`EUGenMLP`, so any trunk or
head layer can be EUGen; with no EUGen layer it is the dense twin.

When the trunk's last layer is EUGen, it replaces that layer's ``ReLU(W x + b)`` as a whole, so no ReLU
follows it and the trunk's output ``A F + c`` is linear in the layer's features ``F``. Both heads read that
output through a linear map (the density head, and the colour head's first layer), so at inference they
absorb ``A`` and ``c`` (:meth:`~eugen_nerf.layers.fused.FusedMLP.absorb_input`) and the trunk hands on ``F``,
``k·m`` wide (128 at the defaults) instead of the 256-wide output: the widest buffer of a render, one per
sample, is halved, and the heads' first products are narrower.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from nerfstudio.cameras.rays import RaySamples
from nerfstudio.field_components.encodings import NeRFEncoding
from nerfstudio.field_components.field_heads import FieldHeadNames
from nerfstudio.fields.base_field import Field
from torch import Tensor, nn

from eugen_nerf.fields.components import check_layer_indices, field_mlp
from eugen_nerf.layers import EUGenMLP, EUGenSpec
from eugen_nerf.layers.fused import FusedMLP

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
        # an EUGen (or SNNK) last layer carries its own non-linearity: no ReLU after it
        last_is_eugen = TRUNK_LAYERS - 1 in check_layer_indices("trunk layers", trunk_layers, TRUNK_LAYERS)
        self.trunk = field_mlp(
            eugen,
            trunk_layers,
            in_dim=self.position_encoding.get_out_dim(),
            num_layers=TRUNK_LAYERS,
            layer_width=trunk_width,
            out_dim=trunk_width,
            skip_connections=(TRUNK_SKIP,),
            out_activation=None if last_is_eugen and eugen.layer_type in ("eugen", "snnk") else nn.ReLU(),
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

        self._folded = None
        self._folded_key = None

    def folded_heads(self) -> tuple[FusedMLP, FusedMLP, FusedMLP] | None:
        """``(trunk, density head, colour head)`` in merged form with the trunk's last ``A`` absorbed by the heads
        (see the module docstring), or None where the field does not run so: in training, where the trunk's
        output is not linear in its last features, where an MLP does not run its eager fused form, or where a
        forward hook would miss the output it watches (distillation's capture). Rebuilt when a weight changes."""
        mlps = (self.trunk, self.color_head)
        if self.training or self.trunk.out_activation is not None:  # a dense last layer has its ReLU
            return None
        for mlp in mlps:
            if isinstance(mlp, EUGenMLP) and (not mlp.runs_fused or mlp.compile_fused or mlp.layers_hooked()):
                return None
        for module in (*mlps, self.density_head):
            if module._forward_hooks or module._forward_pre_hooks:
                return None
        tensors = [t for m in (*mlps, self.density_head) for t in (*m.parameters(), *m.buffers())]
        key = tuple((id(t), t._version, t.device, t.dtype) for t in tensors)
        if key != self._folded_key:
            self._folded, self._folded_key = self.fold_heads(), key
        return self._folded

    @torch.no_grad()  # inference forms: no autograd history on the merged weights
    def fold_heads(self) -> tuple[FusedMLP, FusedMLP, FusedMLP] | None:
        """The merged forms :meth:`folded_heads` runs, built now whatever the mode (None where the trunk's output
        is not linear in its last features, or the colour head reads its input other than linearly)."""
        if self.trunk.out_activation is not None:
            return None
        color = self.color_head.fused()
        if not color.reads_input_linearly():  # the colour head needs the trunk's output itself
            return None
        trunk, a, c = self.trunk.fused().split_output()
        density = FusedMLP.from_linear(self.density_head).absorb_input(0, a, c)
        return trunk, density, color.absorb_input(self.direction_encoding.get_out_dim(), a, c)

    def get_density(self, ray_samples: RaySamples) -> tuple[Tensor, Tensor]:
        encoded = self.position_encoding(ray_samples.frustums.get_positions())
        folded = self.folded_heads()
        if folded is None:
            features = self.trunk(encoded)
            return nn.functional.softplus(self.density_head(features)), features
        features = folded[0](encoded)  # the last EUGen layer's features F
        return nn.functional.softplus(folded[1](features)), features

    def get_outputs(
        self, ray_samples: RaySamples, density_embedding: Tensor | None = None
    ) -> dict[FieldHeadNames, Tensor]:
        assert density_embedding is not None
        encoded_dir = self.direction_encoding(ray_samples.frustums.directions)
        folded = self.folded_heads()
        if folded is None:
            rgb = self.color_head.forward_concat([encoded_dir, density_embedding])
        else:  # the embedding is the trunk's last features (get_density ran in the same mode)
            rgb = folded[2]([encoded_dir, density_embedding])
        return {FieldHeadNames.RGB: rgb}
