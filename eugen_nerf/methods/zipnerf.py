"""``eugen-zipnerf`` and its dense twin ``dense-zipnerf``: Zip-NeRF (multisampled, anti-aliased hash grid,
64-wide density MLP, 256-wide bottleneck and view MLP), EUGen in the bottleneck and view MLP."""

from __future__ import annotations

from nerfstudio.engine.optimizers import AdamOptimizerConfig
from nerfstudio.engine.schedulers import ExponentialDecaySchedulerConfig
from nerfstudio.plugins.types import MethodSpecification

from eugen_nerf.methods.common import layer_summary, object_method_config
from eugen_nerf.models.zipnerf import FIELD_MLPS, ZipNeRFEUGenConfig, ZipNeRFModelConfig

MAX_STEPS = 25_000
"""Zip-NeRF's step budget."""


GRID_LR = 1e-2
"""Zip-NeRF's learning rate (decaying tenfold over MAX_STEPS steps, the default run), kept for the hash grids and
proposal networks."""
MLP_LR = 1e-3
"""The NeRF field's MLPs: a tenth of Zip-NeRF's. At 256 rays a step, 1e-2 saturates the view MLP's sigmoid
(bunny128, 300 steps: sigmoid outputs' std 0.49, a red-and-black speckled object; at 1e-3, 0.31 and the
object's brown)."""


TRAIN_SCALES = (1, 2, 4)
"""Training rays at full, half and quarter resolution, made from the full-resolution images (Zip-NeRF's and
mip-NeRF's multiscale training): the scale-aware grid learns the footprints it is tested on."""


def _adam(lr: float) -> dict:
    """Zip-NeRF's optimiser: Adam (0.9, 0.99, eps 1e-15), the learning rate decaying tenfold over MAX_STEPS steps
    (a shorter --max-num-iterations stops it part-way: 10,000 steps end at 40% of the start)."""
    return {
        "optimizer": AdamOptimizerConfig(lr=lr, eps=1e-15),
        "scheduler": ExponentialDecaySchedulerConfig(lr_final=lr / 10, max_steps=MAX_STEPS),
    }


def zipnerf_method(method_name: str, eugen: ZipNeRFEUGenConfig) -> MethodSpecification:
    """Zip-NeRF at the reference sizes; 4096 rays a step (the reference uses 65536 on 8 accelerators), the
    field's MLPs at a tenth of the grid's learning rate (:data:`MLP_LR`), multiscale rays (:data:`TRAIN_SCALES`;
    ``--pipeline.datamanager.train-scales 1`` trains at full resolution only)."""
    config = object_method_config(
        method_name,
        model=ZipNeRFModelConfig(eugen=eugen),
        optimizers={"proposal_networks": _adam(GRID_LR), "fields": _adam(GRID_LR), FIELD_MLPS: _adam(MLP_LR)},
        max_num_iterations=MAX_STEPS,
        train_num_rays_per_batch=4096,
    )
    config.pipeline.datamanager.train_scales = TRAIN_SCALES
    layers = layer_summary({"density MLP": tuple(eugen.density_layers), "view MLP": tuple(eugen.view_layers)})
    return MethodSpecification(
        config=config,
        description="Zip-NeRF (multisampled anti-aliased hash grid, trained on rays at "
        f"{', '.join(f'1/{s}' for s in TRAIN_SCALES)} resolution made from the images); {layers}",
    )


eugen_zipnerf = zipnerf_method("eugen-zipnerf", ZipNeRFEUGenConfig())
dense_zipnerf = zipnerf_method("dense-zipnerf", ZipNeRFEUGenConfig(density_layers=(), view_layers=()))
