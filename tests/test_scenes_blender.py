"""The Blender scenes' Python side (descriptions, cameras, dataset files, checks, bad input) without Blender,
the shipped Blender scenes through nerfstudio's own parsers, and (slow) the renderer end to end."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes import SHIPPED_SCENES_DIR, SceneError
from eugen_nerf.scenes.blender import (
    SCENES,
    BlenderSceneConfig,
    FrameSpec,
    RenderSettings,
    check_description,
    job,
)
from eugen_nerf.scenes.blender.check import check_blender_scene
from eugen_nerf.scenes.blender.formats import nerfstudio_transforms, write_synthetic_transforms
from eugen_nerf.scenes.blender.generate import compare_renders, generate_blender_scene, plan
from eugen_nerf.scenes.blender.geometry import helix, lathe, tree, tubes
from eugen_nerf.scenes.blender.rigs import (
    SYNTHETIC_ANGLE_X,
    SYNTHETIC_RADIUS,
    every_nth,
    inward_orbits,
    synthetic_splits,
)
from eugen_nerf.scenes.blender.spec import object_bounds

OBJECT_SCENES = ("shiny", "branches", "patterns", "sculpture")
SHIPPED_SIZE = 128
SHIPPED_OBJECTS = tuple(f"{name}{SHIPPED_SIZE}" for name in OBJECT_SCENES)
SHIPPED_UNBOUNDED = f"garden{SHIPPED_SIZE}"
HAS_BLENDER = shutil.which("blender") is not None


# ---------------------------------------------------------------------------------------------- descriptions


@pytest.mark.parametrize("name", sorted(SCENES))
def test_every_scene_description_is_buildable_and_deterministic(name: str) -> None:
    scene = SCENES[name](0)
    check_description(scene)  # materials defined, assets present, objects inside the box
    assert scene.digest() == SCENES[name](0).digest()
    assert scene.kind == ("unbounded" if name == "garden" else "object")
    for asset in scene.assets:
        assert asset.data and asset.source and asset.licence


def test_seed_changes_the_procedural_geometry() -> None:
    assert SCENES["branches"](0).digest() != SCENES["branches"](1).digest()


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s["objects"].append({"shape": "teapot"}), "shape 'teapot'"),
        (
            lambda s: s["objects"].append({"shape": "cube", "material": "nope"}),
            "material 'nope' is not defined",
        ),
        (
            lambda s: s["objects"].append(
                {"shape": "cube", "location": (1.2, 0, 0), "scale": (0.5, 0.5, 0.5)}
            ),
            "outside the ±1.5 scene box",
        ),
        (
            lambda s: s["objects"].append(
                {"shape": "ply", "path": "missing.ply", "bounds": ([0] * 3, [0] * 3)}
            ),
            "not among the scene's assets",
        ),
        (lambda s: s["materials"].update(bad={"color": (2.0, 0.0, 0.0)}), "three numbers in [0, 1]"),
    ],
)
def test_check_description_names_what_blender_could_not_build(edit, message: str) -> None:
    from dataclasses import replace

    scene = SCENES["shiny"](0)
    data = {"objects": list(scene.objects), "materials": dict(scene.materials)}
    edit(data)
    broken = replace(scene, objects=tuple(data["objects"]), materials=data["materials"])
    with pytest.raises(InputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        check_description(broken)


def test_bounds_follow_rotation_and_scale() -> None:
    low, high = object_bounds(
        {"shape": "cube", "location": (0, 0, 1), "scale": (1, 0.1, 0.1), "rotation": (0, 0, 90)}
    )
    np.testing.assert_allclose(low, [-0.1, -1, 0.9], atol=1e-9)
    np.testing.assert_allclose(high, [0.1, 1, 1.1], atol=1e-9)


def test_procedural_meshes_are_closed_and_sized() -> None:
    segment = tubes(np.array([[0, 0, 0, 0, 0, 1, 0.1, 0.05]]), sides=8)
    assert len(segment.vertices) == 18 and len(segment.faces) == 32
    edges = np.sort(
        np.concatenate([segment.faces[:, [0, 1]], segment.faces[:, [1, 2]], segment.faces[:, [2, 0]]]), axis=1
    )
    _, counts = np.unique(edges, axis=0, return_counts=True)
    assert np.all(counts == 2)  # watertight: every edge is shared by two triangles
    bowl = lathe(np.array([(0.0, 0.0), (1.0, 0.0), (1.0, 1.0)]), segments=16)
    assert np.abs(np.linalg.norm(bowl.vertices[16:, :2], axis=1) - 1.0).max() < 1e-12
    spring = helix(turns=2, radius=0.2, height=1.0, wire=0.01)
    assert spring.shape[1] == 8 and np.isclose(spring[-1, 5], 1.0)
    branches = tree(np.random.default_rng(0))
    assert branches[:, 6:].min() >= 0.004 and branches[:, 6:].max() <= 0.05 and len(branches) > 100


# --------------------------------------------------------------------------------------------------- cameras


def test_synthetic_rig_matches_nerf_synthetic() -> None:
    splits = synthetic_splits((100, 100, 200), seed=0)
    assert {k: len(v) for k, v in splits.items()} == {"train": 100, "val": 100, "test": 200}
    for poses in splits.values():
        np.testing.assert_allclose(np.linalg.norm(poses[:, :3, 3], axis=1), SYNTHETIC_RADIUS)
        forward = -poses[:, :3, 2]  # cameras look down -z at the origin
        np.testing.assert_allclose(np.einsum("ni,ni->n", forward, -poses[:, :3, 3] / SYNTHETIC_RADIUS), 1.0)
    assert splits["train"][:, 2, 3].min() >= 0 and splits["val"][:, 2, 3].min() >= 0
    np.testing.assert_allclose(splits["test"][:, 2, 3], SYNTHETIC_RADIUS * math.sin(math.radians(30)))
    smaller = synthetic_splits((40, 8, 16), seed=0)  # the shipped scenes' cameras are the full split's first
    np.testing.assert_allclose(smaller["train"], splits["train"][:40])
    np.testing.assert_allclose(smaller["val"], splits["val"][:8])
    assert not np.allclose(synthetic_splits((40, 8, 16), seed=1)["train"], smaller["train"])


def test_inward_orbits_circle_the_target_at_several_heights() -> None:
    target = np.array([0.0, 0.0, 0.85])
    poses = inward_orbits(48, target, np.random.default_rng(0))
    offsets = poses[:, :3, 3] - target
    distance = np.linalg.norm(offsets, axis=1)
    assert distance.min() >= 2.6 and distance.max() <= 3.4
    elevation = np.degrees(np.arcsin(offsets[:, 2] / distance))
    rings = [elevation[:16].mean(), elevation[16:32].mean(), elevation[32:].mean()]
    assert rings[0] < rings[1] < rings[2]
    aim = np.einsum("ni,ni->n", -poses[:, :3, 2], -offsets / distance[:, None])
    assert aim.min() > 0.99  # each camera looks (nearly) at the target
    assert every_nth(16) == {
        "train": [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15],
        "val": [0, 8],
        "test": [0, 8],
    }


# ---------------------------------------------------------------------------------------------- dataset files


def test_synthetic_transforms_are_nerf_synthetic_files(tmp_path: Path) -> None:
    splits = {
        split: [FrameSpec(f"{split}/r_{i}", pose) for i, pose in enumerate(poses)]
        for split, poses in synthetic_splits((3, 1, 2), 0).items()
    }
    write_synthetic_transforms(tmp_path, SYNTHETIC_ANGLE_X, splits)
    meta = json.loads((tmp_path / "transforms_train.json").read_text())
    assert meta["camera_angle_x"] == SYNTHETIC_ANGLE_X
    assert [f["file_path"] for f in meta["frames"]] == ["./train/r_0", "./train/r_1", "./train/r_2"]
    np.testing.assert_allclose(
        meta["frames"][1]["transform_matrix"], splits["train"][1].camera_to_world, atol=1e-9
    )


def test_nerfstudio_transforms_hold_intrinsics_and_splits() -> None:
    poses = inward_orbits(16, np.zeros(3), np.random.default_rng(0))
    frames = [FrameSpec(f"images/frame_{i + 1:05d}", pose) for i, pose in enumerate(poses)]
    splits = {split: [frames[i] for i in indices] for split, indices in every_nth(16).items()}
    meta = nerfstudio_transforms(200, 200, 1.0, splits, ".jpg")
    assert meta["fl_x"] == pytest.approx(100.0 / math.tan(0.5)) and (meta["cx"], meta["w"]) == (100.0, 200)
    assert [f["file_path"] for f in meta["frames"]] == [f"images/frame_{i:05d}.jpg" for i in range(1, 17)]
    assert meta["test_filenames"] == ["images/frame_00001.jpg", "images/frame_00009.jpg"]
    assert len(meta["train_filenames"]) == 14


def test_job_carries_settings_cameras_and_seed(tmp_path: Path) -> None:
    scene = SCENES["shiny"](0)
    settings = RenderSettings.for_scene(scene, 64, 64, samples=16)
    pose = synthetic_splits((1, 1, 1), 0)["test"][0]
    document = job(scene, settings, [FrameSpec("test/r_0", pose)], SYNTHETIC_ANGLE_X, tmp_path, 7)
    assert document["sampling_seed"] == 7 and document["render"]["samples"] == 16
    assert document["render"]["transparent"] and document["render"]["format"] == "PNG"
    assert document["frames"][0]["file_path"] == "test/r_0"
    np.testing.assert_allclose(document["frames"][0]["transform_matrix"], pose, atol=1e-9)
    json.dumps(document)  # what Blender reads is plain JSON
    garden = RenderSettings.for_scene(SCENES["garden"](0), 64, 64)
    assert not garden.transparent and garden.format == "JPEG"


def test_noise_floor_psnr_composites_on_white(tmp_path: Path) -> None:
    for folder, value in (("a", 100), ("b", 110)):
        (tmp_path / folder / "test").mkdir(parents=True)
        image = np.zeros((4, 4, 4), dtype=np.uint8)
        image[:2, :, :3], image[:2, :, 3] = value, 255  # top half opaque, bottom half transparent
        iio.imwrite(tmp_path / folder / "test" / "r_0.png", image)
    result = compare_renders(tmp_path / "a", tmp_path / "b", ["test/r_0"], ".png")
    assert result["psnr"] == pytest.approx(-10 * math.log10(0.5 * (10 / 255) ** 2), abs=0.01)


# ------------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "options, message",
    [
        ({"resolution": 8}, "--resolution 8 is out of range"),
        ({"resolution": 5000}, "--resolution 5000 is out of range"),
        ({"views": (10, 0, 5)}, "--views 10 0 5 is out of range"),
        ({"views": (10, 5)}, "takes three counts"),
        ({"name": "garden", "views": (10, 5, 5)}, "takes one count"),
        ({"name": "garden", "views": (4,)}, "out of range"),
        ({"samples": 0}, "--samples 0 is out of range"),
        ({"noise_floor_views": 500}, "--noise-floor-views 500"),
    ],
)
def test_out_of_range_options_fail_in_one_line(tmp_path: Path, options: dict, message: str) -> None:
    config = BlenderSceneConfig(**{"name": "shiny", "output": tmp_path / "out", **options})
    with pytest.raises(InputError, match=message):
        generate_blender_scene(config)
    assert not (tmp_path / "out").exists() and not any(tmp_path.iterdir())


def test_missing_blender_names_the_package_and_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("EUGEN_BLENDER", raising=False)
    with pytest.raises(InputError, match="install the Debian package `blender`"):
        generate_blender_scene(BlenderSceneConfig("shiny", tmp_path / "out", resolution=32, views=(1, 1, 1)))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("overwrite", [False, True])
def test_output_holding_something_else_is_refused(tmp_path: Path, overwrite: bool) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(
        InputError, match="holds files that are not this scene; choose an empty or new folder"
    ):
        generate_blender_scene(
            BlenderSceneConfig("shiny", tmp_path / "out", resolution=32, views=(1, 1, 1), overwrite=overwrite)
        )
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]


def test_cli_reports_bad_input_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    from eugen_nerf.scenes import cli

    monkeypatch.setattr(
        "sys.argv", ["eugen-scenes", "blender", "shiny", "--output", str(tmp_path / "o"), "--resolution", "4"]
    )
    with pytest.raises(SystemExit) as exit_info:
        cli.entrypoint()
    assert exit_info.value.code == 2
    out = capsys.readouterr().err.strip().splitlines()
    assert out == ["eugen-scenes: error: --resolution 4 is out of range: use 16 to 2048 pixels"]


def test_the_blender_script_ships_in_the_package() -> None:
    from eugen_nerf.scenes.blender.runner import SCRIPT

    text = SCRIPT.read_text()
    assert "import bpy" in text and "use_denoising = False" in text and '"Standard"' in text


# ---------------------------------------------------------------------------------------------- shipped scenes


@pytest.mark.parametrize("name", SHIPPED_OBJECTS)
def test_shipped_object_scenes_load_through_blender_data(name: str) -> None:
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

    root = SHIPPED_SCENES_DIR / name
    summary = check_blender_scene(root)
    record = json.loads((root / "scene.json").read_text())
    assert summary is not None and summary.split_sizes == record["views"]
    assert record["blender"].startswith("Blender ") and record["render"]["view_transform"] == "Standard"
    assert record["measured"]["noise_floor"]["psnr"] >= 35.0
    parser = BlenderDataParserConfig(data=root).setup()
    for split in ("train", "val", "test"):
        outputs = parser.get_dataparser_outputs(split)
        assert len(outputs.image_filenames) == record["views"][split]
        assert float(outputs.cameras.fx[0]) == pytest.approx(
            0.5 * SHIPPED_SIZE / math.tan(0.5 * SYNTHETIC_ANGLE_X), rel=1e-5
        )
    image = iio.imread(outputs.image_filenames[0])
    assert (
        image.shape == (SHIPPED_SIZE, SHIPPED_SIZE, 4)
        and image[..., 3].min() == 0
        and image[..., 3].max() == 255
    )


def test_shipped_unbounded_scene_loads_through_nerfstudio_data() -> None:
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig

    root = SHIPPED_SCENES_DIR / SHIPPED_UNBOUNDED
    summary = check_blender_scene(root)
    record = json.loads((root / "scene.json").read_text())
    assert summary is not None and summary.num_frames == record["views"]["frames"]
    assert record["measured"]["noise_floor"]["psnr"] >= 35.0
    outputs = NerfstudioDataParserConfig(data=root).setup().get_dataparser_outputs("train")
    assert len(outputs.image_filenames) == record["views"]["train"]
    assert iio.imread(outputs.image_filenames[0]).shape == (SHIPPED_SIZE, SHIPPED_SIZE, 3)


@pytest.mark.parametrize("name", [*SHIPPED_OBJECTS, SHIPPED_UNBOUNDED])
def test_shipped_scenes_are_what_their_command_renders(name: str, tmp_path: Path) -> None:
    """The shipped folder's fingerprint is the one its recorded command plans now: rerunning the command is
    "up to date", and a change to a scene's description cannot leave a stale shipped scene behind."""
    import shlex

    import tyro

    from eugen_nerf.scenes import cli

    record = json.loads((SHIPPED_SCENES_DIR / name / "scene.json").read_text())
    config = tyro.cli(
        cli.Commands, args=shlex.split(record["command"])[1:]
    )  # the recorded command, as the CLI parses it
    assert isinstance(config, cli.Blender) and config.output == Path("scenes") / name
    assert plan(config).fingerprint(config.seed) == record["fingerprint"]


