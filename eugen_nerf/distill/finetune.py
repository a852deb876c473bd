"""Optional fine-tune of the student on what the teacher renders: no ground truth needed.

The teacher is an unlimited supervisor: its colours of the distillation's own rays (recorded while they
were first rendered) and of rays from novel cameras near the training ones (rendered by an untouched copy
of the teacher) are the targets. Given that copy (``--finetune-target fields``), it renders each batch as it is
drawn instead: its colours are the targets and its fields are matched too (:mod:`.field_match`), and part of
every batch can come from new novel cameras each step (``fresh``: no novel camera is trained on twice). By
default every parameter of the student's fields is trained (the dense layers and the density head adapt to the
EUGen layers' inputs, which the closed form cannot do for layers it did not replace); ``parameters="eugen"``
trains only the EUGen layers' ``A``, ``c`` (and trainable ``G``). Adam with a cosine-decayed learning rate.

**Never worse than where it started.** Adam's first steps move every parameter by about the learning rate
whatever the gradient, which can undo a closed form that already renders like the teacher. Given validation rays (the
distillation's held-out cameras, which neither the fit nor the fine-tune sees, and the teacher's render of
``--finetune-validation-views`` novel cameras of their own), their error against the teacher is measured
before the first step and every ``check_every`` steps, and the best state is kept. One held-out camera alone
is too small a check: it can let a fine-tune keep a state that is worse on every test view.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from nerfstudio.cameras.rays import RayBundle
from torch import Tensor
from tqdm import tqdm

from eugen_nerf.distill.field_match import render_and_match_fields
from eugen_nerf.distill.sampling import PixelRays, cat_rays
from eugen_nerf.eval.runs import final_rgb
from eugen_nerf.eval.timing import cpu_denormals_flushed
from eugen_nerf.layers import EUGenLinear

TRAINED_KEYS = ("rgb", "rgb_coarse", "rgb_fine")


def eugen_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """``A``, ``c`` (and trainable ``G``) of every EUGen layer of ``model``."""
    return [p for m in model.modules() if isinstance(m, EUGenLinear) for p in m.parameters(recurse=False)]


def field_parameters(model) -> list[torch.nn.Parameter]:
    """Every parameter the model's own training optimises (its param groups), camera optimisation excepted:
    the fields, their heads and proposal networks, never metric networks such as LPIPS."""
    groups = model.get_param_groups()
    return [p for name, params in groups.items() if name != "camera_opt" for p in params]


@dataclass
class FinetuneLog:
    """Per-step training losses; validation MSE against the teacher by step; the step whose state was kept."""

    losses: list[float] = field(default_factory=list)
    validation: list[tuple[int, float]] = field(default_factory=list)
    kept_step: int | None = None


@contextmanager
def swapped(params: list[torch.nn.Parameter], values: list[Tensor] | None):
    """``params`` hold ``values`` inside the block and their own values after it (``None``: unchanged)."""
    if values is None:
        yield
        return
    with torch.no_grad():
        own = [p.detach().clone() for p in params]
        for p, value in zip(params, values):
            p.copy_(value)
    try:
        yield
    finally:
        with torch.no_grad():
            for p, value in zip(params, own):
                p.copy_(value)


@torch.no_grad()
def validation_mse(model, rays: RayBundle, targets: Tensor, device: torch.device, chunk: int = 4096) -> float:
    """Mean squared error of the model's final colour against ``targets`` (eval mode: no sampler jitter)."""
    model.eval()
    total = 0.0
    for start in range(0, len(rays), chunk):
        outputs = model(rays[start : start + chunk].to(device))
        total += float((final_rgb(outputs) - targets[start : start + chunk].to(device)).square().sum())
    model.train()
    return total / targets.numel()


