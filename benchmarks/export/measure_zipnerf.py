"""The Zip-NeRF head exported and rendered: a small dense-zipnerf and eugen-zipnerf pair (train_zipnerf.py) through
eugen-export (float32 and float16), the reference renderer against nerfstudio on every test view (the same
proposal sampling), the page's sampling against both and the ground truth, then the page itself in headless
Chromium (SwiftShader WebGL2): page against reference at a test camera and the frame time of each field.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/export/train_zipnerf.py
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/export/measure_zipnerf.py   # writes zipnerf.json

Results are written after every step (an interrupted run keeps what it measured; a rerun skips it, and takes
the page's screenshot only where docs/screenshots/ lacks it). Pictures
to look at (ground truth | nerfstudio | reference | page's sampling, test view 0 of each run) go to
outputs/export-zipnerf/, the page's frames beside this script.
"""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from PIL import Image

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))
from _browser import Browser
from measure_browser import page_call, truth
from measure_reference import MARCH, measure

from eugen_nerf.eval.runs import final_rgb, ground_truth, load_run
from eugen_nerf.export import format as fmt
from eugen_nerf.export.field import load_export
from eugen_nerf.export.render import Sampling, render_view
from eugen_nerf.export.serve import make_server

ROOT = REPO / "outputs" / "export-zipnerf"
RUNS = {"dense": "dense-zipnerf", "eugen": "eugen-zipnerf"}
OUT = HERE / "zipnerf.json"
CAMERA, PAGE_SIZE = 0, 64
SCREENSHOT = REPO / "docs" / "screenshots" / "export-viewer-zipnerf.png"


def run_config(method: str) -> Path:
    return ROOT / "bunny64" / method / method / "config.yml"


def export(method: str, dtype: str) -> Path:
    output = ROOT / "exports" / (method if dtype == "float32" else f"{method}-f16")
    if not (output / fmt.FILE_NAME).is_file():
        subprocess.run(
            [
                str(REPO / ".venv/bin/eugen-export"),
                str(run_config(method)),
                "--output",
                str(output),
                "--dtype",
                dtype,
            ],
            check=True,
        )
    return output


def save_row(images: list[torch.Tensor | np.ndarray], path: Path) -> None:
    row = np.concatenate([np.asarray(image, dtype=np.float64) for image in images], 1)
    Image.fromarray((row * 255).round().astype(np.uint8)).resize(
        (row.shape[1] * 4, row.shape[0] * 4), 0
    ).save(path)


def save(results: dict) -> None:
    OUT.write_text(json.dumps(results, indent=1) + "\n")


def page_pixels(out: dict) -> np.ndarray:
    return (
        np.frombuffer(base64.b64decode(out["rgb"]), np.uint8).reshape(out["height"], out["width"], 3) / 255.0
    )


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return round(float(-10 * np.log10(np.mean((np.asarray(a) - np.asarray(b)) ** 2))), 3)


