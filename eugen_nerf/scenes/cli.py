"""``eugen-scenes``: render, check and list the synthetic scenes (tyro subcommands, like nerfstudio's ns-*).

``render`` uses the project's own ray caster (small Lambertian scenes, no extra program); ``blender`` renders
the named Blender scenes with Cycles (needs the ``blender`` program), ``photo-capture`` and ``rgbd-room`` the
hand-held photo capture and the RGB-D room; ``colmap`` turns photographs into a posed dataset with
``ns-process-data`` (needs ``colmap``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro
from rich.console import Console
from rich.table import Table

from eugen_nerf.inputs.errors import InputError, one_line_errors
from eugen_nerf.inputs.options import parse_command_line
from eugen_nerf.scenes.appearance import PHOTOS
from eugen_nerf.scenes.blender.check import check_blender_scene
from eugen_nerf.scenes.blender.generate import BlenderSceneConfig, generate_blender_scene
from eugen_nerf.scenes.blender.measure import Measure
from eugen_nerf.scenes.colmap import ColmapConfig, run_colmap, summary_line
from eugen_nerf.scenes.contact_sheet import contact_sheet
from eugen_nerf.scenes.generate import SceneConfig, generate_scene
from eugen_nerf.scenes.meshes import BUNDLED_MESHES, bundled_mesh_dir
from eugen_nerf.scenes.photo_capture import PhotoCaptureConfig, check_photo_capture, generate_photo_capture
from eugen_nerf.scenes.rgbd_room import RoomConfig, generate_room
from eugen_nerf.scenes.validate import validate_any, validate_scene

CONSOLE = Console()


@dataclass
class Render(SceneConfig):
    """Render a nerfstudio/Blender-format scene (RGB on white, depth, masks, cameras, mesh) from a mesh."""

    def main(self) -> None:
        CONSOLE.print(str(validate_scene(generate_scene(self))), soft_wrap=True)


@dataclass
class Blender(BlenderSceneConfig):
    """Render a named Blender scene with Cycles on the CPU: an object in NeRF-Synthetic's format (shiny,
    branches, patterns, sculpture) or the unbounded garden in nerfstudio-data's format. Cached: a folder
    rendered with the same settings is reused; an interrupted render resumes. Needs the `blender` program."""

    def main(self) -> None:
        CONSOLE.print(str(check_blender_scene(generate_blender_scene(self))), soft_wrap=True)


@dataclass
class Check:
    """Validate scene folders (nerfstudio-data or NeRF-Synthetic format) or transforms.json files; exits
    non-zero with the reason if one is broken."""

    paths: tyro.conf.Positional[tuple[Path, ...]]
    """Scene folders or transforms.json files to check."""

    def main(self) -> None:
        if not self.paths:
            raise InputError("name at least one scene folder or transforms.json to check")
        for path in self.paths:
            summary = check_blender_scene(path) or check_photo_capture(path) or validate_any(path)
            CONSOLE.print(str(summary), soft_wrap=True)


@dataclass
class PhotoCapture(PhotoCaptureConfig):
    """Photograph the garden by hand: JPEGs with EXIF focal length along a wobbly orbit, with exposure drift
    and sensor noise, and no poses beside them (Blender's true poses go to reference/ for scoring). Cached
    and resumable. Needs the `blender` program; then `eugen-scenes colmap OUTPUT/images --output DATASET`."""

    def main(self) -> None:
        CONSOLE.print(check_photo_capture(generate_photo_capture(self)), soft_wrap=True)


@dataclass
class RGBDRoom(RoomConfig):
    """Render the RGB-D room for iSDF: colour, 16-bit z-depth from Cycles' Z pass (thousandths of a scene
    unit: 2 mm, the room's unit being 2 m), a walk-through
    in temporal order and the room's triangles as ground-truth mesh. Cached and resumable. Needs `blender`."""

    def main(self) -> None:
        CONSOLE.print(str(validate_scene(generate_room(self))), soft_wrap=True)


@dataclass
class Colmap(ColmapConfig):
    """Photographs to a posed dataset with `ns-process-data images` (COLMAP on the CPU, offline matching,
    the focal length from the photographs' EXIF); one line if too few frames were registered; pose errors
    against a rendered capture's true poses. Needs the `colmap` and `ffmpeg` programs (bash scripts/setup.sh
    --scenes installs them)."""

    def main(self) -> None:
        CONSOLE.print(summary_line(run_colmap(self)), soft_wrap=True)


@dataclass
class Sheet:
    """Write a contact sheet (a grid of a scene's views, spread over its splits) as one PNG; several scenes
    go into one sheet, scene after scene."""

    scenes: tyro.conf.Positional[tuple[Path, ...]]
    """Scene folders (nerfstudio-data or NeRF-Synthetic format, or a photo capture)."""
    output: Path
    """PNG file to write."""
    count: int = 12
    """How many views of each scene."""
    columns: int = 6
    """Views a row."""
    size: int | None = None
    """Resize every view to this width in pixels (scenes of different sizes need it)."""

    def main(self) -> None:
        if not self.scenes:
            raise InputError("name at least one scene folder")
        if self.size is not None and not 8 <= self.size <= 4096:
            raise InputError(f"--size must be 8 to 4096 pixels, got {self.size}")
        for scene in self.scenes:
            check_photo_capture(scene) or validate_any(scene)
        sheet = contact_sheet(self.scenes, self.output, self.count, self.columns, size=self.size)
        CONSOLE.print(f"wrote {sheet}")


@dataclass
class ListMeshes:
    """List the meshes bundled with pymeshlab (usable as --mesh NAME) and the photos for --color photo."""

    def main(self) -> None:
        table = Table(title=f"Bundled meshes ({bundled_mesh_dir()})")
        for column in ("name", "file", "description"):
            table.add_column(column)
        for name, mesh in BUNDLED_MESHES.items():
            table.add_row(name, mesh.filename, mesh.description)
        CONSOLE.print(table)
        CONSOLE.print(f"Photos (skimage.data): {', '.join(PHOTOS)}")


Commands = (
    Annotated[Render, tyro.conf.subcommand("render")]
    | Annotated[Blender, tyro.conf.subcommand("blender")]
    | Annotated[Check, tyro.conf.subcommand("check")]
    | Annotated[Measure, tyro.conf.subcommand("measure")]
    | Annotated[Sheet, tyro.conf.subcommand("sheet")]
    | Annotated[PhotoCapture, tyro.conf.subcommand("photo-capture")]
    | Annotated[RGBDRoom, tyro.conf.subcommand("rgbd-room")]
    | Annotated[Colmap, tyro.conf.subcommand("colmap")]
    | Annotated[ListMeshes, tyro.conf.subcommand("list-meshes")]
)


def entrypoint() -> None:
    """Console script: bad scenes and refused overwrites end with a one-line message and exit status 2."""
    command = parse_command_line(Commands, "eugen-scenes", description=__doc__)
    # SIGINT/SIGTERM unwind too: the render's staging folder is removed, an earlier scene stays as it was
    with one_line_errors("eugen-scenes", also=(FileExistsError, FileNotFoundError, ValueError)):
        command.main()


if __name__ == "__main__":
    entrypoint()
