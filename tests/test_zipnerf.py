"""Zip-NeRF: multisampling, anti-aliased features, the interlevel loss, the field, bad input.

Fused == unfused for the Zip-NeRF field is in tests/test_fields.py, with the other fields."""

from __future__ import annotations

import math

import pytest
import torch
from nerfstudio.cameras.rays import Frustums, RaySamples
from nerfstudio.field_components.encodings import HashEncoding
from nerfstudio.field_components.field_heads import FieldHeadNames
from test_fields import ray_samples, zipnerf_field  # the shared small fields and samples

from eugen_nerf.fields.hashgrid import GatherHashEncoding
from eugen_nerf.fields.multisample import (
    contract_gaussians,
    frustum_multisamples,
    level_weights,
    pixel_radius,
)
from eugen_nerf.fields.zipnerf import encode_directions
from eugen_nerf.layers import EUGenLinear
from eugen_nerf.models.interlevel import (
    anti_aliased_interlevel_loss,
    blur_step_function,
    integrate_linear_spline,
)
from eugen_nerf.models.zipnerf import ZipNeRFEUGenConfig, ZipNeRFModelConfig

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def mip_nerf_gaussian(t0: float, t1: float, radius: float):
    """mip-NeRF's stable mean along the ray and variances of a conical frustum (Barron et al. 2021, eq. 7)."""
    mu, hw = (t0 + t1) / 2, (t1 - t0) / 2
    t_mean = mu + 2 * mu * hw**2 / (3 * mu**2 + hw**2)
    t_var = hw**2 / 3 - 4 / 15 * hw**4 * (12 * mu**2 - hw**2) / (3 * mu**2 + hw**2) ** 2
    r_var = (mu**2 / 4 + 5 / 12 * hw**2 - 4 / 15 * hw**4 / (3 * mu**2 + hw**2)) * radius**2
    return t_mean, t_var, r_var


@pytest.mark.parametrize("randomize", [False, True])
@pytest.mark.parametrize("t0,t1", [(2.0, 2.5), (1.0, 3.0), (4.0, 4.05)])
def test_multisamples_have_the_frustums_mean_and_spread(randomize, t0, t1):
    torch.manual_seed(0)
    direction = torch.nn.functional.normalize(torch.tensor([[0.3, -0.2, 0.9]]), dim=-1)
    origin = torch.tensor([[0.5, 0.1, -2.0]])
    radius = 0.02
    means, stds = frustum_multisamples(
        origin,
        direction,
        torch.tensor([[t0]]),
        torch.tensor([[t1]]),
        torch.tensor([[radius]]),
        randomize=randomize,
    )
    assert means.shape == (1, 6, 3) and stds.shape == (1, 6)
    t_mean, t_var, r_var = mip_nerf_gaussian(t0, t1, radius)
    points = means[0] - origin[0]
    along = points @ direction[0]
    across = points - along[:, None] * direction[0]
    torch.testing.assert_close(points.mean(0), direction[0] * t_mean, rtol=1e-4, atol=1e-6)
    assert along.var(unbiased=False).item() == pytest.approx(t_var, rel=0.02)
    # the hexagon's spread per perpendicular axis matches the cone's (the pattern's radius grows with t)
    assert (across.pow(2).sum(-1).mean() / 2).item() == pytest.approx(r_var, rel=0.1)
    assert (stds > 0).all()


def test_multisampling_is_deterministic_in_evaluation():
    args = (
        torch.zeros(3, 3),
        torch.tensor([[0.0, 0.0, 1.0]] * 3),
        torch.tensor([[1.0], [2.0], [3.0]]),
        torch.tensor([[1.5], [2.5], [3.5]]),
        torch.full((3, 1), 0.01),
    )
    first, _ = frustum_multisamples(*args, randomize=False)
    second, _ = frustum_multisamples(*args, randomize=False)
    assert torch.equal(first, second)


