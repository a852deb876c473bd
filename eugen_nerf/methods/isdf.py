"""``eugen-isdf`` and its dense twin ``dense-isdf``: iSDF's SDF trained through ``ns-train`` on an RGB-D scene.

The online, keyframe-based iSDF is the ``eugen-isdf`` command (:mod:`eugen_nerf.isdf.cli`); here batches of
depth pixels from all frames train the same field with the same samples and losses.
"""

from __future__ import annotations

import torch
from nerfstudio.engine.optimizers import AdamOptimizerConfig
from nerfstudio.plugins.types import MethodSpecification

from eugen_nerf.fields.isdf import ISDFFieldConfig, dense_isdf_config
from eugen_nerf.methods.common import layer_summary, object_method_config
from eugen_nerf.models.isdf import ISDFDataManagerConfig, ISDFModelConfig
from eugen_nerf.scenes import dataparser_config


def isdf_method(method_name: str, sdf: ISDFFieldConfig) -> MethodSpecification:
    """iSDF's optimiser (AdamW, lr 1.3e-3, weight decay 0.012); 1024 depth rays per batch."""
    config = object_method_config(
        method_name,
        model=ISDFModelConfig(sdf=sdf),
        optimizers={
            "fields": {
                "optimizer": AdamOptimizerConfig(_target=torch.optim.AdamW, lr=1.3e-3, weight_decay=0.012),
                "scheduler": None,
            }
        },
        max_num_iterations=20_000,
        train_num_rays_per_batch=1024,
    )
    datamanager = config.pipeline.datamanager
    config.pipeline.datamanager = ISDFDataManagerConfig(
        dataparser=dataparser_config(),
        train_num_rays_per_batch=datamanager.train_num_rays_per_batch,
        eval_num_rays_per_batch=datamanager.eval_num_rays_per_batch,
    )
    return MethodSpecification(
        config=config,
        description="iSDF signed-distance field from RGB-D frames; "
        + layer_summary({"MLP": tuple(sdf.eugen.layers)}),
    )


eugen_isdf = isdf_method("eugen-isdf", ISDFFieldConfig())
dense_isdf = isdf_method("dense-isdf", dense_isdf_config())
