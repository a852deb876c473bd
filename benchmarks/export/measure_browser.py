"""The web viewer in headless Chromium (SwiftShader WebGL2 on the CPU): the paper-sized teacher's and its
student's exports rendered by the page at a test camera, against the reference renderer (same sampling) and the
ground truth, with each frame's time; then a 200 x 200 frame of the student.

    .venv/bin/python benchmarks/export/measure_reference.py   # first (its exports)
    .venv/bin/python benchmarks/export/measure_browser.py     # writes benchmarks/export/browser.json

Results are written after every render (a long run interrupted keeps what it measured). The page's
settings: 128 samples per ray, occupancy skipping and early termination on.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from _browser import Browser

from eugen_nerf.export.field import load_export
from eugen_nerf.export.render import Sampling, render_view
from eugen_nerf.export.serve import make_server

EXPORTS = {"student": REPO / "outputs/export/student", "teacher": REPO / "outputs/export/teacher"}
SAMPLES, CAMERA = 128, 0
OUT = Path(__file__).with_name("browser.json")


def page_call(browser: Browser, expression: str, timeout: float = 7200.0):
    result = browser.call(
        "Runtime.evaluate", timeout, expression=expression, awaitPromise=True, returnByValue=True
    )
    return result["result"].get("value")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return round(float(-10 * np.log10(np.mean((a - b) ** 2))), 3)


def truth(size: int) -> np.ndarray | None:
    """Test image CAMERA of the scene, composited on white (only at its own size)."""
    meta = json.loads((REPO / "scenes/bunny64/transforms_test.json").read_text())
    image = (
        np.asarray(
            Image.open(REPO / "scenes/bunny64" / (meta["frames"][CAMERA]["file_path"] + ".png")).convert(
                "RGBA"
            )
        )
        / 255.0
    )
    if image.shape[0] != size:
        return None
    return image[..., :3] * image[..., 3:] + (1 - image[..., 3:])


def main() -> None:
    results = json.loads(OUT.read_text()) if OUT.is_file() else {}
    results["browser"] = subprocess.run(
        ["/usr/bin/chromium", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    results["device"] = "headless Chromium, SwiftShader WebGL2 (software), 2-core CPU shared with other jobs"
    results["settings"] = {"samples": SAMPLES, "camera": CAMERA, "occupancy": True, "early_termination": True}
    server = make_server(list(EXPORTS.values()), 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/?still"
    plan = [("student", 64), ("teacher", 64), ("student", 200)]
    with Browser(1100, 640) as browser:
        browser.open(url)
        while not browser.evaluate("typeof window.eugen === 'object' && window.eugen.ready !== null"):
            time.sleep(0.3)
        assert page_call(browser, "window.eugen.ready") == "ready"
        for name, size in plan:
            key = f"{name}_{size}"
            if key in results:
                continue
            field = list(EXPORTS).index(name)
            options = {"field": field, "camera": CAMERA, "width": size, "height": size, "samples": SAMPLES}
            out = page_call(browser, f"window.eugen.renderTest({json.dumps(options)})")
            page = np.frombuffer(base64.b64decode(out["rgb"]), np.uint8).reshape(size, size, 3) / 255.0
            Image.fromarray((page * 255).round().astype(np.uint8)).save(OUT.with_name(f"page_{key}.png"))
            reference = render_view(
                load_export(EXPORTS[name], device="cpu"), CAMERA, Sampling(samples=SAMPLES), size, size
            )
            entry = {"frame_ms": round(out["ms"], 1), "page_vs_reference_db": psnr(page, reference.numpy())}
            gt = truth(size)
            if gt is not None:
                entry["page_vs_truth_db"] = psnr(page, gt)
            results[key] = entry
            print(key, entry, flush=True)
            OUT.write_text(json.dumps(results, indent=1) + "\n")
    if "student_64" in results and "teacher_64" in results:
        results["teacher_over_student_frame_time"] = round(
            results["teacher_64"]["frame_ms"] / results["student_64"]["frame_ms"], 3
        )
    OUT.write_text(json.dumps(results, indent=1) + "\n")
    server.shutdown()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
