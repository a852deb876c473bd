"""``eugen-fit-image``: fit a SIREN (dense or with EUGen hidden layers) to one image.

SIREN's classic experiment: the network maps pixel coordinates in ``[-1, 1]²`` to pixel values, trained
full-batch with Adam on the MSE (lr 1e-3; the paper's 1e-4 is slower for dense and EUGen alike). The command prints PSNR against steps and the training
throughput (pixels per second), and writes ``reconstruction.png`` and ``history.json``.

The default image is ``skimage.data.camera`` (the cameraman, 512² in skimage) resized to 128² so that a
CPU fits it in minutes; ``--size 256`` is the paper's setting.
"""

from __future__ import annotations

import json
import math
import time
import typing
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

import imageio.v3 as iio
import numpy as np
import torch
from rich.console import Console
from rich.progress import Progress
from torch import Tensor

from eugen_nerf.eval.metrics import psnr
from eugen_nerf.eval.timing import synchronize
from eugen_nerf.fields.siren import SirenEUGenSpec, SirenLayerType, siren_mlp, siren_param_groups
from eugen_nerf.inputs.errors import InputError, NumericalError, one_line_errors
from eugen_nerf.inputs.numerics import check_finite
from eugen_nerf.inputs.options import (
    POSITIVE_INT,
    check_options,
    parse_command_line,
    positive,
    resolve_device,
)
from eugen_nerf.inputs.outputs import refuse_existing, staged_directory
from eugen_nerf.layers import EUGenMLP
from eugen_nerf.layers.eugen import check_choice
from eugen_nerf.siren.image import from_signed, load_image, pixel_grid, to_signed
from eugen_nerf.siren.sine_basis import hold_in_sine_basis, store_weights

CONSOLE = Console()

LrSchedule = Literal["constant", "cosine", "warmup-cosine"]
LR_SCHEDULES = typing.get_args(LrSchedule)


@dataclass
class FitImageConfig:
    """Fit a SIREN to an image and report PSNR against steps and throughput."""

    output: Path = Path("outputs/fit_image")
    """Folder for reconstruction.png and history.json."""
    overwrite: bool = False
    """Replace an earlier fit in --output (its reconstruction.png and history.json)."""
    image: str = "camera"
    """A skimage.data image name (camera, astronaut, ...) or an image file."""
    size: int = 128
    """The image is resized to size x size (256 in the SIREN paper; 128 keeps a CPU fit to minutes)."""
    layers: SirenLayerType = "dense"
    """Hidden layers: SIREN sine layers, EUGen sine-feature layers, or a reviewers' baseline (lowrank: sine
    layers of rank --eugen.lowrank-rank; snnk: ReLU random features of width k·m)."""
    width: int = 256
    """Hidden width (256 in the SIREN paper)."""
    hidden_layers: int = 3
    """Number of hidden layers between the first sine layer and the linear output."""
    eugen: SirenEUGenSpec = field(default_factory=SirenEUGenSpec)
    """EUGen layer hyper-parameters (used with --layers eugen)."""
    steps: int = 500
    """Full-batch training steps (every pixel each step)."""
    lr: float = 1e-3
    """Adam learning rate (SIREN's paper: 1e-4; 1e-3 measured best for both dense and EUGen at 128²)."""
    lr_schedule: LrSchedule = "constant"
    """constant, or cosine: each parameter group's rate (G's larger one included) falls along a cosine towards
    1% of its start, reached after the last step (without it a full-batch fit at a large learning rate
    oscillates, and its last step can sit far below its best); warmup-cosine: the same after a linear rise
    over the first 5% of the steps (Adam's first steps are about ``lr`` in every coordinate whatever the
    gradient's size, and at a large rate they can knock a fit off its start)."""
    log_every: int = 50
    """Print (and record) the PSNR every this many steps."""
    sine_basis: bool = False
    """Experimental, not recommended: on colour images it fits below the dense SIREN.
    Trains every EUGen layer whose output a frozen G reads in the sine
    units' basis: A and c held as V = G A / ω while training, so Adam steps on one entry per pair of sine
    units, as on a dense SIREN's W; A is what is stored and merged. Needs --layers eugen with frozen
    projections; V is m × m a layer while training."""
    seed: int = 0
    """Seed of the initial weights (and EUGen projections)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: CUDA when available, otherwise CPU."""


@dataclass
class FitResult:
    """What a fit reports: PSNR (dB) against steps, throughput, and the reconstruction in [0, 1]."""

    history: list[tuple[int, float]]
    train_seconds: float
    pixels_per_second: float
    final_psnr: float
    num_parameters: int
    reconstruction: np.ndarray = field(repr=False)


def build_siren(config: FitImageConfig, out_dim: int) -> EUGenMLP:
    torch.manual_seed(config.seed)
    return siren_mlp(2, config.width, out_dim, (config.layers,) * config.hidden_layers, config.eugen)


WARMUP_FRACTION = 0.05
"""Share of the steps over which ``warmup-cosine`` raises the rate linearly from ``lr / warmup steps``."""


def lr_factor(schedule: LrSchedule, step: int, steps: int) -> float:
    """The factor on every group's rate before optimiser step ``step + 1`` of ``steps``: cosine decay to 1%
    after the last step, behind a linear warm-up for ``warmup-cosine``."""
    if schedule == "constant":
        return 1.0
    factor = 0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * step / steps))
    if schedule == "warmup-cosine":
        warmup = max(1, round(WARMUP_FRACTION * steps))
        factor *= min(1.0, (step + 1) / warmup)
    return factor