def test_cli_check_accepts_every_shipped_blender_scene(monkeypatch, capsys) -> None:
    from eugen_nerf.scenes import cli

    paths = [str(SHIPPED_SCENES_DIR / name) for name in (*SHIPPED_OBJECTS, SHIPPED_UNBOUNDED)]
    monkeypatch.setattr("sys.argv", ["eugen-scenes", "check", *paths])
    cli.entrypoint()
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(paths) and all(": OK - " in line for line in lines)


def test_check_rejects_a_broken_blender_scene(tmp_path: Path) -> None:
    root = shutil.copytree(SHIPPED_SCENES_DIR / SHIPPED_OBJECTS[0], tmp_path / "scene")
    image = iio.imread(root / "train" / "r_0.png")
    iio.imwrite(root / "train" / "r_0.png", image[..., :3])
    with pytest.raises(SceneError, match="expected an RGBA PNG"):
        check_blender_scene(root)


# ---------------------------------------------------------------------------------------------- with Blender

needs_blender = pytest.mark.skipif(
    not HAS_BLENDER, reason="the `blender` program is not installed (apt package blender)"
)


@pytest.mark.slow
@needs_blender
def test_tiny_scene_end_to_end_is_cached_and_checked(tmp_path: Path) -> None:
    config = BlenderSceneConfig(
        "shiny", tmp_path / "tiny", resolution=24, views=(2, 1, 1), samples=4, noise_floor_views=1, quiet=True
    )
    root = generate_blender_scene(config)
    summary = check_blender_scene(root)
    assert summary is not None and summary.split_sizes == {"train": 2, "val": 1, "test": 1}
    record = json.loads((root / "scene.json").read_text())
    assert record["measured"]["frames_rendered"] == 4 and "noise_floor" in record["measured"]
    image = iio.imread(root / "test" / "r_0.png")
    assert image[..., 3].max() == 255 and image[..., 3].min() == 0  # an object on a transparent film
    before = (root / "test" / "r_0.png").stat().st_mtime_ns
    generate_blender_scene(config)  # cached: nothing rendered again
    assert (root / "test" / "r_0.png").stat().st_mtime_ns == before
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


