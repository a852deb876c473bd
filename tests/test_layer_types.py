"""``--pipeline.model.eugen.layer-type`` for every head: each reviewers' baseline builds and trains.

For the NeRF, nerfacto and iSDF methods, every layer type (EUGen, low-rank, SNNK, dense) replaces exactly the
layers the method selects, with EUGen's parameter count for the baselines, and a few optimiser steps keep
the loss and every gradient finite. Bad combinations fail when the config is made, before anything runs.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from _tiny import train_steps

from eugen_nerf.layers import EUGenLinear, EUGenSpec, LowRankLinear, MergedMLP
from eugen_nerf.methods.isdf import eugen_isdf
from eugen_nerf.methods.nerf import eugen_nerf
from eugen_nerf.methods.nerfacto import eugen_nerfacto
from eugen_nerf.scenes import shipped_scene

pytestmark = pytest.mark.usefixtures("one_thread")

LAYER_CLASS = {"eugen": EUGenLinear, "lowrank": LowRankLinear, "snnk": EUGenLinear, "dense": torch.nn.Linear}


def tiny(method: str):
    if method == "nerf":
        config = copy.deepcopy(eugen_nerf.config)
        config.pipeline.datamanager.data = shipped_scene("bunny32")
        model = config.pipeline.model
        model.num_coarse_samples = model.num_importance_samples = 8
        model.trunk_width, model.head_width = 32, 16
        return config, lambda m: m.field_coarse.trunk, model.eugen.trunk_layers
    if method == "nerfacto":
        config = copy.deepcopy(eugen_nerfacto.config)
        config.pipeline.datamanager.data = shipped_scene("bunny32")
        model = config.pipeline.model
        model.num_proposal_samples_per_ray, model.num_nerf_samples_per_ray = (16, 8), 8
        model.log2_hashmap_size, model.max_res = 12, 64
        return config, lambda m: m.field.color_mlp, model.eugen.color_layers
    config = copy.deepcopy(eugen_isdf.config)
    config.pipeline.datamanager.data = shipped_scene("bunny_rgbd")
    config.pipeline.model.sdf.width = 32
    config.pipeline.model.num_render_samples = 16
    return config, lambda m: m.field.mlp, config.pipeline.model.sdf.eugen.layers


def eugen_config(config, method: str) -> EUGenSpec:
    return config.pipeline.model.sdf.eugen if method == "isdf" else config.pipeline.model.eugen


@pytest.mark.parametrize("layer_type", ["eugen", "lowrank", "snnk", "dense"])
@pytest.mark.parametrize("method", ["nerf", "nerfacto", "isdf"])
def test_every_layer_type_builds_and_trains_for_every_head(method, layer_type):
    torch.manual_seed(0)
    config, mlp_of, selected = tiny(method)
    eugen = eugen_config(config, method)
    eugen.layer_type, eugen.num_features = layer_type, 8
    config.pipeline.datamanager.train_num_rays_per_batch = 64
    pipeline = config.pipeline.setup(device="cpu", test_mode="val")
    mlp = layered = mlp_of(pipeline.model)
    assert selected, "the method selects no layer"
    if method == "nerf" and layer_type == "eugen":  # the trunk trains merged; its layers are checked apart
        assert isinstance(mlp, MergedMLP)
        apart = copy.deepcopy(config)
        apart.pipeline.model.eugen.train_merged = False
        layered = mlp_of(apart.pipeline.setup(device="cpu", test_mode="val").model)
    for index, layer in enumerate(layered.layers):
        expected = LAYER_CLASS[layer_type] if index in selected else torch.nn.Linear
        assert type(layer) is expected, (index, type(layer))
        if index in selected and layer_type == "snnk":
            assert (layer.degree, layer.use_norm, layer.feature_map) == (1, False, "relu")

    def finite(loss) -> None:
        assert math.isfinite(loss.item())
        for name, parameter in mlp.named_parameters():
            assert parameter.grad is None or torch.isfinite(parameter.grad).all(), name

    train_steps(config, pipeline, 3, after_backward=finite)


def test_baselines_get_eugens_parameter_count():
    config, mlp_of, selected = tiny("nerf")
    config.pipeline.model.eugen.train_merged = False  # an EUGen layer's own A and G, not the merged chain's
    counts = {}
    for layer_type in ("eugen", "lowrank", "snnk"):
        config.pipeline.model.eugen.layer_type = layer_type
        model = config.pipeline.setup(device="cpu", test_mode="val").model
        layer = mlp_of(model).layers[selected[0]]
        counts[layer_type] = sum(p.numel() for p in layer.parameters() if p.requires_grad)
    assert abs(counts["lowrank"] - counts["eugen"]) <= 0.05 * counts["eugen"], counts
    assert counts["snnk"] == counts["eugen"], counts  # k·m ReLU features, one learned A


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"layer_type": "conv"}, "layer-type must be one of"),
        ({"degree": 9}, "degree must be an integer in 1..4"),
        ({"num_features": 0}, "num-features must be an integer in 1..4096"),
        ({"layer_type": "snnk", "feature_map": "sin"}, "not supported by layer-type snnk"),
        ({"scaling": "log"}, "scaling must be one of"),
    ],
)
def test_bad_layer_options_are_refused_with_one_clear_line(overrides, message):
    with pytest.raises(ValueError, match=message):
        EUGenSpec(**overrides)
