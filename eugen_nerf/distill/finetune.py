"""Optional short fine-tune of the student's EUGen layers on the teacher's rendered colours.

Only the EUGen layers' ``A``, ``c`` (and ``G`` when trainable) are trained, with Adam, on random
batches of the distillation's own rays; the targets are the teacher's colours recorded while those
rays were first rendered, so no ground-truth image is needed.
"""

from __future__ import annotations

from typing import List

import torch
from torch import Tensor
from tqdm import tqdm

from eugen_nerf.distill.sampling import RaySet
from eugen_nerf.layers import EUGenLinear

TRAINED_KEYS = ("rgb", "rgb_coarse", "rgb_fine")


def eugen_parameters(model: torch.nn.Module) -> List[torch.nn.Parameter]:
    """``A``, ``c`` (and trainable ``G``) of every EUGen layer of ``model``."""
    return [p for m in model.modules() if isinstance(m, EUGenLinear) for p in m.parameters(recurse=False)]


def finetune(model, rays: RaySet, ray_indices: Tensor, teacher_rgb: Tensor, steps: int, lr: float,
             batch_rays: int, seed: int, device: torch.device, show_progress: bool = True) -> List[float]:
    """Train the EUGen layers for ``steps`` Adam steps; return the per-step losses.

    ``teacher_rgb[j]`` is the teacher's colour of ray ``ray_indices[j]`` of ``rays``.
    """
    params = eugen_parameters(model)
    if not params:
        raise ValueError("the student has no EUGen layer to fine-tune")
    frozen = {p: p.requires_grad for p in model.parameters()}
    model.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    # In train mode nerfstudio's samplers jitter with the global generator: seed it from ``seed``, in a fork that
    # leaves the caller's state alone, so that the student depends on the options only (bit-identical reruns).
    forked = [torch.device(device)] if torch.device(device).type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=forked):
            torch.manual_seed(seed)
            for _ in tqdm(range(steps), desc="fine-tune", disable=not show_progress, leave=False):
                pick = torch.randint(len(ray_indices), (min(batch_rays, len(ray_indices)),), generator=generator)
                outputs = model(rays.rays[ray_indices[pick]].to(device))
                target = teacher_rgb[pick].to(device)
                outputs_seen = {id(outputs[key]): outputs[key] for key in TRAINED_KEYS if key in outputs}
                loss = sum(torch.nn.functional.mse_loss(rgb, target) for rgb in outputs_seen.values())
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(float(loss))
    finally:
        model.eval()
        for p, flag in frozen.items():
            p.requires_grad_(flag)
        for p in params:
            p.grad = None
    return losses
