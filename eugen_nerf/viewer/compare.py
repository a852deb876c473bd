"""Two trained runs of one scene seen through one camera: renders, timings, PSNR on the nearest test view.

Everything here is independent of the browser, so it is tested directly; :mod:`eugen_nerf.viewer.cli`
wires it to a viser server.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import viser.transforms as vtf
from nerfstudio.cameras.cameras import Cameras, CameraType
from nerfstudio.engine.trainer import TrainerConfig
from nerfstudio.pipelines.base_pipeline import Pipeline
from nerfstudio.viewer.utils import CameraState, get_camera
from torch import Tensor

from eugen_nerf.eval.runs import final_rgb, ground_truth_image
from eugen_nerf.inputs.errors import InputError

VISER_SCALE = 10.0
"""Viser world units per scene unit, as in nerfstudio's viewer (``VISER_NERFSTUDIO_SCALE_RATIO``)."""


class SceneMismatchError(InputError):
    """The two runs were trained on different scenes, so neither their images nor their PSNRs compare."""


def scene_data_path(config: TrainerConfig) -> Path:
    """The scene a run was trained on, as nerfstudio's datamanager resolves it."""
    datamanager = config.pipeline.datamanager
    for data in (datamanager.data, getattr(datamanager.dataparser, "data", None), config.data):
        if data is not None:
            return Path(data)
    raise ValueError("the run's config names no scene data path")


def scene_fingerprint(data: Path) -> str:
    """SHA-256 of the scene's camera files (``transforms.json``, or a NeRF-Synthetic folder's
    ``transforms_{train,val,test}.json``) and its ``scene.json`` where it has one (scenes rendered from one
    camera rig share their cameras): identical for copies of a scene, not for its variants."""
    files = sorted([*data.glob("transforms*.json"), data / "scene.json"]) if data.is_dir() else [data]
    files = [file for file in files if file.is_file()]
    if not any(file.name.startswith("transforms") or not data.is_dir() for file in files):
        raise FileNotFoundError(
            f"scene data {data}: no transforms*.json there (relative paths resolve from the current directory)"
        )
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()


def check_same_scene(left: Path, right: Path) -> Path:
    """The common scene of the runs whose ``config.yml`` are ``left`` and ``right``; raise if they differ.

    Only the configs are read, so a mismatch is reported before any model is built.
    """
    from eugen_nerf.eval.runs import find_config, latest_checkpoint, read_config

    for option, path in (("--left", left), ("--right", right)):  # the shared run-directory checks
        try:
            latest_checkpoint(find_config(path))
        except InputError as err:
            raise InputError(f"{option}: {err}") from None
    scenes = [scene_data_path(read_config(find_config(path))) for path in (left, right)]
    if scene_fingerprint(scenes[0]) != scene_fingerprint(scenes[1]):
        raise SceneMismatchError(
            f"the runs are of different scenes: --left {left} was trained on {scenes[0]}, "
            f"--right {right} on {scenes[1]}; compare two runs of one scene"
        )
    return scenes[0]


@dataclass
class Run:
    """One loaded run: its pipeline (model and test views) and a short label."""

    config_path: Path
    label: str
    pipeline: Pipeline

    @classmethod
    def load(cls, config_path: Path) -> Run:
        """Load with the one run loader (offline, checkpoint checked and loaded strictly)."""
        from eugen_nerf.eval.runs import load_run

        run = load_run(config_path, test_mode="test")
        return cls(config_path, f"{run.method} @ step {run.step}", run.pipeline)

    def render(self, camera: Cameras) -> tuple[Tensor, float]:
        """``(H, W, 3)`` rgb in [0, 1] and the seconds the model took for it."""
        from eugen_nerf.eval.timing import timed

        model = self.pipeline.model
        outputs, seconds = timed(lambda: model.get_outputs_for_camera(camera.to(model.device)), model.device)
        return final_rgb(outputs).clamp(0.0, 1.0).cpu(), seconds

    def ground_truth(self, index: int) -> Tensor:
        """Test image ``index`` composited as the run renders it (``eugen-eval``'s ground truth)."""
        return ground_truth_image(self.pipeline, self.pipeline.datamanager.eval_dataset, index).cpu()


