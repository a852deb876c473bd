"""Viewer controls and comparison-viewer pieces, without a browser or a trained run.

The controls are installed into a real viser server, as nerfstudio's viewer installs them, so a value
set on the GUI handle runs the same callback a click in the browser would.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch
import viser
import yaml
from _scripts import run_main
from nerfstudio.viewer.viewer_elements import ViewerCheckbox
from PIL import Image, ImageDraw
from torch import Tensor, nn

from eugen_nerf.eval.panels import compose, fit_label
from eugen_nerf.eval.panels import difference as difference_image
from eugen_nerf.inputs.errors import InputError
from eugen_nerf.layers import EUGenMLP, EUGenSpec
from eugen_nerf.viewer.compare import (
    HeldOutViews,
    SceneMismatchError,
    c2w_to_viser,
    check_same_scene,
    panel_camera,
    viser_to_c2w,
)
from eugen_nerf.viewer.controls import FUSED_LABEL, add_eugen_viewer_controls
from eugen_nerf.viewer.server import check_listen_address, start_viser_server

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeModel(nn.Module):
    """A model as the viewer sees it: EUGen MLPs inside, a constant-colour render."""

    def __init__(self, colour: float) -> None:
        super().__init__()
        self.field = nn.ModuleDict(
            {
                "eugen": EUGenMLP(3, 2, 8, 3, layer_types=("eugen", "dense")),
                "dense": EUGenMLP(3, 2, 8, 3),
            }
        )
        self.colour = colour

    def get_outputs_for_camera(self, camera, obb_box=None) -> dict[str, Tensor]:
        return {"rgb": torch.full((2, 2, 3), self.colour), "depth": torch.full((2, 2, 1), self.colour)}


def test_a_process_that_exits_during_visers_scan_does_not_stop_the_viewer(monkeypatch):
    """viser scans every process at start and lets psutil.NoSuchProcess escape when one exits meanwhile."""
    calls = []

    def flaky_server(**kwargs):
        calls.append(kwargs)
        if len(calls) < 3:
            raise psutil.NoSuchProcess(12345)
        return "server"

    monkeypatch.setattr(viser, "ViserServer", flaky_server)
    assert start_viser_server("127.0.0.1", 7010, verbose=False) == "server"
    assert calls == [{"host": "127.0.0.1", "port": 7010, "verbose": False}] * 3
    calls.clear()
    with pytest.raises(psutil.NoSuchProcess):  # a scan that never settles is still reported
        start_viser_server("127.0.0.1", 7010, attempts=2)


@pytest.fixture
def server():
    server = start_viser_server("127.0.0.1", free_port(), verbose=False)
    yield server
    server.stop()


def wait_until(condition, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_fused_checkbox_toggles_fuse_in_eval_of_eugen_mlps(server):
    model = FakeModel(0.5)
    add_eugen_viewer_controls(model)
    checkbox = model.eugen_fused_inference
    assert isinstance(checkbox, ViewerCheckbox) and checkbox.name == FUSED_LABEL and checkbox.value is True

    checkbox.install(server)
    checkbox.gui_handle.value = False  # what a click in the browser does
    assert wait_until(lambda: not model.field["eugen"].fuse_in_eval)
    checkbox.gui_handle.value = True
    assert wait_until(lambda: model.field["eugen"].fuse_in_eval)


def test_fused_checkbox_changes_the_code_path_not_the_output():
    mlp = EUGenMLP(3, 3, 16, 3, layer_types=("dense", "eugen", "dense")).eval()
    model = nn.Module()
    model.mlp = mlp
    add_eugen_viewer_controls(model)
    x = torch.randn(64, 3)
    fused = mlp(x)
    model.eugen_fused_inference.cb_hook(ViewerCheckbox(FUSED_LABEL, default_value=False))
    assert mlp.fuse_in_eval is False
    torch.testing.assert_close(mlp(x), fused, rtol=1e-4, atol=1e-5)


def test_no_controls_without_eugen_layers():
    model = nn.Module()
    model.mlp = EUGenMLP(3, 2, 8, 3)
    add_eugen_viewer_controls(model)
    assert not hasattr(model, "eugen_fused_inference")


def test_no_fused_switch_for_mlps_trained_merged():
    """A MergedMLP has one form: a model whose EUGen MLPs all trained merged gets no switch."""
    from eugen_nerf.layers import MergedMLP

    spec = EUGenSpec(num_features=4, scaling="projected", use_norm=False)
    model = nn.Module()
    model.mlp = MergedMLP(EUGenMLP(3, 3, 8, 3, layer_types=("dense", "eugen", "dense"), eugen=spec))
    add_eugen_viewer_controls(model)
    assert not hasattr(model, "eugen_fused_inference")


def test_difference_image_is_absolute_and_in_range():
    a, b = torch.tensor([[0.2, 1.0, 0.0]]), torch.tensor([[0.7, 0.0, 0.0]])
    torch.testing.assert_close(difference_image(a, b), torch.tensor([[0.5, 1.0, 0.0]]))


def look_from(x: float) -> Tensor:
    """A camera-to-world on the x axis at ``x``, looking at the origin (nerfstudio: along its -z)."""
    sign = float(np.sign(x))
    rotation = torch.tensor([[0.0, 0.0, sign], [sign, 0.0, 0.0], [0.0, 1.0, 0.0]])
    return torch.cat([rotation, torch.tensor([[x], [0.0], [0.0]])], dim=1)


def test_viser_camera_round_trip_and_panel_camera():
    c2w = look_from(-2.5).double()
    wxyz, position = c2w_to_viser(c2w)
    torch.testing.assert_close(viser_to_c2w(wxyz, position), c2w)
    camera = panel_camera(c2w, fov=1.0, aspect=2.4, height=60)
    assert (int(camera.height), int(camera.width)) == (60, 48)


def test_nearest_test_view_by_position_and_direction():
    from nerfstudio.cameras.cameras import Cameras

    cameras = Cameras(
        camera_to_worlds=torch.stack([look_from(4.0), look_from(-4.0)]), fx=10.0, fy=10.0, cx=5.0, cy=5.0
    )
    views = HeldOutViews(cameras, ["a", "b"])
    assert views.nearest(look_from(3.5)) == 0
    assert views.nearest(look_from(-5.0)) == 1


def test_compose_puts_panels_side_by_side_enlarged():
    panels = [torch.zeros(24, 16, 3), torch.ones(24, 16, 3), torch.full((24, 16, 3), 0.5)]
    image = compose(panels, ["left", "right", "diff"], min_height=96)
    assert image.shape == (96, 192, 3) and image.dtype == np.uint8
    assert image[90, 10].tolist() == [0, 0, 0] and image[90, 74].tolist() == [255, 255, 255]
    assert image[:20, :60].max() == 255  # the label is drawn over the black panel


def test_compose_keeps_a_long_label_inside_its_panel():
    label = "eugen-nerf (train-merged=True, num-features=48) seed 0"
    panels = [torch.zeros(32, 32, 3), torch.zeros(32, 32, 3)]
    image = compose(panels, [label, ""], min_height=128)
    assert image.shape == (128, 256, 3)
    assert image[:, 128:].max() == 0  # nothing of the first label spills into the second (black) panel
    assert image[:, :128].max() > 200  # and it is drawn
    draw = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    font, lines = fit_label(draw, label, 128 - 12)
    assert len(lines) > 1 and "".join(lines).replace(" ", "") == label.replace(" ", "")
    assert all(draw.textlength(line, font=font) <= 128 - 12 for line in lines)
    assert fit_label(draw, "dense", 128 - 12)[1] == ["dense"]


def write_run_config(path: Path, data: Path) -> Path:
    from eugen_nerf.methods.nerfacto import eugen_nerfacto

    config = eugen_nerfacto.config
    config.data = None
    config.pipeline.datamanager.data = data
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.dump(config))
    # the shared run-directory check wants a checkpoint; check_same_scene reads only its name, never its bytes
    (path.parent / "nerfstudio_models").mkdir(exist_ok=True)
    (path.parent / "nerfstudio_models" / "step-000000001.ckpt").write_bytes(b"")
    return path


def test_runs_of_different_scenes_are_refused(tmp_path: Path):
    # nerfstudio-data scenes, and NeRF-Synthetic folders (transforms_{train,val,test}.json) rendered from one rig
    for scene, another in (("bunny32", "bunny64"), ("shiny128", "branches128")):
        left = write_run_config(tmp_path / scene / "a" / "config.yml", REPO / "scenes" / scene)
        same = write_run_config(tmp_path / scene / "b" / "config.yml", REPO / "scenes" / scene)
        other = write_run_config(tmp_path / scene / "c" / "config.yml", REPO / "scenes" / another)
        assert check_same_scene(left, same) == REPO / "scenes" / scene
        with pytest.raises(SceneMismatchError, match=f"different scenes.*{scene}.*{another}"):
            check_same_scene(left, other)

    # = eugen-viewer
    result = run_main("eugen_nerf.viewer.cli", "--left", left, "--right", other, module=True)
    assert result.returncode == 2
    message = " ".join((result.stdout + result.stderr).split())
    assert "runs are of different scenes" in message and str(other) in message and "Traceback" not in message


def test_an_address_the_viewer_cannot_listen_on_is_refused_before_the_runs_load(tmp_path: Path):
    check_listen_address("127.0.0.1", 0)
    with pytest.raises(InputError, match="--port must be in 0..65535"):
        check_listen_address("127.0.0.1", 99999)
    with pytest.raises(InputError, match="--host no-such-host.invalid: cannot listen there"):
        check_listen_address("no-such-host.invalid", 7008)
    # = eugen-viewer, with runs that would take a while to load: one line at once (viser would wait for ever)
    left = write_run_config(tmp_path / "a" / "config.yml", REPO / "scenes" / "bunny32")
    right = write_run_config(tmp_path / "b" / "config.yml", REPO / "scenes" / "bunny32")
    result = run_main("eugen_nerf.viewer.cli", "--left", left, "--right", right, "--port", "99999")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert (
        result.stderr.strip().splitlines()[-1] == "eugen-viewer: error: --port must be in 0..65535, got 99999"
    )


def test_a_stock_vanilla_nerf_run_renders_its_fine_colour():
    """Stock vanilla-nerf (and its students) output ``rgb_fine``, no ``rgb``."""
    from types import SimpleNamespace

    from eugen_nerf.viewer.compare import Run

    class Vanilla(nn.Module):
        device = torch.device("cpu")

        def get_outputs_for_camera(self, camera):
            return {"rgb_coarse": torch.zeros(2, 2, 3), "rgb_fine": torch.full((2, 2, 3), 0.3)}

    camera = SimpleNamespace(to=lambda device: camera)
    rgb, seconds = Run(Path("config.yml"), "vanilla", SimpleNamespace(model=Vanilla())).render(camera)
    torch.testing.assert_close(rgb, torch.full((2, 2, 3), 0.3))
    assert seconds >= 0
