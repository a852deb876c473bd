#!/usr/bin/env python
"""Regenerate the README's viewer screenshots from fresh runs, in headless Chromium.

``docs/screenshots/ns-viewer.png``: stock ``ns-viewer`` on the demo's eugen-nerfacto run (``make demo``
first), with the EUGen control under Custom Elements. ``docs/screenshots/eugen-viewer.png``:
``eugen-viewer`` with the shipped dense NeRF teacher on the left and the same demo run on the right.
Each screenshot is taken once the render area holds an image (not a flat colour); look at both before
committing them.

    make demo && python scripts/screenshots.py
    python scripts/screenshots.py --run outputs/exp/RUN/eugen-nerfacto/x/config.yml

Needs Debian's chromium (``apt-get install -y chromium``, installed by ``scripts/setup.sh --test``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _browser import Browser, chromium_missing, stop_process_group  # the tests' Chromium driver

BIN = Path(sys.executable).parent
RENDER_AREA = 'canvas[data-engine^="three.js"]'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    with log.open("w") as out:
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_for_port(process: subprocess.Popen, port: int, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the viewer exited with {process.returncode} before listening on {port}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the viewer did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def rendered(browser: Browser, path: Path, timeout: float = 400.0, settle: float = 45.0) -> None:
    """Screenshot the page until the render area holds an image, then wait for one more refinement."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left, top, right, bottom = browser.rect(RENDER_AREA)
        pixels = np.asarray(Image.open(browser.screenshot(path)).convert("RGB"))[top:bottom, left:right]
        flat = pixels.reshape(-1, 3).astype(np.int32)
        colours, counts = np.unique(flat // 8, axis=0, return_counts=True)
        background = colours[np.argmax(counts)] * 8 + 4
        differing = float((np.abs(flat - background).max(axis=1) > 24).mean())  # the tests' "holds an image"
        if differing > 0.05 and "Waiting for the first frame" not in browser.text():
            time.sleep(settle)  # the viewer refines the image after its first low-resolution render
            browser.screenshot(path)
            return
        time.sleep(2.0)
    raise SystemExit(f"the render area shows no image after {timeout:.0f} s; see {path}")


def zoom_out(browser: Browser, clicks: int) -> None:
    """Wheel-scroll over the render area: the stock viewer's first camera sits close to small scenes."""
    left, top, right, bottom = browser.rect(RENDER_AREA)
    x, y = (left + right) / 2, (top + bottom) / 2
    for _ in range(clicks):
        browser.call("Input.dispatchMouseEvent", type="mouseWheel", x=x, y=y, deltaX=0, deltaY=-120)
        time.sleep(0.2)


def shoot(args: list, path: Path, texts: tuple, port: int, log: Path, zoom: int = 0, show: str = "") -> None:
    process = start(args, log)
    try:
        wait_for_port(process, port)
        with Browser(width=1280, height=720) as browser:
            browser.open(f"http://127.0.0.1:{port}")
            browser.wait_for_text(*texts, timeout=120)
            if zoom:
                time.sleep(5.0)
                zoom_out(browser, zoom)
            if show:
                browser.scroll_to_text(show)
            rendered(browser, path)
    finally:
        stop_process_group(process)
    print(f"wrote {path}")


@dataclass
class Screenshots:
    run: Path = ROOT / "outputs/demo/eugen-nerfacto/latest/config.yml"
    """config.yml of the eugen-nerfacto run to show (the default is make demo's)"""
    teacher: Path = ROOT / "teachers/bunny64/dense-nerf/shipped/config.yml"
    """left side of the eugen-viewer screenshot"""
    zoom: int = 0
    """mouse-wheel clicks over the ns-viewer render (moves its camera)"""
    out_dir: Path = ROOT / "docs" / "screenshots"
    """where the screenshots (ns-viewer.png, eugen-viewer.png) are written."""


def main() -> None:
    args = tyro.cli(Screenshots, description=__doc__)
    missing = chromium_missing()
    if missing:
        raise SystemExit(missing)
    if not args.run.exists():
        raise SystemExit(f"{args.run}: no such run config (run `make demo` first, or pass --run)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    shoot(
        [
            str(BIN / "ns-viewer"),
            "--load-config",
            str(args.run),
            "--viewer.websocket-host",
            "127.0.0.1",
            "--viewer.websocket-port",
            str(port),
        ],
        args.out_dir / "ns-viewer.png",
        ("Render Options", "EUGen fused inference"),
        port,
        args.out_dir / "ns-viewer.log",
        zoom=args.zoom,
        show="EUGen fused inference",
    )
    port = free_port()
    shoot(
        [
            str(BIN / "eugen-viewer"),
            "--left",
            str(args.teacher),
            "--right",
            str(args.run),
            "--port",
            str(port),
        ],
        args.out_dir / "eugen-viewer.png",
        ("EUGen fused inference",),
        port,
        args.out_dir / "eugen-viewer.log",
    )
    for log in args.out_dir.glob("*.log"):
        log.unlink()


if __name__ == "__main__":
    main()
