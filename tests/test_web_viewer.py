"""The web viewer (top-level ``viewer/``) as a person uses it: ``eugen-export serve`` on a free port, headless
Chromium (SwiftShader WebGL2), a tiny exported field. The page renders a test camera as the reference renderer
does, shows frame times and both fields, and says in words what is wrong with a bad export or a browser that
lacks what it needs. Chromium missing is a failure with the setup command, not a skip."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
import torch
from _browser import Browser, chromium, stop_process_group  # noqa: F401 (chromium: a fixture, used by name)
from PIL import Image
from test_export import export_run, psnr, train_tiny_runs
from test_viewer_browser import free_port, wait_for_port

from eugen_nerf.bench import browser as browser_driver
from eugen_nerf.bench.browser import wait_ready
from eugen_nerf.export import format as fmt
from eugen_nerf.export.field import load_export
from eugen_nerf.export.render import Sampling, render_view
from eugen_nerf.export.serve import PAGE

REPO = Path(__file__).resolve().parents[1]
SIZE, SAMPLES = 16, 64


def page_render(browser: Browser, **options) -> tuple[torch.Tensor, float]:
    """A test camera rendered by the page at once: RGB in [0, 1] as a float tensor and the frame's milliseconds."""
    pixels, ms = browser_driver.page_render(browser, **options)
    return torch.from_numpy(pixels).float(), ms