@pytest.mark.slow
@needs_blender
def test_interrupted_render_resumes_without_rendering_twice(tmp_path: Path) -> None:
    from eugen_nerf.inputs.outputs import staging_path

    config = BlenderSceneConfig(
        "branches", tmp_path / "b", resolution=16, views=(2, 1, 1), samples=2, quiet=True
    )
    staged = staging_path(config.output)
    p = plan(config)
    (staged / "train").mkdir(parents=True)
    iio.imwrite(
        staged / "train" / "r_0.png", np.zeros((16, 16, 4), np.uint8)
    )  # as if an earlier run had made it
    (staged / ".work").mkdir()
    (staged / ".work" / "fingerprint").write_text(p.fingerprint(config.seed))
    root = generate_blender_scene(config)
    record = json.loads((root / "scene.json").read_text())
    assert record["measured"]["frames_rendered"] == 3  # r_0 was on disk already
    assert iio.imread(root / "train" / "r_0.png").max() == 0


@pytest.mark.slow
@needs_blender
@pytest.mark.parametrize("name", [*SHIPPED_OBJECTS, SHIPPED_UNBOUNDED])
def test_shipped_scene_regenerates_with_the_same_seed(name: str, tmp_path: Path) -> None:
    """Two frames rendered again from scene.json's settings match the shipped ones to at least 35 dB."""
    from eugen_nerf.scenes.blender.generate import rerender

    root = SHIPPED_SCENES_DIR / name
    record = json.loads((root / "scene.json").read_text())
    names = (
        ["test/r_0", "train/r_1"]
        if record["kind"] == "object"
        else ["images/frame_00001", "images/frame_00002"]
    )
    rerender(root, names, tmp_path)
    suffix = ".png" if record["kind"] == "object" else ".jpg"
    assert compare_renders(root, tmp_path, names, suffix)["min_frame_psnr"] >= 35.0


