"""Tests that look at the picture: a short ``ns-train`` run must render the object in its own colours.

PSNR alone can hide a black object on a white background (the silhouette right, every colour
at the sigmoid's floor). Here a method trains through nerfstudio's own ``Trainer`` (the ``ns-train`` path:
its optimisers, schedulers and callbacks), renders a held-out view, and the object's pixels (where the
ground truth is not background) are compared channel by channel with the ground truth's: the mean colour
must be close and the channels must differ as the ground truth's do (a grey render fails).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from _tiny import small_method_config

REPO = Path(__file__).resolve().parents[1]
SCENE = REPO / "scenes" / "bunny64"


def train_and_render(method: str, steps: int, tmp_path: Path, **model_overrides):
    """Train ``method`` on bunny64 for ``steps`` through nerfstudio's Trainer; return (render, ground truth)."""
    config = small_method_config(method, **model_overrides)
    config.vis = "tensorboard"
    config.output_dir = tmp_path
    config.timestamp = "test"
    config.max_num_iterations = steps
    config.steps_per_save = config.steps_per_eval_image = config.steps_per_eval_batch = 10**9
    config.steps_per_eval_all_images = 10**9
    config.pipeline.datamanager.data = SCENE
    # every generator the training touches (nerfstudio's samplers draw from torch, numpy and random), so the
    # result does not depend on which tests ran before in the same process
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    from nerfstudio.engine.callbacks import TrainingCallbackLocation

    for step in range(steps):  # Trainer.train's loop without its writers and saves: the callbacks run too
        trainer.pipeline.train()
        for callback in trainer.callbacks:
            callback.run_callback_at_location(step, location=TrainingCallbackLocation.BEFORE_TRAIN_ITERATION)
        trainer.train_iteration(step)
        for callback in trainer.callbacks:
            callback.run_callback_at_location(step, location=TrainingCallbackLocation.AFTER_TRAIN_ITERATION)
    pipeline = trainer.pipeline
    pipeline.eval()
    camera, batch = pipeline.datamanager.next_eval_image(0)
    with torch.no_grad():
        rgb = pipeline.model.get_outputs_for_camera(camera)["rgb"]
    truth = pipeline.model.renderer_rgb.blend_background(batch["image"].to(rgb.device))
    return rgb, truth


def assert_object_colours_match(rgb: torch.Tensor, truth: torch.Tensor, tolerance: float) -> None:
    """The object's mean colour is within ``tolerance`` of the truth's per channel, and it is not grey."""
    assert torch.isfinite(rgb).all()
    obj = (truth - 1.0).abs().amax(dim=-1) > 0.1  # white background: anything visibly not white
    assert obj.float().mean() > 0.05, "the test view shows too little of the object"
    ours, theirs = rgb[obj].mean(dim=0), truth[obj].mean(dim=0)
    assert (ours - theirs).abs().max() < tolerance, (
        f"object colour {ours.tolist()} vs truth {theirs.tolist()}"
    )
    spread_truth = float(theirs.max() - theirs.min())
    spread_ours = float(ours.max() - ours.min())
    assert spread_ours > 0.5 * spread_truth, (
        f"grey object: channel spread {spread_ours:.3f} vs {spread_truth:.3f}"
    )


def test_eugen_nerfacto_renders_the_object_in_colour(tmp_path, one_thread):
    rgb, truth = train_and_render("eugen-nerfacto", 120, tmp_path)
    assert_object_colours_match(rgb, truth, tolerance=0.12)


@pytest.mark.slow
@pytest.mark.parametrize(
    "method, steps",
    [
        ("dense-nerfacto", 300),
        ("eugen-nerfacto", 300),
        ("dense-nerf", 1000),
        ("eugen-nerf", 1000),
        ("dense-siren", 1000),
        ("eugen-siren", 1000),
    ],
)
def test_every_method_renders_the_object_in_colour(method, steps, tmp_path, one_thread):
    rgb, truth = train_and_render(method, steps, tmp_path)
    assert_object_colours_match(rgb, truth, tolerance=0.08)
