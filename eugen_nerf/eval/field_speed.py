"""Field throughput: points per second through the model's radiance field, without the renderer.

The field is timed on its real entry point, ``Field.forward(ray_samples)`` (encodings, density MLP and
colour head together), at random points in the scene box with random unit view directions, batched as
``(points, 1)`` samples from camera 0. That is what "field-MLP points per second" means in the report:
it excludes ray generation, proposal sampling and volume rendering, which the render FPS covers.
The timed field is ``model.field`` if present, else ``model.field_fine`` (vanilla NeRF / mip-NeRF's
fine network), else the first nerfstudio ``Field`` child of the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from eugen_nerf.eval.timing import Timing, benchmark

if TYPE_CHECKING:
    from nerfstudio.cameras.rays import RaySamples

FIELD_ATTRIBUTES = ("field", "field_fine")


class NoFieldError(ValueError):
    """The model has no nerfstudio ``Field`` (e.g. Gaussian splatting)."""


def find_field(model: nn.Module) -> tuple[str, nn.Module]:
    """The attribute name and module of the model's main radiance field."""
    from nerfstudio.fields.base_field import Field

    for name in FIELD_ATTRIBUTES:
        if isinstance(getattr(model, name, None), Field):
            return name, getattr(model, name)
    for name, child in model.named_children():
        if isinstance(child, Field):
            return name, child
    raise NoFieldError(f"{type(model).__name__} has no nerfstudio Field child to time")


def random_ray_samples(
    aabb: torch.Tensor, num_points: int, device: torch.device, seed: int = 0
) -> RaySamples:
    """``(num_points, 1)`` short frustums (length 1e-2) at uniform points of ``aabb``, random directions."""
    from nerfstudio.cameras.rays import Frustums, RaySamples

    generator = torch.Generator().manual_seed(seed)
    low, high = aabb[0].float().cpu(), aabb[1].float().cpu()
    origins = low + (high - low) * torch.rand(num_points, 1, 3, generator=generator)
    directions = torch.nn.functional.normalize(torch.randn(num_points, 1, 3, generator=generator), dim=-1)
    zeros = torch.zeros(num_points, 1, 1)
    frustums = Frustums(
        origins=origins,
        directions=directions,
        starts=zeros,
        ends=zeros + 1e-2,
        pixel_area=zeros + 1e-6,
    )
    samples = RaySamples(frustums=frustums, camera_indices=zeros.long(), deltas=zeros + 1e-2)
    return samples.to(device)


def time_field(
    model: nn.Module, num_points: int, device: torch.device, warmup: int = 1, repeats: int = 5
) -> tuple[str, Timing]:
    """Time one field forward over ``num_points`` points; returns the field's name and the timing."""
    name, field = find_field(model)
    samples = random_ray_samples(model.scene_box.aabb, num_points, device)
    with torch.no_grad():
        timing = benchmark(lambda: field(samples), device, warmup=warmup, repeats=repeats)
    return name, timing