# --------------------------------------------------------------------------------------------- view dependence


def test_view_dependence_is_small_on_a_lambertian_scene_and_grows_with_view_dependent_colour() -> None:
    from dataclasses import replace

    from eugen_nerf.scenes.blender.measure import views_of_nerfstudio_scene
    from eugen_nerf.scenes.view_dependence import _project, _unproject, colour_spread

    views = views_of_nerfstudio_scene(SHIPPED_SCENES_DIR / "bunny64")[:20]
    rows, cols = np.nonzero(views[0].depth > 0)
    r, c, z = _project(views[0], _unproject(views[0], rows, cols))
    np.testing.assert_allclose(r, rows + 0.5, atol=1e-4)  # unproject then project lands on the pixel centre
    np.testing.assert_allclose(c, cols + 0.5, atol=1e-4)
    np.testing.assert_allclose(z, views[0].depth[rows, cols], rtol=1e-5)
    lambertian = colour_spread(views, stride=4)
    assert lambertian["points"] > 50 and lambertian["mean_spread"] < 0.05
    # a colour that depends on the view (a grey offset alternating between views: std 0.1 exactly)
    shifted = [
        replace(v, rgb=np.clip(v.rgb * 0.6 + (0.3 if k % 2 else 0.1), 0, 1)) for k, v in enumerate(views)
    ]
    assert colour_spread(shifted, stride=4)["mean_spread"] > lambertian["mean_spread"] + 0.05


