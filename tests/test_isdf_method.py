"""``eugen-isdf`` / ``dense-isdf`` through nerfstudio's pipeline on the RGB-D scene: depth reaches the model,
a few CPU steps lower the loss, and rendering gives depth and normals."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from _tiny import train_steps

from eugen_nerf.methods.isdf import dense_isdf, eugen_isdf
from eugen_nerf.models.isdf import ISDFModel
from eugen_nerf.scenes import shipped_scene

pytestmark = pytest.mark.usefixtures("one_thread")


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

    def rays_carry_depth(step: int) -> None:
        ray_bundle, batch = pipeline.datamanager.next_train(step)
        assert torch.equal(ray_bundle.metadata["depth"], batch["depth_image"])

    losses = train_steps(config, pipeline, 24, before_step=rays_carry_depth)
    assert sum(losses[-3:]) < 0.85 * sum(losses[:3]), losses
    pipeline.eval()
    camera = pipeline.datamanager.eval_dataset.cameras[0:1]
    outputs = model.get_outputs_for_camera(camera)
    assert outputs["depth"].shape == (96, 96, 1) and outputs["rgb"].shape == (96, 96, 3)
    metrics, images = model.get_image_metrics_and_images(outputs, pipeline.datamanager.eval_dataset[0])
    assert 0.0 <= metrics["hit_agreement"] <= 1.0 and set(images) == {"depth", "normals"}


def test_eugen_eval_scores_an_isdf_run_on_geometry(tmp_path) -> None:
    """``eugen-eval`` reports SDF error, Chamfer and F-score (not image metrics) for iSDF runs."""
    import jsonschema

    from eugen_nerf.eval.evaluate import EvalSettings, evaluate_configs
    from eugen_nerf.eval.report import SCHEMA, build_report

    torch.manual_seed(0)
    config = copy.deepcopy(eugen_isdf.config)
    config.data = config.pipeline.datamanager.data = shipped_scene("bunny_rgbd")
    config.pipeline.datamanager.train_num_rays_per_batch = 128
    config.pipeline.model.sdf.width = 32
    config.pipeline.model.sdf.eugen.num_features = 8
    config.pipeline.model.num_render_samples = 16
    config.output_dir, config.experiment_name, config.timestamp = tmp_path, "isdf", "run"
    config.max_num_iterations = 10
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**9
    config.vis = "tensorboard"
    config.save_config()
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    trainer.train()

    settings = EvalSettings(warmup=0, repeats=1, field_points=1024, max_views=1)
    (entry,) = evaluate_configs([config.get_base_dir() / "config.yml"], settings)
    metrics = entry["metrics"]
    assert "psnr" not in metrics and metrics["f_score_threshold"] == 0.02
    assert 0 < metrics["sdf_error"]["mean"] < 1
    if metrics["mesh_reason"] is None:  # a surface was found: mesh metrics are real numbers
        assert metrics["chamfer"]["mean"] > 0 and 0 <= metrics["f_score"]["mean"] <= 1
    else:  # ten steps may leave no zero crossing: then no made-up mesh metric, and the reason
        assert (
            metrics["chamfer"] is None
            and metrics["f_score"] is None
            and "zero crossing" in metrics["mesh_reason"]
        )
    assert entry["speed"]["field_points_per_second"] > 0 and entry["speed"]["render_fps"] > 0
    jsonschema.validate(build_report([entry], vars(settings), torch.device("cpu")), SCHEMA)


def test_the_sampling_range_is_the_scenes(tmp_path) -> None:
    """The room is sampled and rendered from 0.05 to 3.5 units as its scene.json says (a fixed 2-6 range put
    every sample behind its walls); an option given on the command line wins."""
    from eugen_nerf.inputs.errors import InputError

    config = copy.deepcopy(eugen_isdf.config)
    config.pipeline.datamanager.data = shipped_scene("room_rgbd")
    config.pipeline.model.sdf.width = 16
    model = config.pipeline.setup(device="cpu", test_mode="val").model
    assert (model.sampling.near, model.sampling.far) == (0.05, 3.5)
    assert (model.collider.near_plane, model.collider.far_plane) == (0.05, 3.5)
    config.pipeline.model.sampling.far = 3.0
    assert config.pipeline.setup(device="cpu", test_mode="val").model.sampling.far == 3.0
    config.pipeline.model.sampling.near = 4.0  # beyond the far plane: one line, no traceback
    with pytest.raises(InputError, match="near plane 4.0 and far plane 3.0 need 0 <= near < far"):
        config.pipeline.setup(device="cpu", test_mode="val")


def test_a_scene_without_depth_is_refused() -> None:
    """nerfstudio's DepthDataset would download a monocular depth network for it; iSDF needs measured depth."""
    from eugen_nerf.scenes import SceneError

    config = copy.deepcopy(eugen_isdf.config)
    config.pipeline.datamanager.data = Path(__file__).resolve().parents[1] / "scenes" / "shiny128"
    with pytest.raises(SceneError, match="its frames have no depth maps"):
        config.pipeline.setup(device="cpu", test_mode="val")
