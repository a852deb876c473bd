"""What our models share about the data's framing: near/far, background and scene contraction.

The datamanager (:mod:`eugen_nerf.scenes.datamanager`) chooses a :class:`Framing` from the data; each model
config has ``near_plane``, ``far_plane``, ``background_color`` and ``disable_scene_contraction`` whose default
(``None`` / ``"auto"``) keeps the data's choice and any other value overrides it. The mixin also renders
cameras without nerfstudio's per-bundle indexing warning (scoped, see :mod:`eugen_nerf.scenes.quiet`).
"""

from __future__ import annotations

from typing import Optional

import torch
from nerfstudio.cameras.rays import RaySamples
from nerfstudio.field_components.spatial_distortions import SceneContraction
from nerfstudio.utils.rich_utils import CONSOLE

from eugen_nerf.scenes.framing import FRAMING_KEY, OBJECT_DEFAULT, Framing
from eugen_nerf.scenes.quiet import quiet_camera_indexing


def check_planes(near: Optional[float], far: Optional[float]) -> None:
    """Config check: explicit planes must satisfy 0 <= near < far."""
    if near is not None and near < 0:
        raise ValueError(f"near-plane must be >= 0, got {near}")
    if near is not None and far is not None and not near < far:
        raise ValueError(f"near-plane {near} must be smaller than far-plane {far}")


class FramedModelMixin:
    """For nerfstudio ``Model`` subclasses: the data's framing with command-line overrides."""

    def data_framing(
        self,
        near: Optional[float],
        far: Optional[float],
        background: str,
        disable_contraction: Optional[bool],
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
