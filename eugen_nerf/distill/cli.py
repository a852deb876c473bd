"""``eugen-distill``: turn a trained nerfstudio field into an EUGen field in closed form.

    eugen-distill --teacher outputs/bunny64/dense-nerf/<timestamp>/config.yml --output-dir outputs/student
    eugen-distill --teacher RUN --list-layers
    eugen-distill --teacher RUN --output-dir DIR --layers auto --psnr-budget 0.1
    torchrun --nproc-per-node 2 -m eugen_nerf.distill.cli --teacher RUN --output-dir DIR

Exit status: 0 done, 2 bad input (nothing written) or a non-finite fit, 3 stopped on ``--stop-after-batches``
(resumable), 130 Ctrl-C or SIGTERM (resumable; with ``--overwrite`` the previous run stays until the new one is
complete).
"""

from __future__ import annotations

import argparse
import sys
from fractions import Fraction
from pathlib import Path
from typing import List, Optional

from rich.console import Console
from rich.table import Table

from eugen_nerf.distill.options import FINETUNE_PARAMETERS, DistillError, DistillInterrupted, DistillOptions
from eugen_nerf.inputs.errors import InputError, NumericalError, one_line_errors, report
from eugen_nerf.layers import FEATURE_MAPS, PROJECTION_KINDS, SCALINGS


def fraction(text: str) -> float:
    """A number such as ``0.1`` or ``1/16``; the (0, 1] check is :class:`DistillOptions`' (one message
    for the CLI and the API)."""
    try:
        return float(Fraction(text))
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="eugen-distill", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--teacher", type=Path, required=True, help="the teacher's config.yml or its run directory")
    p.add_argument("--output-dir", type=Path, help="the student run directory to write")
    p.add_argument("--list-layers", action="store_true", help="list the teacher's replaceable layers and exit")
    p.add_argument("--layers", nargs="+", default=["hidden"],
                   help="layer paths or glob patterns (see --list-layers); 'hidden': every hidden non-skip "
                        "layer but the first of each MLP; 'auto': greedy within --psnr-budget")
    p.add_argument("--psnr-budget", type=float, default=0.1, help="auto: largest accepted PSNR drop (dB)")
    p.add_argument("--auto-views", type=int, default=2, help="auto: held-out training views measured")
    p.add_argument("--num-features", type=int, default=64, help="m, random features per order")
    p.add_argument("--degree", type=int, default=2, help="k, the highest polynomial order")
    p.add_argument("--feature-map", choices=FEATURE_MAPS, default="identity",
                   help="Φ (identity: the unbiased estimate's map; fitted better than relu, measured)")
    p.add_argument("--projection", choices=PROJECTION_KINDS, default="gaussian")
    p.add_argument("--no-norm", dest="use_norm", action="store_false", help="drop the ‖x‖ entry of x⁺")
    p.add_argument("--scaling", choices=SCALINGS, default="linear",
                   help="linear: direction features times rms(x⁺) (safe to stack); unit: direction features; "
                        "polynomial: products of x⁺ itself")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image-fraction", type=fraction, default=1 / 16, help="fraction of training images, (0, 1]")
    p.add_argument("--resolution-scale", type=fraction, default=1 / 8, help="camera resolution scale, (0, 1]")
    p.add_argument("--pair-fraction", type=fraction, default=0.1, help="fraction of recorded pairs fitted, (0, 1]")
    p.add_argument("--heldout-fraction", type=fraction, default=0.1, help="fraction of pairs held out")
    p.add_argument("--ridge", default="auto", help="relative ridge strength, or 'auto' (held-out selection)")
    p.add_argument("--fit", choices=("sequential", "parallel"), default="sequential",
                   help="sequential: inputs from the student so far; parallel: all from the teacher in one pass")
    p.add_argument("--finetune-steps", type=int, default=0, help="Adam steps on teacher colours after the solve")
    p.add_argument("--finetune-lr", type=float, default=1e-3,
                   help="Adam learning rate of the fine-tune at its start (cosine-decayed)")
    p.add_argument("--finetune-rays", type=int, default=256, help="rays per fine-tune step")
    p.add_argument("--finetune-parameters", choices=FINETUNE_PARAMETERS, default="all",
                   help="all: every field parameter, density head included; eugen: the EUGen layers only")
    p.add_argument("--finetune-novel-views", type=int, default=8,
                   help="cameras near the training ones rendered by the teacher as extra targets (0: none)")
    p.add_argument("--refine-steps", type=int, default=0,
                   help="the paper's refinement: Adam steps per layer on G and A after the closed form (0: none)")
    p.add_argument("--refine-rows", type=int, default=65536, help="captured rows per layer used by the refinement")
    p.add_argument("--refine-lr", type=float, default=1e-3, help="Adam learning rate of the refinement")
    p.add_argument("--batch-rays", type=int, default=1024, help="rays per rendered batch")
    p.add_argument("--eval-views", type=int, default=None, help="test views in the report (default: all)")
    p.add_argument("--fps-repeats", type=int, default=3, help="timed renders per test view")
    p.add_argument("--no-eval", dest="evaluate", action="store_false", help="skip the test-split evaluation")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run in --output-dir")
    p.add_argument("--stop-after-batches", type=int, default=None,
                   help="stop after this many batches, state saved (to interrupt deterministically)")
    return p


def list_teacher_layers(teacher: Path, console: Console) -> None:
    from eugen_nerf.distill.student import list_layers
    from eugen_nerf.distill.teacher import load_teacher

    model = load_teacher(teacher).model
    table = Table(title=f"layers of {teacher}")
    table.add_column("path", no_wrap=True)
    for column in ("in", "out", "MLP", "type", "followed by", "hidden"):
        table.add_column(column)
    for row in list_layers(model):
        table.add_row(row.ref.path, str(row.in_features), str(row.out_features), row.mlp_type, row.kind,
                      row.activation, "yes" if row.hidden else "")
    console.print(table)


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    console = Console()
    try:
        if args.list_layers:
            list_teacher_layers(args.teacher, console)
            return 0
        if args.output_dir is None:
            raise DistillError("--output-dir is required (or pass --list-layers)")
        values = {k: v for k, v in vars(args).items() if k not in ("list_layers",)}
        options = DistillOptions(**values)
        from eugen_nerf.distill.run import distill  # nerfstudio import is slow: after the argument checks

        distill(options, console)
    except (InputError, NumericalError) as err:
        report("eugen-distill", err)
        return 2
    except DistillInterrupted as err:
        console.print(f"[yellow]eugen-distill: {err}[/]")
        return 3
    return 0


def entrypoint() -> None:
    with one_line_errors("eugen-distill"):  # Ctrl-C/SIGTERM: one line, the saved state resumes
        code = main()
    sys.exit(code)


if __name__ == "__main__":
    entrypoint()
