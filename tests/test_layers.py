"""EUGen layer: unbiasedness, variance, shapes, gradients, checkpoints, bad input."""

import math

import pytest
import torch
from torch import nn

from eugen_nerf.layers import EUGenLinear, LowRankLinear, draw_projections, snnk_linear

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _dense(d=5, l=3, seed=0):
    torch.manual_seed(seed)
    linear = nn.Linear(d, l).double()
    with torch.no_grad():
        linear.weight.mul_(0.6)
    return linear


def _poly(z, coeffs):
    return sum(a * z**i for i, a in enumerate(coeffs))


def _average_estimate(linear, x, coeffs, m, seeds, **kw):
    total = 0
    for seed in seeds:
        layer = EUGenLinear.from_dense(linear, coeffs, num_features=m, seed=seed, **kw).double()
        with torch.no_grad():
            total = total + layer(x)
    return total / len(seeds)


@pytest.mark.parametrize(
    "coeffs, shared, projection_scale",
    [
        ((0.1, 1.0), True, 1.0),
        ((0.0, 0.5, 0.25), True, 1.0),
        ((0.0, 0.5, 0.25), False, 1.0),
        ((0.0, 0.5, 0.25), True, 3.0),
        ((0.2, 1.0, 0.5, 0.1), True, 1.0),
        ((0.2, 1.0, 0.5, 0.1), False, 1.0),
    ],
)
def test_from_dense_is_unbiased(coeffs, shared, projection_scale):
    linear = _dense()
    x = torch.randn(4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 0.7
    target = _poly(linear(x).detach(), coeffs)
    estimate = _average_estimate(
        linear,
        x,
        coeffs,
        m=64,
        seeds=range(600),
        shared_projections=shared,
        projection_scale=projection_scale,
    )
    # Monte-Carlo error over 600 seeds x 64 features is a few 1e-2 at most for these sizes.
    scale = target.abs().mean() + 0.1
    assert (estimate - target).abs().max() / scale < 0.08, (estimate, target)


def test_error_shrinks_like_inverse_sqrt_m():
    linear = _dense()
    x = torch.randn(8, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 0.7
    coeffs = (0.0, 1.0, 0.5)
    target = _poly(linear(x).detach(), coeffs)

    def rms_error(m):
        errors = []
        for seed in range(200):
            layer = EUGenLinear.from_dense(linear, coeffs, num_features=m, seed=seed).double()
            with torch.no_grad():
                errors.append((layer(x) - target).square().mean())
        return torch.stack(errors).mean().sqrt().item()

    e16, e64, e256 = rms_error(16), rms_error(64), rms_error(256)
    # Quadrupling m halves the error (1/sqrt(m)); allow Monte-Carlo slack.
    assert 1.6 < e16 / e64 < 2.5
    assert 1.6 < e64 / e256 < 2.5


def test_degree_one_variance_matches_theory():
    """Var of the degree-1 estimate of w⁺ᵀx⁺ is ((w⁺ᵀx⁺)² + ‖w⁺‖²‖x⁺‖²)/m."""
    d, m = 4, 32
    linear = _dense(d=d, l=1)
    x = torch.randn(1, d, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    samples = []
    for seed in range(3000):
        layer = EUGenLinear.from_dense(linear, (0.0, 1.0), num_features=m, seed=seed).double()
        with torch.no_grad():
            samples.append(layer(x)[0, 0])
    samples = torch.stack(samples)
    w_plus = torch.cat([linear.weight[0], linear.bias, torch.zeros(1, dtype=torch.float64)]).detach()
    x_plus = torch.cat([x[0], torch.ones(1, dtype=torch.float64), x[0].norm().reshape(1)])
    expected = ((w_plus @ x_plus) ** 2 + w_plus.square().sum() * x_plus.square().sum()) / m
    assert samples.var().item() == pytest.approx(expected.item(), rel=0.1)
    assert samples.mean().item() == pytest.approx(
        (w_plus @ x_plus).item(), abs=4 * math.sqrt(expected / 3000)
    )


def test_orthogonal_projections_are_marginally_gaussian_and_orthogonal():
    g = draw_projections(1, 40, 10, seed=0, kind="orthogonal", dtype=torch.float64)[0]
    block = g[:10] / g[:10].norm(dim=1, keepdim=True)
    assert torch.allclose(block @ block.T, torch.eye(10, dtype=torch.float64), atol=1e-10)
    many = torch.cat(
        [draw_projections(1, 40, 10, seed=s, kind="orthogonal", dtype=torch.float64)[0] for s in range(200)]
    )
    assert many.mean().abs() < 0.02
    assert many.var().item() == pytest.approx(1.0, rel=0.05)


def test_orthogonal_from_dense_is_unbiased_with_lower_variance():
    linear = _dense(d=6, l=2)
    x = torch.randn(3, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    target = linear(x).detach()

    def stats(kind):
        outs = []
        for seed in range(400):
            layer = EUGenLinear.from_dense(
                linear, (0.0, 1.0), num_features=24, seed=seed, projection=kind
            ).double()
            with torch.no_grad():
                outs.append(layer(x))
        outs = torch.stack(outs)
        return outs.mean(0), (outs - target).square().mean()

    mean_o, mse_o = stats("orthogonal")
    _, mse_g = stats("gaussian")
    assert (mean_o - target).abs().max() < 0.1 * (target.abs().mean() + 0.1)
    assert mse_o < mse_g


def test_same_seed_same_layer_and_projections_not_stored():
    a = EUGenLinear(7, 3, num_features=8, degree=2, seed=11)
    b = EUGenLinear(7, 3, num_features=8, degree=2, seed=11)
    c = EUGenLinear(7, 3, num_features=8, degree=2, seed=12)
    assert torch.equal(a.projections, b.projections)
    assert not torch.equal(a.projections, c.projections)
    assert "projections" not in a.state_dict()


def test_state_dict_round_trip_regenerates_projections():
    src = EUGenLinear(7, 3, num_features=8, degree=3, seed=5, feature_map="softplus")
    dst = EUGenLinear(7, 3, num_features=8, degree=3, seed=99, feature_map="softplus")
    dst.load_state_dict(src.state_dict())
    x = torch.randn(10, 7)
    assert dst.seed == 5
    assert torch.equal(src(x), dst(x))


def test_trainable_projections_are_stored_and_receive_gradients():
    layer = EUGenLinear(6, 4, num_features=8, degree=2, trainable_projections=True)
    assert "projections" in layer.state_dict()
    layer(torch.randn(5, 6)).square().sum().backward()
    assert layer.projections.grad is not None and layer.projections.grad.abs().sum() > 0
    assert layer.weight.grad.abs().sum() > 0 and layer.bias.grad.abs().sum() > 0


def test_frozen_projections_get_no_gradient():
    layer = EUGenLinear(6, 4, num_features=8, degree=2)
    assert all(p is not layer.projections for p in layer.parameters())
    layer(torch.randn(5, 6)).sum().backward()
    assert layer.weight.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("feature_map", ["identity", "relu", "softplus", "sin"])
def test_shapes_dtypes_devices(dtype, device, feature_map):
    layer = EUGenLinear(5, 3, num_features=4, degree=3, feature_map=feature_map).to(
        device=device, dtype=dtype
    )
    x = torch.randn(2, 6, 5, device=device, dtype=dtype)
    y = layer(x)
    assert y.shape == (2, 6, 3) and y.dtype == dtype and y.device.type == device
    assert layer.features(x).shape == (2, 6, 12)


def test_norm_entry_lets_the_layer_depend_on_the_norm():
    """Without the norm entry the degree-1 polynomial layer is affine; with it, it is not."""
    x = torch.randn(1, 4, dtype=torch.float64)
    for use_norm, affine in [(False, True), (True, False)]:
        layer = EUGenLinear(4, 2, num_features=8, degree=1, use_norm=use_norm, scaling="polynomial").double()
        with torch.no_grad():
            sum_of_images = layer(x) + layer(-x)
            assert torch.allclose(sum_of_images, 2 * layer(torch.zeros_like(x)), atol=1e-12) == affine


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"degree": 0}, "degree"),
        ({"num_features": 0}, "num_features"),
        ({"num_features": -3}, "num_features"),
        ({"feature_map": "tanh"}, "feature_map"),
        ({"projection": "uniform"}, "projection"),
        ({"projection_scale": 0.0}, "projection_scale"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        EUGenLinear(4, 2, **kwargs)


def test_wrong_input_width_is_a_clear_error():
    with pytest.raises(ValueError, match="in_features=4"):
        EUGenLinear(4, 2)(torch.randn(3, 5))


def test_lowrank_from_dense_is_the_best_rank_r_approximation():
    linear = _dense(d=8, l=6)
    full = LowRankLinear.from_dense(linear, rank=6)
    x = torch.randn(5, 8, dtype=torch.float64)
    assert torch.allclose(full(x), linear(x), atol=1e-10)
    low = LowRankLinear.from_dense(linear, rank=2)
    s = torch.linalg.svdvals(linear.weight.detach())
    assert torch.linalg.matrix_norm(low.up @ low.down - linear.weight).item() == pytest.approx(
        s[2:].square().sum().sqrt().item(), rel=1e-8
    )
    # a rank above min(d, l) (a narrow layer at EUGen's parameter count) holds the layer exactly
    wide = LowRankLinear.from_dense(linear, rank=7)
    assert torch.allclose(wide(x), linear(x), atol=1e-10) and not wide.up[:, 6:].any()


def test_snnk_is_a_degree_one_relu_eugen_layer():
    layer = snnk_linear(5, 3, num_features=16)
    assert layer.degree == 1 and layer.feature_map == "relu" and not layer.use_norm
    assert (layer.features(torch.randn(4, 5)) >= 0).all()


@pytest.mark.parametrize("use_norm", [True, False])
def test_unit_and_linear_scaling_are_the_polynomial_features_rescaled_per_order(use_norm):
    """unit = order-i polynomial features / rms(x⁺)^i (the direction of x⁺); linear = unit · rms(x⁺)."""
    x = torch.randn(50, 6, dtype=torch.float64) * 3
    layers = {
        s: EUGenLinear(6, 3, num_features=8, degree=3, use_norm=use_norm, scaling=s, seed=4).double()
        for s in ("unit", "linear", "polynomial")
    }
    rms = layers["unit"].input_rms(torch.linalg.vector_norm(x, dim=-1, keepdim=True))
    manual = ((x.square().sum(-1, keepdim=True) * (1 + use_norm) + 1) / (6 + 1 + use_norm)).sqrt()
    torch.testing.assert_close(rms, manual)
    order = torch.arange(1, 4, dtype=torch.float64).repeat_interleave(8)
    poly = layers["polynomial"].features(x)
    torch.testing.assert_close(layers["unit"].features(x), poly / rms**order)
    torch.testing.assert_close(layers["linear"].features(x), poly / rms ** (order - 1))


def test_unit_features_are_bounded_whatever_the_input_scale():
    layer = EUGenLinear(16, 4, num_features=8, degree=3, scaling="unit")
    bound = torch.linalg.vector_norm(layer.projections, dim=1).view(3, 8).cumprod(0).flatten()
    bound = bound * (layer.augmented_dim**0.5) ** torch.arange(1, 4).repeat_interleave(8)
    for scale in (1e-6, 1.0, 1e3, 1e15):
        feats = layer.features(torch.randn(200, 16) * scale)
        assert torch.isfinite(feats).all()
        assert (feats.abs() <= bound * (1 + 1e-5)).all()


def test_from_dense_keeps_the_polynomial_form_it_estimates():
    assert (
        EUGenLinear.from_dense(torch.nn.Linear(4, 3), (0.0, 1.0, 0.5), num_features=8).scaling == "polynomial"
    )


@pytest.mark.parametrize("kwargs", [{"scaling": "cubic"}])
def test_bad_scaling_names_the_argument(kwargs):
    with pytest.raises(ValueError, match="scaling"):
        EUGenLinear(4, 2, **kwargs)


def _reference_features(layer, x):
    """Φ(f(x)) written as the module docstring states it: products of the projections of x⁺ built
    explicitly, divided by rms(x⁺) per factor, mapped, times rms(x⁺) (linear scaling)."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    parts = [x, torch.ones_like(norm)] + ([norm] if layer.use_norm else [])
    x_plus = torch.cat(parts, dim=-1)
    rms = x_plus.square().mean(-1, keepdim=True).sqrt()
    projected = (x_plus / rms) @ layer.projections.to(x).T
    n, k, m = x.shape[0], layer.degree, layer.num_features
    products = projected.view(n, k, m).cumprod(dim=1).reshape(n, k * m)
    phi = {"relu": torch.relu, "identity": lambda z: z, "softplus": nn.functional.softplus}[layer.feature_map]
    return phi(products) * rms


@pytest.mark.parametrize("feature_map", ["relu", "identity", "softplus"])
@pytest.mark.parametrize("degree, use_norm", [(1, True), (2, True), (2, False), (3, False)])
def test_linear_features_and_their_first_and_second_derivatives_match_the_reference(
    feature_map, degree, use_norm
):
    """The training path's features (running products, 1/rms folded into the higher orders, ‖x‖ from ‖x‖²)
    are the reference formula, and so are the input gradient and its gradient (iSDF's eikonal term)."""
    layer = EUGenLinear(
        7, 5, num_features=6, degree=degree, use_norm=use_norm, feature_map=feature_map, seed=3
    ).double()
    x = (torch.randn(40, 7, dtype=torch.float64) * 2).requires_grad_()
    ours, reference = layer.features(x), _reference_features(layer, x)
    torch.testing.assert_close(ours, reference)
    weights = torch.randn_like(ours)
    grads = [torch.autograd.grad((f * weights).sum(), x, create_graph=True)[0] for f in (ours, reference)]
    torch.testing.assert_close(grads[0], grads[1])
    second = [torch.autograd.grad(g.square().sum(), x, retain_graph=True)[0] for g in grads]
    torch.testing.assert_close(second[0], second[1])


def _reference_projected_features(layer, x):
    """Φ(f(x)) under ``scaling="projected"``, written out: the projections of x⁺ built explicitly, divided by
    their own rms, multiplied as orders, mapped, times that rms."""
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    parts = [x, torch.ones_like(norm)] + ([norm] if layer.use_norm else [])
    projected = torch.cat(parts, dim=-1) @ layer.projections.to(x).T
    rms = projected.square().mean(-1, keepdim=True).sqrt()
    n, k, m = x.shape[0], layer.degree, layer.num_features
    products = (projected / rms).view(n, k, m).cumprod(dim=1).reshape(n, k * m)
    phi = {"relu": torch.relu, "identity": lambda z: z, "softplus": nn.functional.softplus}[layer.feature_map]
    return phi(products) * rms


@pytest.mark.parametrize("feature_map", ["relu", "identity", "softplus"])
@pytest.mark.parametrize("degree, use_norm", [(2, False), (3, True)])
def test_projected_scaling_takes_the_rms_of_the_projections_and_its_derivatives_follow(
    feature_map, degree, use_norm
):
    """``projected``: linear scaling with rms(G x⁺) for rms(x⁺); without the norm entry it needs no ‖x‖.
    The input gradient and its gradient (iSDF's eikonal term) match the written-out formula's."""
    layer = EUGenLinear(
        7, 5, num_features=6, degree=degree, use_norm=use_norm, feature_map=feature_map, scaling="projected"
    ).double()
    assert layer.needs_input_norm == use_norm
    x = (torch.randn(40, 7, dtype=torch.float64) * 2).requires_grad_()
    ours, reference = layer.features(x), _reference_projected_features(layer, x)
    torch.testing.assert_close(ours, reference)
    assert not torch.allclose(ours, _reference_features(layer, x))  # not the exact rms(x⁺)
    weights = torch.randn_like(ours)
    grads = [torch.autograd.grad((f * weights).sum(), x, create_graph=True)[0] for f in (ours, reference)]
    torch.testing.assert_close(grads[0], grads[1])
    second = [torch.autograd.grad(g.square().sum(), x, retain_graph=True)[0] for g in grads]
    torch.testing.assert_close(second[0], second[1])
    # positively homogeneous of degree 1 in x⁺, like linear scaling: twice the projections, twice the features
    before = _reference_projected_features(layer, x)
    layer.projections.data.mul_(2)
    torch.testing.assert_close(layer.features(x), 2 * before)


def test_a_merged_chain_of_projected_layers_carries_no_norm_rows():
    """Merged, a ``linear`` layer after an EUGen layer recovers ‖x‖ with a second k·m-row product; a
    ``projected`` one needs none, so its step is half as wide."""
    from eugen_nerf.layers import EUGenMLP, EUGenSpec

    steps = {
        scaling: EUGenMLP(
            in_dim=12,
            num_layers=3,
            layer_width=64,
            out_dim=4,
            layer_types="eugen",
            eugen=EUGenSpec(
                num_features=16, degree=2, feature_map="identity", use_norm=False, scaling=scaling
            ),
        )
        .fused()
        .steps[1]
        for scaling in ("linear", "projected")
    }
    assert steps["linear"].norm_rows == 32 and steps["linear"].weight.shape[0] == 64
    assert steps["projected"].norm_rows == 0 and steps["projected"].weight.shape[0] == 32


def test_a_zero_input_has_finite_gradients():
    """‖x‖ enters the layer (norm entry, rms): at x = 0 its gradient is taken as 0, never inf or nan."""
    layer = EUGenLinear(6, 3, num_features=4, degree=2, use_norm=True, feature_map="relu")
    x = torch.zeros(3, 6, requires_grad=True)
    layer(x).sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("scaling, use_norm", [("unit", False), ("linear", True), ("projected", False)])
def test_half_precision_layers_run_layer_by_layer_and_fused(dtype, scaling, use_norm):
    """Norms and rms are kept in float32 for half weights, then cast back: no dtype clash in F.linear."""
    from eugen_nerf.layers import EUGenMLP, EUGenSpec

    torch.manual_seed(0)
    spec = EUGenSpec(num_features=8, degree=2, scaling=scaling, use_norm=use_norm)
    mlp = EUGenMLP(6, 3, 16, 4, layer_types=("dense", "eugen", "dense"), eugen=spec)
    x = torch.randn(32, 6)
    reference = mlp.double().forward_unfused(x.double()).float()
    half = mlp.to(dtype)
    for out in (half.forward_unfused(x.to(dtype)), half.eval()(x.to(dtype))):
        assert out.dtype == dtype and torch.isfinite(out).all()
        torch.testing.assert_close(out.float(), reference, rtol=0.1, atol=0.1)


def test_the_fused_form_follows_a_changed_buffer():
    """Frozen projections are a buffer: regenerating them rebuilds the cached fused form."""
    from eugen_nerf.layers import EUGenMLP, EUGenSpec

    mlp = EUGenMLP(
        6, 3, 16, 4, layer_types=("dense", "eugen", "dense"), eugen=EUGenSpec(num_features=8)
    ).eval()
    x = torch.randn(16, 6)
    before = mlp(x)
    layer = mlp.layers[1]
    with torch.no_grad():
        layer.projections.copy_(torch.randn_like(layer.projections))
    torch.testing.assert_close(mlp(x), mlp.forward_unfused(x))
    assert not torch.allclose(mlp(x), before)


def test_an_eugen_output_is_absorbed_by_the_linear_layer_that_reads_it():
    from eugen_nerf.layers import EUGenMLP, EUGenSpec
    from eugen_nerf.layers.fused import FusedMLP

    torch.manual_seed(0)
    spec = EUGenSpec(num_features=8)
    producer = EUGenMLP(5, 3, 16, out_dim=16, layer_types=("dense", "eugen", "eugen"), eugen=spec).eval()
    consumer = EUGenMLP(4 + 16, 2, 12, out_dim=3, out_activation=nn.Sigmoid()).eval()
    x, extra = torch.randn(50, 5), torch.randn(50, 4)
    with torch.no_grad():
        expected = consumer(torch.cat([extra, producer(x)], dim=-1))
        features_form, a, c = producer.fused().split_output()
        features = features_form(x)
        assert features.shape == (50, 8 * spec.degree)
        merged = consumer.fused().absorb_input(4, a, c)
        assert merged.in_dim == 4 + 8 * spec.degree
        torch.testing.assert_close(merged([extra, features]), expected, rtol=1e-5, atol=1e-6)
        linear = nn.Linear(16, 2)
        density = FusedMLP.from_linear(linear).absorb_input(0, a, c)
        torch.testing.assert_close(density(features), linear(producer(x)), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="last layer is EUGen and that has no output activation"):
        consumer.fused().split_output()
    skipping = EUGenMLP(16, 3, 8, out_dim=2, skip_connections=(1,)).eval()
    assert not skipping.fused().reads_input_linearly()
    with pytest.raises(ValueError, match="skip connection"):
        skipping.fused().absorb_input(0, a, c)
    with pytest.raises(ValueError, match="not within the input"):
        consumer.fused().absorb_input(10, a, c)
