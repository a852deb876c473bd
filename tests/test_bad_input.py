"""A catalogue of bad input across every command: each case gives one clear line and loses nothing.

Every case asserts (1) the exit status, (2) that the message names the file, frame or option at fault,
(3) that there is no traceback, and (4) that nothing was written: the whole scratch folder (inputs and any
earlier output) is byte-identical afterwards. The console scripts run in-process through their entry
functions (cheap); ``ns-train`` and ``ns-eval`` run as real subprocesses, the only way to see that stock
nerfstudio commands print no traceback.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from _scripts import run_command as run

REPO = Path(__file__).resolve().parents[1]
RGBD = REPO / "scenes" / "bunny_rgbd"
SCENE = REPO / "scenes" / "bunny32"
TEACHER = REPO / "teachers" / "bunny64" / "dense-nerf" / "shipped"
BIN = Path(sys.executable).parent


def read_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()} | {
        str(p.relative_to(root)) + "/": b"" for p in sorted(root.rglob("*")) if p.is_dir()
    }


# --------------------------------------------------------------------------- inputs, made once per module
RUN = Path("bunny64", "dense-nerf", "shipped")
"""Where a copied run lies under its output_dir, as nerfstudio lays runs out (ns-eval finds it there)."""


def copy_run(root: Path, name: str) -> Path:
    """A copy of the shipped teacher at ``root/name/RUN`` whose config's output_dir is ``root/name``."""
    run = shutil.copytree(TEACHER, root / name / RUN)
    config = (run / "config.yml").read_text()
    marker = "output_dir: !!python/object/apply:pathlib.PosixPath\n- teachers\n"
    assert marker in config
    (run / "config.yml").write_text(config.replace(marker, marker.replace("teachers", str(root / name))))
    return run


def run_dir(inputs: Path, name: str) -> Path:
    return inputs / name / RUN


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Broken copies of shipped scenes and runs, and broken files, shared read-only by the cases."""
    root = tmp_path_factory.mktemp("inputs")
    rgbd = lambda name: shutil.copytree(RGBD, root / name)

    (rgbd("no_depth_png") / "depth" / "frame_0003.png").unlink()

    meta = json.loads((rgbd("no_depth_key") / "transforms.json").read_text())
    del meta["frames"][5]["depth_file_path"]
    (root / "no_depth_key" / "transforms.json").write_text(json.dumps(meta))

    for png in (rgbd("depth_8bit") / "depth").glob("*.png"):
        iio.imwrite(png, np.clip(iio.imread(png), 0, 255).astype(np.uint8))

    (rgbd("bad_json") / "transforms.json").write_text('{"frames": [')

    meta = json.loads((rgbd("missing_mesh") / "scene.json").read_text())
    meta["ground_truth_mesh"] = "nope.ply"
    (root / "missing_mesh" / "scene.json").write_text(json.dumps(meta))

    meta = json.loads((rgbd("lens") / "transforms.json").read_text())
    meta["k1"] = -0.05
    (root / "lens" / "transforms.json").write_text(json.dumps(meta))

    meta = json.loads((shutil.copytree(SCENE, root / "one_point") / "transforms.json").read_text())
    for frame in meta["frames"]:  # every camera at one point: no parallax
        frame["transform_matrix"] = [[1, 0, 0, 0.5], [0, 1, 0, 0.5], [0, 0, 1, 0.5], [0, 0, 0, 1]]
    (root / "one_point" / "transforms.json").write_text(json.dumps(meta))

    (root / "empty.ply").write_text("ply\nformat ascii 1.0\nelement vertex 0\nelement face 0\nend_header\n")
    (root / "text.png").write_text("this is not an image\n")
    iio.imwrite(root / "a.png", np.zeros((32, 32, 3), np.uint8))

    run = copy_run(root, "run_truncated")
    (checkpoint,) = (run / "nerfstudio_models").glob("step-*.ckpt")
    checkpoint.write_bytes(checkpoint.read_bytes()[: checkpoint.stat().st_size // 3])
    shutil.rmtree(copy_run(root, "run_no_ckpt") / "nerfstudio_models")
    (root / "run_garbage").mkdir()
    (root / "run_garbage" / "config.yml").write_text("::: not yaml [\n")
    return root


@pytest.fixture
def scratch(tmp_path, monkeypatch) -> Path:
    """The case's folder; commands run from the repository (the shipped runs name their scene relatively)."""
    monkeypatch.chdir(REPO)
    return tmp_path


@dataclass
class Case:
    """One bad invocation: how to run it, what the message must name, the expected exit status."""

    id: str
    run: Callable[[Path, Path], list[str]]
    """``(inputs, scratch) -> argv`` of the console script ``script``."""
    script: str
    names: Callable[[Path, Path], str]
    """``(inputs, scratch) -> text`` the message must contain (a path, a frame, an option)."""
    code: int = 2
    prepare: Callable[[Path], None] | None = None
    """Puts an earlier result in the scratch folder, which must stay byte-identical."""
    parsed_by_tyro: bool = False
    """Rejected while tyro parses the flags (a type, a choice, an option's own validation): tyro's one-message box,
    as ns-train shows it, instead of our one ``prog: error:`` line."""


