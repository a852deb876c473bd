"""The fine-tune's field loss: the student's fields match the teacher's at the teacher's own ray samples.

A rendered colour is one number per ray, and many fields render it: a student that matches the teacher's colours
on the training rays can still put its density elsewhere and leave floaters on new cameras. The teacher is an
unlimited supervisor of more than colour. Each step, the untouched teacher renders the batch with its fields
recorded (the samples each field saw, how it was called and what it returned); its rendered colour of the batch
is the colour target, so rays need no target rendered ahead (novel cameras cost nothing until they are drawn).
The student's field of the same name then evaluates the same samples, and the loss compares them where the
picture is made:

- colour, weighted by the teacher's rendering weight ``T·α`` of the sample;
- opacity ``α = 1 − exp(−σδ)``, weighted by the teacher's transmittance ``T`` (a sample in front of the surface,
  where a floater would show, weighs 1; one behind it, 0).

Fields are recorded by wrapping their ``forward`` on the instance for the teacher's render: nerfstudio's models
call ``field.forward(...)`` directly, which module hooks do not see. Fields a model reaches only through
``get_density`` (nerfacto's proposal networks, through ``density_fn``) are not recorded, so not matched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NamedTuple

import torch
from nerfstudio.cameras.rays import RayBundle, RaySamples
from nerfstudio.field_components.field_heads import FieldHeadNames
from nerfstudio.fields.base_field import Field
from torch import Tensor

from eugen_nerf.eval.runs import final_rgb

_UNSET = object()


class FieldCall(NamedTuple):
    """One recorded ``forward`` of a field: its module path, its samples, its other arguments, its outputs."""

    name: str
    samples: RaySamples
    args: tuple
    kwargs: dict
    outputs: dict


def named_fields(model: torch.nn.Module) -> dict[str, Field]:
    """Every nerfstudio field of ``model`` by module path (``field_coarse``, ``field_fine``, ``field``, ...)."""
    return {name: module for name, module in model.named_modules() if isinstance(module, Field)}


@contextlib.contextmanager
def recorded_fields(model: torch.nn.Module) -> Iterator[list[FieldCall]]:
    """Within the block, each ``forward`` of a field of ``model`` appends a :class:`FieldCall`; afterwards every
    field has the ``forward`` it had before (its own instance attribute, if it had one)."""
    records: list[FieldCall] = []
    saved = {}

    def recording(name: str, forward):
        def wrapper(ray_samples: RaySamples, *args, **kwargs):
            outputs = forward(ray_samples, *args, **kwargs)
            records.append(FieldCall(name, ray_samples, args, kwargs, outputs))
            return outputs

        return wrapper

    try:
        for name, field in named_fields(model).items():
            saved[name] = (field, field.__dict__.get("forward", _UNSET))
            field.forward = recording(name, field.forward)
        yield records
    finally:
        for field, previous in saved.values():
            if previous is _UNSET:
                del field.forward  # the class's forward again
            else:
                field.forward = previous


def opacity(density: Tensor, ray_samples: RaySamples) -> Tensor:
    """``α = 1 − exp(−σδ)`` of each sample (an infinite density over a zero spacing counts as opaque, not NaN)."""
    return torch.nan_to_num(1.0 - torch.exp(-density * ray_samples.deltas), nan=1.0)


def transmittance_before(alpha: Tensor) -> Tensor:
    """``T`` before each sample of (rays, samples, 1) opacities: the exact product, where nerfstudio's
    ``get_weights_and_transmittance_from_alphas`` adds 1e-7 to every factor."""
    return torch.cumprod(
        torch.cat([torch.ones_like(alpha[..., :1, :]), 1.0 - alpha[..., :-1, :]], dim=-2), dim=-2
    )


def render_and_match_fields(
    teacher: torch.nn.Module, student: torch.nn.Module, rays: RayBundle
) -> tuple[Tensor, Tensor]:
    """The teacher's final colour of ``rays`` (its render of this batch: the colour target), and the weighted
    mismatch of the student's fields against the teacher's at the teacher's samples, differentiable in the student.

    Per field and ray: colour error weighted by ``T·α``, opacity error weighted by ``T``, summed over the samples;
    averaged over the rays, summed over the fields. The student's fields run in the student's mode (training, in
    the fine-tune); a field whose eval mode differs (nerfacto's average appearance embedding) is matched as the
    student trains, against the teacher as it renders."""
    student_fields = named_fields(student)
    with torch.no_grad(), recorded_fields(teacher) as calls:
        colour = final_rgb(teacher(rays))
    if not calls:
        raise ValueError(
            "the teacher rendered without calling a nerfstudio field's forward: no field to match"
        )
    loss = torch.zeros((), device=rays.origins.device)
    for call in calls:
        if call.name not in student_fields:
            raise ValueError(f"the student has no field {call.name!r} to match the teacher's")
        if call.samples.deltas is None or call.samples.deltas.dim() != 3:
            raise ValueError(
                f"field {call.name!r}: samples must be (rays, samples, 1) with spacings to be matched"
            )
        # in the student's own mode: in eval mode an EUGen MLP runs its fused form, which trains nothing
        student_out = student_fields[call.name](call.samples, *call.args, **call.kwargs)
        teacher_out = call.outputs
        with torch.no_grad():
            alpha = opacity(teacher_out[FieldHeadNames.DENSITY], call.samples)
            transmittance = transmittance_before(alpha)
            weights = transmittance * alpha
        student_alpha = opacity(student_out[FieldHeadNames.DENSITY], call.samples)
        colour_error = (student_out[FieldHeadNames.RGB] - teacher_out[FieldHeadNames.RGB]).square()
        colour_loss = (weights * colour_error).sum(-2).mean()
        opacity_loss = (transmittance * (student_alpha - alpha).square()).sum(-2).mean()
        loss = loss + colour_loss + opacity_loss
    return colour, loss
