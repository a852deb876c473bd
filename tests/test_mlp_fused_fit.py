"""EUGenMLP, its fused form, and the closed-form fit."""

import math

import pytest
import torch
from torch import nn

from eugen_nerf.layers import EUGenLinear, EUGenMLP, EUGenSpec, NormalEquations

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


TRUNK_SPEC = EUGenSpec(num_features=16, degree=2)


def _nerf_trunk(layer_types, spec=TRUNK_SPEC, out_dim=None, out_activation=None):
    return EUGenMLP(
        in_dim=12,
        num_layers=8,
        layer_width=64,
        out_dim=out_dim,
        skip_connections=(4,),
        layer_types=layer_types,
        eugen=spec,
        out_activation=out_activation,
    )


def _relative_error(a, b):
    return ((a - b).norm() / b.norm()).item()


def test_dense_eugenmlp_matches_nerfstudio_mlp():
    from nerfstudio.field_components.mlp import MLP

    torch.manual_seed(0)
    stock = MLP(
        in_dim=12,
        num_layers=8,
        layer_width=64,
        out_dim=5,
        skip_connections=(4,),
        activation=nn.ReLU(),
        out_activation=nn.Sigmoid(),
        implementation="torch",
    )
    ours = EUGenMLP(
        in_dim=12, num_layers=8, layer_width=64, out_dim=5, skip_connections=(4,), out_activation=nn.Sigmoid()
    )
    ours.layers.load_state_dict(stock.layers.state_dict())
    x = torch.randn(30, 12)
    assert torch.allclose(ours(x), stock(x), atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "layer_types",
    [
        "eugen",
        [
            "dense",
            "eugen",
            "eugen",
            "eugen",
            "eugen",
            "eugen",
            "eugen",
            "dense",
        ],  # skip into a merged EUGen layer
        ["eugen", "eugen", "eugen", "dense", "eugen", "dense", "eugen", "eugen"],  # skip into a dense layer
        ["eugen", "lowrank", "eugen", "snnk", "eugen", "eugen", "dense", "eugen"],
    ],
)
@pytest.mark.parametrize("use_norm", [True, False])
@pytest.mark.parametrize("scaling", ["unit", "linear", "projected", "polynomial"])
@pytest.mark.parametrize("feature_map, degree", [("softplus", 2), ("relu", 2), ("identity", 3)])
def test_fused_equals_unfused(layer_types, use_norm, scaling, feature_map, degree, device):
    """Every map and scaling, including the homogeneous maps' linear scaling, which divides only the higher
    orders by ``rms`` in the fused form."""
    torch.manual_seed(0)
    if scaling == "polynomial":
        degree = 2  # eight stacked layers of cubic products of x⁺ itself overflow
    spec = EUGenSpec(
        num_features=16, degree=degree, use_norm=use_norm, feature_map=feature_map, scaling=scaling
    )
    mlp = _nerf_trunk(layer_types, spec, out_dim=4, out_activation=nn.Sigmoid()).double().to(device).eval()
    x = torch.randn(2, 50, 12, dtype=torch.float64, device=device)
    with torch.no_grad():
        fused, unfused = mlp(x), mlp.forward_unfused(x)
    assert fused.shape == (2, 50, 4)
    assert _relative_error(fused, unfused) < 1e-5


@pytest.mark.parametrize("width, norm_rows, has_constant", [(64, 32, True), (24, 24, False)])
def test_norm_of_a_merged_layer_output_takes_k_m_rows_plus_a_constant(width, norm_rows, has_constant):
    """``‖A F + c‖`` from ``F``: the QR factor of ``[A, c]`` without its constant last row when it is square
    (an even ``2·k·m``-wide step, not ``2·k·m + 1``), all of it when ``A`` is wider than tall."""
    torch.manual_seed(0)
    spec = EUGenSpec(num_features=16, degree=2, feature_map="identity")  # k*m = 32 features
    mlp = EUGenMLP(in_dim=12, num_layers=3, layer_width=width, out_dim=4, layer_types="eugen", eugen=spec)
    mlp = mlp.double().eval()
    with torch.no_grad():
        mlp.layers[0].bias.normal_()  # a constant the norm must carry
        step = mlp.fused().steps[1]
        assert step.norm_rows == norm_rows and step.weight.shape[0] == 32 + norm_rows
        assert (step.norm_constant is not None and bool(step.norm_constant > 0)) == has_constant
        x = torch.randn(200, 12, dtype=torch.float64)
        assert _relative_error(mlp(x), mlp.forward_unfused(x)) < 1e-9