def test_multisamples_of_rays_expanded_over_their_samples_equal_materialised_ones():
    """Origins, directions and radii broadcast over a ray's samples (stride 0, as nerfstudio's ray samples hold
    them) are computed once per ray: the means and blurs equal those of the materialised tensors, bit for bit,
    in the ``[..., samples, 6, 3]`` shape, and the tested means sit on the rays' own cones."""
    torch.manual_seed(0)
    rays, samples = 5, 4
    origins = torch.randn(rays, 1, 3)
    directions = torch.nn.functional.normalize(torch.randn(rays, 1, 3), dim=-1)
    radii = torch.rand(rays, 1, 1) * 0.01
    starts = torch.rand(rays, samples, 1) + 2.0
    ends = starts + torch.rand(rays, samples, 1) * 0.5
    expanded = [x.expand(rays, samples, x.shape[-1]) for x in (origins, directions, radii)]
    assert expanded[0].stride(1) == 0
    materialised = [x.contiguous() for x in expanded]
    means, stds = frustum_multisamples(expanded[0], expanded[1], starts, ends, expanded[2], randomize=False)
    reference, reference_stds = frustum_multisamples(
        materialised[0], materialised[1], starts, ends, materialised[2], randomize=False
    )
    assert means.shape == (rays, samples, 6, 3) and stds.shape == (rays, samples, 6)
    assert torch.equal(means, reference) and torch.equal(stds, reference_stds)
    along = ((means - origins[:, :, None]) * directions[:, :, None]).sum(-1)  # distance along each ray
    assert bool(((along > starts - 1e-4) & (along < ends + 1e-4)).all())


def test_feature_weight_is_one_for_small_frustums_and_falls_as_they_grow():
    resolutions = torch.tensor([16.0, 64.0, 256.0])
    stds = torch.tensor([1e-6, 1e-3, 1e-2, 1e-1, 1.0])
    weights = level_weights(stds, resolutions)  # [5, 3]
    assert torch.allclose(weights[0], torch.ones(3))
    assert (weights[1:] <= weights[:-1] + 1e-7).all()  # falls with the blur
    assert (weights[:, 1:] <= weights[:, :-1] + 1e-7).all()  # finer levels fade first
    assert weights[-1].max() < 0.05


def test_pixel_radius_is_mip_nerfs():
    assert pixel_radius(torch.tensor([4e-6])).item() == pytest.approx(2e-3 * 2 / math.sqrt(12), rel=1e-5)


def test_contraction_keeps_inner_gaussians_and_shrinks_outer_ones():
    means = torch.tensor([[0.5, 0.0, 0.0], [10.0, 0.0, 0.0]])
    stds = torch.tensor([0.1, 0.1])
    contracted, new_stds = contract_gaussians(means, stds)
    torch.testing.assert_close(contracted[0], means[0])
    assert new_stds[0] == stds[0]
    assert contracted[1, 0].item() == pytest.approx(1.9)
    # scaled by det(J)^(1/3) of the contraction at r = 10: radial 1/r^2, tangential (2 - 1/r)/r twice
    assert new_stds[1].item() == pytest.approx(0.1 * (0.01 * 0.19**2) ** (1 / 3), rel=1e-5)


