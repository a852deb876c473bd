"""``eugen-nerf`` and its dense twin ``dense-nerf``: vanilla NeRF with and without EUGen trunk layers."""

from __future__ import annotations

from nerfstudio.engine.optimizers import RAdamOptimizerConfig
from nerfstudio.plugins.types import MethodSpecification

from eugen_nerf.methods.common import layer_summary, object_method_config
from eugen_nerf.models.nerf import EUGenNeRFModelConfig, NeRFEUGenConfig


def nerf_method(method_name: str, eugen: NeRFEUGenConfig) -> MethodSpecification:
    """Vanilla NeRF at the paper's sizes (8x256 trunk, 64 + 128 samples, 1024 rays), NeRF's RAdam at 5e-4."""
    config = object_method_config(
        method_name,
        model=EUGenNeRFModelConfig(eugen=eugen),
        optimizers={"fields": {"optimizer": RAdamOptimizerConfig(lr=5e-4, eps=1e-08), "scheduler": None}},
        max_num_iterations=200_000,
        train_num_rays_per_batch=1024,
    )
    return MethodSpecification(
        config=config,
        description="Vanilla NeRF at the paper's sizes; "
        + layer_summary({"trunk": tuple(eugen.trunk_layers), "colour head": tuple(eugen.head_layers)}),
    )


eugen_nerf = nerf_method("eugen-nerf", NeRFEUGenConfig())
dense_nerf = nerf_method("dense-nerf", NeRFEUGenConfig(trunk_layers=(), head_layers=()))