def entry(script: str) -> Callable[[], None]:
    if script == "eugen-isdf":
        from eugen_nerf.isdf.cli import entrypoint
    elif script == "eugen-scenes":
        from eugen_nerf.scenes.cli import entrypoint
    elif script == "eugen-fit-image":
        from eugen_nerf.siren.fit_image import entrypoint
    elif script == "eugen-eval":
        from eugen_nerf.eval.cli import entrypoint
    elif script == "eugen-distill":
        from eugen_nerf.distill.cli import entrypoint
    elif script == "eugen-viewer":
        from eugen_nerf.viewer.cli import entrypoint
    elif script == "ns-train":
        from nerfstudio.scripts.train import entrypoint
    else:
        raise AssertionError(script)
    return entrypoint


def earlier_isdf_run(scratch: Path) -> None:
    (scratch / "out").mkdir()
    for name, data in (
        ("field.pt", b"weights"),
        ("metrics.json", b'{"sdf_error": 0.07}'),
        ("mesh.ply", b"ply"),
    ):
        (scratch / "out" / name).write_bytes(data)


def earlier_scene(scratch: Path) -> None:
    (scratch / "out").mkdir()
    (scratch / "out" / "transforms.json").write_text('{"frames": []}')


def other_files(scratch: Path) -> None:
    """A folder of the user's own files where a command is told to write, with --overwrite."""
    (scratch / "out").mkdir()
    (scratch / "out" / "notes.txt").write_text("mine, not a result")


def earlier_student(scratch: Path) -> None:
    shutil.copytree(TEACHER, scratch / "out")


ISDF = ["--evaluation.mesh-resolution", "16"]


def NS_ZIP(scratch: Path) -> list[str]:  # reads as a constant prefix
    """``ns-train eugen-nerfacto`` on a shipped scene, its output folder in the case's scratch (never created)."""
    return ["eugen-nerfacto", "--data", str(SCENE), "--output-dir", str(scratch / "o")]


