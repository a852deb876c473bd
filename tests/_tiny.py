"""The smallest configurations of our methods that learn the shipped bunny in a few dozen CPU iterations,
shared by the tests that train through nerfstudio's ``Trainer`` in the test process (the colour checks, the
viewers' run)."""

from __future__ import annotations

import copy

_NERF_MODEL = {
    "train_num_rays_per_batch": 256,
    "num_coarse_samples": 16,
    "num_importance_samples": 16,
    "trunk_width": 64,
    "head_width": 32,
}
SMALL = {
    "nerfacto": {
        "train_num_rays_per_batch": 256,
        "num_proposal_samples_per_ray": (32, 16),
        "num_nerf_samples_per_ray": 16,
        "log2_hashmap_size": 14,
        "max_res": 128,
    },
    "nerf": _NERF_MODEL,
    "siren": _NERF_MODEL,  # NeRF's model with a SIREN field: the same sizes
}
"""Per method family (the part of the method's name after ``eugen-``/``dense-``)."""
FIELDS_LR = {"nerf": 2e-3}
"""The fields' learning rate per family where the method's own is too slow for a short CPU run: NeRF's paper
rate 5e-4 rendered white fog after 600 tiny steps; 2e-3 is the README's CPU configuration."""


def registered_config(method: str):
    """A copy of ``method``'s registered ``TrainerConfig`` (copied: tests may change it freely)."""
    from nerfstudio.plugins.registry import discover_methods

    return copy.deepcopy(discover_methods()[0][method])


def owner(size: str) -> str:
    """The part of the pipeline's config that holds ``size``: the ray batch is the datamanager's."""
    return "datamanager" if size == "train_num_rays_per_batch" else "model"


def cli_options(sizes: dict) -> list[str]:
    """``sizes`` as ``ns-train`` options, each where :func:`set_sizes` puts it."""
    options = []
    for key, value in sizes.items():
        values = value if isinstance(value, tuple) else (value,)
        options += [f"--pipeline.{owner(key)}.{key.replace('_', '-')}", *map(str, values)]
    return options


def set_sizes(config, sizes: dict, strict: bool = True) -> None:
    """Set ``sizes`` on ``config``'s model (the ray batch on its datamanager); an option the method does not
    have is an error, or skipped with ``strict=False`` (one table for a family whose methods differ)."""
    for key, value in sizes.items():
        target = getattr(config.pipeline, owner(key))
        if hasattr(target, key):
            setattr(target, key, value)
        else:
            assert not strict, key


def small_method_config(method: str, **model_overrides):
    """A copy of ``method``'s registered ``TrainerConfig`` on the CPU in fp32 at :data:`SMALL`'s sizes (then
    ``model_overrides``) and :data:`FIELDS_LR`'s rate; the rest (data, output, steps) is the caller's."""
    config = registered_config(method)
    config.machine.device_type = "cpu"
    config.mixed_precision = False
    family = method.split("-", 1)[1]
    set_sizes(config, {**SMALL[family], **model_overrides})
    if family in FIELDS_LR:
        config.optimizers["fields"]["optimizer"].lr = FIELDS_LR[family]
    return config


def train_steps(config, pipeline, steps: int, before_step=None, after_backward=None) -> list[float]:
    """``steps`` optimisation steps of ``pipeline`` with ``config``'s optimizers, as nerfstudio's ``Trainer``
    takes them without its callbacks; the losses. ``before_step(step)`` and ``after_backward(loss)`` let a test
    check each step."""
    from nerfstudio.engine.optimizers import Optimizers

    optimizers = Optimizers(config.optimizers, pipeline.get_param_groups())
    losses = []
    for step in range(steps):
        if before_step is not None:
            before_step(step)
        _, loss_dict, _ = pipeline.get_train_loss_dict(step)
        loss = sum(loss_dict.values())
        optimizers.zero_grad_all()
        loss.backward()
        if after_backward is not None:
            after_backward(loss)
        optimizers.optimizer_step_all()
        losses.append(float(loss.detach()))
    return losses


CLI_SIZES = {
    "nerf": cli_options({**SMALL["nerf"], "train_num_rays_per_batch": 128}),
    "nerfacto": cli_options(SMALL["nerfacto"]),
}
"""``SMALL`` as ``ns-train`` options, for the tests that train through the command line (NeRF at 128 rays a
batch)."""