@dataclass
class HeldOutViews:
    """The scene's test views: camera presets and their names (each run scores its own ground truth)."""

    cameras: Cameras
    names: list[str]

    @classmethod
    def from_pipeline(cls, pipeline: Pipeline) -> HeldOutViews:
        dataset = pipeline.datamanager.eval_dataset
        return cls(dataset.cameras, [Path(name).stem for name in dataset.image_filenames])

    def __len__(self) -> int:
        return len(self.names)

    def nearest(self, c2w: Tensor) -> int:
        """The test view closest to ``c2w`` in position (relative to the views' distance) and direction."""
        poses = self.cameras.camera_to_worlds.double().cpu()
        c2w = c2w.double().cpu()
        scale = poses[:, :, 3].norm(dim=-1).median().clamp(min=1e-6)
        distance = (poses[:, :, 3] - c2w[:, 3]).norm(dim=-1) / scale
        misalignment = 1.0 - (poses[:, :, 2] * c2w[:, 2]).sum(dim=-1)  # both -z: the viewing direction
        return int(torch.argmin(distance + misalignment))


class ViewScores:
    """Each run's PSNR on each test view, rendered at that view's own camera; cached per fused setting."""

    def __init__(self, runs: list[Run], views: HeldOutViews) -> None:
        self.runs, self.views = runs, views
        self._cache: dict[tuple[int, int, bool], float] = {}

    def psnr(self, side: int, index: int, fused: bool) -> float:
        from eugen_nerf.eval.metrics import psnr

        key = (side, index, fused)
        if key not in self._cache:
            run = self.runs[side]
            rgb, _ = run.render(self.views.cameras[index : index + 1])
            self._cache[key] = float(psnr(rgb, run.ground_truth(index))[0])
        return self._cache[key]


def viser_to_c2w(wxyz: np.ndarray, position: np.ndarray) -> Tensor:
    """nerfstudio camera-to-world (OpenGL axes, scene units) of a viser camera (OpenCV axes, viser units)."""
    rotation = vtf.SO3(np.asarray(wxyz)) @ vtf.SO3.from_x_radians(np.pi)
    translation = np.asarray(position, dtype=np.float64) / VISER_SCALE
    return torch.from_numpy(np.concatenate([rotation.as_matrix(), translation[:, None]], axis=1))


def c2w_to_viser(c2w: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The viser ``(wxyz, position)`` looking through nerfstudio camera-to-world ``c2w``."""
    c2w = c2w.double().cpu().numpy()
    rotation = vtf.SO3.from_matrix(c2w[:3, :3]) @ vtf.SO3.from_x_radians(np.pi)
    return rotation.wxyz, c2w[:3, 3] * VISER_SCALE


def panel_camera(c2w: Tensor, fov: float, aspect: float, height: int) -> Cameras:
    """A pinhole camera for one of the three side-by-side panels of a ``aspect`` (width / height) canvas."""
    width = max(8, round(height * aspect / 3))
    state = CameraState(fov=fov, aspect=width / height, c2w=c2w, camera_type=CameraType.PERSPECTIVE)
    return get_camera(state, height, width)


def stats_markdown(labels: list[str], seconds: list[float], psnrs: list[float], view_name: str) -> str:
    """The per-frame numbers under the image: render time and PSNR on the nearest test view."""
    lines = [f"Nearest test view: **{view_name}**", ""]
    for side, label, sec, value in zip(("Left", "Right"), labels, seconds, psnrs):
        lines.append(f"**{side}** ({label}): render {sec * 1000:.0f} ms, PSNR {value:.2f} dB  ")
    return "\n".join(lines)
