"""``eugen-siren`` / ``dense-siren`` through nerfstudio's pipeline: a few CPU steps on bunny32 lower the loss."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import torch
from _tiny import train_steps

from eugen_nerf.layers import EUGenLinear
from eugen_nerf.layers.baselines import LowRankLinear
from eugen_nerf.methods.siren import dense_siren, eugen_siren
from eugen_nerf.models.siren import SirenNeRFModel
from eugen_nerf.scenes import shipped_scene

pytestmark = pytest.mark.usefixtures("one_thread")


def small_pipeline(spec):
    config = copy.deepcopy(spec.config)
    config.pipeline.datamanager.data = shipped_scene("bunny32")
    config.pipeline.datamanager.train_num_rays_per_batch = 128
    model = config.pipeline.model
    model.trunk_width, model.head_width = 32, 16
    model.num_coarse_samples, model.num_importance_samples = 16, 8
    model.siren = replace(model.siren, num_features=16)
    for group in config.optimizers.values():
        group["optimizer"].lr *= 5  # a few steps must show progress
    return config, config.pipeline.setup(device="cpu", test_mode="val")


@pytest.mark.parametrize(
    "spec, layers",
    [(eugen_siren, None), (dense_siren, None), (dense_siren, "lowrank"), (dense_siren, "snnk")],
    ids=["eugen", "dense", "lowrank", "snnk"],
)
def test_siren_method_trains(spec, layers) -> None:
    """Each method, and the reviewers' baselines (``--pipeline.model.layers lowrank|snnk``), train."""
    torch.manual_seed(0)
    if layers is not None:
        spec = copy.deepcopy(spec)
        spec.config.pipeline.model.layers = layers
    config, pipeline = small_pipeline(spec)
    model = pipeline.model
    assert isinstance(model, SirenNeRFModel)
    eugen_layers = [m for m in model.modules() if isinstance(m, EUGenLinear)]
    kind = layers or ("eugen" if spec is eugen_siren else "dense")
    assert len(eugen_layers) == (6 if kind in ("eugen", "snnk") else 0)  # 3 hidden layers x (coarse, fine)
    lowrank = [m for m in model.modules() if isinstance(m, LowRankLinear)]
    assert len(lowrank) == (6 if kind == "lowrank" else 0)
    groups = pipeline.get_param_groups()
    assert set(groups) == ({"fields", "projections"} if kind in ("eugen", "snnk") else {"fields"})
    losses = train_steps(config, pipeline, 30)
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5]), losses
    assert config.machine.device_type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_siren_method_refuses_a_weight_learning_rate_it_has_no_optimizer_for() -> None:
    """The method's optimizers are ``fields`` and ``projections``: a scaled ``A`` group would train at no rate
    a user chose, so ``--pipeline.model.siren.weight-lr-scale`` other than 1 is one clear error at setup."""
    config = copy.deepcopy(eugen_siren.config)
    config.pipeline.datamanager.data = shipped_scene("bunny32")
    config.pipeline.model.siren = replace(config.pipeline.model.siren, weight_lr_scale=10.0)
    with pytest.raises(ValueError, match="weight-lr-scale: the method has optimizers for the fields and"):
        config.pipeline.setup(device="cpu", test_mode="val")