def test_fused_float32_close_and_cheaper():
    torch.manual_seed(0)
    mlp = _nerf_trunk("eugen").eval()
    x = torch.randn(100, 12)
    with torch.no_grad():
        assert _relative_error(mlp(x), mlp.forward_unfused(x)) < 1e-4
    assert mlp.fused().macs_per_point() < mlp.macs_per_point()


def test_fused_form_follows_parameter_updates_and_mode_switches():
    torch.manual_seed(0)
    mlp = _nerf_trunk("eugen", out_dim=3)
    x = torch.randn(20, 12)
    optimizer = torch.optim.SGD(mlp.parameters(), lr=1e-2)
    for _ in range(2):
        mlp.train()
        optimizer.zero_grad()
        mlp(x).square().mean().backward()
        optimizer.step()
        mlp.eval()
        with torch.no_grad():
            assert _relative_error(mlp(x), mlp.forward_unfused(x)) < 1e-4
    state = {k: v.clone() for k, v in mlp.state_dict().items()}
    other = _nerf_trunk("eugen", out_dim=3).eval()
    with torch.no_grad():
        other(x)  # build a fused cache, then load: the cache must not survive
        other.load_state_dict(state)
        assert torch.allclose(other(x), mlp(x), atol=1e-6)


def test_gradients_reach_every_trainable_tensor():
    spec = EUGenSpec(num_features=8, degree=2, trainable_projections=True)
    mlp = _nerf_trunk("eugen", spec, out_dim=2)
    mlp(torch.randn(16, 12)).sum().backward()
    for name, p in mlp.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_layer_selection_and_bad_indices():
    mlp = EUGenMLP(in_dim=3, num_layers=4, layer_width=16, eugen_layers=[1, -1])
    assert mlp.layer_types == ("dense", "eugen", "dense", "eugen")
    assert isinstance(mlp.layers[3], EUGenLinear)
    with pytest.raises(ValueError, match="index 4 does not exist"):
        EUGenMLP(in_dim=3, num_layers=4, layer_width=16, eugen_layers=[4])
    with pytest.raises(ValueError, match="layer type"):
        EUGenMLP(in_dim=3, num_layers=2, layer_width=16, layer_types="conv")
    with pytest.raises(ValueError, match="eugen.num-features must be an integer in 1..4096, got 0"):
        EUGenSpec(num_features=0)
    spec = EUGenSpec()
    spec.degree = 9  # changed after construction: the MLP validates it again
    with pytest.raises(ValueError, match="eugen.degree must be an integer in 1..4, got 9"):
        EUGenMLP(in_dim=3, num_layers=2, layer_width=16, layer_types="eugen", eugen=spec)
    with pytest.raises(ValueError, match="in_dim=3"):
        EUGenMLP(in_dim=3, num_layers=2, layer_width=16)(torch.randn(2, 4))


