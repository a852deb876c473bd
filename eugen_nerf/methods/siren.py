"""``eugen-siren`` and its dense twin ``dense-siren``: NeRF whose position trunk is a SIREN."""

from __future__ import annotations

from typing import Literal

from nerfstudio.engine.optimizers import AdamOptimizerConfig
from nerfstudio.plugins.types import MethodSpecification

from eugen_nerf.fields.siren import SirenEUGenSpec
from eugen_nerf.methods.common import object_method_config
from eugen_nerf.models.siren import SirenNeRFModelConfig

FIELDS_LR = 2e-4
"""Adam learning rate of the fields (between SIREN's 1e-4 and NeRF's 5e-4; not tuned on NeRF scenes)."""


def siren_method(method_name: str, layers: Literal["dense", "eugen"]) -> MethodSpecification:
    """SIREN trunk (256 wide, 3 hidden layers, ω₀ = 30) in NeRF's coarse + fine model, 1024 rays per batch."""
    spec = SirenEUGenSpec()
    config = object_method_config(
        method_name,
        model=SirenNeRFModelConfig(layers=layers, siren=spec),
        optimizers={
            "fields": {"optimizer": AdamOptimizerConfig(lr=FIELDS_LR, eps=1e-15), "scheduler": None},
            "projections": {
                "optimizer": AdamOptimizerConfig(lr=FIELDS_LR * spec.projection_lr_scale, eps=1e-15),
                "scheduler": None,
            },
        },
        max_num_iterations=100_000,
        train_num_rays_per_batch=1024,
    )
    hidden = (
        "hidden layers A·sin(ωGx⁺)+c with k=1 and trainable G: a width-m SIREN layer with a factorised "
        "weight (no frozen random features, no polynomial products)"
        if layers == "eugen"
        else "sine hidden layers (the dense twin)"
    )
    return MethodSpecification(config=config, description=f"NeRF with a SIREN trunk; {hidden}")


eugen_siren = siren_method("eugen-siren", "eugen")
dense_siren = siren_method("dense-siren", "dense")