@pytest.mark.parametrize(
    "features, max_res, log2_size", [(2, 256, 12), (4, 8192, 19), (1, 2048, 14), (8, 64, 10)]
)
def test_gather_hash_encoding_equals_nerfstudios(features, max_res, log2_size, monkeypatch):
    """Every row-gather path (8-, 16-, 4-byte rows, and the generic one), chunking, and hashing of coordinates
    whose products overflow 32 bits (resolution 8192)."""
    from eugen_nerf.fields import hashgrid

    monkeypatch.setattr(hashgrid, "CHUNK", 700)
    torch.manual_seed(0)
    kwargs = dict(
        num_levels=5,
        max_res=max_res,
        log2_hashmap_size=log2_size,
        features_per_level=features,
        implementation="torch",
    )
    stock, ours = HashEncoding(**kwargs), GatherHashEncoding(**kwargs)
    ours.load_state_dict(stock.state_dict())
    points = torch.rand(2000, 3)
    points[:4] = torch.tensor([0.5, 0.25, 0.0])  # on grid vertices
    points[4:8] = torch.tensor([0.9999, 0.75, 0.99])  # far corner: large hashed products
    torch.testing.assert_close(ours(points), stock(points), rtol=1e-5, atol=1e-7)
    with torch.no_grad():  # without autograd the corners are accumulated one by one: the same to rounding
        inference = ours(points)
    torch.testing.assert_close(inference, ours(points).detach(), rtol=1e-6, atol=1e-9)
    (grad_ours,) = torch.autograd.grad(ours(points).square().sum(), ours.hash_table)
    (grad_stock,) = torch.autograd.grad(stock(points).square().sum(), stock.hash_table)
    torch.testing.assert_close(grad_ours, grad_stock, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("features", [1, 2, 4, 3])
def test_row_gather_reads_the_rows_embedding_reads(features):
    """Rows read as one 4-, 8- or 16-byte scalar with 32-bit indices (3 features: the generic path) equal
    ``embedding`` with 64-bit ones, bit for bit, and the gradients summed back into the table equal
    ``embedding``'s (on the CPU summed by ``bincount`` in float64, so to rounding)."""
    from eugen_nerf.fields.hashgrid import _GatherRows

    torch.manual_seed(0)
    table = torch.randn(1000, features, requires_grad=True)
    index = torch.randint(0, 1000, (8, 300), dtype=torch.int32)
    index[0, :5] = torch.tensor([0, 999, 999, 0, 500], dtype=torch.int32)  # ends of the table, repeats
    ours = _GatherRows.apply(table, index)
    reference = torch.nn.functional.embedding(index.long(), table)
    assert ours.shape == (8, 300, features) and torch.equal(ours, reference)
    weights = torch.randn(8, 300, features)
    (grad_ours,) = torch.autograd.grad((ours * weights).sum(), table)
    (grad_reference,) = torch.autograd.grad((reference * weights).sum(), table)
    torch.testing.assert_close(grad_ours, grad_reference)


def test_blurred_step_function_integrates_like_the_convolution():
    edges = torch.tensor([[0.0, 0.2, 0.5, 1.0]])
    values = torch.tensor([[1.0, 3.0, 0.4]])
    knots, blurred = blur_step_function(edges, values, 0.05)
    integral = integrate_linear_spline(torch.tensor([[-1.0, 0.0, 0.3, 0.6, 2.0]]), knots, blurred)
    # a box blur of half-width 0.05 spreads each jump over [edge - 0.05, edge + 0.05] (checked by hand)
    expected = torch.tensor([[0.0, 0.0125, 0.5, 1.14, 1.3]])
    torch.testing.assert_close(integral, expected, rtol=1e-5, atol=1e-5)


def _ray_samples_on(edges: torch.Tensor) -> RaySamples:
    n = edges.shape[-1] - 1
    starts, ends = edges[..., :-1, None], edges[..., 1:, None]
    frustums = Frustums(
        origins=torch.zeros(1, n, 3),
        directions=torch.tensor([[[0.0, 0.0, 1.0]]]).expand(1, n, 3),
        starts=starts,
        ends=ends,
        pixel_area=torch.full((1, n, 1), 1e-6),
    )
    return RaySamples(frustums=frustums, spacing_starts=starts, spacing_ends=ends)


def test_interlevel_loss_is_zero_for_an_enveloping_proposal_and_positive_for_a_missing_one():
    nerf = _ray_samples_on(torch.linspace(0, 1, 9)[None])
    nerf_weights = torch.tensor([[0, 0, 0.45, 0.45, 0, 0, 0, 0]])[..., None]
    proposal = _ray_samples_on(torch.linspace(0, 1, 5)[None])
    covering = torch.tensor([[0.0, 1.0, 0.0, 0.0]])[..., None]  # [0.25, 0.5) holds the NeRF's mass
    missing = torch.tensor([[0.0, 0.0, 0.0, 1.0]])[..., None]
    ok = anti_aliased_interlevel_loss([covering, nerf_weights], [proposal, nerf], [0.003])
    bad = anti_aliased_interlevel_loss([missing.requires_grad_(), nerf_weights], [proposal, nerf], [0.003])
    assert ok.item() < 1e-3 < bad.item()
    bad.backward()


@pytest.mark.parametrize("contraction", [False, True])
def test_field_shapes_ranges_and_eugen_layers(contraction):
    torch.manual_seed(0)
    field = zipnerf_field(ZipNeRFEUGenConfig(num_features=8), contraction)
    outputs = field(ray_samples(num_rays=6))
    assert outputs[FieldHeadNames.DENSITY].shape == (6, 5, 1) and (outputs[FieldHeadNames.DENSITY] >= 0).all()
    rgb = outputs[FieldHeadNames.RGB]
    assert rgb.shape == (6, 5, 3) and (rgb >= -0.001).all() and (rgb <= 1.001).all()
    # the default: the two wide view layers are EUGen, the bottleneck stays dense (it saves nothing as EUGen)
    assert not any(isinstance(layer, EUGenLinear) for layer in field.density_mlp.layers)
    assert [isinstance(layer, EUGenLinear) for layer in field.view_mlp.layers] == [True, True, False]
    bottleneck = zipnerf_field(ZipNeRFEUGenConfig(num_features=8, density_layers=(1,)), contraction)
    assert isinstance(bottleneck.density_mlp.layers[1], EUGenLinear)
    dense = zipnerf_field(ZipNeRFEUGenConfig(density_layers=(), view_layers=()))
    assert not any(isinstance(m, EUGenLinear) for m in dense.modules())


def test_field_mlps_train_in_their_own_optimiser_group():
    from nerfstudio.data.scene_box import SceneBox

    from eugen_nerf.methods.zipnerf import GRID_LR, MLP_LR, eugen_zipnerf
    from eugen_nerf.models.zipnerf import FIELD_MLPS

    config = ZipNeRFModelConfig(
        num_levels=2,
        max_res=32,
        log2_hashmap_size=10,
        bottleneck_width=32,
        hidden_dim_color=32,
        eugen=ZipNeRFEUGenConfig(num_features=8),
        proposal_net_args_list=[{"hidden_dim": 8, "log2_hashmap_size": 10, "num_levels": 2, "max_res": 32}]
        * 2,
    )
    model = config.setup(
        scene_box=SceneBox(torch.tensor([[-1.0] * 3, [1.0] * 3])), num_train_data=1, metadata={}
    )
    groups = {name: {id(p) for p in params} for name, params in model.get_param_groups().items()}
    assert groups["fields"] == {id(p) for p in model.field.grid.parameters()}
    assert groups[FIELD_MLPS] == {
        id(p) for n, p in model.field.named_parameters() if not n.startswith("grid.")
    }
    assert groups[FIELD_MLPS] and not groups[FIELD_MLPS] & groups["fields"]
    networks = [model.field, *model.proposal_networks]
    assert set().union(*groups.values()) == {id(p) for net in networks for p in net.parameters()}
    optimizers = eugen_zipnerf.config.optimizers
    assert optimizers[FIELD_MLPS]["optimizer"].lr == MLP_LR < GRID_LR == optimizers["fields"]["optimizer"].lr


def test_direction_encoding_has_zipnerfs_27_channels():
    encoded = encode_directions(torch.tensor([[0.0, 0.0, 1.0]]))
    assert encoded.shape == (1, 27)
    assert encoded[0, :3].tolist() == [0.0, 0.0, 1.0]


def test_field_without_pixel_area_is_one_clear_error():
    samples = ray_samples(num_rays=6)
    samples.frustums.pixel_area = None
    with pytest.raises(ValueError, match="pixel_area"):
        zipnerf_field(ZipNeRFEUGenConfig(num_features=8))(samples)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"bottleneck_width": 16, "eugen": ZipNeRFEUGenConfig(num_features=16)}, "wider than the bottleneck"),
        ({"hidden_dim_color": 16, "eugen": ZipNeRFEUGenConfig(num_features=16)}, "wider than the view MLP"),
        ({"num_proposal_samples_per_ray": (64, -1)}, "num-proposal-samples-per-ray"),
        ({"interlevel_pulse_widths": (0.03,)}, "interlevel-pulse-widths"),
        ({"hash_decay_loss_mult": -1.0}, "hash-decay-loss-mult"),
        ({"proposal_net_args_list": [{"num_levls": 4}]}, "unknown keys"),
        ({"hidden_dim_color": 0}, "hidden-dim-color"),
        ({"average_init_density": 1.0}, "average-init-density is a nerfacto-style knob"),
    ],
)
def test_bad_sizes_are_one_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ZipNeRFModelConfig(**kwargs)