CASES = [
    # ---------------------------------------------------------------- eugen-isdf
    Case(
        "isdf-missing-scene",
        lambda i, s: ["--data", str(s / "nowhere"), "--output", str(s / "out")],
        "eugen-isdf",
        lambda i, s: str(s / "nowhere"),
    ),
    Case(
        "isdf-deleted-depth-png",
        lambda i, s: ["--data", str(i / "no_depth_png"), "--output", str(s / "out")],
        "eugen-isdf",
        lambda i, s: "depth/frame_0003.png",
    ),
    Case(
        "isdf-frame-without-depth",
        lambda i, s: ["--data", str(i / "no_depth_key"), "--output", str(s / "out")],
        "eugen-isdf",
        lambda i, s: "frame 5",
    ),
    Case(
        "isdf-8bit-depth",
        lambda i, s: ["--data", str(i / "depth_8bit"), "--output", str(s / "out")],
        "eugen-isdf",
        lambda i, s: "depth/frame_0000.png: depth PNG must be single-channel 16-bit",
    ),
    Case(
        "isdf-bad-json",
        lambda i, s: ["--data", str(i / "bad_json"), "--output", str(s / "out")],
        "eugen-isdf",
        lambda i, s: str(i / "bad_json" / "transforms.json"),
    ),
    Case(
        "isdf-missing-mesh",
        lambda i, s: ["--data", str(i / "missing_mesh"), "--output", str(s / "out")],
        "eugen-isdf",
        lambda i, s: f"its ground-truth mesh {i / 'missing_mesh' / 'nope.ply'} does not exist",
    ),
    Case(
        "isdf-lens-distortion",
        lambda i, s: ["--data", str(i / "lens"), "--output", str(s / "out")],
        "eugen-isdf",
        lambda i, s: "its camera has lens distortion (k1, k2, k3, k4, p1, p2 = -0.05, 0, 0, 0, 0, 0)",
    ),
    Case(
        "isdf-negative-free-space-band",
        lambda i, s: ["--output", str(s / "out"), "--evaluation.free-space-band", "-0.1"],
        "eugen-isdf",
        lambda i, s: "--evaluation.free-space-band must be > 0",
    ),
    Case(
        "isdf-frame-stride-0",
        lambda i, s: ["--output", str(s / "out"), "--train.frame-stride", "0"],
        "eugen-isdf",
        lambda i, s: "--train.frame-stride must be an integer >= 1",
    ),
    Case(
        "isdf-negative-lr",
        lambda i, s: ["--output", str(s / "out"), "--train.lr", "-1"],
        "eugen-isdf",
        lambda i, s: "--train.lr must be > 0",
    ),
    Case(
        "isdf-mesh-resolution-2",
        lambda i, s: ["--output", str(s / "out"), "--evaluation.mesh-resolution", "2"],
        "eugen-isdf",
        lambda i, s: "--evaluation.mesh-resolution",
    ),
    Case(
        "isdf-far-before-near",
        lambda i, s: ["--output", str(s / "out"), "--train.sampling.far", "1"],
        "eugen-isdf",
        lambda i, s: "--train.sampling.far",
    ),
    Case(
        "isdf-output-holds-a-run",
        lambda i, s: ["--output", str(s / "out"), *ISDF],
        "eugen-isdf",
        lambda i, s: f"--output {s / 'out'} already holds an eugen-isdf run",
        prepare=earlier_isdf_run,
    ),
    Case(
        "isdf-overwrite-over-other-files",
        lambda i, s: ["--output", str(s / "out"), "--overwrite", *ISDF],
        "eugen-isdf",
        lambda i, s: f"--output {s / 'out'} holds files that are not an eugen-isdf run (no metrics.json)",
        prepare=other_files,
    ),
    # ---------------------------------------------------------------- eugen-scenes
    Case(
        "scenes-check-nothing",
        lambda i, s: ["check"],
        "eugen-scenes",
        lambda i, s: "name at least one scene folder or transforms.json to check",
    ),
    Case(
        "scenes-measure-nothing",
        lambda i, s: ["measure", "--output", str(s / "scenes.json")],
        "eugen-scenes",
        lambda i, s: "name at least one scene folder to measure",
    ),
    Case(
        "scenes-mesh-without-vertices",
        lambda i, s: ["render", "--output", str(s / "out"), "--mesh", str(i / "empty.ply")],
        "eugen-scenes",
        lambda i, s: f"--mesh {i / 'empty.ply'}",
    ),
    Case(
        "scenes-missing-mesh",
        lambda i, s: ["render", "--output", str(s / "out"), "--mesh", str(s / "no.obj")],
        "eugen-scenes",
        lambda i, s: str(s / "no.obj"),
    ),
    Case(
        "scenes-output-exists",
        lambda i, s: ["render", "--output", str(s / "out"), "--width", "8", "--height", "8"],
        "eugen-scenes",
        lambda i, s: f"--output {s / 'out'} already exists",
        prepare=earlier_scene,
    ),
    Case(
        "scenes-camera-angle-0",
        lambda i, s: ["render", "--output", str(s / "out"), "--camera-angle-x", "0"],
        "eugen-scenes",
        lambda i, s: "--camera-angle-x must be in (0, pi) radians, got 0.0",
    ),
    Case(
        "scenes-radius-inside-the-near-plane",
        lambda i, s: ["render", "--output", str(s / "out"), "--radius", "1.5"],
        "eugen-scenes",
        lambda i, s: "--radius must exceed 2",
    ),
    Case(
        "scenes-overwrite-over-other-files",
        lambda i, s: ["render", "--output", str(s / "out"), "--width", "8", "--height", "8", "--overwrite"],
        "eugen-scenes",
        lambda i, s: f"--output {s / 'out'} holds files that are not a scene (no scene.json)",
        prepare=other_files,
    ),
    Case(
        "scenes-width-0",
        lambda i, s: ["render", "--output", str(s / "out"), "--width", "0"],
        "eugen-scenes",
        lambda i, s: "--width must be at least 1",
    ),
    Case(
        "scenes-check-8bit-depth",
        lambda i, s: ["check", str(i / "depth_8bit")],
        "eugen-scenes",
        lambda i, s: "depth_8bit/depth/frame_0000.png",
    ),
    Case(
        "scenes-check-missing",
        lambda i, s: ["check", str(s / "nowhere")],
        "eugen-scenes",
        lambda i, s: f"{s / 'nowhere'}: scene does not exist",
    ),
    Case(
        "scenes-check-bad-json",
        lambda i, s: ["check", str(i / "bad_json")],
        "eugen-scenes",
        lambda i, s: f"{i / 'bad_json' / 'transforms.json'}: unreadable JSON",
    ),
    Case(
        "scenes-check-deleted-depth-png",
        lambda i, s: ["check", str(i / "no_depth_png")],
        "eugen-scenes",
        lambda i, s: "depth/frame_0003.png is missing",
    ),
    Case(
        "scenes-check-degenerate-poses",
        lambda i, s: ["check", str(i / "one_point")],
        "eugen-scenes",
        lambda i, s: "all 28 cameras are at one point",
    ),
    Case(
        "scenes-trajectory-for-captured",
        lambda i, s: ["render", "--output", str(s / "out"), "--kind", "captured", "--layout", "trajectory"],
        "eugen-scenes",
        lambda i, s: "--layout trajectory is for --kind object",
    ),
    Case(
        "scenes-jpeg-quality-0",
        lambda i, s: ["render", "--output", str(s / "out"), "--kind", "unbounded", "--jpeg-quality", "0"],
        "eugen-scenes",
        lambda i, s: "--jpeg-quality must be between 1 and 100",
    ),
    Case(
        "scenes-frame-scale-0",
        lambda i, s: ["render", "--output", str(s / "out"), "--kind", "captured", "--frame-scale", "0"],
        "eugen-scenes",
        lambda i, s: "--frame-scale must be positive",
    ),
    # ---------------------------------------------------------------- eugen-fit-image
    Case(
        "fit-image-missing-file",
        lambda i, s: ["--image", str(s / "missing.png"), "--output", str(s / "out")],
        "eugen-fit-image",
        lambda i, s: f"{s / 'missing.png'}: --image file is missing",
    ),
    Case(
        "fit-image-text-file",
        lambda i, s: ["--image", str(i / "text.png"), "--output", str(s / "out")],
        "eugen-fit-image",
        lambda i, s: f"{i / 'text.png'}: --image file is unreadable",
    ),
    Case(
        "fit-image-unknown-name",
        lambda i, s: ["--image", "cameraman", "--output", str(s / "out")],
        "eugen-fit-image",
        lambda i, s: "--image 'cameraman'",
    ),
    Case(
        "fit-image-size-0",
        lambda i, s: ["--size", "0", "--output", str(s / "out")],
        "eugen-fit-image",
        lambda i, s: "--size must be an integer >= 1",
    ),
    Case(
        "fit-image-steps-0",
        lambda i, s: ["--steps", "0", "--output", str(s / "out")],
        "eugen-fit-image",
        lambda i, s: "--steps must be an integer >= 1",
    ),
    Case(
        "fit-image-nan-lr",
        lambda i, s: ["--lr", "nan", "--output", str(s / "out")],
        "eugen-fit-image",
        lambda i, s: "--lr must be a finite number",
    ),
    Case(
        "fit-image-sine-basis-dense",
        lambda i, s: ["--sine-basis", "--size", "8", "--steps", "1", "--output", str(s / "out")],
        "eugen-fit-image",
        lambda i, s: "--sine-basis needs EUGen layers whose output a frozen G reads",
    ),
    # ---------------------------------------------------------------- eugen-eval
    Case(
        "eval-missing-config",
        lambda i, s: ["--load-config", str(s / "none.yml"), "--output", str(s / "r.json")],
        "eugen-eval",
        lambda i, s: f"{s / 'none.yml'}: no such file (name a run's config.yml or its folder)",
    ),
    Case(
        "eval-garbage-config",
        lambda i, s: ["--load-config", str(i / "run_garbage" / "config.yml"), "--output", str(s / "r.json")],
        "eugen-eval",
        lambda i, s: f"{i / 'run_garbage' / 'config.yml'}: not a nerfstudio TrainerConfig",
    ),
    Case(
        "eval-no-checkpoints",
        lambda i, s: [
            "--load-config",
            str(run_dir(i, "run_no_ckpt") / "config.yml"),
            "--output",
            str(s / "r.json"),
        ],
        "eugen-eval",
        lambda i, s: "shipped/config.yml: no checkpoints",
    ),
    Case(
        "eval-truncated-checkpoint",
        lambda i, s: [
            "--load-config",
            str(run_dir(i, "run_truncated") / "config.yml"),
            "--output",
            str(s / "r.json"),
        ],
        "eugen-eval",
        lambda i, s: (
            f"{run_dir(i, 'run_truncated')}/nerfstudio_models/step-000004999.ckpt: not a readable checkpoint"
        ),
    ),
    Case(
        "eval-lpips-text-image",
        lambda i, s: ["lpips", str(i / "a.png"), str(i / "text.png")],
        "eugen-eval",
        lambda i, s: f"{i / 'text.png'}: image file is unreadable",
    ),
    Case(
        "eval-no-run",
        lambda i, s: ["runs", "--load-config", "--output", str(s / "r.json")],
        "eugen-eval",
        lambda i, s: "--load-config needs at least one run's config.yml",
    ),
    Case(
        "eval-output-under-a-file",
        lambda i, s: ["--load-config", str(TEACHER / "config.yml"), "--output", str(i / "a.png" / "r.json")],
        "eugen-eval",
        lambda i, s: f"--output {i / 'a.png' / 'r.json'}: cannot write into {i / 'a.png'}",
    ),
    Case(
        "eval-plots-a-file",
        lambda i, s: [
            "--load-config",
            str(TEACHER / "config.yml"),
            "--output",
            str(s / "r.json"),
            "--plots",
            str(i / "a.png"),
        ],
        "eugen-eval",
        lambda i, s: f"--plots {i / 'a.png'} is not a folder",
    ),
    Case(
        "eval-picture-under-a-file",
        lambda i, s: [
            "--load-config",
            str(TEACHER / "config.yml"),
            str(TEACHER / "config.yml"),
            "--output",
            str(s / "r.json"),
            "--side-by-side",
            str(i / "a.png" / "p.png"),
        ],
        "eugen-eval",
        lambda i, s: f"--side-by-side {i / 'a.png' / 'p.png'}: cannot write into {i / 'a.png'}",
    ),
    Case(
        "eval-picture-view-without-picture",
        lambda i, s: ["--load-config", str(TEACHER / "config.yml"), "--side-by-side-view", "1"],
        "eugen-eval",
        lambda i, s: "--side-by-side-view sets up --side-by-side's picture; add --side-by-side",
    ),
    Case(
        "eval-mistyped-subcommand",
        lambda i, s: ["rnus", "--load-config", str(TEACHER / "config.yml")],
        "eugen-eval",
        lambda i, s: "'rnus' is neither a subcommand (runs, lpips, setup-lpips) nor an existing path",
    ),
    # ---------------------------------------------------------------- eugen-distill
    Case(
        "distill-unknown-device",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--device", "gpu0"],
        "eugen-distill",
        lambda i, s: "--device 'gpu0' is not a torch device",
    ),
    Case(
        "distill-missing-teacher",
        lambda i, s: ["--teacher", str(s / "none"), "--output-dir", str(s / "out")],
        "eugen-distill",
        lambda i, s: f"{s / 'none'}: not a nerfstudio run directory",
    ),
    Case(
        "distill-truncated-checkpoint",
        lambda i, s: ["--teacher", str(run_dir(i, "run_truncated")), "--output-dir", str(s / "out")],
        "eugen-distill",
        lambda i, s: (
            f"{run_dir(i, 'run_truncated')}/nerfstudio_models/step-000004999.ckpt: not a readable checkpoint"
        ),
    ),
    Case(
        "distill-output-is-the-teacher",
        lambda i, s: [
            "--teacher",
            str(run_dir(i, "run_truncated")),
            "--output-dir",
            str(run_dir(i, "run_truncated")),
            "--overwrite",
        ],
        "eugen-distill",
        lambda i, s: f"--output-dir {run_dir(i, 'run_truncated')} holds the teacher's run",
    ),
    Case(
        "distill-output-above-the-teacher",
        lambda i, s: [
            "--teacher",
            str(run_dir(i, "run_truncated")),
            "--output-dir",
            str(i / "run_truncated"),
        ],
        "eugen-distill",
        lambda i, s: f"--output-dir {i / 'run_truncated'} holds the teacher's run",
    ),
    Case(
        "distill-output-inside-the-teacher",
        lambda i, s: [
            "--teacher",
            str(run_dir(i, "run_truncated")),
            "--output-dir",
            str(run_dir(i, "run_truncated") / "student"),
        ],
        "eugen-distill",
        lambda i, s: f"--output-dir {run_dir(i, 'run_truncated') / 'student'} is inside the teacher's run",
    ),
    Case(
        "distill-output-holds-other-files",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--overwrite"],
        "eugen-distill",
        lambda i, s: f"--output-dir {s / 'out'} holds files that are not an eugen-distill run",
        prepare=other_files,
    ),
    Case(
        "distill-eval-views-0",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--eval-views", "0"],
        "eugen-distill",
        lambda i, s: "eval-views must be >= 1",
    ),
    Case(
        "distill-negative-finetune-lr",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--finetune-lr", "-1"],
        "eugen-distill",
        lambda i, s: "finetune-lr must be a number > 0, got -1.0",
    ),
    Case(
        "distill-output-holds-a-run",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out")],
        "eugen-distill",
        lambda i, s: f"--output-dir {s / 'out'} already holds a run",
        prepare=earlier_student,
    ),
    Case(
        "distill-num-features-0",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--eugen.num-features", "0"],
        "eugen-distill",
        lambda i, s: "eugen.num-features must be an integer in 1..4096, got 0",
        parsed_by_tyro=True,
    ),
    Case(
        "distill-width-fraction-above-1",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--width-fraction", "3/2"],
        "eugen-distill",
        lambda i, s: "width-fraction must be in (0, 1] or None, got 1.5",
    ),
    Case(
        "distill-width-fraction-of-without-a-fraction",
        lambda i, s: [
            "--teacher",
            str(TEACHER),
            "--output-dir",
            str(s / "out"),
            "--width-fraction-of",
            "field_*.trunk.layers.7",
        ],
        "eugen-distill",
        lambda i, s: "width-fraction-of: expected PATTERN=FRACTION, got 'field_*.trunk.layers.7'",
    ),
    Case(
        "distill-width-fraction-of-matching-no-layer",
        lambda i, s: [
            "--teacher",
            str(TEACHER),
            "--output-dir",
            str(s / "out"),
            "--width-fraction-of",
            "field_*.head.layers.7=1/2",
        ],
        "eugen-distill",
        lambda i, s: (
            "width-fraction-of 'field_*.head.layers.7=1/2': 'field_*.head.layers.7' matches none of the layers replaced"
        ),
    ),
    Case(
        "distill-narrow-fraction-with-seeded-projections",
        lambda i, s: [
            "--teacher",
            str(TEACHER),
            "--output-dir",
            str(s / "out"),
            "--narrow-fraction",
            "1/2",
            "--projections",
            "seeded",
        ],
        "eugen-distill",
        lambda i, s: (
            "narrow-fraction keeps the first of the teacher's pivoted units; projections 'seeded' are not those"
        ),
    ),
    Case(
        "distill-narrow-fraction-for-a-baseline",
        lambda i, s: [
            "--teacher",
            str(TEACHER),
            "--output-dir",
            str(s / "out"),
            "--eugen.layer-type",
            "lowrank",
            "--narrow-fraction",
            "7/16",
        ],
        "eugen-distill",
        lambda i, s: "narrow-fraction narrows EUGen layers; eugen.layer-type lowrank has none",
    ),
    Case(
        "distill-num-features-with-width-fraction",
        lambda i, s: [
            "--teacher",
            str(TEACHER),
            "--output-dir",
            str(s / "out"),
            "--eugen.num-features",
            "32",
        ],
        "eugen-distill",
        lambda i, s: (
            "eugen.num-features 32 sets one m for every layer, width-fraction 5/8 one per layer: "
            "add --width-fraction None"
        ),
    ),
    Case(
        "distill-default-num-features-with-width-fraction",  # the default m, typed: not ignored silently
        lambda i, s: [
            "--teacher",
            str(TEACHER),
            "--output-dir",
            str(s / "out"),
            "--eugen.num-features",
            "64",
        ],
        "eugen-distill",
        lambda i, s: (
            "eugen.num-features 64 sets one m for every layer, width-fraction 5/8 one per layer: "
            "add --width-fraction None"
        ),
    ),
    Case(
        "distill-ridge-not-a-number",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--ridge", "abc"],
        "eugen-distill",
        lambda i, s: (
            "Error parsing --ridge: no type matching FLOAT|{auto} could be instantiated from ['abc']"
        ),
        parsed_by_tyro=True,
    ),
    Case(
        "distill-degree-0",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--eugen.degree", "0"],
        "eugen-distill",
        lambda i, s: "eugen.degree must be an integer in 1..4, got 0",
        parsed_by_tyro=True,
    ),
    Case(
        "distill-scaling-unknown",
        lambda i, s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out"), "--eugen.scaling", "log"],
        "eugen-distill",
        lambda i, s: "invalid choice 'log' for argument '--eugen.scaling'",
        parsed_by_tyro=True,
    ),
    Case(
        "distill-unknown-layer",
        lambda i, s: [
            "--teacher",
            str(TEACHER),
            "--output-dir",
            str(s / "out"),
            "--layers",
            "field_coarse.trunk.layers.99",
        ],
        "eugen-distill",
        lambda i, s: "field_coarse.trunk.layers.99",
    ),
    # ---------------------------------------------------------------- eugen-viewer
    Case(
        "viewer-missing-left",
        lambda i, s: ["--left", str(s / "none.yml"), "--right", str(TEACHER / "config.yml")],
        "eugen-viewer",
        lambda i, s: f"--left: {s / 'none.yml'}: no such file",
    ),
    Case(
        "viewer-right-without-checkpoints",
        lambda i, s: [
            "--left",
            str(TEACHER / "config.yml"),
            "--right",
            str(run_dir(i, "run_no_ckpt") / "config.yml"),
        ],
        "eugen-viewer",
        lambda i, s: "--right: " + str(run_dir(i, "run_no_ckpt")),
    ),
    Case(
        "viewer-truncated-checkpoint",
        lambda i, s: [
            "--left",
            str(TEACHER / "config.yml"),
            "--right",
            str(run_dir(i, "run_truncated") / "config.yml"),
            "--port",
            "0",
        ],
        "eugen-viewer",
        lambda i, s: (
            f"{run_dir(i, 'run_truncated')}/nerfstudio_models/step-000004999.ckpt: not a readable checkpoint"
        ),
    ),
    Case(
        "viewer-render-height-0",
        lambda i, s: [
            "--left",
            str(TEACHER / "config.yml"),
            "--right",
            str(TEACHER / "config.yml"),
            "--render-height",
            "0",
        ],
        "eugen-viewer",
        lambda i, s: "--render-height must be an integer >= 1",
    ),
    # ---------------------------------------------------------------- ns-train, parsed in-process (tyro)
    Case(
        "ns-train-missing-scene",
        lambda i, s: ["dense-nerf", "--data", str(s / "nowhere"), "--output-dir", str(s / "o")],
        "ns-train",
        lambda i, s: f"{s / 'nowhere'}: scene does not exist",
    ),
    Case(
        "ns-train-isdf-8bit-depth",
        lambda i, s: ["eugen-isdf", "--data", str(i / "depth_8bit"), "--output-dir", str(s / "o")],
        "ns-train",
        lambda i, s: "depth PNG must be single-channel 16-bit",
    ),
    Case(
        "ns-train-degenerate-poses",
        lambda i, s: ["eugen-nerf", "--data", str(i / "one_point"), "--output-dir", str(s / "o")],
        "ns-train",
        lambda i, s: "all 28 cameras are at one point",
    ),
    Case(
        "ns-train-blender-missing",
        lambda i, s: [
            "dense-nerf",
            "--output-dir",
            str(s / "o"),
            "blender-data",
            "--data",
            str(s / "nowhere"),
        ],
        "ns-train",
        lambda i, s: f"{s / 'nowhere'}: dataset folder does not exist",
    ),
    Case(
        "ns-train-non-finite-choice",
        lambda i, s: [*NS_ZIP(s), "--on-non-finite", "ignore"],
        "ns-train",
        lambda i, s: "invalid choice 'ignore' for argument '--on-non-finite'",
    ),
    # ---------------------------------------------------------------- ns-train: EUGen layer options (EUGenConfig)
    Case(
        "ns-train-layer-type-unknown",
        lambda i, s: [*NS_ZIP(s), "--pipeline.model.eugen.layer-type", "conv"],
        "ns-train",
        lambda i, s: "invalid choice 'conv' for argument '--pipeline.model.eugen.layer-type'",
    ),
    Case(
        "ns-train-snnk-with-sin",
        lambda i, s: [
            *NS_ZIP(s),
            "--pipeline.model.eugen.layer-type",
            "snnk",
            "--pipeline.model.eugen.feature-map",
            "sin",
        ],
        "ns-train",
        lambda i, s: "eugen.feature-map 'sin' is not supported by layer-type snnk",
    ),
    Case(
        "ns-train-scaling-unknown",
        lambda i, s: [*NS_ZIP(s), "--pipeline.model.eugen.scaling", "log"],
        "ns-train",
        lambda i, s: "invalid choice 'log' for argument '--pipeline.model.eugen.scaling'",
    ),
    Case(
        "ns-train-degree-0",
        lambda i, s: [*NS_ZIP(s), "--pipeline.model.eugen.degree", "0"],
        "ns-train",
        lambda i, s: "eugen.degree must be an integer in 1..4, got 0",
    ),
    Case(
        "ns-train-degree-5",
        lambda i, s: [*NS_ZIP(s), "--pipeline.model.eugen.degree", "5"],
        "ns-train",
        lambda i, s: "eugen.degree must be an integer in 1..4, got 5",
    ),
    Case(
        "ns-train-num-features-0",
        lambda i, s: [*NS_ZIP(s), "--pipeline.model.eugen.num-features", "0"],
        "ns-train",
        lambda i, s: "eugen.num-features must be an integer in 1..4096, got 0",
    ),
    Case(
        "ns-train-num-features-4097",
        lambda i, s: [*NS_ZIP(s), "--pipeline.model.eugen.num-features", "4097"],
        "ns-train",
        lambda i, s: "eugen.num-features must be an integer in 1..4096, got 4097",
    ),
    Case(
        "ns-train-num-features-not-int",
        lambda i, s: [*NS_ZIP(s), "--pipeline.model.eugen.num-features", "many"],
        "ns-train",
        lambda i, s: "--pipeline.model.eugen.num-features",
    ),
    Case(
        "ns-train-eugen-layer-index",
        lambda i, s: [*NS_ZIP(s), "--pipeline.model.eugen.color-layers", "7"],
        "ns-train",
        lambda i, s: "eugen.color-layers: layer index 7 does not exist",
    ),
]
if not __import__("torch").cuda.is_available():  # where there is a GPU these would train on it
    CASES += [
        Case(
            f"{script.removeprefix('eugen-')}-cuda-without-a-gpu",
            lambda i, s, args=args: [*args(s), "--device", "cuda"],
            script,
            lambda i, s: "--device cuda: no CUDA device is available here",
        )
        for script, args in (
            ("eugen-isdf", lambda s: ["--data", str(RGBD), "--output", str(s / "out")]),
            ("eugen-fit-image", lambda s: ["--size", "8", "--steps", "1", "--output", str(s / "out")]),
            ("eugen-distill", lambda s: ["--teacher", str(TEACHER), "--output-dir", str(s / "out")]),
        )
    ]


