"""nerfstudio viewer elements of EUGen models: fused vs unfused inference, student vs teacher.

nerfstudio's viewer finds :class:`~nerfstudio.viewer.viewer_elements.ViewerElement` attributes anywhere
under the pipeline (``parse_object`` walks attributes and child modules), so the elements are stored as
plain attributes of the model: they show under "Custom Elements" in ``ns-viewer`` and ``ns-train --vis
viewer`` with no change to nerfstudio. The viewer re-renders after every element callback.

A distilled student's class is its teacher's (possibly a stock nerfstudio model), so the student /
teacher / difference switch wraps the instance's ``get_outputs_for_camera`` rather than a class method.
"""

from __future__ import annotations

from typing import Literal

import torch
from nerfstudio.cameras.cameras import Cameras
from nerfstudio.data.scene_box import OrientedBox
from nerfstudio.viewer.viewer_elements import ViewerCheckbox, ViewerDropdown
from torch import Tensor, nn

from eugen_nerf.eval.panels import difference as difference_image
from eugen_nerf.layers import EUGenMLP

FUSED_LABEL = "EUGen fused inference"
SHOW_LABEL = "show"
ShowChoice = Literal["student", "teacher", "difference"]
SHOW_CHOICES = ("student", "teacher", "difference")


def eugen_mlps(model: nn.Module) -> list[EUGenMLP]:
    """The model's own :class:`EUGenMLP` with at least one EUGen layer (a carried teacher's excluded)."""
    teacher = getattr(model, "teacher", None)
    skip = set(map(id, teacher.modules())) if isinstance(teacher, nn.Module) else set()
    return [m for m in model.modules() if isinstance(m, EUGenMLP) and m.has_eugen and id(m) not in skip]


def set_fused(model: nn.Module, fused: bool) -> None:
    """Run every EUGen MLP of ``model`` in its fused (``True``) or layer-by-layer form in eval mode."""
    for mlp in eugen_mlps(model):
        mlp.fuse_in_eval = fused


def select_outputs(
    choice: ShowChoice, student: dict[str, Tensor], teacher: dict[str, Tensor] | None
) -> dict[str, Tensor]:
    """The outputs the viewer shows for ``choice``; ``difference`` keeps the student's other outputs."""
    if choice == "student":
        return student
    if teacher is None:
        raise ValueError(f"show={choice!r} needs the teacher's outputs")
    if choice == "teacher":
        return teacher
    return {**student, "rgb": difference_image(student["rgb"], teacher["rgb"])}


def add_eugen_viewer_controls(model: nn.Module) -> None:
    """Give ``model`` its viewer elements; call it at the end of ``populate_modules`` (or after building).

    * ``eugen_fused_inference``: a checkbox over ``fuse_in_eval`` of the model's EUGen MLPs, added when
      it has any, so that the fused form's speed and output can be checked against the unfused one.
    * ``eugen_show``: when the model carries a ``teacher`` model, a dropdown rendering the student, the
      teacher, or ``|student - teacher|`` rgb.
    """
    mlps = eugen_mlps(model)
    if mlps:
        model.eugen_fused_inference = ViewerCheckbox(
            FUSED_LABEL,
            default_value=all(mlp.fuse_in_eval for mlp in mlps),
            cb_hook=lambda element: set_fused(model, element.value),
            hint="Merged feature-to-feature form of the EUGen layers (eval only); off: layer by layer.",
        )
    teacher = getattr(model, "teacher", None)
    if hasattr(teacher, "get_outputs_for_camera"):
        model.eugen_show = ViewerDropdown(
            SHOW_LABEL,
            default_value="student",
            options=list(SHOW_CHOICES),
            hint="Render the student, its teacher, or |student - teacher| rgb.",
        )
        _switch_outputs_on_show(model)


def _switch_outputs_on_show(model: nn.Module) -> None:
    """Make ``model.get_outputs_for_camera`` (what the viewer renders) follow ``model.eugen_show``."""
    render_student = model.get_outputs_for_camera

    @torch.no_grad()
    def get_outputs_for_camera(camera: Cameras, obb_box: OrientedBox | None = None) -> dict[str, Tensor]:
        choice = model.eugen_show.value
        student = render_student(camera, obb_box=obb_box) if choice != "teacher" else {}
        teacher = None
        if choice != "student":
            model.teacher.eval()
            teacher = model.teacher.get_outputs_for_camera(camera, obb_box=obb_box)
        return select_outputs(choice, student, teacher)

    model.get_outputs_for_camera = get_outputs_for_camera
