"""``eugen-distill``: turn a trained nerfstudio field into an EUGen field in closed form.

    eugen-distill --teacher teachers/shiny128/dense-nerf/paper --output-dir outputs/student  # the shipped teacher
    eugen-distill --teacher RUN --list-layers
    eugen-distill --teacher RUN --output-dir DIR --layers auto --psnr-budget 0.1
    eugen-distill --teacher RUN --output-dir DIR --width-fraction 1/4 --finetune-steps 300
    eugen-distill --teacher RUN --output-dir DIR --width-fraction None --eugen.num-features 32
    torchrun --nproc-per-node 2 -m eugen_nerf.distill.cli --teacher RUN --output-dir DIR --refine-steps 0

Exit status: 0 done, 2 bad input (nothing written) or a non-finite fit, 3 stopped on ``--stop-after-batches``
(resumable), 130 Ctrl-C or SIGTERM (resumable; with ``--overwrite`` the previous run stays until the new one is
complete).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from eugen_nerf.distill.options import (
    DistillError,
    DistillInterrupted,
    DistillOptions,
    width_fraction_conflict,
)
from eugen_nerf.inputs.errors import InputError, NumericalError, one_line_errors, report
from eugen_nerf.inputs.options import parse_command_line


@dataclass
class DistillCommand(DistillOptions):
    """Turn a trained nerfstudio field into an EUGen field in closed form (see ``eugen-distill --help``)."""

    list_layers: bool = False
    """List the teacher's replaceable layers and exit."""

    def __post_init__(self) -> None:
        """Checked in :func:`main` instead, after parsing: tyro would show a bad value in its error box."""


def list_teacher_layers(teacher: Path, console: Console) -> None:
    from eugen_nerf.distill.student import list_layers
    from eugen_nerf.distill.teacher import load_teacher

    model = load_teacher(teacher).model
    table = Table(title=f"layers of {teacher}")
    table.add_column("path", no_wrap=True)
    for column in ("in", "out", "MLP", "type", "followed by", "hidden"):
        table.add_column(column)
    for row in list_layers(model):
        table.add_row(
            row.ref.path,
            str(row.in_features),
            str(row.out_features),
            row.mlp_type,
            row.kind,
            row.activation,
            "yes" if row.hidden else "",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    console = Console()
    try:
        command = parse_command_line(DistillCommand, "eugen-distill", argv, __doc__)
    except SystemExit as done:  # --help, or a bad flag (tyro printed one message naming it)
        return int(done.code or 0)
    try:
        command.check()
        typed = [flag.split("=", 1)[0].replace("_", "-") for flag in (sys.argv[1:] if argv is None else argv)]
        if command.width_fraction is not None and "--eugen.num-features" in typed:
            # the options see only the value: the default m typed out (64) would otherwise be ignored silently
            raise width_fraction_conflict(command.eugen.num_features, command.width_fraction)
        if command.list_layers:
            list_teacher_layers(command.teacher, console)
            return 0
        if command.output_dir is None:
            raise DistillError("--output-dir is required (or pass --list-layers)")
        from eugen_nerf.distill.run import distill  # nerfstudio import is slow: after the argument checks

        distill(command, console)
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