def test_closed_form_fit_recovers_a_target_in_the_feature_span():
    # softplus keeps every feature alive (a ReLU feature can be identically zero: then A is not unique)
    layer = EUGenLinear(6, 3, num_features=20, degree=2, feature_map="softplus").double()
    true_weight = torch.randn(3, layer.feature_dim, dtype=torch.float64)
    true_bias = torch.randn(3, dtype=torch.float64)
    equations = NormalEquations(layer.feature_dim, 3)
    for _ in range(5):  # streamed batches
        x = torch.randn(400, 6, dtype=torch.float64)
        features = layer.features(x)
        equations.update(features, features @ true_weight.T + true_bias)
    solution = equations.solve(ridge=1e-12)
    assert torch.allclose(solution.weight, true_weight, atol=1e-4)
    assert torch.allclose(solution.bias, true_bias, atol=1e-4)
    x_new = torch.randn(100, 6, dtype=torch.float64)
    predicted = layer.features(x_new) @ solution.weight.T + solution.bias
    assert torch.allclose(predicted, layer.features(x_new) @ true_weight.T + true_bias, atol=1e-6)
    assert (solution.r2 > 1 - 1e-9).all()


def test_fit_distils_a_dense_relu_layer_and_matches_batch_lstsq():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU()).double()
    student = EUGenLinear(8, 16, num_features=64, degree=2, feature_map="relu").double()
    equations = NormalEquations(student.feature_dim, 16)
    xs = [torch.randn(500, 8, dtype=torch.float64) for _ in range(4)]
    with torch.no_grad():
        for x in xs:
            equations.update(student.features(x), teacher(x))
    solution = equations.solve(ridge=0.0)
    x_all = torch.cat(xs)
    with torch.no_grad():
        design = torch.cat([student.features(x_all), torch.ones(len(x_all), 1, dtype=torch.float64)], 1)
        reference = torch.linalg.lstsq(design, teacher(x_all)).solution
    assert torch.allclose(solution.weight.T, reference[:-1], atol=1e-6)
    assert (solution.r2 > 0.9).all()