def test_measure_without_view_dependence_reads_every_generated_kind(tmp_path) -> None:
    """Object, unbounded, photo capture and RGB-D room: each record gives its size, frames and noise floor."""
    from eugen_nerf.scenes.blender.measure import measure_scene

    expected = {
        "shiny128": ("object", {"resolution": 128}),
        "garden128": ("unbounded", {"resolution": 128}),
        "garden_photos": ("photo-capture", {"width": 224, "height": 168, "frames": 100}),
        "room_rgbd": ("rgbd-room", {"width": 160, "height": 120, "frames": 100}),
    }
    for name, (kind, size) in expected.items():
        result = measure_scene(SHIPPED_SCENES_DIR / name, tmp_path, view_dependence=False)
        assert result["kind"] == kind and "view_dependence" not in result
        assert {k: result[k] for k in size} == size
        assert len(result["content_sha256"]) == 64 and result["noise_floor"]["psnr"] >= 35.0


def test_measure_replaces_its_scenes_entries_and_keeps_the_file_s_other_records(tmp_path) -> None:
    from eugen_nerf.scenes.blender.measure import Measure

    room = str(SHIPPED_SCENES_DIR / "room_rgbd")
    output = tmp_path / "scenes.json"
    records = [{"scene": "old"}, {"scene": room, "stale": True}, {"scene": "other"}]
    output.write_text(json.dumps({"scenes": records, "regenerated": {"psnr": 99.0}}))
    Measure((SHIPPED_SCENES_DIR / "room_rgbd",), output=output, view_dependence=False).main()
    report = json.loads(output.read_text())
    assert report["regenerated"] == {"psnr": 99.0}
    # the scene measured again replaces its entry where it stood; the scenes not measured keep theirs
    assert [r["scene"] for r in report["scenes"]] == ["old", room, "other"]
    assert "stale" not in report["scenes"][1] and "content_sha256" in report["scenes"][1]
    with pytest.raises(InputError, match="at least one scene"):
        Measure((), output=output, view_dependence=False).main()
    assert json.loads(output.read_text()) == report


