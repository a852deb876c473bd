"""nerfstudio viewer elements of EUGen models: fused vs unfused inference.

nerfstudio's viewer finds :class:`~nerfstudio.viewer.viewer_elements.ViewerElement` attributes anywhere
under the pipeline (``parse_object`` walks attributes and child modules), so the elements are stored as
plain attributes of the model: they show under "Custom Elements" in ``ns-viewer`` and ``ns-train --vis
viewer`` with no change to nerfstudio. The viewer re-renders after every element callback. A student and its
teacher are compared side by side by ``eugen-viewer`` (:mod:`eugen_nerf.viewer.compare`).
"""

from __future__ import annotations

from nerfstudio.viewer.viewer_elements import ViewerCheckbox
from torch import nn

from eugen_nerf.layers import EUGenMLP

FUSED_LABEL = "EUGen fused inference"


def eugen_mlps(model: nn.Module) -> list[EUGenMLP]:
    """The model's :class:`EUGenMLP` with at least one EUGen layer."""
    return [m for m in model.modules() if isinstance(m, EUGenMLP) and m.has_eugen]


def set_fused(model: nn.Module, fused: bool) -> None:
    """Run every EUGen MLP of ``model`` in its fused (``True``) or layer-by-layer form in eval mode."""
    for mlp in eugen_mlps(model):
        mlp.fuse_in_eval = fused


def add_eugen_viewer_controls(model: nn.Module) -> None:
    """Give ``model`` its viewer elements; call it at the end of ``populate_modules`` (or after building).

    * ``eugen_fused_inference``: a checkbox over ``fuse_in_eval`` of the model's EUGen MLPs, added when
      it has any, so that the fused form's speed and output can be checked against the unfused one.
    """
    mlps = eugen_mlps(model)
    if mlps:
        model.eugen_fused_inference = ViewerCheckbox(
            FUSED_LABEL,
            default_value=all(mlp.fuse_in_eval for mlp in mlps),
            cb_hook=lambda element: set_fused(model, element.value),
            hint="Merged feature-to-feature form of the EUGen layers (eval only); off: layer by layer.",
        )