def test_bad_layer_indices_are_one_clear_error():
    with pytest.raises(ValueError, match="view-layers"):
        ZipNeRFEUGenConfig(view_layers=(3,))


@pytest.mark.slow  # ~20 s on 2 cores (datamanager set-up and 120 steps: at the MLPs' 1e-3, 40 were too few)
def test_a_few_training_steps_on_a_shipped_scene_lower_the_loss(tmp_path):
    import copy
    import random

    import numpy as np

    from eugen_nerf.methods.zipnerf import eugen_zipnerf

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    config = copy.deepcopy(eugen_zipnerf.config)
    config.data = None
    config.pipeline.datamanager.data = REPO / "scenes" / "bunny32"
    config.pipeline.datamanager.train_num_rays_per_batch = 256
    model = config.pipeline.model
    model.num_levels, model.max_res, model.log2_hashmap_size = 4, 64, 12
    model.bottleneck_width = model.hidden_dim_color = 32
    model.eugen = ZipNeRFEUGenConfig(num_features=8)
    model.proposal_net_args_list = [
        {"hidden_dim": 16, "log2_hashmap_size": 10, "num_levels": 3, "max_res": 32, "features_per_level": 1}
    ]
    model.num_proposal_samples_per_ray, model.num_nerf_samples_per_ray = (16, 8), 8
    config.output_dir, config.vis = tmp_path, "tensorboard"
    config.max_num_iterations = 120
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    losses = []
    for step in range(config.max_num_iterations):
        _, loss_dict, _ = trainer.train_iteration(step)
        losses.append(loss_dict["rgb_loss"].item())
    assert all(math.isfinite(x) for x in losses)
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