def test_pooled_r2_is_finite_when_some_outputs_never_vary():
    # units of a teacher that fire on the training rays and never on the held-out ones: their held-out
    # targets have no variance, and the pooled R² must count their error rather than sink to -inf
    torch.manual_seed(0)

    def pairs(rows, dead):
        x = torch.randn(rows, 8, dtype=torch.float64)
        targets = torch.relu(
            x @ torch.randn(8, 9, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        )
        targets[:, 6:] *= 0.0 if dead else 0.5
        return torch.cat([x, x.square()], 1), targets

    train, heldout = NormalEquations(16, 9), NormalEquations(16, 9)
    train.update(*pairs(4000, dead=False))
    features, targets = pairs(2000, dead=True)
    heldout.update(features, targets)
    solution = train.solve(ridge=1e-8)
    predicted = features @ solution.weight.T + solution.bias
    by_rows = 1 - (predicted - targets).square().sum() / (targets - targets.mean(0)).square().sum()
    pooled = heldout.pooled_r2(solution.weight, solution.bias)
    assert math.isfinite(pooled) and pooled < 1
    assert pooled == pytest.approx(float(by_rows), abs=1e-9)
    assert heldout.pooled_r2(solution.weight * 0.5, solution.bias) < pooled  # a ridge sweep can choose
    constant = NormalEquations(16, 2)
    constant.update(features, torch.zeros(len(features), 2, dtype=torch.float64))
    assert math.isnan(constant.pooled_r2(torch.zeros(2, 16), torch.zeros(2)))


def test_fit_state_round_trip_and_merge_equal_single_pass():
    f, y = torch.randn(300, 5, dtype=torch.float64), torch.randn(300, 2, dtype=torch.float64)
    whole = NormalEquations(5, 2)
    whole.update(f, y)
    first, second = NormalEquations(5, 2), NormalEquations(5, 2)
    first.update(f[:120], y[:120])
    second.update(f[120:], y[120:])
    resumed = NormalEquations(5, 2)
    resumed.load_state_dict(first.state_dict())
    resumed.merge_(second)
    assert torch.allclose(resumed.solve(1e-3).weight, whole.solve(1e-3).weight, atol=1e-12)


def test_singular_system_still_solves():
    f = torch.randn(50, 1, dtype=torch.float64).repeat(1, 4)  # rank-1 features
    equations = NormalEquations(4, 1)
    equations.update(f, 3 * f[:, :1] + 1)
    solution = equations.solve(ridge=0.0)
    assert torch.isfinite(solution.weight).all()
    assert (solution.r2 > 1 - 1e-6).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_fit_rejects_non_finite_input(bad):
    equations = NormalEquations(3, 1)
    f = torch.randn(4, 3)
    f[1, 2] = bad
    with pytest.raises(ValueError, match="features must be finite"):
        equations.update(f, torch.randn(4, 1))
    with pytest.raises(ValueError, match="targets must be finite"):
        equations.update(torch.randn(4, 3), torch.full((4, 1), bad))
    with pytest.raises(ValueError, match="3 columns"):
        equations.update(torch.randn(4, 2), torch.randn(4, 1))
    with pytest.raises(ValueError, match="ridge"):
        equations.solve(ridge=-1.0)


def test_fused_form_gives_the_same_input_gradient():
    """Eval-mode fields may need d(output)/d(input) (e.g. SDF normals, eikonal terms)."""
    torch.manual_seed(0)
    mlp = _nerf_trunk("eugen", out_dim=1).double().eval()
    x = torch.randn(30, 12, dtype=torch.float64, requires_grad=True)
    (grad_fused,) = torch.autograd.grad(mlp(x).sum(), x)
    (grad_unfused,) = torch.autograd.grad(mlp.forward_unfused(x).sum(), x)
    assert _relative_error(grad_fused, grad_unfused) < 1e-6


@pytest.mark.slow
def test_compiled_fused_form_matches_unfused():
    torch.manual_seed(0)
    mlp = EUGenMLP(
        in_dim=12,
        num_layers=4,
        layer_width=32,
        out_dim=3,
        skip_connections=(2,),
        layer_types="eugen",
        eugen=EUGenSpec(num_features=8, degree=2),
        compile_fused=True,
    ).eval()
    x = torch.randn(64, 12)
    with torch.no_grad():
        assert _relative_error(mlp(x), mlp.forward_unfused(x)) < 1e-4
    assert mlp.compile_fused, "compilation fell back to eager"


def test_compile_failure_falls_back_to_eager(monkeypatch):
    def broken_compile(fn, *args, **kwargs):
        def run(*a, **k):
            raise RuntimeError("no compiler here")

        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    mlp = EUGenMLP(
        in_dim=5,
        num_layers=2,
        layer_width=8,
        layer_types="eugen",
        eugen=EUGenSpec(num_features=4),
        compile_fused=True,
    ).eval()
    x = torch.randn(7, 5)
    with pytest.warns(UserWarning, match="no compiler here"):
        y = mlp(x)
    assert torch.allclose(y, mlp.forward_unfused(x), atol=1e-5)
    assert not mlp.compile_fused


def test_weighted_fit_recovers_the_weighted_least_squares_solution():
    generator = torch.Generator().manual_seed(0)
    f = torch.randn(400, 6, dtype=torch.float64, generator=generator)
    y = torch.randn(400, 2, dtype=torch.float64, generator=generator)
    w = torch.rand(400, dtype=torch.float64, generator=generator) * 3
    equations = NormalEquations(6, 2)
    equations.update(f[:150], y[:150], w[:150])
    equations.update(f[150:], y[150:], w[150:])
    solution = equations.solve(ridge=0.0)
    design = torch.cat([f, torch.ones(400, 1, dtype=torch.float64)], 1) * w.sqrt()[:, None]
    reference = torch.linalg.lstsq(design, y * w.sqrt()[:, None]).solution
    assert torch.allclose(solution.weight.T, reference[:-1], atol=1e-9)
    assert torch.allclose(solution.bias, reference[-1], atol=1e-9)
    # and the unweighted solution differs: the weights did something
    plain = NormalEquations(6, 2)
    plain.update(f, y)
    assert not torch.allclose(plain.solve(0.0).weight, solution.weight, atol=1e-3)


def test_integer_weights_equal_repeated_rows():
    f, y = torch.randn(50, 4, dtype=torch.float64), torch.randn(50, 1, dtype=torch.float64)
    weighted, repeated = NormalEquations(4, 1), NormalEquations(4, 1)
    weighted.update(f, y, torch.full((50,), 3.0))
    repeated.update(f.repeat(3, 1), y.repeat(3, 1))
    for key in NormalEquations.STATE_KEYS:
        assert torch.allclose(getattr(weighted, key), getattr(repeated, key)), key


@pytest.mark.parametrize(
    "bad", [torch.tensor([1.0, -1.0, 1.0]), torch.tensor([1.0, float("nan"), 1.0]), torch.ones(2)]
)
def test_bad_weights_are_rejected(bad):
    with pytest.raises(ValueError, match="weights"):
        NormalEquations(2, 1).update(torch.randn(3, 2), torch.randn(3, 1), bad)


def test_standardised_ridge_shrinks_features_alike_whatever_their_scale():
    generator = torch.Generator().manual_seed(1)
    f = torch.randn(300, 5, dtype=torch.float64, generator=generator)
    y = f @ torch.randn(5, 1, dtype=torch.float64, generator=generator) + 0.1 * torch.randn(
        300, 1, dtype=torch.float64
    )
    scaled = f.clone()
    scaled[:, 0] *= 1000.0  # one feature order a thousand times larger than the others
    predictions = {}
    for standardise in (True, False):
        for name, features in (("f", f), ("scaled", scaled)):
            equations = NormalEquations(5, 1)
            equations.update(features, y)
            solution = equations.solve(ridge=0.1, standardise=standardise)
            predictions[standardise, name] = features @ solution.weight.T + solution.bias
    assert torch.allclose(predictions[True, "f"], predictions[True, "scaled"], atol=1e-9)
    assert not torch.allclose(predictions[False, "f"], predictions[False, "scaled"], atol=1e-3)


def _residual(f, y, weight, bias):
    return float((f @ weight.T + bias - y).square().sum())


def test_reduced_rank_fit_is_the_best_rank_r_fit_in_the_data_metric():
    generator = torch.Generator().manual_seed(0)
    n, d, l, rank = 2000, 6, 5, 2
    truth = torch.randn(l, d, dtype=torch.float64, generator=generator)
    # whitened inputs (centred, covariance exactly I): the best rank-r fit is the truncated SVD of the solution
    q = torch.linalg.qr(torch.randn(n, d, dtype=torch.float64, generator=generator)).Q
    white = (q - q.mean(0)) * n**0.5
    white = torch.linalg.qr(white).Q * n**0.5
    y = white @ truth.T + 0.5
    equations = NormalEquations(d, l)
    equations.update(white, y)
    reduced = equations.reduce_rank(equations.solve(ridge=0.0), rank)
    u, s, vh = torch.linalg.svd(truth)
    assert torch.allclose(reduced.weight, (u[:, :rank] * s[:rank]) @ vh[:rank], atol=1e-6)
    assert torch.linalg.matrix_rank(reduced.weight).item() == rank
    # correlated inputs: it beats truncating the weight alone (which ignores which inputs occur)
    mixing = torch.randn(d, d, dtype=torch.float64, generator=generator) * torch.tensor(
        [5.0, 3, 1, 0.3, 0.1, 0.05]
    )
    f = torch.randn(n, d, dtype=torch.float64, generator=generator) @ mixing
    y = f @ truth.T + 0.1 * torch.randn(n, l, dtype=torch.float64, generator=generator)
    equations = NormalEquations(d, l)
    equations.update(f, y)
    full = equations.solve(ridge=0.0)
    reduced = equations.reduce_rank(full, rank)
    u, s, vh = torch.linalg.svd(full.weight)
    truncated = (u[:, :rank] * s[:rank]) @ vh[:rank]
    truncated_bias = y.mean(0) - f.mean(0) @ truncated.T
    assert _residual(f, y, reduced.weight, reduced.bias) < 0.9 * _residual(f, y, truncated, truncated_bias)
    assert _residual(f, y, full.weight, full.bias) <= _residual(f, y, reduced.weight, reduced.bias)
    # the reported R² is the reduced fit's
    assert torch.allclose(reduced.r2, equations.r2(reduced.weight, reduced.bias))


class _LiveBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """The peak of the bytes held by tensors that ops create while the mode is on (storages tracked until freed)."""

    def __init__(self) -> None:
        super().__init__()
        self.live, self.current, self.peak = {}, 0, 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        import weakref

        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key in self.live or any(
                isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == key for a in args
            ):
                continue  # a view or an in-place result: no new memory
            self.live[key] = storage.nbytes()
            self.current += storage.nbytes()
            self.peak = max(self.peak, self.current)
            weakref.finalize(storage, self._free, key)
        return out


def test_fused_form_holds_no_dead_buffer():
    """A NeRF-like trunk (skip into a dense layer, EUGen layers around it, a dense last layer, an output
    activation): no more than the input and two width-wide buffers are alive at once (a dense layer's output
    and its activation, as in a layer-by-layer forward), so no step keeps an earlier step's buffer."""
    torch.manual_seed(0)
    spec = EUGenSpec(num_features=16, degree=2, feature_map="identity")
    mlp = EUGenMLP(
        in_dim=24,
        num_layers=8,
        layer_width=128,
        skip_connections=(4,),
        eugen_layers=[1, 2, 3, 5, 6],
        eugen=spec,
        out_activation=nn.ReLU(),
    ).eval()
    x = torch.randn(2048, 24)
    fused = mlp.fused()
    with torch.no_grad():
        expected = mlp.forward_unfused(x)
        tracker = _LiveBytes()
        with tracker:
            out = fused(x)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4)
    row = x.shape[0] * 4  # bytes of one float column
    assert tracker.peak <= row * (2 * 128 + 2)  # two 128-wide buffers and the norms' columns