@contextlib.contextmanager
def served_page(exports: list[Path]) -> Iterator[tuple[Browser, str]]:
    """The page serving ``exports`` (A and B), opened with ``?still`` in headless Chromium, ready."""
    server = make_server(exports, 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        with Browser(1100, 640) as browser:
            browser.open(url + "?still")
            while not browser.evaluate("typeof window.eugen === 'object' && window.eugen.ready !== null"):
                time.sleep(0.3)
            assert page_call(browser, "window.eugen.ready") == "ready"
            yield browser, url
    finally:
        server.shutdown()


def page_frame(
    browser: Browser, field: int, export_path: Path, size: int
) -> tuple[dict, np.ndarray, np.ndarray]:
    """Test camera CAMERA of field ``field`` by the page at ``size``: its time and PSNRs, the page's picture and
    the reference renderer's (same sampling)."""
    options = {"field": field, "camera": CAMERA, "width": size, "height": size, "samples": MARCH.samples}
    out = page_call(browser, f"window.eugen.renderTest({json.dumps(options)})")
    page = page_pixels(out)
    reference = render_view(load_export(export_path, device="cpu"), CAMERA, MARCH, size, size).numpy()
    entry = {"frame_ms": round(out["ms"], 1), "page_vs_reference_db": psnr(page, reference)}
    if size == PAGE_SIZE:
        entry["page_vs_truth_db"] = psnr(page, truth(size))
    return entry, page, reference


def screenshot(browser: Browser, url: str) -> None:
    """The page as a person sees it, both fields side by side at test camera 0, once both frames are drawn."""
    browser.open(url)
    while not browser.evaluate("typeof window.eugen === 'object' && window.eugen.ready !== null"):
        time.sleep(0.3)
    assert page_call(browser, "window.eugen.ready") == "ready"
    browser.evaluate(
        "document.getElementById('show').value = '2'; document.getElementById('show').onchange()"
    )
    captions = "[...document.querySelectorAll('figure.view:not([hidden]) .fps')].map((e) => e.textContent)"
    while not all("ms/frame" in caption for caption in browser.evaluate(captions)):
        time.sleep(2)
    browser.screenshot(SCREENSHOT)


def main() -> None:
    torch.set_num_threads(1)
    results = json.loads(OUT.read_text()) if OUT.is_file() else {}
    results["command"] = "benchmarks/export/measure_zipnerf.py (see its docstring)"
    exports = {}
    for name, method in RUNS.items():
        exports[name] = export(method, "float32")
        half = export(method, "float16")
        if name not in results:
            results[name] = measure(str(run_config(method)), str(exports[name]))
            results[name]["export_bytes_float16"] = (half / fmt.FILE_NAME).stat().st_size
            save(results)
        run = load_run(run_config(method), device="cpu")
        exported = load_export(exports[name], device="cpu")
        cameras = run.pipeline.datamanager.eval_dataset.cameras
        with torch.no_grad():
            nerfstudio = final_rgb(run.model.get_outputs_for_camera(cameras[CAMERA : CAMERA + 1])).clamp(0, 1)
        reference = render_view(exported, CAMERA, Sampling(kind="nerfstudio"))
        march = render_view(exported, CAMERA, MARCH)
        save_row([ground_truth(run, CAMERA), nerfstudio, reference, march], ROOT / f"views_{method}.png")
        if f"{name}_march_vs_nerfstudio_db" not in results:
            results[f"{name}_march_vs_nerfstudio_db"] = psnr(march.numpy(), nerfstudio.numpy())
            save(results)
        if (
            "march_skipping_vs_plain_db" not in results[name]
        ):  # occupancy skipping and early termination, both off
            plain = render_view(
                exported, CAMERA, Sampling(samples=MARCH.samples, occupancy=False, early_termination=False)
            )
            results[name]["march_skipping_vs_plain_db"] = psnr(march.numpy(), plain.numpy())
            save(results)
        if "float16_vs_float32_db" not in results[name]:
            halved = load_export(half, device="cpu")
            results[name]["float16_vs_float32_db"] = {
                "march": psnr(render_view(halved, CAMERA, MARCH).numpy(), march.numpy()),
                "nerfstudio": psnr(
                    render_view(halved, CAMERA, Sampling(kind="nerfstudio")).numpy(), reference.numpy()
                ),
            }
            save(results)
    for name in RUNS:
        if "export_bytes" in results.get(name, {}):
            print(name, results[name]["export_bytes"], results[name]["min_reference_vs_nerfstudio_db"])

    browser_results = results.setdefault("browser", {})
    version = subprocess.run(["/usr/bin/chromium", "--version"], capture_output=True, text=True, check=False)
    browser_results["chromium"] = version.stdout.strip()
    browser_results["device"] = (
        "headless Chromium, SwiftShader WebGL2 (software), 2-core CPU shared with other jobs"
    )
    browser_results["settings"] = {
        "samples": MARCH.samples,
        "camera": CAMERA,
        "occupancy": True,
        "early_termination": True,
    }
    frames = browser_results.setdefault("frames", {})
    with served_page([exports["eugen"], exports["dense"]]) as (browser, url):
        for repeat in range(2):
            for field, name in enumerate(("eugen", "dense")):
                key = f"{name}_{PAGE_SIZE}_{repeat}"
                if key not in frames:
                    frames[key], page, reference = page_frame(browser, field, exports[name], PAGE_SIZE)
                    if repeat == 0:
                        save_row([truth(PAGE_SIZE), page, reference], HERE / f"page_zipnerf_{name}.png")
                    print(key, frames[key], flush=True)
                    save(results)
        if not SCREENSHOT.is_file():
            screenshot(browser, f"{url}?resolution={PAGE_SIZE}&samples={MARCH.samples}")
    # the float16 export in the page (RGBA16F textures), then a 200 x 200 frame of the EUGen field
    half = ROOT / "exports" / "eugen-zipnerf-f16"
    with served_page([half, exports["eugen"]]) as (browser, _):
        for key, field, path, size in (
            ("eugen_float16_64", 0, half, PAGE_SIZE),
            ("eugen_200", 1, exports["eugen"], 200),
        ):
            if key not in frames:
                frames[key] = page_frame(browser, field, path, size)[0]
                print(key, frames[key], flush=True)
                save(results)
    best = {
        name: min(frames[f"{name}_{PAGE_SIZE}_{r}"]["frame_ms"] for r in range(2))
        for name in ("eugen", "dense")
    }
    results["browser"]["dense_over_eugen_frame_time"] = round(best["dense"] / best["eugen"], 3)
    save(results)
    print(results["browser"])


if __name__ == "__main__":
    main()
