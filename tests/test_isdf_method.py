"""``eugen-isdf`` / ``dense-isdf`` through nerfstudio's pipeline on the RGB-D scene: depth reaches the model,
a few CPU steps lower the loss, and rendering gives depth and normals."""

from __future__ import annotations

import copy

import pytest
import torch
from nerfstudio.engine.optimizers import Optimizers

from eugen_nerf.methods.isdf import dense_isdf, eugen_isdf
from eugen_nerf.models.isdf import ISDFModel
from eugen_nerf.scenes import shipped_scene


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("spec", [eugen_isdf, dense_isdf], ids=["eugen", "dense"])
def test_isdf_method_trains_and_renders(spec) -> None:
    torch.manual_seed(0)
    config = copy.deepcopy(spec.config)
    config.pipeline.datamanager.data = shipped_scene("bunny_rgbd")
    config.pipeline.datamanager.train_num_rays_per_batch = 128
    config.pipeline.model.sdf.width = 32
    config.pipeline.model.sdf.eugen.num_features = 8
    config.pipeline.model.num_render_samples = 16
    pipeline = config.pipeline.setup(device="cpu", test_mode="val")
    model = pipeline.model
    assert isinstance(model, ISDFModel) and model.field.mlp.has_eugen == (spec is eugen_isdf)
    optimizers = Optimizers(config.optimizers, pipeline.get_param_groups())
    losses = []
    for step in range(12):
        ray_bundle, batch = pipeline.datamanager.next_train(step)
        assert torch.equal(ray_bundle.metadata["depth"], batch["depth_image"])
        _, loss_dict, _ = pipeline.get_train_loss_dict(step)
        loss = sum(loss_dict.values())
        optimizers.zero_grad_all()
        loss.backward()
        optimizers.optimizer_step_all()
        losses.append(float(loss.detach()))
    assert sum(losses[-3:]) < 0.85 * sum(losses[:3]), losses
    pipeline.eval()
    camera = pipeline.datamanager.eval_dataset.cameras[0:1]
    outputs = model.get_outputs_for_camera(camera)
    assert outputs["depth"].shape == (96, 96, 1) and outputs["rgb"].shape == (96, 96, 3)
    metrics, images = model.get_image_metrics_and_images(outputs, pipeline.datamanager.eval_dataset[0])
    assert 0.0 <= metrics["hit_agreement"] <= 1.0 and set(images) == {"depth", "normals"}
