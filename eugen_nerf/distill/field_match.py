"""The fine-tune's field loss: the student's fields match the teacher's at the teacher's own ray samples.

A rendered colour is one number per ray, and many fields render it: a student that matches the teacher's colours
on the training rays can still put its density elsewhere and leave floaters on new cameras. The teacher is an
unlimited supervisor of more than colour. Each step, the untouched teacher renders the batch with its fields
recorded (the samples each field saw and what it returned); its rendered colour of the batch is the colour
target, so rays need no target rendered ahead (novel cameras cost nothing until they are drawn). The student's
field of the same name then evaluates the same samples, and the loss compares them where the picture is made:

- colour, weighted by the teacher's rendering weight ``T·α`` of the sample;
- opacity ``α = 1 − exp(−σδ)``, weighted by the teacher's transmittance ``T`` (a sample in front of the surface,
  where a floater would show, weighs 1; one behind it, 0).

Fields are recorded by wrapping their ``forward`` on the instance for the teacher's render: nerfstudio's models
call ``field.forward(...)`` directly, which module hooks do not see.
"""

from __future__ import annotations

import contextlib
from typing import Dict, Iterator, List, Tuple

import torch
from nerfstudio.cameras.rays import RayBundle, RaySamples
from nerfstudio.field_components.field_heads import FieldHeadNames
from nerfstudio.fields.base_field import Field
from torch import Tensor

from eugen_nerf.eval.runs import final_rgb


def named_fields(model: torch.nn.Module) -> Dict[str, Field]:
    """Every nerfstudio field of ``model`` by module path (``field_coarse``, ``field_fine``, ``field``, ...)."""
    return {name: module for name, module in model.named_modules() if isinstance(module, Field)}


@contextlib.contextmanager
def recorded_fields(model: torch.nn.Module) -> Iterator[List[Tuple[str, RaySamples, Dict]]]:
    """Within the block, each ``forward`` of a field of ``model`` appends (its path, the samples, its outputs)."""
    records: List[Tuple[str, RaySamples, Dict]] = []
    fields = named_fields(model)

    def recording(name: str, field: Field):
        def forward(ray_samples: RaySamples, *args, **kwargs):
            outputs = type(field).forward(field, ray_samples, *args, **kwargs)
            records.append((name, ray_samples, outputs))
            return outputs
        return forward

    for name, field in fields.items():
        field.forward = recording(name, field)
    try:
        yield records
    finally:
        for field in fields.values():
            del field.forward  # the class's forward again


def opacity(density: Tensor, ray_samples: RaySamples) -> Tensor:
    """``α = 1 − exp(−σδ)`` of each sample."""
    return 1.0 - torch.exp(-density * ray_samples.deltas)


def field_match(teacher: torch.nn.Module, student: torch.nn.Module, rays: RayBundle) -> Tuple[Tensor, Tensor]:
    """The teacher's final colour of ``rays`` (its render of this batch, the colour target), and the weighted
    mismatch of the student's fields against the teacher's at the teacher's samples (summed over fields; per ray,
    colour weighted by ``T·α``, opacity by ``T``), differentiable in the student."""
    student_fields = named_fields(student)
    with torch.no_grad(), recorded_fields(teacher) as records:
        colour = final_rgb(teacher(rays))
    if not records:
        raise ValueError("the teacher rendered without calling a nerfstudio field: no field to match")
    loss = torch.zeros((), device=rays.origins.device)
    for name, samples, taught in records:
        if name not in student_fields:
            raise ValueError(f"the student has no field {name!r} to match the teacher's")
        learnt = student_fields[name](samples)
        with torch.no_grad():
            alpha_taught = opacity(taught[FieldHeadNames.DENSITY], samples)
            transmittance = torch.cumprod(torch.cat([torch.ones_like(alpha_taught[..., :1, :]),
                                                     1.0 - alpha_taught[..., :-1, :]], dim=-2), dim=-2)
            weights = transmittance * alpha_taught
        alpha_learnt = opacity(learnt[FieldHeadNames.DENSITY], samples)
        rgb = (weights * (learnt[FieldHeadNames.RGB] - taught[FieldHeadNames.RGB]).square()).sum(-2).mean()
        density = (transmittance * (alpha_learnt - alpha_taught).square()).sum(-2).mean()
        loss = loss + rgb + density
    return colour, loss
