"""Unit tests of the EUGen fields and their configs: shapes, fused == unfused, twins, bad values."""

from __future__ import annotations

import pytest
import torch
from nerfstudio.cameras.rays import Frustums, RaySamples
from nerfstudio.field_components.field_heads import FieldHeadNames

from eugen_nerf.fields.components import check_layer_indices
from eugen_nerf.fields.nerf import EUGenNeRFField
from eugen_nerf.fields.nerfacto import EUGenNerfactoField
from eugen_nerf.fields.zipnerf import ZipNeRFField
from eugen_nerf.layers import EUGenLinear, EUGenMLP, EUGenSpec
from eugen_nerf.models.nerf import NeRFEUGenConfig
from eugen_nerf.models.nerfacto import NerfactoEUGenConfig
from eugen_nerf.models.zipnerf import ZipNeRFEUGenConfig


def ray_samples(num_rays: int = 4, num_samples: int = 5, seed: int = 0) -> RaySamples:
    generator = torch.Generator().manual_seed(seed)
    directions = torch.nn.functional.normalize(
        torch.randn(num_rays, num_samples, 3, generator=generator), dim=-1
    )
    starts = torch.rand(num_rays, num_samples, 1, generator=generator) * 0.5
    frustums = Frustums(
        origins=torch.rand(num_rays, num_samples, 3, generator=generator) - 0.5,
        directions=directions,
        starts=starts,
        ends=starts + 0.1,
        pixel_area=torch.full((num_rays, num_samples, 1), 1e-4),
    )
    return RaySamples(
        frustums=frustums, camera_indices=torch.zeros(num_rays, num_samples, 1, dtype=torch.long)
    )


def nerf_field(eugen: NeRFEUGenConfig) -> EUGenNeRFField:
    return EUGenNeRFField(eugen, eugen.trunk_layers, eugen.head_layers, trunk_width=32, head_width=16)


def zip_field(eugen: NerfactoEUGenConfig) -> EUGenNerfactoField:
    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
    return EUGenNerfactoField(
        aabb, eugen, eugen.density_layers, eugen.color_layers, num_levels=4, max_res=64, log2_hashmap_size=10
    )


def zipnerf_field(eugen: ZipNeRFEUGenConfig, contraction: bool = False) -> ZipNeRFField:
    aabb = torch.tensor([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0]])
    return ZipNeRFField(
        aabb,
        contraction,
        eugen,
        eugen.density_layers,
        eugen.view_layers,
        bottleneck_width=32,
        view_width=32,
        num_levels=4,
        max_res=64,
        log2_hashmap_size=10,
        implementation="torch",
    )


FIELDS = [
    pytest.param(
        lambda: nerf_field(NeRFEUGenConfig(num_features=8, trunk_layers=(1, 2, 3, 4, 7), head_layers=(0,))),
        id="nerf",
    ),
    pytest.param(
        lambda: zip_field(NerfactoEUGenConfig(num_features=8, density_layers=(0, 1), color_layers=(0, 1, 2))),
        id="nerfacto",
    ),
    pytest.param(
        lambda: zipnerf_field(
            ZipNeRFEUGenConfig(num_features=8, density_layers=(0, 1), view_layers=(0, 1, 2))
        ),
        id="zipnerf",
    ),
]


@pytest.mark.parametrize("make_field", FIELDS)
def test_field_outputs_have_ray_sample_shapes(make_field):
    torch.manual_seed(0)
    outputs = make_field()(ray_samples())
    assert outputs[FieldHeadNames.DENSITY].shape == (4, 5, 1)
    assert outputs[FieldHeadNames.RGB].shape == (4, 5, 3)
    assert (outputs[FieldHeadNames.DENSITY] >= 0).all()
    assert ((outputs[FieldHeadNames.RGB] >= 0) & (outputs[FieldHeadNames.RGB] <= 1)).all()


@pytest.mark.parametrize("make_field", FIELDS)
def test_fused_inference_matches_unfused_in_eval_mode(make_field):
    torch.manual_seed(0)
    field = make_field().eval()
    samples = ray_samples()
    fused = field(samples)
    for module in field.modules():
        if isinstance(module, EUGenMLP):
            module.fuse_in_eval = False
    unfused = field(samples)
    for head in (FieldHeadNames.DENSITY, FieldHeadNames.RGB):
        torch.testing.assert_close(fused[head], unfused[head], rtol=1e-5, atol=1e-6)


