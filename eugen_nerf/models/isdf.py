"""iSDF through ``ns-train``: the SDF field trained from random batches of posed depth pixels.

The streaming trainer (:mod:`eugen_nerf.isdf.trainer`) is the faithful online iSDF; this model is the
``ns-train`` integration: :class:`ISDFDataManager` reads the scene's depth (nerfstudio's ``DepthDataset``)
and hands each training ray its measured depth in ``ray_bundle.metadata["depth"]``, so ``get_outputs``
draws iSDF's samples and bounds exactly as the streaming trainer does (:mod:`eugen_nerf.isdf.sampling`),
and ``get_loss_dict`` applies iSDF's losses. Batches mix all frames at random: no keyframe buffer.

For evaluation and the viewer the model renders the SDF: the first sign change along each ray gives the
depth, the SDF gradient there the normal (``rgb`` shows the shaded normals).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from nerfstudio.cameras.rays import RayBundle
from nerfstudio.data.datamanagers.base_datamanager import VanillaDataManager, VanillaDataManagerConfig
from nerfstudio.data.datasets.depth_dataset import DepthDataset
from nerfstudio.model_components.scene_colliders import NearFarCollider
from nerfstudio.models.base_model import Model, ModelConfig
from nerfstudio.utils import colormaps
from torch import Tensor
from torch.nn import Parameter

from eugen_nerf.extensions import extend_model
from eugen_nerf.fields.isdf import ISDFField, ISDFFieldConfig
from eugen_nerf.isdf.losses import ISDFLossConfig, isdf_losses
from eugen_nerf.isdf.sampling import RayBatch, SamplingConfig, pc_bounds, sample_distances, sample_points
from eugen_nerf.models.framing import FramedModelMixin, check_collider
from eugen_nerf.scenes.datamanager import FramingMixin
from eugen_nerf.scenes.validate import SceneError


def check_has_depth(outputs, data) -> None:
    """iSDF trains on measured depth: a scene without it is refused in one line (nerfstudio's ``DepthDataset``
    would otherwise download a monocular depth network and train on its relative, not metric, depths)."""
    depths = outputs.metadata.get("depth_filenames")
    if outputs.image_filenames and not depths:
        raise SceneError(
            f"{data}: its frames have no depth maps ('depth_file_path' in transforms.json); iSDF trains on "
            "measured depth (an RGB-D scene such as scenes/bunny_rgbd or scenes/room_rgbd)"
        )


@dataclass
class ISDFDataManagerConfig(VanillaDataManagerConfig):
    """nerfstudio's datamanager over a ``DepthDataset``, passing each ray's depth to the model."""

    _target: type = field(default_factory=lambda: ISDFDataManager)


class ISDFDataManager(FramingMixin, VanillaDataManager[DepthDataset]):
    def create_train_dataset(self) -> DepthDataset:
        check_has_depth(self.train_dataparser_outputs, self.config.data)
        return super().create_train_dataset()

    def create_eval_dataset(self) -> DepthDataset:
        outputs = self.dataparser.get_dataparser_outputs(split=self.test_split)
        check_has_depth(outputs, self.config.data)
        return super().create_eval_dataset()

    def next_train(self, step: int) -> tuple[RayBundle, dict]:
        ray_bundle, batch = super().next_train(step)  # FramingMixin: without the indexing warning
        ray_bundle.metadata["depth"] = batch["depth_image"].to(ray_bundle.origins.device)
        return ray_bundle, batch


@dataclass
class ISDFModelConfig(ModelConfig):
    """iSDF's field, samples and losses; ``sdf.eugen.layers = ()`` is the dense twin."""

    _target: type = field(default_factory=lambda: ISDFModel)
    sdf: ISDFFieldConfig = field(default_factory=ISDFFieldConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    """iSDF's samples; ``near``/``far`` left unset are the scene's (its scene.json's: 0.05 and 3.5 in the room,
    2 and 6 around an object), which also bound the rendered rays."""
    loss: ISDFLossConfig = field(default_factory=ISDFLossConfig)
    num_render_samples: int = 128
    """Uniform samples per ray when rendering depth (the first SDF sign change is refined linearly)."""
    eval_num_rays_per_chunk: int = 1024
    collider_params: dict[str, float] | None = None
    """Near/far planes (``near_plane``, ``far_plane``) of the training samples and of rendering, where
    ``sampling.near``/``sampling.far`` are unset (those win); None: the scene's range."""

    def __post_init__(self) -> None:
        check_collider(self, reads_collider_params=True)


class ISDFModel(FramedModelMixin, Model):
    config: ISDFModelConfig

    def populate_modules(self) -> None:
        # the base Model would build a collider at fixed planes: the scene's range instead (no LPIPS either way)
        config, planes = self.config, self.config.collider_params or {}
        self.data_framing(
            config.sampling.near if config.sampling.near is not None else planes.get("near_plane"),
            config.sampling.far if config.sampling.far is not None else planes.get("far_plane"),
            "auto",
            None,
        )
        near, far = self.collider_planes()
        self.collider = NearFarCollider(near_plane=near, far_plane=far)
        self.sampling = replace(config.sampling, near=near, far=far)
        self.field = ISDFField(self.config.sdf)
        self.generator = torch.Generator().manual_seed(0)
        extend_model(self)  # the viewer's "EUGen fused inference" (eugen_nerf.extensions)

    def evaluate_geometry(self, scene, cameras, settings) -> dict:
        """``eugen-eval``'s report for this run: geometry against the scene's mesh, SDF and render speed."""
        from eugen_nerf.isdf.evaluate import evaluate_geometry_run  # open3d: only when evaluating

        return evaluate_geometry_run(self, scene, cameras, settings)

    def get_param_groups(self) -> dict[str, list[Parameter]]:
        return {"fields": list(self.field.parameters())}

    def get_outputs(self, ray_bundle: RayBundle) -> dict[str, Tensor]:
        if self.training and ray_bundle.metadata and "depth" in ray_bundle.metadata:
            return self.training_outputs(ray_bundle)
        return self.render(ray_bundle)

    def training_outputs(self, ray_bundle: RayBundle) -> dict[str, Tensor]:
        """iSDF's samples along the rays, their bounds from the measured depth, SDF and gradient."""
        depth = ray_bundle.metadata["depth"][..., 0] * ray_bundle.metadata["directions_norm"][..., 0]
        rays = RayBatch(ray_bundle.origins, ray_bundle.directions, depth)
        distances = sample_distances(rays, self.sampling, self.generator)
        points = sample_points(rays, distances)
        sdf, gradient = self.field.sdf_and_gradient(points, create_graph=True)
        return {"sdf": sdf[..., 0], "gradient": gradient, "bounds": pc_bounds(rays, distances, points)}

    def render(self, ray_bundle: RayBundle) -> dict[str, Tensor]:
        """Depth at the first + to - sign change along each ray, normals there, shaded normals as ``rgb``."""
        origins, directions = ray_bundle.origins, ray_bundle.directions
        near = (
            ray_bundle.nears
            if ray_bundle.nears is not None
            else torch.full_like(origins[..., :1], self.sampling.near)
        )
        far = (
            ray_bundle.fars
            if ray_bundle.fars is not None
            else torch.full_like(origins[..., :1], self.sampling.far)
        )
        steps = torch.linspace(0.0, 1.0, self.config.num_render_samples, device=origins.device)
        t = near + (far - near) * steps  # (R, S)
        with torch.no_grad():
            sdf = self.field(origins[:, None] + t[..., None] * directions[:, None])[..., 0]
        crossing = (sdf[:, :-1] > 0) & (sdf[:, 1:] <= 0)
        hit = crossing.any(dim=1)
        first = torch.where(hit, crossing.float().argmax(dim=1), torch.zeros_like(hit, dtype=torch.long))[
            :, None
        ]
        s0, s1 = sdf.gather(1, first), sdf.gather(1, first + 1)
        t0, t1 = t.gather(1, first), t.gather(1, first + 1)
        depth = torch.where(hit[:, None], t0 + (t1 - t0) * s0 / (s0 - s1).clamp(min=1e-8), far)
        _, gradient = self.field.sdf_and_gradient(origins + depth * directions, create_graph=False)
        normals = torch.nn.functional.normalize(gradient, dim=-1) * hit[:, None]
        accumulation = hit[:, None].float()
        outputs = {
            "depth": depth,
            "accumulation": accumulation,
            "normals": normals,
            "rgb": (0.5 + 0.5 * normals) * accumulation + (1.0 - accumulation),
        }
        if ray_bundle.metadata and "directions_norm" in ray_bundle.metadata:
            # the depth sensor's convention
            outputs["z_depth"] = depth / ray_bundle.metadata["directions_norm"]
        return outputs

    def get_loss_dict(self, outputs, batch, metrics_dict=None) -> dict[str, Tensor]:
        losses = isdf_losses(outputs["sdf"], outputs["gradient"], outputs["bounds"], self.config.loss)
        return {"sdf_loss": losses["sdf"].mean(), "eikonal_loss": losses["eikonal"].mean()}

    def get_metrics_dict(self, outputs, batch) -> dict[str, Tensor]:
        if "sdf" not in outputs:
            return {}
        return {"gradient_norm": outputs["gradient"].detach().norm(dim=-1).mean()}

    def get_image_metrics_and_images(
        self, outputs: dict[str, Tensor], batch: dict[str, Tensor]
    ) -> tuple[dict[str, float], dict[str, Tensor]]:
        """Depth error (metres, z-depth) on pixels with a measurement, the depth map and the normals."""
        measured = batch["depth_image"].to(outputs["depth"].device)
        height, width = measured.shape[:2]
        valid = (measured > 0) & (outputs["accumulation"] > 0)
        metrics = {"hit_agreement": float(((measured > 0) == (outputs["accumulation"] > 0)).float().mean())}
        if "z_depth" in outputs and valid.any():
            metrics["depth_abs_error"] = float((outputs["z_depth"] - measured).abs()[valid].mean())
        near, far = self.sampling.near, self.sampling.far
        images = {
            "depth": torch.cat(
                [
                    colormaps.apply_depth_colormap(measured.clamp(min=near), near_plane=near, far_plane=far),
                    colormaps.apply_depth_colormap(outputs["depth"], near_plane=near, far_plane=far),
                ],
                dim=1,
            ),
            "normals": outputs["rgb"].reshape(height, width, 3),
        }
        return metrics, images
