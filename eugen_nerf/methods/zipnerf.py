"""``eugen-zipnerf`` and its dense twin ``dense-zipnerf``: Zip-NeRF (multisampled, anti-aliased hash grid,
64-wide density MLP, 256-wide bottleneck and view MLP), EUGen in the bottleneck and view MLP."""

from __future__ import annotations

from nerfstudio.engine.optimizers import AdamOptimizerConfig
from nerfstudio.engine.schedulers import ExponentialDecaySchedulerConfig
from nerfstudio.plugins.types import MethodSpecification

from eugen_nerf.methods.common import object_method_config
from eugen_nerf.models.zipnerf import ZipNeRFEUGenConfig, ZipNeRFModelConfig

MAX_STEPS = 25_000
"""Zip-NeRF's step budget."""


def _adam() -> dict:
    """Zip-NeRF's optimiser: Adam (0.9, 0.99, eps 1e-15), learning rate 1e-2 decaying to 1e-3."""
    return {
        "optimizer": AdamOptimizerConfig(lr=1e-2, eps=1e-15),
        "scheduler": ExponentialDecaySchedulerConfig(lr_final=1e-3, max_steps=MAX_STEPS),
    }


def zipnerf_method(method_name: str, eugen: ZipNeRFEUGenConfig) -> MethodSpecification:
    """Zip-NeRF at the reference sizes; 4096 rays a step (the reference uses 65536 on 8 accelerators)."""
    config = object_method_config(
        method_name,
        model=ZipNeRFModelConfig(eugen=eugen),
        optimizers={"proposal_networks": _adam(), "fields": _adam()},
        max_num_iterations=MAX_STEPS,
        train_num_rays_per_batch=4096,
    )
    layers = (
        "all layers dense (the dense twin)"
        if not eugen.density_layers and not eugen.view_layers
        else f"EUGen density layers {list(eugen.density_layers)}, view layers {list(eugen.view_layers)}"
    )
    return MethodSpecification(
        config=config, description=f"{method_name}: Zip-NeRF (multisampled anti-aliased hash grid), {layers}"
    )


eugen_zipnerf = zipnerf_method("eugen-zipnerf", ZipNeRFEUGenConfig())
dense_zipnerf = zipnerf_method("dense-zipnerf", ZipNeRFEUGenConfig(density_layers=(), view_layers=()))
