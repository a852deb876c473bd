"""The reference renderer against nerfstudio on every test view of the shipped paper-sized teacher and its
default eugen-distill student, and the page's sampling (the reference's march) against the ground truth.

    .venv/bin/eugen-distill --teacher teachers/bunny64/dense-nerf/paper --output-dir outputs/export-student
    .venv/bin/eugen-export teachers/bunny64/dense-nerf/paper --output outputs/export/teacher
    .venv/bin/eugen-export outputs/export-student --output outputs/export/student
    .venv/bin/python benchmarks/export/measure_reference.py   # writes benchmarks/export/reference.json
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from eugen_nerf.eval.runs import final_rgb, ground_truth, load_run
from eugen_nerf.export import format as fmt
from eugen_nerf.export.field import load_export
from eugen_nerf.export.render import Sampling, render_view

RUNS = {
    "teacher": ("teachers/bunny64/dense-nerf/paper", "outputs/export/teacher"),
    "student": ("outputs/export-student", "outputs/export/student"),
}
MARCH = Sampling(samples=128)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return round(float(-10 * torch.log10(((a - b) ** 2).mean().clamp_min(1e-20))), 3)


def measure(run_path: str, export_path: str) -> dict:
    run = load_run(Path(run_path), device="cpu")
    exported = load_export(export_path, device="cpu")
    cameras = run.pipeline.datamanager.eval_dataset.cameras
    views = []
    for view in range(len(cameras)):
        truth = ground_truth(run, view)
        with torch.no_grad():
            nerfstudio = final_rgb(run.model.get_outputs_for_camera(cameras[view : view + 1])).clamp(0, 1)
        start = time.perf_counter()
        reference = render_view(exported, view, Sampling(kind="nerfstudio"))
        reference_seconds = time.perf_counter() - start
        start = time.perf_counter()
        march = render_view(exported, view, MARCH)
        march_seconds = time.perf_counter() - start
        views.append(
            {
                "view": view,
                "reference_vs_nerfstudio_db": psnr(reference, nerfstudio),
                "nerfstudio_vs_truth_db": psnr(nerfstudio, truth),
                "march_vs_truth_db": psnr(march, truth),
                "reference_seconds": round(reference_seconds, 3),
                "march_seconds": round(march_seconds, 3),
            }
        )
        print(run_path, views[-1], flush=True)
    header = fmt.read(export_path).header
    return {
        "run": run_path,
        "method": header["source"]["method"],
        "export_bytes": Path(export_path, fmt.FILE_NAME).stat().st_size,
        "macs_per_sample": header["macs_per_sample"],
        "occupied_fraction": float(exported.occupancy.float().mean()),
        "views": views,
        "min_reference_vs_nerfstudio_db": min(v["reference_vs_nerfstudio_db"] for v in views),
        "mean_nerfstudio_vs_truth_db": round(sum(v["nerfstudio_vs_truth_db"] for v in views) / len(views), 3),
        "mean_march_vs_truth_db": round(sum(v["march_vs_truth_db"] for v in views) / len(views), 3),
    }


def main() -> None:
    torch.set_num_threads(1)
    results = {name: measure(*paths) for name, paths in RUNS.items()}
    results["march"] = {
        "samples": MARCH.samples,
        "occupancy": MARCH.occupancy,
        "early_termination": MARCH.early_termination,
    }
    results["command"] = "benchmarks/export/measure_reference.py (see its docstring)"
    out = Path(__file__).with_name("reference.json")
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
