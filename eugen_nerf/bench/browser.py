"""Headless Debian Chromium driven over the DevTools protocol: open a page, read its text, screenshot it, and
run the web viewer's own test hooks (``window.eugen``) in it.

Only the standard library and ``websockets`` (a viser dependency) are used; no browser is downloaded.
WebGL runs on SwiftShader, Chromium's software renderer, so a machine without a GPU renders the page too.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from websockets.sync.client import connect

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
"""The Chromium executable (``$CHROMIUM`` overrides Debian's)."""
SETUP_HINT = (
    "install the Debian package chromium: apt-get install -y chromium (bash scripts/setup.sh --test does)"
)
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--use-gl=angle",
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--mute-audio",
)
"""Chromium's flags: headless, WebGL through SwiftShader, nothing fetched from the network."""


def chromium_missing() -> str | None:
    """Why Chromium cannot run here (one line naming the package to install), or ``None`` when it can."""
    if shutil.which(CHROMIUM) is None:
        return f"headless Chromium not found at {CHROMIUM}: {SETUP_HINT}"
    return None


def chromium_version() -> str:
    """``chromium --version`` (the browser the page's frame times were taken in)."""
    done = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip()


class Browser:
    """One headless Chromium with a fresh profile and one page; ``close`` kills its process group."""

    def __init__(self, width: int = 1280, height: int = 720, timeout: float = 60.0) -> None:
        missing = chromium_missing()
        if missing:
            raise RuntimeError(missing)
        self.profile = Path(tempfile.mkdtemp(prefix="eugen-chromium-"))
        self.process = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._ids = itertools.count(1)
        self._connection = contextlib.ExitStack()
        try:
            port = self._devtools_port(timeout)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as response:
                pages = [t for t in json.load(response) if t["type"] == "page"]
            self.socket = self._connection.enter_context(
                connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=timeout)
            )
            # --window-size includes the (invisible) browser frame: pin the page's viewport instead
            self.call(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout: float) -> int:
        """The port Chromium chose, read from the ``DevTools listening on ws://...`` line on stderr."""
        deadline = time.monotonic() + timeout
        lines = []
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                break
            lines.append(line)
            found = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if found:
                self.process.stderr.close()  # stop reading: Chromium must never block on a full pipe
                return int(found.group(1))
        raise RuntimeError(f"Chromium did not start its DevTools server:\n{''.join(lines)[-2000:]}")

    def call(self, method: str, timeout: float = 60.0, **params: Any) -> dict:
        """Send one DevTools command and return its result within ``timeout`` s (events in between are dropped)."""
        message_id = next(self._ids)
        self.socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=timeout))
            if message.get("id") == message_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    def text(self) -> str:
        """What a person can read on the page (labels of the GUI controls included)."""
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for_text(self, *needles: str, timeout: float = 60.0) -> str:
        """Poll the page text until it holds every needle; raise with the text seen otherwise."""
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if all(needle in text for needle in needles):
                return text
            time.sleep(0.5)
        raise AssertionError(f"page never showed {needles}; its text was:\n{text[:3000]}")

    def rect(self, selector: str) -> tuple[int, int, int, int]:
        """``(left, top, right, bottom)`` in viewport pixels of the first element matching ``selector``."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
            ".getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })()"
        )
        return tuple(round(v) for v in box)

    def scroll_to_text(self, text: str) -> None:
        """Scroll the innermost element showing ``text`` into view (controls far down a side panel)."""
        self.evaluate(
            f"(() => {{ const it = document.evaluate('//*[text()={json.dumps(text)}]', document, null, "
            "XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue; "
            "if (it) it.scrollIntoView({block: 'center'}); })()"
        )

    def screenshot(self, path: Path) -> Path:
        """A PNG of the viewport, WebGL canvas included."""
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self._connection.close()
        stop_process_group(self.process)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stop_process_group(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM then SIGKILL ``process`` and its group (it must be started with ``start_new_session``)."""
    if process.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


def page_call(browser: Browser, expression: str, timeout: float = 300.0) -> Any:
    """The value of ``expression`` in the page, promises awaited, within ``timeout`` s; a script error raises."""
    result = browser.call(
        "Runtime.evaluate", timeout, expression=expression, awaitPromise=True, returnByValue=True
    )
    if "exceptionDetails" in result:
        raise RuntimeError(f"the page failed: {result['exceptionDetails']}")
    return result["result"].get("value")


def wait_ready(browser: Browser, timeout: float = 120.0) -> str:
    """Wait for the web viewer's script to load, then for its field(s): ``ready`` or ``error: ...``."""
    deadline = time.monotonic() + timeout
    while not browser.evaluate("typeof window.eugen === 'object' && window.eugen.ready !== null"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the page's script did not run within {timeout:.0f} s")
        time.sleep(0.3)
    return page_call(browser, "window.eugen.ready")


def page_render(browser: Browser, timeout: float = 300.0, **options: Any) -> tuple[np.ndarray, float]:
    """A test camera rendered by the web viewer at once (``window.eugen.renderTest(options)``: ``field``,
    ``camera``, ``width``, ``height``, ``samples``): RGB in [0, 1] ``(H, W, 3)`` float64 and the frame's ms."""
    out = page_call(browser, f"window.eugen.renderTest({json.dumps(options)})", timeout)
    pixels = np.frombuffer(base64.b64decode(out["rgb"]), np.uint8).reshape(out["height"], out["width"], 3)
    return pixels / 255.0, float(out["ms"])


@contextlib.contextmanager
def served_page(
    exports: list[Path], width: int = 1100, height: int = 640, query: str = "?still"
) -> Iterator[tuple[Browser, str]]:
    """The web viewer serving ``exports`` (fields 0 and 1) on a free local port, opened with ``query`` in
    headless Chromium and ready; yields the browser and the page's URL (without the query)."""
    from eugen_nerf.export.serve import make_server

    server = make_server(list(exports), 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        with Browser(width, height) as browser:
            browser.open(url + query)
            state = wait_ready(browser)
            if state != "ready":
                raise RuntimeError(f"the page did not load the exports: {state}")
            yield browser, url
    finally:
        server.shutdown()
        server.server_close()
