"""The smallest configurations of our methods that learn the shipped bunny in a few dozen CPU iterations,
shared by the tests that train through nerfstudio's ``Trainer`` in the test process (the colour checks, the
viewers' run)."""

from __future__ import annotations

import copy

SMALL = {
    "nerfacto": {"train_num_rays_per_batch": 256, "num_proposal_samples_per_ray": (32, 16),
                 "num_nerf_samples_per_ray": 16, "log2_hashmap_size": 14, "max_res": 128},
    "nerf": {"train_num_rays_per_batch": 256, "num_coarse_samples": 16, "num_importance_samples": 16,
             "trunk_width": 64, "head_width": 32},
    "siren": {"train_num_rays_per_batch": 256},
}
"""Per method family (the part of the method's name after ``eugen-``/``dense-``)."""


def small_method_config(method: str, **model_overrides):
    """A copy of ``method``'s registered ``TrainerConfig`` on the CPU in fp32 at :data:`SMALL`'s sizes (then
    ``model_overrides``); the rest (data, output, steps) is the caller's."""
    from nerfstudio.plugins.registry import discover_methods

    config = copy.deepcopy(discover_methods()[0][method])
    config.machine.device_type = "cpu"
    config.mixed_precision = False
    for key, value in {**SMALL[method.split("-", 1)[1]], **model_overrides}.items():
        target = config.pipeline.datamanager if key == "train_num_rays_per_batch" else config.pipeline.model
        assert hasattr(target, key), key
        setattr(target, key, value)
    return config
