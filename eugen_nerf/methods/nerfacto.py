"""``eugen-nerfacto`` and its dense twin ``dense-nerfacto``: hash grid + proposal sampling, EUGen MLP layers."""

from __future__ import annotations

from nerfstudio.engine.optimizers import AdamOptimizerConfig
from nerfstudio.engine.schedulers import ExponentialDecaySchedulerConfig
from nerfstudio.plugins.types import MethodSpecification

from eugen_nerf.methods.common import layer_summary, object_method_config
from eugen_nerf.models.nerfacto import EUGenNerfactoModelConfig, NerfactoEUGenConfig


def _adam() -> dict:
    """nerfacto's optimiser for fields and proposal networks."""
    return {
        "optimizer": AdamOptimizerConfig(lr=1e-2, eps=1e-15),
        "scheduler": ExponentialDecaySchedulerConfig(lr_final=1e-4, max_steps=200_000),
    }


def nerfacto_method(method_name: str, eugen: NerfactoEUGenConfig) -> MethodSpecification:
    """nerfacto-style field at nerfacto's sizes (16-level hash grid, 64-wide MLPs, 4096 rays)."""
    config = object_method_config(
        method_name,
        model=EUGenNerfactoModelConfig(eugen=eugen),
        optimizers={"proposal_networks": _adam(), "fields": _adam()},
        max_num_iterations=30_000,
        train_num_rays_per_batch=4096,
    )
    layers = layer_summary(
        {"density MLP": tuple(eugen.density_layers), "colour MLP": tuple(eugen.color_layers)}
    )
    return MethodSpecification(config=config, description=f"nerfacto-style hash-grid field; {layers}")


eugen_nerfacto = nerfacto_method("eugen-nerfacto", NerfactoEUGenConfig())
dense_nerfacto = nerfacto_method("dense-nerfacto", NerfactoEUGenConfig(density_layers=(), color_layers=()))