def test_a_dense_mlp_runs_the_fused_executor_without_concatenating_its_skip():
    """An all-dense MLP runs the EUGen MLPs' executor in eval mode: the same output as layer by layer, and
    without autograd no more than two width-wide buffers at once (the skip's product is added into the
    layer's output, activations run in place), where the layer-by-layer forward builds the concatenation."""
    torch.manual_seed(0)
    mlp = EUGenMLP(in_dim=24, num_layers=8, layer_width=128, skip_connections=(4,), out_activation=nn.ReLU())
    mlp = mlp.eval()
    assert mlp.runs_fused
    x = torch.randn(2048, 24)
    mlp.fused()
    with torch.no_grad():
        expected = mlp.forward_unfused(x)
        fused_bytes, unfused_bytes = _LiveBytes(), _LiveBytes()
        with fused_bytes:
            out = mlp(x)
        with unfused_bytes:
            mlp.forward_unfused(x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    bound = x.shape[0] * 4 * 2 * 128
    assert fused_bytes.peak <= bound < unfused_bytes.peak


def test_only_dense_or_eugen_mlps_run_the_fused_form():
    """A low-rank MLP without an EUGen layer runs layer by layer (merging a low-rank layer would undo its
    factorisation); ``fuse_in_eval=False`` turns the fused form off."""
    assert EUGenMLP(in_dim=8, num_layers=3, layer_width=16).runs_fused
    assert EUGenMLP(in_dim=8, num_layers=3, layer_width=16, eugen_layers=[1]).runs_fused
    assert not EUGenMLP(in_dim=8, num_layers=3, layer_width=16, layer_types="lowrank").runs_fused
    assert not EUGenMLP(in_dim=8, num_layers=3, layer_width=16, fuse_in_eval=False).runs_fused


@pytest.mark.parametrize(
    "layer_types",
    [
        "dense",
        ["dense", "eugen", "dense"],
        ["eugen", "dense", "dense"],
        ["eugen", "eugen", "dense"],
        "lowrank",
    ],
)
@pytest.mark.parametrize("skip", [(), (1,)])
@pytest.mark.parametrize("training", [False, True])
def test_forward_concat_equals_the_forward_of_the_concatenation(layer_types, skip, training):
    torch.manual_seed(0)
    head = EUGenMLP(
        in_dim=27 + 64,
        num_layers=3,
        layer_width=32,
        out_dim=3,
        skip_connections=skip,
        layer_types=layer_types,
        eugen=TRUNK_SPEC,
        out_activation=nn.Sigmoid(),
    ).train(training)
    parts = [torch.randn(500, 27), torch.randn(500, 64)]
    with torch.no_grad():
        expected = head.forward_unfused(torch.cat(parts, dim=-1))
        out = head.forward_concat(parts)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="91 wide"):
        head.forward_concat([parts[0], parts[0]])


