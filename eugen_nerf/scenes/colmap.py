"""Photographs to a posed dataset through nerfstudio's own ``ns-process-data images`` (COLMAP), with the
checks a user needs around it: COLMAP installed, enough frames registered, and, for a rendered capture
whose true poses are known, how far COLMAP's poses are from them.

COLMAP starts from the focal length in the photographs' EXIF (without one it guesses 1.2 times the image
width) and refines it in bundle adjustment. ``ns-process-data``'s own copy of the photographs loses the
EXIF: its ffmpeg chain of downscaled copies re-encodes the full-size images too. So the photographs are
copied here byte for byte, named as ns-process-data names them (``frame_00001.jpg`` ... in sorted order),
into the dataset's ``images/``, and ``ns-process-data images --skip-image-processing`` runs COLMAP on that
folder: its feature extraction, matching, mapping and final bundle adjustment, then ``transforms.json``
with a frame for every image COLMAP registered. The default ``vocab_tree`` matching downloads a vocabulary
file and fails offline; ``exhaustive`` (every pair) and ``sequential`` (neighbours in file order, for a
walk-around capture) need nothing.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tyro

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.inputs.outputs import refuse_existing
from eugen_nerf.scenes.alignment import pose_errors

MatchingMethod = Literal["exhaustive", "sequential"]
CameraType = Literal["perspective", "pinhole", "simple_pinhole"]
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
MIN_REGISTERED_FRACTION = 0.95
CAMERA_TYPE: CameraType = "perspective"
REFINE_INTRINSICS = True
CAPTURE_ADVICE = (
    "a capture needs texture everywhere in view, neighbouring frames that overlap by well over half, "
    "and parallax (move around the subject, do not only turn the camera)"
)


class RegistrationError(InputError):
    """COLMAP registered too few frames; the partial dataset is left in place for inspection."""


def require_tools() -> None:
    """One line naming the Debian package when COLMAP (or ffmpeg, which ns-process-data also runs) is missing."""
    for tool, package in (("colmap", "colmap"), ("ffmpeg", "ffmpeg")):
        if shutil.which(tool) is None:
            raise InputError(
                f"'{tool}' is not installed (ns-process-data runs it): install the Debian package "
                f"'{package}' (apt-get install {package})"
            )


def list_photographs(folder: Path) -> list[Path]:
    """The images of ``folder`` in the order ns-process-data numbers them (sorted by name)."""
    if not folder.is_dir():
        raise InputError(f"{folder}: photograph folder does not exist")
    images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if len(images) < 3:
        raise InputError(
            f"{folder}: found {len(images)} photographs (.jpg/.png); structure from motion needs many more"
        )
    return images


def process_data_command(
    images: Path,
    output: Path,
    matching_method: MatchingMethod,
    camera_type: CameraType = "perspective",
    refine_intrinsics: bool = True,
) -> list[str]:
    """The ``ns-process-data images`` call on photographs already in ``output/images`` (CPU only, offline
    matching), run with this Python."""
    command = [
        sys.executable,
        "-m",
        "nerfstudio.scripts.process_data",
        "images",
        "--data",
        str(images),
        "--output-dir",
        str(output),
        "--skip-image-processing",
        "--no-gpu",
        "--matching-method",
        matching_method,
        "--camera-type",
        camera_type,
        "--verbose",
    ]
    return command if refine_intrinsics else [*command, "--no-refine-intrinsics"]


def copy_photographs(photographs: list[Path], images: Path) -> None:
    """``photographs`` copied byte for byte (EXIF included) into ``images`` as ``frame_00001.jpg`` ... in
    their order, as ns-process-data names them; anything else in ``images`` is removed (COLMAP reads the
    whole folder). Copies already there are kept."""
    images.mkdir(parents=True, exist_ok=True)
    wanted = {}
    for index, photo in enumerate(photographs):
        wanted[f"frame_{index + 1:05d}{photo.suffix}"] = photo
    for path in images.iterdir():
        if path.name not in wanted:
            path.unlink()
    for name, photo in wanted.items():
        target = images / name
        if target.resolve() == photo.resolve():
            continue
        if not target.is_file() or target.read_bytes() != photo.read_bytes():
            shutil.copyfile(photo, target)


def run_process_data(command: list[str], log: Path) -> int:
    """Run the ns-process-data ``command``, its output (and COLMAP's) appended to ``log``; returns its exit
    status."""
    with log.open("a") as stream:
        stream.write(shlex.join(command) + "\n")
        stream.flush()
        return subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, check=False).returncode


def log_tail(log: Path, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in log.read_text().strip().splitlines()[-lines:])


@dataclass(frozen=True)
class Registration:
    """Which photographs COLMAP registered, and their poses (OpenGL camera-to-world, COLMAP's frame)."""

    num_images: int
    registered: dict[int, np.ndarray]
    """Index of the photograph in sorted order -> its 4x4 pose."""
    intrinsics: dict[str, Any]

    @property
    def fraction(self) -> float:
        return len(self.registered) / self.num_images


def read_registration(dataset: Path, num_images: int) -> Registration:
    """The frames ns-process-data wrote to ``dataset/transforms.json`` (none if COLMAP found no model)."""
    source = dataset / "transforms.json"
    if not source.is_file():
        return Registration(num_images, {}, {})
    meta = json.loads(source.read_text())
    registered = {}
    for frame in meta.get("frames", []):
        stem = Path(frame["file_path"]).stem  # frame_00001 -> photograph 0
        registered[int(stem.rsplit("_", 1)[-1]) - 1] = np.asarray(frame["transform_matrix"], dtype=np.float64)
    intrinsics = {k: meta[k] for k in ("camera_model", "fl_x", "fl_y", "cx", "cy", "w", "h") if k in meta}
    return Registration(num_images, registered, intrinsics)


def check_registered(registration: Registration, dataset: Path, min_fraction: float) -> None:
    """One line saying how many frames were registered and what a capture needs, if too few were."""
    if registration.fraction < min_fraction:
        raise RegistrationError(
            f"COLMAP registered {len(registration.registered)} of {registration.num_images} photographs "
            f"({100 * registration.fraction:.0f}%, at least {100 * min_fraction:.0f}% needed): "
            f"{CAPTURE_ADVICE}; the partial dataset is in {dataset} for inspection"
        )


def reference_poses(reference: Path, num_images: int) -> np.ndarray:
    """The true poses of a rendered capture (a transforms.json listing its frames in photograph order)."""
    meta = json.loads(reference.read_text())
    poses = np.asarray([frame["transform_matrix"] for frame in meta["frames"]], dtype=np.float64)
    if len(poses) != num_images:
        raise InputError(f"{reference}: lists {len(poses)} poses for {num_images} photographs")
    return poses


def registration_report(
    registration: Registration, reference: np.ndarray | None, scene_radius: float | None = None
) -> dict[str, Any]:
    """Registered count and fraction, COLMAP's intrinsics and, with reference poses, the pose errors of
    the registered frames after their similarity alignment."""
    report: dict[str, Any] = {
        "num_images": registration.num_images,
        "num_registered": len(registration.registered),
        "registered_fraction": registration.fraction,
        "unregistered": sorted(set(range(registration.num_images)) - set(registration.registered)),
        "colmap_intrinsics": registration.intrinsics,
    }
    if reference is not None and len(registration.registered) >= 3:
        order = sorted(registration.registered)
        estimated = np.stack([registration.registered[i] for i in order])
        errors = pose_errors(estimated, reference[order], scene_radius)
        report["pose_errors"] = errors.summary()
        report["similarity_colmap_to_reference"] = errors.similarity.matrix().tolist()
    return report


@dataclass
class ColmapConfig:
    """Turn photographs into a posed nerfstudio dataset with `ns-process-data images` (COLMAP on the CPU,
    offline matching, the focal length from the photographs' EXIF), check that enough frames were
    registered and, given a capture's true poses, report COLMAP's pose errors after a similarity alignment.
    Needs the `colmap` and `ffmpeg` programs."""

    images: tyro.conf.Positional[Path]
    """Folder of photographs (e.g. scenes/garden_photos/images)."""
    output: Path
    """Dataset folder written (images/: the photographs as frame_00001.jpg ..., colmap/, transforms.json,
    registration.json)."""
    matching_method: MatchingMethod = "sequential"
    """sequential: each photograph with its neighbours in file order (a walk around the subject; the number
    of pairs grows linearly); exhaustive: every pair (quadratically many, for unordered photographs)."""
    camera_type: CameraType = CAMERA_TYPE
    """ns-process-data's camera model: perspective (OPENCV: focal lengths, principal point, radial and
    tangential distortion), pinhole (no distortion), simple_pinhole (one focal length, centred)."""
    refine_intrinsics: bool = REFINE_INTRINSICS
    """Run ns-process-data's last bundle adjustment, which also moves the principal point."""
    reference: Path | None = None
    """A transforms.json with the photographs' true poses in file order (a rendered capture's
    reference/transforms.json), to score COLMAP's poses; by default the one beside IMAGES, if any."""
    min_registered: float = MIN_REGISTERED_FRACTION
    """Fraction of the photographs COLMAP must register; fewer is an error (the partial dataset stays)."""


def reference_beside(images: Path) -> Path | None:
    """``reference/transforms.json`` next to a rendered capture's ``images/`` folder, if there is one."""
    candidate = images.parent / "reference" / "transforms.json"
    return candidate if candidate.is_file() else None


def run_colmap(config: ColmapConfig) -> dict[str, Any]:
    """Run ns-process-data on ``config.images``, write ``registration.json`` and return it."""
    if not 0.0 < config.min_registered <= 1.0:
        raise InputError(f"--min-registered {config.min_registered} must be in (0, 1]")
    # its images/ would be emptied of all but the photographs: only a dataset this command made (it resumes in it)
    refuse_existing(
        config.output,
        True,
        "--output",
        "a dataset of this command",
        ("registration.json", "process_data.log"),
    )
    photographs = list_photographs(config.images)  # a missing folder is named before a missing tool
    require_tools()
    if (config.output / "images").resolve() == config.images.resolve():
        raise InputError(
            f"--output {config.output}: its images/ would be rewritten from the photographs in it; "
            "choose another dataset folder"
        )
    reference_path = config.reference or reference_beside(config.images)
    reference = reference_poses(reference_path, len(photographs)) if reference_path else None
    config.output.mkdir(parents=True, exist_ok=True)
    copy_photographs(photographs, config.output / "images")
    command = process_data_command(
        config.output / "images",
        config.output,
        config.matching_method,
        config.camera_type,
        config.refine_intrinsics,
    )
    log = config.output / "process_data.log"
    code = run_process_data(command, log)
    registration = read_registration(config.output, len(photographs))
    if code != 0 and registration.registered:
        raise InputError(f"ns-process-data failed (exit {code}; log {log}): {log_tail(log)}")
    report = registration_report(registration, reference)
    report["ns_process_data"] = shlex.join(["ns-process-data", *command[3:]])
    report["matching_method"] = config.matching_method
    report["camera_type"] = config.camera_type
    report["refine_intrinsics"] = config.refine_intrinsics
    report["reference"] = str(reference_path) if reference_path else None
    (config.output / "registration.json").write_text(json.dumps(report, indent=2) + "\n")
    check_registered(registration, config.output, config.min_registered)
    return report


def summary_line(report: dict[str, Any]) -> str:
    line = (
        f"COLMAP registered {report['num_registered']} of {report['num_images']} photographs "
        f"({100 * report['registered_fraction']:.1f}%)"
    )
    errors = report.get("pose_errors")
    if errors:
        line += (
            f"; after a similarity alignment to the true poses: rotation error median "
            f"{errors['rotation_deg_median']:.3f} deg (max {errors['rotation_deg_max']:.3f}), position error median "
            f"{100 * errors['translation_over_radius_median']:.2f}% of the scene radius "
            f"(max {100 * errors['translation_over_radius_max']:.2f}%)"
        )
    return line
