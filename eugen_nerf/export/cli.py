"""eugen-export: write a trained field in its fused form to one file, and view it in a browser.

    eugen-export RUN/config.yml --output DIR [--dtype float16] [--overwrite]
    eugen-export serve DIR [DIR2] [--port 8765]

The first form is shorthand for 'eugen-export export ...': the run (NeRF or Zip-NeRF: EUGen, its dense twin or
an eugen-distill student) becomes DIR/field.eugen (the format: docs/export.md). 'serve' opens the web viewer on 127.0.0.1 with
one export, or two (an EUGen field and its dense twin, toggled or side by side).
Exit status: 0 done, 2 bad input (nothing written), 130 Ctrl-C during an export (0 for serve, which Ctrl-C stops).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Union

import tyro
from rich.console import Console

from eugen_nerf.export import format as fmt
from eugen_nerf.inputs.errors import InputError
from eugen_nerf.inputs.options import run_command, tcp_port
from eugen_nerf.inputs.outputs import refuse_existing, staged_directory

CONSOLE = Console()


@dataclass
class Export:
    """Export a trained run's field (fused), its occupancy grid, bounds, near/far, background and test cameras."""

    config: tyro.conf.Positional[Path]
    """The run's config.yml (or its directory)."""
    output: Path
    """Directory to write field.eugen into."""
    dtype: Literal["float32", "float16"] = "float32"
    """Storage of the weights (the page widens float16 when it loads them)."""
    grid_resolution: int = 64
    """Cells per axis of the occupancy grid baked from the density."""
    alpha_threshold: Annotated[float | None, tyro.conf.arg(help_behavior_hint="")] = None
    """A cell is occupied where a cell-long step through it is at least this opaque (default: 0.001 for NeRF,
    0.01 for Zip-NeRF, whose untrained space keeps a faint haze)."""
    overwrite: bool = False
    """Replace an earlier export in --output (a folder holding other files is refused, never replaced)."""

    def main(self) -> None:
        from eugen_nerf.export.exporter import ExportOptions

        if not 8 <= self.grid_resolution <= 256:
            raise InputError(f"--grid-resolution must be in 8..256, got {self.grid_resolution}")
        if self.alpha_threshold is not None and not 0 < self.alpha_threshold < 1:
            raise InputError(f"--alpha-threshold must be in (0, 1), got {self.alpha_threshold}")
        refuse_existing(self.output, self.overwrite, "--output", "an export", marker=fmt.FILE_NAME)
        from rich.progress import Progress

        from eugen_nerf.eval.runs import load_run
        from eugen_nerf.export.exporter import build_export

        options = ExportOptions(
            dtype=self.dtype, grid_resolution=self.grid_resolution, alpha_threshold=self.alpha_threshold
        )
        with CONSOLE.status(f"loading {self.config}"):
            run = load_run(self.config, device="cpu")
        with Progress(console=CONSOLE, transient=True) as progress:
            header, buffers = build_export(run, options, progress)
        try:
            with staged_directory(self.output) as staging:
                size = fmt.write(staging / fmt.FILE_NAME, header, buffers)
        except OSError as error:  # a full disk, a read-only mount: one line, nothing left behind
            raise InputError(f"--output {self.output}: cannot write it ({error.strerror or error})") from None
        occupied = float(buffers["occupancy"].mean())
        macs = ", ".join(f"{name} {value:,}" for name, value in header["macs_per_sample"].items())
        CONSOLE.print(
            f"wrote {self.output / fmt.FILE_NAME}: {size / 1e6:.2f} MB, {self.dtype}; multiply-adds per sample: "
            f"{macs}; occupancy {occupied:.1%} of {self.grid_resolution}^3 cells; "
            f"{len(header['cameras'])} test cameras"
        )


@dataclass
class Serve:
    """Open the web viewer on 127.0.0.1 with one export, or two (toggled or side by side)."""

    exports: Annotated[
        tyro.conf.Positional[list[Path]], tyro.conf.arg(metavar="EXPORT [EXPORT]", help_behavior_hint="")
    ]
    """One or two export directories (or field.eugen files)."""
    port: int = 8765
    """Port on 127.0.0.1 (0: any free port)."""

    def main(self) -> None:
        from eugen_nerf.export.serve import make_server

        if not 1 <= len(self.exports) <= 2:
            raise InputError(f"serve takes one or two exports, got {len(self.exports)}")
        tcp_port("port", self.port)
        try:
            server = make_server(self.exports, self.port)
        except OSError as error:
            raise InputError(
                f"cannot listen on 127.0.0.1:{self.port} ({error.strerror}); pick --port"
            ) from None
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        CONSOLE.print(f"web viewer: {url}  (Ctrl-C stops it)", soft_wrap=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:  # Ctrl-C is how the server is meant to stop: not an error
            CONSOLE.print("web viewer: stopped")
        finally:
            server.server_close()


Commands = Union[  # noqa: UP007 (tyro subcommands read best as a Union)
    Annotated[Export, tyro.conf.subcommand("export")],
    Annotated[Serve, tyro.conf.subcommand("serve")],
]
SUBCOMMANDS = ("export", "serve")


def entrypoint(args: list[str] | None = None) -> None:
    """Console entry point; ``eugen-export RUN --output DIR`` runs the ``export`` subcommand."""
    run_command("eugen-export", Commands, __doc__, args, "export", SUBCOMMANDS, also=(fmt.ExportFormatError,))


if __name__ == "__main__":
    entrypoint()
