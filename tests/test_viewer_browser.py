"""The viewers as a person uses them: a tiny trained run, a viewer on a free local port, headless Chromium.

Each test screenshots the page and asserts that the render area holds an image (not the background
colour alone) and that the controls are on the page. Every process started here runs in its own process
group and is killed by a fixture finaliser, whatever the outcome. Chromium missing is a failure with the
setup command, not a skip: these tests are the only check that the viewers work.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from _browser import Browser, chromium, stop_process_group  # noqa: F401 (chromium: a fixture, used by name)
from _tiny import small_method_config
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
SCENE = REPO / "scenes" / "bunny32"
BIN = Path(sys.executable).parent
ITERATIONS = 20
RENDER_TIMEOUT = 150.0
RENDER_AREA = 'canvas[data-engine^="three.js"]'
"""viser's 3D canvas, where the render is drawn (another, transparent canvas overlays the whole page)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def start(args: list[str], log: Path) -> subprocess.Popen:
    """A process in its own group (so that its children die with it), output to ``log``."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with log.open("w") as out:
        return subprocess.Popen(
            args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_for_port(process: subprocess.Popen, port: int, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(
                f"viewer exited with {process.returncode} before listening on {port}:\n{log_tail(log)}"
            )
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"viewer did not listen on 127.0.0.1:{port} within {timeout:.0f} s:\n{log_tail(log)}")


def shows_image(pixels: np.ndarray) -> tuple[bool, str]:
    """Whether an RGB region holds an image rather than one flat colour (plus a small overlay).

    At least 5 % of its pixels must differ clearly from its most common colour, and its brightness must vary.
    """
    flat = pixels.reshape(-1, 3).astype(np.int32)
    colours, counts = np.unique(flat // 8, axis=0, return_counts=True)
    background = colours[np.argmax(counts)] * 8 + 4
    differing = float((np.abs(flat - background).max(axis=1) > 24).mean())
    spread = float(flat.mean(axis=1).std())
    return (
        differing > 0.05 and spread > 8.0,
        f"{differing:.1%} pixels off background {background.tolist()}, std {spread:.1f}",
    )


def wait_for_render(
    browser: Browser, shot: Path, check: Callable[[np.ndarray], tuple[bool, str]]
) -> np.ndarray:
    """Screenshot the canvas until ``check`` passes on it (the first renders take seconds on a CPU)."""
    deadline = time.monotonic() + RENDER_TIMEOUT
    while True:
        left, top, right, bottom = browser.rect(RENDER_AREA)
        pixels = np.asarray(Image.open(browser.screenshot(shot)).convert("RGB"))[top:bottom, left:right]
        ok, why = check(pixels)
        if ok:
            return pixels
        if time.monotonic() > deadline:
            pytest.fail(
                f"the viewer's render area shows no image after {RENDER_TIMEOUT:.0f} s ({why}); see {shot}"
            )
        time.sleep(2.0)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``config.yml`` of an eugen-nerfacto trained for a few iterations on the 32x32 bunny. Trained in the test
    process (ns-train's own path is tested in test_methods_cli.py; a subprocess here spent ~20 s starting)."""
    from eugen_nerf.bench.training import train_in_process

    config = small_method_config("eugen-nerfacto")
    config_path, _ = train_in_process(config, SCENE, ITERATIONS, tmp_path_factory.mktemp("viewer_run"))
    return config_path


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[[list[str], str], subprocess.Popen]]:
    """Start processes that are killed (with their groups) when the test ends."""
    processes = []

    def _launch(args: list[str], name: str) -> subprocess.Popen:
        processes.append(start(args, tmp_path / f"{name}.log"))
        return processes[-1]

    yield _launch
    for process in processes:
        stop_process_group(process)


@pytest.mark.usefixtures("chromium")
def test_stock_ns_viewer_renders_with_eugen_controls(trained_run: Path, launch, tmp_path: Path):
    port = free_port()
    viewer = launch(
        [
            str(BIN / "ns-viewer"),
            "--load-config",
            str(trained_run),
            "--viewer.websocket-host",
            "127.0.0.1",
            "--viewer.websocket-port",
            str(port),
        ],
        "ns-viewer",
    )
    wait_for_port(viewer, port, tmp_path / "ns-viewer.log")

    with Browser() as browser:
        browser.open(f"http://127.0.0.1:{port}")
        browser.wait_for_text("Render Options", "Custom Elements", "EUGen fused inference", timeout=90)
        wait_for_render(browser, tmp_path / "ns-viewer.png", shows_image)
    assert viewer.poll() is None, log_tail(tmp_path / "ns-viewer.log")


@pytest.mark.usefixtures("chromium")
def test_eugen_viewer_side_by_side_then_ctrl_c(trained_run: Path, launch, tmp_path: Path):
    port = free_port()
    log = tmp_path / "eugen-viewer.log"
    viewer = launch(
        [
            str(BIN / "eugen-viewer"),
            "--left",
            str(trained_run),
            "--right",
            str(trained_run),
            "--port",
            str(port),
            "--render-height",
            "48",
        ],
        "eugen-viewer",
    )
    wait_for_port(viewer, port, log)

    def panels_show_run_twice_and_no_difference(pixels: np.ndarray) -> tuple[bool, str]:
        third = pixels.shape[1] // 3
        below_labels = pixels[pixels.shape[0] // 8 :]
        left, right, diff = (below_labels[:, i * third : (i + 1) * third] for i in range(3))
        (left_ok, left_why), (right_ok, right_why) = shows_image(left), shows_image(right)
        diff_mean = float(diff.mean())  # one run on both sides: |left - right| is black
        return (
            left_ok and right_ok and diff_mean < 8.0,
            f"left {left_why}; right {right_why}; diff mean {diff_mean:.1f}",
        )

    with Browser() as browser:
        browser.open(f"http://127.0.0.1:{port}")
        text = browser.wait_for_text("PSNR", timeout=RENDER_TIMEOUT)
        for label in ("EUGen fused inference", "Camera preset", "Nearest test view", "render", "ms", "dB"):
            assert label in text, f"{label!r} missing from the page:\n{text}"
        wait_for_render(browser, tmp_path / "eugen-viewer.png", panels_show_run_twice_and_no_difference)

    os.killpg(viewer.pid, signal.SIGINT)  # Ctrl-C in the terminal reaches the whole foreground group
    assert viewer.wait(timeout=30) == 0, log_tail(log)
    assert "Traceback" not in log.read_text(), log_tail(log)