def fit(
    model: EUGenMLP,
    target: Tensor,
    steps: int,
    lr: float,
    log_every: int,
    eugen: SirenEUGenSpec | None = None,
    progress: bool = True,
    lr_schedule: LrSchedule = "constant",
    sine_basis: bool = False,
) -> FitResult:
    """Full-batch Adam on the MSE of ``target`` ``(H, W, C)`` in [0, 1]; PSNR logged from the training pass.

    ``lr_schedule``: ``constant``, ``cosine`` or ``warmup-cosine`` (see :class:`FitImageConfig`). Only the
    optimisation step is timed (PSNR bookkeeping is not), with device synchronisation. The reconstruction
    comes from the eval-mode (merged) network. ``sine_basis``: train in the sine units' basis
    (:mod:`eugen_nerf.siren.sine_basis`); ``model`` is left with its ``A`` written back.
    """
    device = target.device
    height, width, channels = target.shape
    coords = pixel_grid(height, width).to(device)
    values = to_signed(target.reshape(-1, channels))
    check_choice("lr-schedule", lr_schedule, LR_SCHEDULES)
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    eugen = eugen or SirenEUGenSpec()
    if sine_basis and not hold_in_sine_basis(model, eugen.projection_scale, eugen.weight_lr_scale):
        raise InputError(
            "--sine-basis needs EUGen layers whose output a frozen G reads (--layers eugen, frozen G)"
        )
    optimizer = torch.optim.Adam(siren_param_groups(model, lr, eugen))
    schedule = None
    if lr_schedule != "constant":  # a factor: each group scales its own rate (G's too)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, partial(lr_factor, lr_schedule, steps=steps))
    history: list[tuple[int, float]] = []
    model.train()
    seconds = 0.0
    with Progress(console=CONSOLE, transient=True, disable=not progress) as bar:
        task = bar.add_task("fitting", total=steps)
        for step in range(1, steps + 1):
            synchronize(device)
            start = time.perf_counter()
            prediction = model(coords)
            loss = torch.mean((prediction - values) ** 2)
            if not bool(torch.isfinite(loss)):
                raise NumericalError(
                    f"step {step}: the image-fit loss is {float(loss)} (non-finite); "
                    "stopped before the optimiser step (lower --lr)"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if schedule is not None:
                schedule.step()
            synchronize(device)
            seconds += time.perf_counter() - start
            if step % log_every == 0 or step in (1, steps):
                image = from_signed(prediction.detach()).reshape(height, width, channels)
                history.append((step, float(psnr(image, target))))
                if progress:
                    bar.console.log(f"step {step:5d}  PSNR {history[-1][1]:6.2f} dB")
            bar.advance(task)
    store_weights(model)  # every layer held in the sine basis (here or by the caller) stores its A back
    model.eval()
    with torch.no_grad():
        reconstruction = from_signed(model(coords)).reshape(height, width, channels)
    return FitResult(
        history=history,
        train_seconds=seconds,
        pixels_per_second=height * width * steps / seconds,
        final_psnr=float(psnr(reconstruction, target)),
        num_parameters=sum(p.numel() for p in model.parameters()),
        reconstruction=reconstruction.cpu().numpy(),
    )


def save_png(path: Path, image: np.ndarray) -> None:
    pixels = (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    iio.imwrite(path, pixels[..., 0] if pixels.shape[-1] == 1 else pixels)


# the eugen.* options are validated by their spec (EUGenSpec.validate)
OPTION_RULES = {
    "size": POSITIVE_INT,
    "width": POSITIVE_INT,
    "hidden_layers": POSITIVE_INT,
    "steps": POSITIVE_INT,
    "log_every": POSITIVE_INT,
    "lr": positive,
}


def main(config: FitImageConfig) -> FitResult:
    check_options(config, OPTION_RULES)
    refuse_existing(config.output, config.overwrite, "--output", "an image fit", marker="history.json")
    device = resolve_device(config.device)
    target = torch.from_numpy(load_image(config.image, config.size)).to(device)
    model = build_siren(config, out_dim=target.shape[-1]).to(device)
    CONSOLE.print(
        f"SIREN ({config.layers}) {model.layers}  {sum(p.numel() for p in model.parameters()):,} parameters"
    )
    result = fit(
        model,
        target,
        config.steps,
        config.lr,
        config.log_every,
        config.eugen,
        lr_schedule=config.lr_schedule,
        sine_basis=config.sine_basis,
    )
    check_finite(torch.from_numpy(result.reconstruction), "the fitted image (eval-mode network)")
    summary = {key: value for key, value in asdict(result).items() if key != "reconstruction"}
    summary["config"] = json.loads(json.dumps(asdict(config), default=str))
    # both files appear together (an interruption leaves the earlier fit, or nothing, in --output)
    with staged_directory(config.output) as staging:
        save_png(staging / "reconstruction.png", result.reconstruction)
        (staging / "history.json").write_text(json.dumps(summary, indent=2))
    CONSOLE.print(
        f"final PSNR {result.final_psnr:.2f} dB, {result.pixels_per_second:,.0f} pixels/s "
        f"({result.train_seconds:.1f} s for {config.steps} steps); wrote {config.output / 'reconstruction.png'}"
    )
    return result


def entrypoint() -> None:
    config = parse_command_line(FitImageConfig, "eugen-fit-image")
    with one_line_errors("eugen-fit-image"):
        main(config)