def test_fused_inference_follows_the_config():
    field = nerf_field(NeRFEUGenConfig(num_features=8, fused_inference=False, train_merged=False))
    assert not field.trunk.fuse_in_eval
    # layers trained merged have only their merged form: asking for the other is refused, not ignored
    for option in ({"fused_inference": False}, {"compile_fused": True}):
        with pytest.raises(ValueError, match="need the EUGen layers trained apart"):
            NeRFEUGenConfig(num_features=8, **option)


def test_eugen_layers_are_where_the_config_says_and_the_twin_is_dense():
    eugen = nerf_field(NeRFEUGenConfig(num_features=8, trunk_layers=(1, -1), head_layers=(0,)))
    assert [i for i, layer in enumerate(eugen.trunk.layers) if isinstance(layer, EUGenLinear)] == [1, 7]
    assert isinstance(eugen.color_head.layers[0], EUGenLinear)
    dense = nerf_field(NeRFEUGenConfig(trunk_layers=(), head_layers=()))
    assert not any(isinstance(m, EUGenLinear) for m in dense.modules())


def test_eugen_nerf_field_has_fewer_parameters_than_its_dense_twin():
    def count(field):
        return sum(p.numel() for p in field.parameters())

    default = NeRFEUGenConfig()
    eugen = EUGenNeRFField(default, default.trunk_layers, default.head_layers)
    dense = EUGenNeRFField(default, (), ())
    assert count(eugen) < 0.7 * count(dense)


def test_coarse_and_fine_style_seeds_give_different_projections():
    a = nerf_field(NeRFEUGenConfig(num_features=8, seed=0))
    b = nerf_field(NeRFEUGenConfig(num_features=8, seed=1000))
    assert not torch.equal(a.trunk.layers[1].projections, b.trunk.layers[1].projections)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: NeRFEUGenConfig(trunk_layers=(8,)), "eugen.trunk-layers: layer index 8 does not exist"),
        (lambda: NeRFEUGenConfig(head_layers=(-3,)), "eugen.head-layers: layer index -3 does not exist"),
        (lambda: NerfactoEUGenConfig(color_layers=(3,)), "eugen.color-layers: layer index 3 does not exist"),
        (lambda: NeRFEUGenConfig(num_features=0), "eugen.num-features must be an integer in 1..4096, got 0"),
        (lambda: EUGenSpec(num_features=-4), "eugen.num-features must be an integer in 1..4096, got -4"),
        (lambda: EUGenSpec(degree=0), "eugen.degree must be an integer in 1..4, got 0"),
        (lambda: EUGenSpec(feature_map="tanh"), "eugen.feature-map must be one of"),
    ],
)
def test_bad_eugen_config_fails_with_a_clear_message(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_layer_indices_are_normalised():
    assert check_layer_indices("x", (-1, 0, 0), 8) == (0, 7)


def test_nerf_heads_absorb_an_eugen_last_trunk_layer_at_inference():
    """With trunk layer 7 EUGen, no ReLU follows it; in eval the heads absorb its A and the trunk hands on its
    k·m features, and the field's outputs are those of the unfolded field."""
    torch.manual_seed(0)
    config = NeRFEUGenConfig(num_features=8, trunk_layers=(1, 2, 3, 5, 6, 7))
    field = nerf_field(config).eval()
    assert field.trunk.out_activation is None
    samples = ray_samples()
    assert field.folded_heads() is not None
    _, embedding = field.get_density(samples)
    assert embedding.shape[-1] == 8 * config.degree  # the features, not the 32-wide output
    folded = field(samples)
    for module in field.modules():
        if isinstance(module, EUGenMLP):
            module.fuse_in_eval = False
    assert field.folded_heads() is None
    unfolded = field(samples)
    for head in (FieldHeadNames.DENSITY, FieldHeadNames.RGB):
        torch.testing.assert_close(folded[head], unfolded[head], rtol=1e-5, atol=1e-6)


def test_nerf_heads_read_the_trunk_output_where_folding_would_hide_it():
    torch.manual_seed(0)
    field = nerf_field(NeRFEUGenConfig(num_features=8, trunk_layers=(1, 7), train_merged=False)).eval()
    assert field.folded_heads() is not None
    handle = field.trunk.register_forward_hook(
        lambda *args: None
    )  # distillation's capture watches the output
    assert field.folded_heads() is None
    handle.remove()
    assert field.train().folded_heads() is None
    dense_last = nerf_field(NeRFEUGenConfig(num_features=8, trunk_layers=(1, 2))).eval()
    assert isinstance(dense_last.trunk.out_activation, torch.nn.ReLU) and dense_last.folded_heads() is None
