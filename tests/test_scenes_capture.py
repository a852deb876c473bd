"""Capture-style scenes: the captured variant's frame is undone by the dataparser, and the framing
(near/far, background, contraction) follows the data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from eugen_nerf.scenes import dataparser_config
from eugen_nerf.scenes.framing import Framing, border_background, choose_framing, focus_point

SCENES = Path(__file__).resolve().parents[1] / "scenes"
CANONICAL, CAPTURED = SCENES / "bunny64", SCENES / "bunny64_captured"


def parsed_poses(scene: Path, split: str = "train") -> tuple[np.ndarray, object]:
    config = dataparser_config(scene).resolved()
    outputs = config.setup().get_dataparser_outputs(split)
    return outputs.cameras.camera_to_worlds.numpy().astype(np.float64), outputs


def similarity(source: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Umeyama: scale, rotation, translation with target ~ scale * R @ source + t."""
    mu_s, mu_t = source.mean(0), target.mean(0)
    cov = (target - mu_t).T @ (source - mu_s) / len(source)
    u, d, vt = np.linalg.svd(cov)
    sign = np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))])
    rotation = u @ sign @ vt
    scale = float(np.trace(np.diag(d) @ sign) / ((source - mu_s) ** 2).sum(1).mean())
    return scale, rotation, mu_t - scale * rotation @ mu_s


def test_captured_scene_is_written_in_another_frame_as_a_capture():
    meta = json.loads((CAPTURED / "transforms.json").read_text())
    assert meta["camera_model"] == "OPENCV" and meta["k1"] != 0.0
    assert all(frame["file_path"].endswith(".jpg") for frame in meta["frames"])
    scene = json.loads((CAPTURED / "scene.json").read_text())
    assert not {"near", "far", "background"} & set(scene)  # nothing declares the frame
    written = np.array([frame["transform_matrix"] for frame in meta["frames"]])[:, :3, 3]
    canonical = np.array(
        [f["transform_matrix"] for f in json.loads((CANONICAL / "transforms.json").read_text())["frames"]]
    )
    scale, _, offset = similarity(canonical[:, :3, 3], written)
    assert scale == pytest.approx(3.7, rel=1e-6) and np.linalg.norm(offset) > 10.0


def test_captured_normalised_poses_match_the_canonical_ones_up_to_a_similarity():
    canonical, _ = parsed_poses(CANONICAL)
    captured, outputs = parsed_poses(CAPTURED)
    scale, rotation, translation = similarity(canonical[:, :3, 3], captured[:, :3, 3])
    mapped = scale * canonical[:, :3, 3] @ rotation.T + translation
    assert np.abs(mapped - captured[:, :3, 3]).max() < 1e-3
    np.testing.assert_allclose(rotation @ canonical[:, :3, :3], captured[:, :3, :3], atol=1e-3)
    # and nerfstudio's orientation/centring plus our object scale undo the written frame's offset and scale
    assert scale == pytest.approx(1.0, rel=0.02) and np.linalg.norm(translation) < 0.05
    assert abs(float(outputs.dataparser_scale) - 1.0 / 3.7) < 0.01
    assert outputs.cameras.distortion_params[0, 0].item() == pytest.approx(-0.05)


def test_framing_from_data_is_the_same_for_both_frames():
    from eugen_nerf.scenes import load_scene

    canonical = load_scene(CANONICAL)
    images = [frame.rgb() for frame in canonical.frames[:8]]
    poses = np.stack([frame.camera_to_world for frame in canonical.frames])
    captured, _ = parsed_poses(CAPTURED)
    from_canonical = choose_framing(poses, images)  # as if it had no scene.json
    from_captured = choose_framing(captured, images)
    assert from_canonical.kind == from_captured.kind == "object" and not from_captured.contraction
    assert (from_canonical.near, from_canonical.far) == pytest.approx((2.0, 6.0), rel=1e-3)
    assert (from_captured.near, from_captured.far) == pytest.approx((2.0, 6.0), rel=0.02)
    # the object's frame: the focus point at the origin, the nearest camera 4 units away, in both frames
    assert from_canonical.unit == pytest.approx(1.0, rel=1e-6) and from_captured.unit == pytest.approx(
        1.0, rel=0.02
    )
    assert np.allclose(from_captured.origin, focus_point(captured), atol=1e-9)
    # the shipped scene's own declaration gives the same planes
    hinted = choose_framing(poses, images, {"near": 2.0, "far": 6.0, "background": "white"})
    assert (hinted.near, hinted.far, hinted.source) == (2.0, 6.0, "scene.json")


def test_border_background_and_focus_decide_the_kind():
    white, black = np.ones((16, 16, 3)), np.zeros((16, 16, 3))
    photo = np.random.default_rng(0).uniform(size=(16, 16, 3))
    assert border_background([white]) == "white" and border_background([black]) == "black"
    assert border_background([photo]) is None
    parallel = np.tile(np.eye(4)[:3], (5, 1, 1))
    parallel[:, 0, 3] = np.arange(5)  # forward-facing: parallel optical axes meet nowhere
    assert focus_point(parallel) is None
    framing = choose_framing(parallel, [white])
    assert framing.kind == "unbounded" and framing.contraction and framing.background == "last_sample"


def test_command_line_overrides_win_and_bad_planes_are_refused():
    framing = Framing("object", 2.0, 6.0, "white", False, "data")
    assert framing.override() is framing
    changed = framing.override(near=1.0, background="black", contraction=True)
    assert (changed.near, changed.far, changed.background, changed.contraction) == (1.0, 6.0, "black", True)
    assert "command line" in changed.source
    with pytest.raises(ValueError, match="near plane 7.0 and far plane 6.0"):
        framing.override(near=7.0)


def test_a_copy_with_re_expressed_cameras_no_longer_trusts_its_scene_json(tmp_path):
    """The issue's case: bunny32 copied with its scene.json, cameras rotated, offset ~13 and scaled 3.7x."""
    import shutil

    from eugen_nerf.scenes.framing import declared_frame_mismatch, scene_json_hint
    from eugen_nerf.scenes.generate import random_rotation

    copy = shutil.copytree(
        SCENES / "bunny32", tmp_path / "copy", ignore=shutil.ignore_patterns("transforms_*")
    )
    meta = json.loads((copy / "transforms.json").read_text())
    rotation, offset = random_rotation(3), np.array([11.0, -6.0, 3.0])
    for frame in meta["frames"]:
        pose = np.array(frame["transform_matrix"])
        pose[:3, :3], pose[:3, 3] = rotation @ pose[:3, :3], 3.7 * rotation @ pose[:3, 3] + offset
        frame["transform_matrix"] = pose.tolist()
    (copy / "transforms.json").write_text(json.dumps(meta))
    hint = scene_json_hint(copy)
    poses = np.array([f["transform_matrix"] for f in meta["frames"]])
    assert hint is not None and "outside near 2 / far 6" in declared_frame_mismatch(hint, poses)
    resolved = dataparser_config(copy).resolved()  # not verbatim: brought back into the object frame
    assert (resolved.orientation_method, resolved.center_method, resolved.auto_scale_poses) == (
        "up",
        "focus",
        False,
    )
    assert resolved.scale_factor == pytest.approx(1.0 / 3.7, rel=1e-3)
    original = np.array(
        [
            f["transform_matrix"]
            for f in json.loads((SCENES / "bunny32" / "transforms.json").read_text())["frames"]
        ]
    )
    assert declared_frame_mismatch(hint, original, at_origin=True) is None  # the shipped scene itself agrees
