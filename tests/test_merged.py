"""MergedMLP: an EUGen MLP trained in its merged form starts as the MLP it is built from, trains every one of
its matrices, costs fewer multiply-adds, refuses chains that need norm rows, and exports as it renders."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from eugen_nerf.layers import EUGenMLP, EUGenSpec, MergedMLP

SPEC = EUGenSpec(num_features=16, degree=2, feature_map="identity", scaling="projected", use_norm=False)


def trunk(spec: EUGenSpec = SPEC) -> EUGenMLP:
    """An 8-layer NeRF-like trunk (skip at 4) with EUGen layers 1, 2, 3, 5, 6."""
    torch.manual_seed(0)
    return EUGenMLP(
        in_dim=15,
        num_layers=8,
        layer_width=64,
        out_dim=64,
        skip_connections=(4,),
        out_activation=nn.ReLU(),
        eugen_layers=(1, 2, 3, 5, 6),
        eugen=spec,
    )


def test_starts_as_the_mlp_it_is_built_from():
    mlp = trunk()
    merged = MergedMLP(mlp)
    x = torch.randn(257, 15)
    expected = mlp.forward_unfused(x)
    torch.testing.assert_close(merged(x), expected, atol=1e-5, rtol=1e-4)
    # it keeps the source layers' hyper-parameters, not their A and G (the source MLP keeps its own)
    sources = [step.layer for step in merged.fused().steps if step.layer is not None]
    assert sources and all(p.is_meta for layer in sources for p in layer.parameters())
    assert not any(p.is_meta for p in mlp.parameters())
    with torch.no_grad():  # the in-place path inference runs
        torch.testing.assert_close(merged(x), expected, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(
            merged.forward_concat([x[:, :3], x[:, 3:]]), expected, atol=1e-5, rtol=1e-4
        )


def test_forward_concat_calls_the_module_hooks_with_the_whole_input():
    merged = MergedMLP(trunk())
    x = torch.randn(64, 15)
    seen = []
    handle = merged.register_forward_hook(lambda module, args, output: seen.append((args[0], output)))
    with torch.no_grad():
        out = merged.forward_concat([x[:, :3], x[:, 3:]])
    handle.remove()
    assert len(seen) == 1
    torch.testing.assert_close(seen[0][0], x)
    torch.testing.assert_close(seen[0][1], out)
    with torch.no_grad():
        merged.forward_concat([x[:, :3], x[:, 3:]])
    assert len(seen) == 1  # the hook removed: the parts are read apart again


def test_parameters_are_the_merged_matrices_and_cost_less():
    mlp = trunk()
    merged = MergedMLP(mlp)
    # chain steps 2, 3 (and 6) read the previous EUGen layer's k*m features through one k*m x k*m matrix
    assert merged.steps[2].weight.shape == (2 * 16, 2 * 16)
    assert merged.steps[6].weight.shape == (2 * 16, 2 * 16)
    assert merged.steps[3].out_weight is None and merged.steps[6].out_weight is None
    assert sum(p.numel() for p in merged.parameters()) < sum(p.numel() for p in mlp.parameters())
    assert merged.macs_per_point() < mlp.macs_per_point()
    assert merged.macs_per_point() == mlp.fused().macs_per_point()


def test_every_matrix_trains_and_the_loss_falls():
    torch.manual_seed(1)
    merged = MergedMLP(trunk())
    x = torch.randn(512, 15)
    target = (1 + 0.5 * torch.sin(x[:, :1] * 2)) * torch.ones(1, 64)  # positive: the output is a ReLU
    loss = (merged(x) - target).square().mean()
    loss.backward()
    for name, param in merged.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    optimiser = torch.optim.Adam(merged.parameters(), lr=1e-3)
    first = loss.item()
    for _ in range(50):
        optimiser.zero_grad()
        loss = (merged(x) - target).square().mean()
        loss.backward()
        optimiser.step()
    assert loss.item() < 0.5 * first
    trained = merged(x).detach()  # the training path (autograd, out of place)
    with torch.no_grad():  # inference's in-place path runs the trained matrices the same way
        torch.testing.assert_close(merged(x), trained, rtol=1e-5, atol=1e-6)


def test_follows_the_module_to_another_dtype():
    merged = MergedMLP(trunk()).double()
    x = torch.randn(9, 15, dtype=torch.float64)
    assert merged(x).dtype == torch.float64
    assert all(p.dtype == torch.float64 for p in merged.parameters())


@pytest.mark.parametrize(
    "change", [{"scaling": "linear", "use_norm": False}, {"scaling": "projected", "use_norm": True}]
)
def test_chains_that_need_norm_rows_are_refused(change):
    spec = EUGenSpec(**{**SPEC.__dict__, **change})
    with pytest.raises(ValueError, match="cannot be trained in merged form"):
        MergedMLP(trunk(spec))


def test_nerf_config_trains_merged_where_the_layers_allow():
    """None (the default) merges EUGen layers with the projected scaling and nothing else; True refuses the
    rest in one line; False never merges; a field with no EUGen layers has nothing to merge."""
    from eugen_nerf.models.nerf import NeRFEUGenConfig

    assert NeRFEUGenConfig().train_merged is None and NeRFEUGenConfig().merged_training
    assert NeRFEUGenConfig(train_merged=True).merged_training
    assert not NeRFEUGenConfig(train_merged=False).merged_training
    assert not NeRFEUGenConfig(trunk_layers=(), head_layers=()).merged_training
    for unmergeable in ({"scaling": "linear"}, {"use_norm": True}, {"layer_type": "lowrank"}):
        assert not NeRFEUGenConfig(**unmergeable).merged_training  # trained as they are
    with pytest.raises(ValueError, match="eugen.train-merged needs"):
        NeRFEUGenConfig(train_merged=True, scaling="linear")


def test_eugen_nerf_trains_merged_and_dense_nerf_plainly():
    from eugen_nerf.bench.suites.methods import variants
    from eugen_nerf.fields.nerf import EUGenNeRFField

    configs = variants("nerf", False, True, {})
    merged = {kind: config.pipeline.model.eugen.merged_training for kind, (_, config) in configs.items()}
    assert merged == {"eugen": True, "dense": False, "narrowed": False, "lowrank": False, "snnk": False}
    eugen = configs["eugen"][1].pipeline.model.eugen
    field = EUGenNeRFField(eugen, eugen.trunk_layers, eugen.head_layers, 32, 16, eugen.merged_training)
    assert isinstance(field.trunk, MergedMLP)
    dense = configs["dense"][1].pipeline.model.eugen
    assert isinstance(EUGenNeRFField(dense, (), (), 32, 16, dense.merged_training).trunk, EUGenMLP)


def test_nerf_field_with_train_merged_starts_as_the_unmerged_field():
    from eugen_nerf.fields.nerf import EUGenNeRFField
    from eugen_nerf.models.nerf import NeRFEUGenConfig

    spec = NeRFEUGenConfig(num_features=8, train_merged=True)
    torch.manual_seed(3)
    plain = EUGenNeRFField(spec, spec.trunk_layers, spec.head_layers, 32, 16)
    torch.manual_seed(3)
    merged = EUGenNeRFField(spec, spec.trunk_layers, spec.head_layers, 32, 16, train_merged=True)
    assert isinstance(merged.trunk, MergedMLP) and isinstance(merged.color_head, EUGenMLP)
    x = torch.randn(33, 63)
    torch.testing.assert_close(merged.trunk(x), plain.trunk.forward_unfused(x), atol=1e-5, rtol=1e-4)


def test_isdf_field_trains_merged_through_the_eikonal_term():
    """iSDF's loss differentiates the SDF's gradient: the merged form must carry a double backward."""
    from dataclasses import replace

    from eugen_nerf.bench.suites.isdf import macs_per_point
    from eugen_nerf.fields.isdf import ISDFEUGenConfig, ISDFField, ISDFFieldConfig

    spec = ISDFEUGenConfig(num_features=8, scaling="projected")
    torch.manual_seed(4)
    plain = ISDFField(ISDFFieldConfig(width=32, eugen=spec))
    torch.manual_seed(4)
    merged = ISDFField(ISDFFieldConfig(width=32, eugen=replace(spec, train_merged=True)))
    assert isinstance(merged.mlp, MergedMLP)
    x = torch.rand(64, 3) * 2 - 1
    torch.testing.assert_close(merged(x), plain.mlp.forward_unfused(plain.embedding(x * 0.1)))
    sdf, gradient = merged.sdf_and_gradient(x, create_graph=True)
    _, expected = plain.sdf_and_gradient(x, create_graph=True)
    torch.testing.assert_close(gradient, expected, atol=1e-5, rtol=1e-4)
    (sdf.square().mean() + (gradient.norm(dim=-1) - 1).square().mean()).backward()
    for name, param in merged.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert macs_per_point(merged) == macs_per_point(plain)
    merged.load_state_dict(merged.state_dict())  # a saved map loads back into the same config
    with pytest.raises(ValueError, match="eugen.train-merged needs"):
        ISDFEUGenConfig(train_merged=True)  # the default linear scaling needs norm rows


def test_zipnerf_view_mlp_trains_merged_by_default_with_the_projected_scaling():
    import copy
    import math
    from dataclasses import replace

    from _tiny import train_steps

    from eugen_nerf.methods.zipnerf import eugen_zipnerf
    from eugen_nerf.models.zipnerf import FIELD_MLPS, ZipNeRFEUGenConfig
    from eugen_nerf.scenes import shipped_scene

    assert ZipNeRFEUGenConfig().merged_training  # the defaults: projected scaling, no norm entry
    assert not ZipNeRFEUGenConfig(scaling="linear", use_norm=True).merged_training  # trained apart
    assert not ZipNeRFEUGenConfig(view_layers=()).merged_training  # nothing to merge
    with pytest.raises(ValueError, match="eugen.train-merged needs"):
        ZipNeRFEUGenConfig(train_merged=True, scaling="linear", use_norm=True)
    spec = ZipNeRFEUGenConfig(num_features=8, train_merged=False)

    def tiny(eugen: ZipNeRFEUGenConfig):
        config = copy.deepcopy(eugen_zipnerf.config)
        config.pipeline.datamanager.data = shipped_scene("bunny32")
        config.pipeline.datamanager.train_num_rays_per_batch = 64
        model = config.pipeline.model
        model.num_levels, model.max_res, model.log2_hashmap_size = 4, 64, 12
        model.bottleneck_width = model.hidden_dim_color = 32
        model.eugen = eugen
        model.proposal_net_args_list = [
            {
                "hidden_dim": 16,
                "log2_hashmap_size": 10,
                "num_levels": 3,
                "max_res": 32,
                "features_per_level": 1,
            }
        ]
        model.num_proposal_samples_per_ray, model.num_nerf_samples_per_ray = (16, 8), 8
        torch.manual_seed(6)
        return config, config.pipeline.setup(device="cpu", test_mode="val")

    _, plain = tiny(spec)
    config, pipeline = tiny(replace(spec, train_merged=None))
    field = pipeline.model.field
    assert isinstance(field.view_mlp, MergedMLP) and isinstance(field.density_mlp, EUGenMLP)
    parts = [torch.randn(17, 32), torch.randn(17, 27)]
    expected = plain.model.field.view_mlp.forward_unfused(torch.cat(parts, dim=-1))
    torch.testing.assert_close(field.view_mlp.forward_concat(parts), expected, atol=1e-5, rtol=1e-4)
    in_group = {id(p) for p in pipeline.model.get_param_groups()[FIELD_MLPS]}
    assert all(id(p) in in_group for p in field.view_mlp.parameters())

    def finite(loss) -> None:
        assert math.isfinite(loss.item())
        for name, param in field.view_mlp.named_parameters():
            assert param.grad is not None and torch.isfinite(param.grad).all(), name

    train_steps(config, pipeline, 3, after_backward=finite)