def _no_server(*args, **kwargs):
    raise AssertionError("eugen-viewer started serving despite bad input")


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_gives_one_clear_line_and_writes_nothing(
    case: Case, inputs: Path, scratch: Path, monkeypatch, capsys
):
    if case.prepare is not None:
        case.prepare(scratch)
    before_scratch, before_inputs = read_tree(scratch), read_tree(inputs)
    monkeypatch.setattr(sys, "argv", [case.script, *case.run(inputs, scratch)])
    monkeypatch.setenv("COLUMNS", "400")  # tyro's box wraps at the terminal width: keep a long tmp path whole
    if case.script == "eugen-viewer":  # bad input must stop it before it serves (else it would serve forever)
        monkeypatch.setattr("eugen_nerf.viewer.cli.viser.ViserServer", _no_server)
    with pytest.raises(SystemExit) as exit_info:
        entry(case.script)()
    out = capsys.readouterr()
    text = out.out + out.err
    assert exit_info.value.code == case.code, text
    flat = " ".join(text.replace("│", " ").split())  # tyro wraps its messages in a box
    assert case.names(inputs, scratch) in flat, text
    assert "Traceback" not in text
    if case.parsed_by_tyro:
        assert "Value error" in text or "Invalid choice" in text, text
    elif case.script.startswith("eugen-"):  # ours: one error line, the last, starting with the command's name
        lines = [line for line in text.splitlines() if line.strip()]
        assert lines[-1].startswith(f"{case.script}: error: ") and case.names(inputs, scratch) in lines[-1], (
            text
        )
        assert sum("error" in line.lower() for line in lines) == 1, text
    if case.script == "ns-train":
        assert not (scratch / "o").exists(), "ns-train created its --output-dir despite bad input"
    assert read_tree(scratch) == before_scratch
    assert read_tree(inputs) == before_inputs