@contextmanager
def page_on(exports: list[Path]):
    """Headless Chromium showing ``eugen-export serve``'s page for ``exports`` (served in this process), still."""
    from eugen_nerf.export.serve import make_server

    server = make_server(exports, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Browser(1000, 640) as browser:
            browser.open(f"http://127.0.0.1:{server.server_address[1]}/?still")
            assert wait_ready(browser) == "ready"
            yield browser
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def served(exports):
    """``eugen-export serve`` of the tiny EUGen export and its dense twin, on a free port."""
    port = free_port()
    log = Path(exports["eugen-nerf"]).parent / "serve.log"
    exe = Path(sys.executable).parent / "eugen-export"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(exe), "serve", str(exports["eugen-nerf"]), str(exports["dense-nerf"]), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for_port(process, port, log)
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop_process_group(process)


@pytest.mark.usefixtures("chromium")
def test_page_renders_a_test_camera_as_the_reference(served, exports, tmp_path):
    with Browser(1000, 640) as browser:
        browser.open(served + "?still")
        assert wait_ready(browser) == "ready"
        text = browser.text()
        for label in (
            "A: eugen-nerf (eugen-nerf, EUGen, 6 layers)",
            "B: dense-nerf (dense-nerf, dense)",
            "side by side",
            "Samples per ray",
        ):
            assert label in text, f"{label!r} missing from the page:\n{text}"
        for field, method in enumerate(("eugen-nerf", "dense-nerf")):
            page, _ = page_render(browser, field=field, camera=1, width=SIZE, height=SIZE, samples=SAMPLES)
            exported = load_export(exports[method], device="cpu")
            reference = render_view(exported, 1, Sampling(samples=SAMPLES), SIZE, SIZE)
            assert psnr(page, reference) > 40, f"{method}: page vs reference {psnr(page, reference):.1f} dB"
            plain, _ = page_render(
                browser,
                field=field,
                camera=1,
                width=SIZE,
                height=SIZE,
                samples=SAMPLES,
                occupancy=False,
                earlyTermination=False,
            )
            reference = render_view(
                exported, 1, Sampling(samples=SAMPLES, occupancy=False, early_termination=False), SIZE, SIZE
            )
            assert psnr(plain, reference) > 40, f"{method}, no skipping: {psnr(plain, reference):.1f} dB"


def frames_drawn(browser: Browser, timeout: float = 240.0) -> list[str]:
    """Wait until every visible view's caption gives a whole frame's time; the captions."""
    deadline = time.monotonic() + timeout
    while True:
        captions = browser.evaluate(
            "[...document.querySelectorAll('figure.view:not([hidden]) .fps')].map((e) => e.textContent)"
        )
        if all("ms/frame" in caption for caption in captions) or time.monotonic() > deadline:
            return captions
        time.sleep(1)


def canvas_pixels(browser: Browser, path: Path, selector: str = "#view-0 canvas") -> np.ndarray:
    shot = np.asarray(Image.open(browser.screenshot(path)).convert("RGB"))
    left, top, right, bottom = browser.rect(selector)
    return shot[top:bottom, left:right].astype(int)


def both_canvases(browser: Browser, path: Path) -> np.ndarray:
    """The side-by-side views' pixels, A's then B's."""
    a = canvas_pixels(browser, path, "#view-0 canvas")
    b = canvas_pixels(browser, path.with_name(path.stem + "-b.png"), "#view-1 canvas")
    return np.concatenate([a.reshape(-1, 3), b.reshape(-1, 3)])


@pytest.mark.usefixtures("chromium")
def test_page_draws_interactively_side_by_side_and_orbits(served, tmp_path):
    with Browser(1000, 640) as browser:
        browser.open(served + "?resolution=16&samples=32")
        assert wait_ready(browser) == "ready"
        browser.evaluate(
            "document.getElementById('show').value = '2'; document.getElementById('show').onchange()"
        )
        captions = frames_drawn(browser)
        assert len(captions) == 2 and all("ms/frame" in caption for caption in captions), captions
        # both views: a tiny run's EUGen field can be nearly flat fog on its own
        before = both_canvases(browser, tmp_path / "before.png")
        assert before.reshape(-1, 3).std(axis=0).max() > 10, "the canvases show one flat colour"
        # a drag to the left orbits the camera: the next frame shows the field from elsewhere
        browser.evaluate("document.querySelectorAll('.fps').forEach((e) => { e.textContent = ''; })")
        browser.evaluate(
            "(() => { const c = document.querySelector('#view-0 canvas'); const r = c.getBoundingClientRect();"
            " const at = (type, x) => c.dispatchEvent(new PointerEvent(type, {clientX: r.left + x, clientY: r.top + 200,"
            " pointerId: 1, bubbles: true})); at('pointerdown', 300); at('pointermove', 200); at('pointermove', 100);"
            " at('pointerup', 100); })()"
        )
        assert all("ms/frame" in caption for caption in frames_drawn(browser))
        after = both_canvases(browser, tmp_path / "after.png")
        assert np.abs(after - before).mean() > 2, "the picture did not change after a drag"


def static_server(root: Path) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def page_copy(tmp_path, exports) -> tuple[Path, str]:
    """The page's files with good and bad exports beside it, served statically (``?field=`` picks one)."""
    root = tmp_path / "site"
    shutil.copytree(PAGE, root)
    data = (Path(exports["eugen-nerf"]) / fmt.FILE_NAME).read_bytes()
    (root / "good.eugen").write_bytes(data)
    (root / "cut.eugen").write_bytes(data[: len(data) // 2])
    length = int.from_bytes(data[8:12], "little")
    header = data[16 : 16 + length].replace(b'"version": 1', b'"version": 9')
    (root / "future.eugen").write_bytes(data[:16] + header + data[16 + length :])
    server = static_server(root)
    yield root, f"http://127.0.0.1:{server.server_address[1]}/index.html"
    server.shutdown()


def message_of(browser: Browser, url: str) -> str:
    browser.open(url)
    time.sleep(0.5)  # the previous page's window.eugen must not answer
    wait_ready(browser)
    return browser.evaluate(
        "document.getElementById('message').hidden ? '' : document.getElementById('message').textContent"
    )


@pytest.mark.usefixtures("chromium")
def test_page_names_what_is_wrong(page_copy):
    _, url = page_copy
    with Browser(900, 600) as browser:
        assert "truncated" in message_of(browser, url + "?field=cut.eugen")
        assert "format version 9" in message_of(browser, url + "?field=future.eugen")
        limit = message_of(browser, url + "?field=good.eugen&max-texture-size=16")
        assert "MAX_TEXTURE_SIZE is 16" in limit, limit
        assert message_of(browser, url + "?field=good.eugen&still") == ""
        problem = "window.eugen.capabilityProblem"
        assert "no WebGL2" in browser.evaluate(f"{problem}(null)")
        no_highp = "{FRAGMENT_SHADER: 1, HIGH_FLOAT: 2, getShaderPrecisionFormat: () => ({precision: 0})}"
        assert "highp" in browser.evaluate(f"{problem}({no_highp})")
        no_float = (
            "{FRAGMENT_SHADER: 1, HIGH_FLOAT: 2, NO_ERROR: 0, TEXTURE_2D: 3, RGBA32F: 4, RGBA: 5, FLOAT: 6, "
            "getShaderPrecisionFormat: () => ({precision: 23}), createTexture: () => ({}), bindTexture: () => {}, "
            "deleteTexture: () => {}, texImage2D: function () { this.failed = true; }, "
            "getError: function () { const e = this.failed ? 1282 : 0; this.failed = false; return e; }}"
        )
        assert "float textures" in browser.evaluate(f"{problem}({no_float})")


@pytest.mark.usefixtures("chromium")
def test_page_without_webgl2_says_so(page_copy, monkeypatch):
    _, url = page_copy
    monkeypatch.setattr(
        browser_driver, "FLAGS", (*browser_driver.FLAGS, "--disable-webgl", "--disable-3d-apis")
    )
    with Browser(900, 600) as browser:
        message = message_of(browser, url + "?field=good.eugen")
    assert "no WebGL2" in message, message


@pytest.fixture(scope="module")
def exports(tmp_path_factory, one_thread) -> dict[str, Path]:
    """The tiny runs of test_export.py, exported."""
    runs = train_tiny_runs(tmp_path_factory.mktemp("web_runs"))
    root = tmp_path_factory.mktemp("web_exports")
    return {method: export_run(path, root / method) for method, path in runs.items()}


@pytest.mark.slow  # ~1 min each: two tiny Zip-NeRF exports and four frames through SwiftShader
@pytest.mark.usefixtures("chromium")
@pytest.mark.parametrize("unbounded", [False, True], ids=["object", "unbounded"])
def test_page_renders_a_zipnerf_export_as_the_reference(tmp_path, unbounded):
    """The hash-grid head: the shader's hash lookup, trilinear blend, blurred level weights and view MLP match
    the reference renderer's march, EUGen and dense, with occupancy skipping and early termination or without;
    on an unbounded scene also its disparity spacing, contraction and last-sample background."""
    from test_export_zipnerf import export_tiny, tiny_zipnerf_run

    methods = ("eugen-zipnerf", "dense-zipnerf")
    runs = [tiny_zipnerf_run(method, unbounded=unbounded) for method in methods]
    exports = [export_tiny(run, tmp_path / method) for run, method in zip(runs, methods, strict=True)]
    with page_on(exports) as browser:
        assert "eugen-zipnerf (eugen-zipnerf, EUGen, 2 layers)" in browser.text()
        for field, path in enumerate(exports):
            exported = load_export(path, device="cpu")
            for skipping in (True, False):
                options = {"occupancy": skipping, "earlyTermination": skipping}
                page, _ = page_render(
                    browser, field=field, camera=1, width=SIZE, height=SIZE, samples=SAMPLES, **options
                )
                sampling = Sampling(samples=SAMPLES, occupancy=skipping, early_termination=skipping)
                reference = render_view(exported, 1, sampling, SIZE, SIZE)
                assert reference.std() > 0.02, (
                    "the tiny field renders flat: the comparison would show nothing"
                )
                assert psnr(page, reference) > 40, (
                    f"{path.name}, skipping {skipping}: {psnr(page, reference):.1f} dB"
                )


@pytest.mark.slow  # ~1 min: a tiny NeRF trained and exported, two frames through SwiftShader
@pytest.mark.usefixtures("chromium")
def test_page_renders_projected_scaling_as_the_reference(tmp_path, one_thread):
    """EUGen layers with ``scaling="projected"`` (rms of the projections, no norm rows): the shader's rms
    over the padded projection slots and its rescaling match the reference renderer."""
    from _tiny import small_method_config
    from test_export import SCENE, STEPS

    from eugen_nerf.bench.training import train_in_process

    config = small_method_config("eugen-nerf")
    config.pipeline.model.eugen.scaling = "projected"
    config.pipeline.model.eugen.use_norm = False
    run = train_in_process(config, SCENE, STEPS, tmp_path / "runs", timestamp="projected")[0]
    export = export_run(run, tmp_path / "export")
    steps = fmt.read(export).header["fields"]["fine"]["trunk"]["steps"]
    assert {step.get("scaling") for step in steps if step["kind"] == "eugen"} == {"projected"}
    assert not any(step["norm_rows"] for step in steps if step["kind"] == "eugen")
    with page_on([export]) as browser:
        page, _ = page_render(browser, field=0, camera=1, width=SIZE, height=SIZE, samples=SAMPLES)
    reference = render_view(load_export(export, device="cpu"), 1, Sampling(samples=SAMPLES), SIZE, SIZE)
    assert reference.std() > 0.02, "the tiny field renders flat: the comparison would show nothing"
    # the page agrees to ~59 dB; an rms off by sqrt(2) (its row count wrong) falls to ~40 dB
    assert psnr(page, reference) > 50, f"page vs reference {psnr(page, reference):.1f} dB"


@pytest.mark.slow  # ~1 min: two page loads through SwiftShader
@pytest.mark.usefixtures("chromium")
def test_page_keeps_a_cameras_aspect_and_lens(exports, tmp_path):
    """A 4:3 test camera with lens distortion (a COLMAP capture's): the page draws it undistorted as the
    reference renderer does, and its frame keeps the camera's aspect instead of stretching it square."""
    parsed = fmt.read(exports["dense-nerf"])
    header = json.loads(json.dumps(parsed.header))
    camera = header["cameras"][0]
    camera["height"] = camera["width"] * 3 // 4
    camera["cy"] *= 0.75
    camera["distortion"] = [-0.5, 0.1, 0.0, 0.0, 0.01, -0.01]
    (tmp_path / "lens").mkdir()
    fmt.write(tmp_path / "lens" / fmt.FILE_NAME, header, parsed.buffers)
    exported = load_export(tmp_path / "lens", device="cpu")
    width, height = camera["width"], camera["height"]
    reference = render_view(exported, 0, Sampling(samples=SAMPLES))
    pinhole = dataclasses.replace(exported.cameras[0], distortion=(0.0,) * 6)
    assert psnr(render_view(exported, pinhole, Sampling(samples=SAMPLES)), reference) < 35, (
        "the lens shows nothing"
    )
    with page_on([tmp_path / "lens"]) as browser:
        page, _ = page_render(browser, camera=0, width=width, height=height, samples=SAMPLES)
        assert page.shape == reference.shape
        assert psnr(page, reference) > 40, f"page vs reference {psnr(page, reference):.1f} dB"
    with Browser(1000, 640) as browser:
        from eugen_nerf.export.serve import make_server

        server = make_server([tmp_path / "lens"], 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            browser.open(f"http://127.0.0.1:{server.server_address[1]}/?resolution=16&samples=8")
            assert wait_ready(browser) == "ready"
            assert all("ms/frame" in caption for caption in frames_drawn(browser))
            size = browser.evaluate(
                "(() => { const c = document.querySelector('#view-0 canvas'); return [c.width, c.height]; })()"
            )
            assert size == [16, 12]
            left, top, right, bottom = browser.rect("#view-0 canvas")
            assert abs((bottom - top) / (right - left) - 0.75) < 0.02, "the canvas is shown stretched"
        finally:
            server.shutdown()


@pytest.mark.usefixtures("chromium")
def test_page_shows_names_as_text_never_as_markup(exports, tmp_path):
    """An export's folder name (and its header's fields) reach the page as text: markup in them is shown,
    not run."""
    folder = tmp_path / "<i>tagged"
    folder.mkdir()
    shutil.copy(Path(exports["eugen-nerf"]) / fmt.FILE_NAME, folder / fmt.FILE_NAME)
    with page_on([folder]) as browser:
        shown = browser.evaluate(
            "JSON.stringify({markup: document.querySelectorAll('#info i, #show i').length,"
            " option: document.getElementById('show').options[0].textContent,"
            " info: document.getElementById('info').textContent})"
        )
    shown = json.loads(shown)
    assert shown["markup"] == 0, shown
    assert shown["option"].startswith("A: <i>tagged (") and "<i>tagged" in shown["info"], shown
