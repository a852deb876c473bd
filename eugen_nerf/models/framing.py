"""What our models share about the data's framing: near/far, background and scene contraction.

The datamanager (:mod:`eugen_nerf.scenes.datamanager`) chooses a :class:`Framing` from the data; each model
config has ``near_plane``, ``far_plane``, ``background_color`` and ``disable_scene_contraction`` whose default
(``None`` / ``"auto"``) keeps the data's choice and any other value overrides it. Models whose fields read raw
positions render in the object's frame (:attr:`FramedModelMixin.renders_in_object_frame`). The mixin also
renders cameras without nerfstudio's per-bundle indexing warning (scoped, see :mod:`eugen_nerf.scenes.quiet`).
"""

from __future__ import annotations

import dataclasses

import torch
from nerfstudio.cameras.rays import RayBundle, RaySamples
from nerfstudio.field_components.spatial_distortions import SceneContraction
from nerfstudio.utils.rich_utils import CONSOLE

from eugen_nerf.scenes.framing import FRAMING_KEY, OBJECT_DEFAULT, Framing
from eugen_nerf.scenes.quiet import quiet_camera_indexing


def check_planes(near: float | None, far: float | None) -> None:
    """Config check: explicit planes must satisfy 0 <= near < far."""
    if near is not None and near < 0:
        raise ValueError(f"near-plane must be >= 0, got {near}")
    if near is not None and far is not None and not near < far:
        raise ValueError(f"near-plane {near} must be smaller than far-plane {far}")


def check_collider(config, reads_collider_params: bool) -> None:
    """Config check: nerfstudio's collider options these models would ignore. Every ray is clipped to the
    model's near and far planes; ``collider_params`` is read only where ``reads_collider_params``."""
    if not config.enable_collider:
        raise ValueError(
            "enable-collider False is not supported: rays are always clipped to the near and far planes "
            "(--pipeline.model.near-plane/far-plane)"
        )
    if not reads_collider_params and dict(config.collider_params or {}) != {
        "near_plane": 2.0,
        "far_plane": 6.0,
    }:
        raise ValueError(
            "collider-params is not read by this model: set --pipeline.model.near-plane/far-plane instead"
        )


def to_object_frame(ray_bundle: RayBundle, framing: Framing) -> RayBundle:
    """``ray_bundle`` moved to the object's frame: origins ``(o - origin) / unit``, nears and fars ``/ unit``
    (directions and the pixel area at unit distance do not change)."""
    origin = torch.tensor(framing.origin, dtype=ray_bundle.origins.dtype, device=ray_bundle.origins.device)
    scaled = {"origins": (ray_bundle.origins - origin) / framing.unit}
    for name in ("nears", "fars"):
        value = getattr(ray_bundle, name)
        if value is not None:
            scaled[name] = value / framing.unit
    return dataclasses.replace(ray_bundle, **scaled)


class FramedModelMixin:
    """For nerfstudio ``Model`` subclasses: the data's framing with command-line overrides."""

    renders_in_object_frame: bool = False
    """Render rays in the object's frame (:class:`Framing` ``origin``/``unit``): for fields that read raw
    positions (NeRF's positional encoding, SIREN's sines), whose picture would otherwise depend on the frame
    and scale the poses were written in. Fields normalised by the scene box (nerfacto, Zip-NeRF) keep the
    dataparser's frame."""

    def data_framing(
        self,
        near: float | None,
        far: float | None,
        background: str,
        disable_contraction: bool | None,
    ) -> Framing:
        metadata = self.kwargs.get("metadata") or {}  # type: ignore[attr-defined]
        framing = metadata.get(FRAMING_KEY)
        if framing is None:
            framing = OBJECT_DEFAULT
            CONSOLE.print(f"[yellow]No framing from the datamanager; using the {framing.source}")
        contraction = None if disable_contraction is None else not disable_contraction
        framing = framing.override(near, far, background, contraction)
        self.framing = framing
        return framing

    def collider_planes(self) -> tuple[float, float]:
        """Near and far in the frame the model renders rays in."""
        unit = self.framing.unit if self.renders_in_object_frame else 1.0
        return self.framing.near / unit, self.framing.far / unit

    def forward(self, ray_bundle: RayBundle) -> dict[str, torch.Tensor]:
        framing = getattr(self, "framing", None)
        if not self.renders_in_object_frame or framing is None or not framing.moves_rays:
            return super().forward(ray_bundle)  # type: ignore[misc]
        outputs = super().forward(to_object_frame(ray_bundle, framing))  # type: ignore[misc]
        # depths back in the dataparser's units
        return {
            name: value * framing.unit if name.startswith("depth") else value
            for name, value in outputs.items()
        }

    def get_outputs_for_camera(self, *args, **kwargs):
        with quiet_camera_indexing():
            return super().get_outputs_for_camera(*args, **kwargs)  # type: ignore[misc]


class ContractedSampler(torch.nn.Module):
    """Wraps a ray sampler so that its samples' positions are contracted (mip-NeRF 360, L-inf).

    The contraction is stored as the frustums' ``offsets``, so ``get_positions()`` (what a field reads)
    returns contracted points while starts/ends, and hence weights and depths, stay metric.
    """

    def __init__(self, sampler: torch.nn.Module) -> None:
        super().__init__()
        self.sampler = sampler
        self.contraction = SceneContraction(order=float("inf"))

    def forward(self, *args, **kwargs) -> RaySamples:
        samples = self.sampler(*args, **kwargs)
        positions = samples.frustums.get_positions()
        samples.frustums.set_offsets(self.contraction(positions) - positions)
        return samples