def test_catalogue_covers_every_command():
    assert len(CASES) >= 30
    assert {case.script for case in CASES} == {
        "eugen-isdf",
        "eugen-scenes",
        "eugen-fit-image",
        "eugen-eval",
        "eugen-distill",
        "eugen-viewer",
        "ns-train",
    }


def test_ns_eval_on_a_truncated_checkpoint_is_one_line(inputs: Path, tmp_path: Path):
    """Stock ``ns-eval`` (a subprocess: its own exception handling) on our run with a truncated checkpoint."""
    before = read_tree(inputs)
    result = run(
        [
            str(BIN / "ns-eval"),
            "--load-config",
            str(run_dir(inputs, "run_truncated") / "config.yml"),
            "--output-path",
            str(tmp_path / "eval.json"),
        ],
        cwd=REPO,
    )
    text = result.stdout + result.stderr
    assert result.returncode == 1, text
    assert "Traceback" not in text
    assert "step-000004999.ckpt: not a readable checkpoint, truncated or corrupt" in " ".join(text.split())
    assert not (tmp_path / "eval.json").exists()
    assert read_tree(inputs) == before


def test_ns_train_non_finite_loss_stops_naming_the_step(tmp_path: Path):
    """A learning rate that overflows the weights: ns-train stops at the step, before the optimiser uses a NaN."""
    result = run(
        [
            str(BIN / "ns-train"),
            "dense-nerf",
            "--data",
            str(SCENE),
            "--output-dir",
            str(tmp_path / "out"),
            "--max-num-iterations",
            "30",
            "--vis",
            "tensorboard",
            "--optimizers.fields.optimizer.lr",
            "1e30",
            "--pipeline.datamanager.train-num-rays-per-batch",
            "64",
            "--pipeline.model.num-coarse-samples",
            "8",
            "--pipeline.model.num-importance-samples",
            "8",
            "--pipeline.model.trunk-width",
            "16",
            "--pipeline.model.head-width",
            "8",
        ],
        cwd=tmp_path,
    )
    text = result.stdout + result.stderr
    assert result.returncode == 1, text[-3000:]
    assert "Traceback" not in text
    assert "is nan (non-finite); stopped before the optimiser step" in " ".join(text.split()), text[-3000:]
    assert "step " in text
    assert not list((tmp_path / "out").rglob("*.ckpt"))


def test_an_output_folder_that_cannot_be_written_is_refused_before_any_work(tmp_path: Path, monkeypatch):
    """Checked on the nearest folder that exists (running as root, every folder is writable: access is faked)."""
    import os

    from eugen_nerf.inputs.errors import InputError
    from eugen_nerf.inputs.outputs import refuse_existing

    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path and real(path, mode))
    with pytest.raises(InputError, match=f"--output {tmp_path / 'a' / 'b'}: cannot write into {tmp_path}$"):
        refuse_existing(tmp_path / "a" / "b", False)
    monkeypatch.setattr(os, "access", real)
    refuse_existing(tmp_path / "a" / "b", False)  # writable: nothing to say