def test_our_default_dataparser_reads_a_nerf_synthetic_folder_as_blender_data_does() -> None:
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

    from eugen_nerf.scenes.dataparser import dataparser_config
    from eugen_nerf.scenes.validate import validate_data

    root = SHIPPED_SCENES_DIR / SHIPPED_OBJECTS[0]
    validate_data(root, dataparser_config(root))  # what our methods check before training
    ours = dataparser_config(root).setup().get_dataparser_outputs("val")
    stock = BlenderDataParserConfig(data=root).setup().get_dataparser_outputs("val")
    assert ours.image_filenames == stock.image_filenames
    np.testing.assert_allclose(ours.cameras.camera_to_worlds.numpy(), stock.cameras.camera_to_worlds.numpy())
    assert ours.alpha_color.tolist() == [1.0, 1.0, 1.0]
    from eugen_nerf.scenes.framing import scene_json_hint

    # the framing the format declares (blender-data's near/far, white), though the disc reaches the border
    assert scene_json_hint(root) == {"near": 2.0, "far": 6.0, "background": "white"}
    with pytest.raises(SceneError, match="a NeRF-Synthetic folder .* blender-data"):
        from eugen_nerf.scenes import validate_scene

        validate_scene(root)


def test_staging_of_other_or_unknown_settings_is_started_again(tmp_path: Path) -> None:
    """A render resumes only the staging folder its own settings left; one of other settings, or one stopped
    while it was published (its record of settings already gone), would mix old frames into it."""
    from eugen_nerf.scenes.blender.generate import start_staging

    output = tmp_path / "scene"
    staging, work = start_staging(output, "settings A")
    (staging / "frame.png").write_bytes(b"A")
    assert start_staging(output, "settings A") == (staging, work) and (staging / "frame.png").exists()
    start_staging(output, "settings B")
    assert not (staging / "frame.png").exists()
    (staging / "frame.png").write_bytes(b"B")
    (work / "fingerprint").unlink()  # stopped between dropping .work's record and the swap
    start_staging(output, "settings B")
    assert not (staging / "frame.png").exists() and (work / "fingerprint").read_text() == "settings B"
