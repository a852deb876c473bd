"""Optional fine-tune of the student on the teacher's rendered colours: no ground truth needed.

The teacher is an unlimited supervisor: its colours of the distillation's own rays (recorded while they
were first rendered) and of rays from novel cameras near the training ones (rendered by an untouched copy
of the teacher) are the targets. By default every parameter of the student's fields is trained (the dense
layers and the density head adapt to the EUGen layers' inputs, which the closed form cannot do for layers it
did not replace); ``parameters="eugen"`` trains only the EUGen layers' ``A``, ``c`` (and trainable ``G``).
Adam with a cosine-decayed learning rate.
"""

from __future__ import annotations

from typing import List

import torch
from nerfstudio.cameras.rays import RayBundle
from torch import Tensor
from tqdm import tqdm

from eugen_nerf.layers import EUGenLinear

TRAINED_KEYS = ("rgb", "rgb_coarse", "rgb_fine")


def eugen_parameters(model: torch.nn.Module) -> List[torch.nn.Parameter]:
    """``A``, ``c`` (and trainable ``G``) of every EUGen layer of ``model``."""
    return [p for m in model.modules() if isinstance(m, EUGenLinear) for p in m.parameters(recurse=False)]


def field_parameters(model) -> List[torch.nn.Parameter]:
    """Every parameter the model's own training optimises (its param groups), camera optimisation excepted:
    the fields, their heads and proposal networks, never metric networks such as LPIPS."""
    groups = model.get_param_groups()
    return [p for name, params in groups.items() if name != "camera_opt" for p in params]


def finetune(model, rays: RayBundle, targets: Tensor, steps: int, lr: float, batch_rays: int, seed: int,
             device: torch.device, parameters: str = "all", show_progress: bool = True) -> List[float]:
    """Train the student for ``steps`` Adam steps on ``targets[j]``, the teacher's colour of ``rays[j]``;
    return the per-step losses. ``parameters``: one of :data:`~eugen_nerf.distill.options.FINETUNE_PARAMETERS`."""
    params = eugen_parameters(model) if parameters == "eugen" else field_parameters(model)
    if not params:
        raise ValueError("the student has no EUGen layer to fine-tune" if parameters == "eugen"
                         else "the student has no trainable field parameter")
    frozen = {p: p.requires_grad for p in model.parameters()}
    model.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(steps, 1), eta_min=lr * 0.01)
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
                pick = torch.randint(len(rays), (min(batch_rays, len(rays)),), generator=generator)
                outputs = model(rays[pick].to(device))
                target = targets[pick].to(device)
                outputs_seen = {id(outputs[key]): outputs[key] for key in TRAINED_KEYS if key in outputs}
                loss = sum(torch.nn.functional.mse_loss(rgb, target) for rgb in outputs_seen.values())
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                losses.append(float(loss))
    finally:
        model.eval()
        for p, flag in frozen.items():
            p.requires_grad_(flag)
        for p in params:
            p.grad = None
    return losses