def finetune(
    model,
    rays: RayBundle | PixelRays,
    targets: Tensor | None,
    steps: int,
    lr: float,
    batch_rays: int,
    seed: int,
    device: torch.device,
    parameters: str = "all",
    show_progress: bool = True,
    validation: tuple[RayBundle, Tensor] | None = None,
    check_every: int = 25,
    teacher: torch.nn.Module | None = None,
    fresh: Callable[[int], RayBundle] | None = None,
    fresh_rays: int = 0,
    average: float = 0.0,
) -> FinetuneLog:
    """Train the student for ``steps`` Adam steps on ``targets[j]``, the teacher's colour of ``rays[j]``; with
    ``validation`` keep the state that renders it best (the starting state included). ``parameters``: one of
    :data:`~eugen_nerf.distill.options.FINETUNE_PARAMETERS`. With ``teacher`` (an untouched copy) the teacher
    renders each batch: its colour is the target (``targets`` is not read and may be ``None``) and the
    student's fields also match the teacher's at its samples (:mod:`~eugen_nerf.distill.field_match`). With
    ``fresh`` (a teacher is needed), ``fresh_rays`` of each step's ``batch_rays`` are drawn from
    ``fresh(step)`` and the rest from ``rays``. With ``average`` > 0 the student validated and kept is an
    exponential moving average of the trained parameters with that decay per step (Polyak averaging: it
    smooths the step-to-step noise of small batches that the cosine decay leaves)."""
    if teacher is None and targets is None:
        raise ValueError("finetune: targets are needed unless a teacher renders them")
    if fresh is not None and teacher is None:
        raise ValueError("finetune: fresh rays need a teacher to render them")
    if fresh is not None and not 0 < fresh_rays < batch_rays:
        raise ValueError(f"finetune: fresh_rays must be in (0, batch_rays = {batch_rays}), got {fresh_rays}")
    pool_rays = batch_rays - fresh_rays if fresh is not None else batch_rays
    if not 0.0 <= average < 1.0:
        raise ValueError(f"finetune: average must be in [0, 1), got {average}")
    params = eugen_parameters(model) if parameters == "eugen" else field_parameters(model)
    if not params:
        raise ValueError(
            "the student has no EUGen layer to fine-tune"
            if parameters == "eugen"
            else "the student has no trainable field parameter"
        )
    frozen = {p: p.requires_grad for p in model.parameters()}
    model.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, max(steps, 1), eta_min=lr * 0.01)
    generator = torch.Generator().manual_seed(seed)
    log = FinetuneLog()
    model.train()
    # its colours as the test renders them, no sampler jitter (jittered targets fine-tune worse)
    if teacher is not None:
        teacher.eval()
    best = None
    averaged = [p.detach().clone() for p in params] if average else None

    def check(step: int) -> None:
        nonlocal best
        if validation is None:
            return
        with swapped(params, averaged):
            error = validation_mse(model, *validation, device)
            log.validation.append((step, error))
            if best is None or error < best[0]:
                best = (error, step, [p.detach().clone() for p in params])

    # In train mode nerfstudio's samplers jitter with the global generator: seed it from ``seed``, in a fork that
    # leaves the caller's state alone, so that the student depends on the options only (bit-identical reruns).
    forked = [torch.device(device)] if torch.device(device).type == "cuda" else []
    try:
        # on the CPU, denormals flushed: a trained field's tiny gradients otherwise slow each step severalfold
        with torch.random.fork_rng(devices=forked), cpu_denormals_flushed(device):
            torch.manual_seed(seed)
            check(0)
            for step in tqdm(range(1, steps + 1), desc="fine-tune", disable=not show_progress, leave=False):
                pick = torch.randint(len(rays), (min(pool_rays, len(rays)),), generator=generator)
                batch = rays[pick]
                if fresh is not None:
                    new = fresh(step)
                    batch = cat_rays(batch, new[torch.randint(len(new), (fresh_rays,), generator=generator)])
                batch = batch.to(device)
                if teacher is not None:
                    target, fields_loss = render_and_match_fields(teacher, model, batch)
                else:
                    target, fields_loss = targets[pick].to(device), 0.0
                outputs = model(batch)
                outputs_seen = {id(outputs[key]): outputs[key] for key in TRAINED_KEYS if key in outputs}
                loss = fields_loss + sum(
                    torch.nn.functional.mse_loss(rgb, target) for rgb in outputs_seen.values()
                )
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                if averaged is not None:
                    with torch.no_grad():
                        for mean, p in zip(averaged, params):
                            mean.lerp_(p, 1.0 - average)
                log.losses.append(float(loss))
                if step % check_every == 0 or step == steps:
                    check(step)
        if best is not None:
            with torch.no_grad():
                for p, saved in zip(params, best[2]):
                    p.copy_(saved)
            log.kept_step = best[1]
        elif averaged is not None:
            with torch.no_grad():
                for p, mean in zip(params, averaged):
                    p.copy_(mean)
    finally:
        model.eval()
        for p, flag in frozen.items():
            p.requires_grad_(flag)
        for p in params:
            p.grad = None
    return log