@pytest.mark.parametrize("training", [False, True])
def test_forward_concat_calls_the_module_hooks_with_the_whole_input(training):
    """Distillation records an MLP's input with a forward hook on it; a field that hands its colour head the
    input as parts must still go through those hooks, with the concatenated input and the same output."""
    torch.manual_seed(0)
    head = EUGenMLP(in_dim=27 + 64, num_layers=3, layer_width=32, out_dim=3, skip_connections=(1,)).train(
        training
    )
    parts = [torch.randn(50, 27), torch.randn(50, 64)]
    seen = []
    handle = head.register_forward_hook(lambda module, args, output: seen.append((args[0], output)))
    with torch.no_grad():
        out = head.forward_concat(parts)
    handle.remove()
    assert len(seen) == 1
    torch.testing.assert_close(seen[0][0], torch.cat(parts, dim=-1))
    torch.testing.assert_close(seen[0][1], out)
    with torch.no_grad():
        head.forward_concat(parts)
    assert len(seen) == 1  # the hook removed: the fused path again


@pytest.mark.parametrize(
    "layer_types, skip", [("dense", ()), ("dense", (1,)), (["eugen", "eugen", "dense"], (1,))]
)
def test_the_fused_form_reads_the_parts_apart(layer_types, skip):
    """A head given its input as parts never builds their concatenation, whether its first layer is dense or
    EUGen and whether a skip reads the input again (Zip-NeRF's view MLP): what it allocates is narrower than
    its input."""
    torch.manual_seed(0)
    head = EUGenMLP(
        in_dim=27 + 256,
        num_layers=3,
        layer_width=32,
        out_dim=3,
        skip_connections=skip,
        layer_types=layer_types,
        eugen=EUGenSpec(num_features=8),
        out_activation=nn.Sigmoid(),
    ).eval()
    assert head.runs_fused
    parts = [torch.randn(1000, 27), torch.randn(1000, 256)]
    head.fused()
    tracker = _LiveBytes()
    with torch.no_grad(), tracker:
        out = head.forward_concat(parts)
    torch.testing.assert_close(out, head.forward_unfused(torch.cat(parts, dim=-1)), rtol=1e-5, atol=1e-5)
    assert tracker.peak <= 1000 * 4 * (2 * 32 + 4)  # two layer-wide buffers and a few norm columns


