"""The ns-process-data / COLMAP wrapper: tool checks, the registration count, its one-line refusal and the
pose report against a capture's true poses (no COLMAP run in the default suite)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from eugen_nerf.inputs.errors import InputError
from eugen_nerf.scenes import colmap
from eugen_nerf.scenes.alignment import Similarity
from eugen_nerf.scenes.colmap import (
    ColmapConfig,
    RegistrationError,
    check_registered,
    copy_photographs,
    process_data_command,
    read_registration,
    reference_poses,
    registration_report,
    require_tools,
    run_colmap,
    summary_line,
)
from eugen_nerf.scenes.photographs import Handheld, handheld_poses


def write_photographs(folder: Path, count: int) -> list[Path]:
    folder.mkdir(parents=True)
    paths = [folder / f"frame_{i + 1:05d}.jpg" for i in range(count)]
    for path in paths:
        path.write_bytes(b"not decoded by these tests")
    return paths


def write_process_data_output(dataset: Path, poses: dict[int, np.ndarray]) -> None:
    """What ns-process-data writes: a frame per registered photograph, renamed frame_00001.jpg ..."""
    dataset.mkdir(parents=True, exist_ok=True)
    frames = [
        {"file_path": f"images/frame_{i + 1:05d}.jpg", "transform_matrix": pose.tolist()}
        for i, pose in sorted(poses.items())
    ]
    meta = {"camera_model": "OPENCV", "fl_x": 200.0, "fl_y": 200.0, "cx": 112, "cy": 84, "w": 224, "h": 168}
    (dataset / "transforms.json").write_text(json.dumps({**meta, "frames": frames}))


def test_missing_colmap_names_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == "colmap" else "/usr/bin/" + tool)
    with pytest.raises(InputError, match=r"'colmap' is not installed.*Debian package 'colmap'"):
        require_tools()


def test_missing_colmap_is_refused_before_anything_is_written(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(shutil, "which", lambda tool: None)
    write_photographs(tmp_path / "images", 5)
    with pytest.raises(InputError, match="not installed"):
        run_colmap(ColmapConfig(tmp_path / "images", tmp_path / "dataset"))
    assert not (tmp_path / "dataset").exists()


def test_a_folder_of_other_files_is_never_made_a_dataset(tmp_path: Path) -> None:
    """Its images/ would be emptied of everything but the photographs: refused before COLMAP is even looked for."""
    write_photographs(tmp_path / "images", 5)
    other = tmp_path / "someone_elses"
    (other / "images").mkdir(parents=True)
    (other / "images" / "keep.png").write_bytes(b"mine")
    with pytest.raises(InputError, match="holds files that are not a dataset of this command"):
        run_colmap(ColmapConfig(tmp_path / "images", other))
    assert (other / "images" / "keep.png").read_bytes() == b"mine"


def test_process_data_runs_offline_on_the_cpu_on_the_exif_keeping_copies(tmp_path: Path) -> None:
    command = process_data_command(tmp_path / "out" / "images", tmp_path / "out", "sequential")
    assert command[command.index("--matching-method") + 1] == "sequential"
    assert "--no-gpu" in command and "vocab_tree" not in command
    assert command[3:5] == ["images", "--data"]
    assert "--skip-image-processing" in command  # its ffmpeg copy would drop the EXIF focal length
    assert command[command.index("--camera-type") + 1] == "perspective"
    assert "--no-refine-intrinsics" in process_data_command(
        tmp_path, tmp_path, "exhaustive", "pinhole", refine_intrinsics=False
    )


def test_photographs_are_copied_byte_for_byte_with_ns_process_data_names(tmp_path: Path) -> None:
    from PIL import Image

    from eugen_nerf.scenes.photographs import (
        Exposure,
        Lens,
        frame_exposures,
        read_exif_focal,
        write_photograph,
    )

    source = tmp_path / "photos"
    source.mkdir()
    lens, exposure = Lens(), Exposure()
    for index, name in enumerate(("b.jpg", "a.jpg")):
        rgb = np.full((12, 16, 3), 0.2 + 0.3 * index)
        write_photograph(source / name, rgb, lens, frame_exposures(2, exposure)[index], exposure, index, 90)
    images = tmp_path / "dataset" / "images"
    images.mkdir(parents=True)
    (images / "frame_00009.jpg").write_bytes(b"left from an earlier run")
    copy_photographs(sorted(source.iterdir()), images)
    assert sorted(p.name for p in images.iterdir()) == ["frame_00001.jpg", "frame_00002.jpg"]
    assert (images / "frame_00001.jpg").read_bytes() == (source / "a.jpg").read_bytes()
    assert read_exif_focal(images / "frame_00002.jpg")["focal_mm"] == pytest.approx(lens.focal_mm)
    with Image.open(images / "frame_00001.jpg") as image:
        assert image.size == (16, 12)


def test_registration_is_read_in_photograph_order(tmp_path: Path) -> None:
    poses = handheld_poses(Handheld(num_frames=10))
    registered = {i: poses[i] for i in (0, 1, 2, 5, 9)}
    write_process_data_output(tmp_path, registered)
    registration = read_registration(tmp_path, 10)
    assert sorted(registration.registered) == [0, 1, 2, 5, 9]
    np.testing.assert_allclose(registration.registered[5], poses[5])
    assert registration.fraction == pytest.approx(0.5)
    assert registration.intrinsics["w"] == 224


def test_too_few_registered_frames_is_one_line_with_the_count_and_what_a_capture_needs(
    tmp_path: Path,
) -> None:
    poses = handheld_poses(Handheld(num_frames=60))
    write_process_data_output(tmp_path, {i: poses[i] for i in range(13)})
    registration = read_registration(tmp_path, 60)
    with pytest.raises(RegistrationError) as error:
        check_registered(registration, tmp_path, 0.95)
    message = str(error.value)
    assert "\n" not in message
    assert "registered 13 of 60 photographs (22%" in message
    assert (
        "texture" in message and "overlap" in message and "parallax" in message and str(tmp_path) in message
    )
    check_registered(read_registration(tmp_path, 13), tmp_path, 0.95)  # all 13 of 13: accepted


def test_no_reconstruction_counts_as_none_registered(tmp_path: Path) -> None:
    registration = read_registration(tmp_path, 40)
    assert registration.fraction == 0.0
    with pytest.raises(RegistrationError, match="registered 0 of 40"):
        check_registered(registration, tmp_path, 0.95)


def test_report_aligns_colmap_poses_to_the_true_ones(tmp_path: Path) -> None:
    truth = handheld_poses(Handheld(num_frames=30))
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(3, 3)))
    q *= np.sign(np.linalg.det(q))
    colmap_frame = Similarity(0.2, q, np.array([3.0, 1.0, -2.0]))  # COLMAP's arbitrary frame and unit
    estimated = colmap_frame.apply_poses(truth)
    estimated[:, :3, 3] += rng.normal(scale=0.2 * 0.01, size=(30, 3))  # 1 cm of noise in COLMAP's units
    write_process_data_output(tmp_path, {i: estimated[i] for i in range(30) if i != 7})
    report = registration_report(read_registration(tmp_path, 30), truth)
    assert report["num_registered"] == 29 and report["unregistered"] == [7]
    errors = report["pose_errors"]
    assert errors["rotation_deg_max"] < 0.5  # the centres' noise tilts the fitted similarity a little
    assert 0.001 < errors["translation_over_radius_median"] < 0.02
    assert errors["scale"] == pytest.approx(5.0, rel=1e-3)
    assert "rotation error median" in summary_line(report)


def test_reference_must_list_one_pose_per_photograph(tmp_path: Path) -> None:
    poses = handheld_poses(Handheld(num_frames=5))
    reference = tmp_path / "transforms.json"
    reference.write_text(json.dumps({"frames": [{"transform_matrix": p.tolist()} for p in poses]}))
    assert reference_poses(reference, 5).shape == (5, 4, 4)
    with pytest.raises(InputError, match="lists 5 poses for 6 photographs"):
        reference_poses(reference, 6)


def test_run_colmap_reports_and_refuses_a_partial_reconstruction(monkeypatch, tmp_path: Path) -> None:
    """The whole command with ns-process-data replaced by a fake that registers 8 of 10 photographs."""
    truth = handheld_poses(Handheld(num_frames=10))
    write_photographs(tmp_path / "capture" / "images", 10)
    (tmp_path / "capture" / "reference").mkdir()
    frames = [
        {"file_path": f"../images/frame_{i + 1:05d}.jpg", "transform_matrix": p.tolist()}
        for i, p in enumerate(truth)
    ]
    (tmp_path / "capture" / "reference" / "transforms.json").write_text(json.dumps({"frames": frames}))

    def fake_process_data(command, log) -> int:
        output = Path(command[command.index("--output-dir") + 1])
        assert len(list((output / "images").iterdir())) == 10  # the copies COLMAP reads
        write_process_data_output(output, {i: truth[i] for i in range(8)})
        return 0

    monkeypatch.setattr(colmap, "require_tools", lambda: None)
    monkeypatch.setattr(colmap, "run_process_data", fake_process_data)
    config = ColmapConfig(tmp_path / "capture" / "images", tmp_path / "dataset")
    with pytest.raises(RegistrationError, match="registered 8 of 10"):
        run_colmap(config)
    report = json.loads((tmp_path / "dataset" / "registration.json").read_text())  # left for inspection
    assert report["registered_fraction"] == pytest.approx(0.8)
    assert report["pose_errors"]["rotation_deg_max"] < 1e-6
    assert report["reference"].endswith("reference/transforms.json")
    assert "--skip-image-processing" in report["ns_process_data"]
    config.min_registered = 0.8
    assert run_colmap(config)["num_registered"] == 8