def test_softplus_runs_in_place_at_inference_and_equals_its_autograd_form():
    """iSDF's softplus (β = 100) activations and softplus feature maps are written over the layer's fresh output
    without autograd; the values are the out-of-place module's, bit for bit."""
    from eugen_nerf.layers.eugen import activate

    torch.manual_seed(0)
    x = torch.randn(300, 40) * 0.2
    softplus = nn.Softplus(beta=100.0)
    buffer = x.clone()
    out = activate(softplus, buffer, inplace=True)
    assert out.data_ptr() == buffer.data_ptr()
    assert torch.equal(out, softplus(x))
    spec = EUGenSpec(num_features=16, degree=2, feature_map="softplus", scaling="linear")
    mlp = (
        EUGenMLP(
            in_dim=12,
            num_layers=5,
            layer_width=32,
            out_dim=1,
            layer_types=["dense", "eugen", "eugen", "eugen", "dense"],
            skip_connections=(2,),
            activation=softplus,
            eugen=spec,
        )
        .double()
        .eval()
    )
    points = torch.randn(64, 12, dtype=torch.float64)
    with torch.no_grad():
        fused = mlp(points)
    with torch.enable_grad():
        reference = mlp.forward_unfused(points)  # autograd on: every activation out of place
    assert _relative_error(fused, reference.detach()) < 1e-9


@pytest.mark.parametrize("parts", [False, True])
def test_a_cpu_batch_runs_in_passes_of_rows_with_the_same_result(parts):
    """Without autograd on a CPU the chain runs :data:`CPU_ROWS` rows at a time (its buffers stay in cache):
    every row's output is the one the whole batch gives, and what is alive at once is one pass's buffers and
    the output, not the whole batch's width-wide buffers."""
    from eugen_nerf.layers.fused import CPU_ROWS

    torch.manual_seed(0)
    mlp = EUGenMLP(
        in_dim=24,
        num_layers=8,
        layer_width=128,
        out_dim=8,
        skip_connections=(4,),
        eugen_layers=[1, 2, 3, 5, 6],
        eugen=EUGenSpec(num_features=16, degree=2, scaling="projected", use_norm=False),
        out_activation=nn.ReLU(),
    ).eval()
    rows = 3 * CPU_ROWS + 17
    x = torch.randn(rows, 24)
    given = [x[:, :10], x[:, 10:]] if parts else x
    fused = mlp.fused()
    with torch.no_grad():
        whole = fused(given, rows_per_pass=0)
        tracker = _LiveBytes()
        with tracker:
            passes = fused(given)
    torch.testing.assert_close(passes, whole, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(passes, mlp.forward_unfused(x), rtol=1e-4, atol=1e-4)
    assert tracker.peak <= CPU_ROWS * 4 * (2 * 128 + 2) + rows * 8 * 4


def test_a_layer_by_layer_mlp_runs_a_cpu_batch_in_passes_of_rows_unless_its_layers_are_hooked():
    """A low-rank MLP (no EUGen layer: run layer by layer, not merged) runs in the same passes of rows as a
    fused one, so the baselines are timed as EUGen is (their input given in parts too); a hook on one of its
    layers sees the whole batch."""
    from eugen_nerf.layers.fused import CPU_ROWS

    torch.manual_seed(0)
    mlp = EUGenMLP(
        in_dim=24,
        num_layers=4,
        layer_width=64,
        out_dim=3,
        skip_connections=(2,),
        layer_types=["dense", "lowrank", "lowrank", "dense"],
        eugen=EUGenSpec(lowrank_rank=8),
    ).eval()
    assert not mlp.runs_fused
    rows = 2 * CPU_ROWS + 5
    x = torch.randn(rows, 24)
    with torch.no_grad():
        whole = mlp.forward_unfused(x)
        tracker = _LiveBytes()
        with tracker:
            passes = mlp(x)
        torch.testing.assert_close(passes, whole, rtol=1e-6, atol=1e-6)
        assert tracker.peak <= CPU_ROWS * 4 * (2 * (24 + 64) + 8) + rows * 3 * 4
        tracker = _LiveBytes()
        with tracker:  # parts of a colour head's input: concatenated a pass at a time, never whole
            passes = mlp.forward_concat([x[:, :10], x[:, 10:]])
        torch.testing.assert_close(passes, whole, rtol=1e-6, atol=1e-6)
        assert tracker.peak <= CPU_ROWS * 4 * (2 * (24 + 64) + 8) + rows * 3 * 4
        seen = []
        handle = mlp.layers[1].register_forward_hook(lambda module, args, out: seen.append(len(args[0])))
        torch.testing.assert_close(mlp(x), whole, rtol=1e-6, atol=1e-6)
        handle.remove()
        layer = mlp.layers[1]
        handle = nn.modules.module.register_module_forward_hook(
            lambda module, args, out: seen.append(len(args[0])) if module is layer else None
        )
        torch.testing.assert_close(mlp(x), whole, rtol=1e-6, atol=1e-6)
        handle.remove()
    assert seen == [rows, rows]
