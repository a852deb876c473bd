"""The evaluation report: its JSON schema, the terminal table and the plots.

Report layout (``SCHEMA`` below is the normative JSON Schema)::

    {
      "schema_version": 2,
      "created_with": {"eugen_nerf": str, "nerfstudio": str, "torch": str, "command": str},
      "created_at": ISO-8601 str,
      "device": {"type": "cpu" | "cuda", "name": str, "torch_threads": int},
      "settings": {warmup, repeats, field_points, lpips, max_views, eval_num_rays_per_chunk},
      "runs": [{
        "name": "experiment/method/timestamp", "config": str, "method": str, "scene": str,
        "step": int, "checkpoint": str, "views": [image file of each test view],
        "metrics": {
          "psnr": STAT (dB, capped at 100), "ssim": STAT, "lpips": STAT | null,
          "lpips_reason": null | str (why lpips is null)
          -- iSDF runs give "sdf_error" (STAT), "chamfer", "f_score" (STAT | null), "f_score_threshold",
             "mesh_reason" (null | why no mesh, e.g. no zero crossing yet) instead of the image metrics
        },
        "speed": {"render_fps", "render_seconds_per_view": [..], "rays_per_second",
                  "field_points_per_second" (null: no field, e.g. splatting), "field_module",
                  "resolution": [width, height],
                  "render_speedup": null | the first run's render time over this run's, timed side by side,
                  "render_fps_side_by_side": null | this run's FPS in that side-by-side timing},
        "size": {"parameters", "checkpoint_bytes",
                 "render_memory_bytes": null | int (one test view's render, fresh process: eval/memory.py),
                 "render_memory_kind": null | "rss_delta_fresh_process" | "cuda_allocated_delta",
                 "render_memory_reason" (only when the measuring process failed): why it is null}
      }]
    }

where STAT is ``{"mean": float, "std": float (population), "per_view": [float, one per view]}``.
Parameters exclude metric modules (LPIPS, SSIM); checkpoint bytes are the ``.ckpt`` file size.
"""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from eugen_nerf.eval.memory import KINDS as MEMORY_KINDS
from eugen_nerf.inputs.outputs import atomic_write_bytes

SCHEMA_VERSION = 2

_STAT = {
    "type": "object",
    "required": ["mean", "std", "per_view"],
    "properties": {
        "mean": {"type": "number"},
        "std": {"type": "number", "minimum": 0},
        "per_view": {"type": "array", "items": {"type": "number"}},
    },
}
_NUMBER = {"type": "number", "minimum": 0}
_INTEGER = {"type": "integer", "minimum": 0}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "eugen-eval report",
    "type": "object",
    "required": ["schema_version", "created_with", "created_at", "device", "settings", "runs"],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "created_with": {
            "type": "object",
            "required": ["eugen_nerf", "nerfstudio", "torch", "command"],
            "additionalProperties": {"type": "string"},
        },
        "created_at": {"type": "string"},
        "device": {
            "type": "object",
            "required": ["type", "name", "torch_threads"],
            "properties": {
                "type": {"enum": ["cpu", "cuda"]},
                "name": {"type": "string"},
                "torch_threads": _INTEGER,
            },
        },
        "settings": {"type": "object"},
        "runs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "config", "method", "metrics", "speed", "size"],
                "properties": {
                    "name": {"type": "string"},
                    "config": {"type": "string"},
                    "method": {"type": "string"},
                    "scene": {"type": "string"},
                    "step": _INTEGER,
                    "checkpoint": {"type": "string"},
                    "views": {"type": "array", "items": {"type": "string"}},
                    "metrics": {
                        "type": "object",
                        "properties": {
                            "psnr": _STAT,
                            "ssim": _STAT,
                            "lpips": {"oneOf": [_STAT, {"type": "null"}]},
                            "lpips_reason": {"type": ["string", "null"]},
                            "sdf_error": _STAT,
                            "chamfer": {"oneOf": [_STAT, {"type": "null"}]},
                            "f_score": {"oneOf": [_STAT, {"type": "null"}]},
                            "f_score_threshold": _NUMBER,
                            "mesh_reason": {"type": ["string", "null"]},
                        },
                        "oneOf": [
                            {"required": ["psnr", "ssim", "lpips", "lpips_reason"]},
                            {"required": ["sdf_error", "chamfer", "f_score"]},
                        ],
                    },
                    "speed": {
                        "type": "object",
                        "properties": {
                            "render_fps": _NUMBER,
                            "render_seconds_per_view": {"type": "array", "items": _NUMBER},
                            "rays_per_second": _NUMBER,
                            "field_points_per_second": {"oneOf": [_NUMBER, {"type": "null"}]},
                            "field_module": {"type": ["string", "null"]},
                            "resolution": {"type": "array", "items": _INTEGER, "minItems": 2, "maxItems": 2},
                            "render_speedup": {"oneOf": [_NUMBER, {"type": "null"}]},
                            "render_fps_side_by_side": {"oneOf": [_NUMBER, {"type": "null"}]},
                        },
                    },
                    "size": {
                        "type": "object",
                        "required": [
                            "parameters",
                            "checkpoint_bytes",
                            "render_memory_bytes",
                            "render_memory_kind",
                        ],
                        "properties": {
                            "parameters": _INTEGER,
                            "checkpoint_bytes": _INTEGER,
                            "render_memory_bytes": {"oneOf": [_INTEGER, {"type": "null"}]},
                            "render_memory_kind": {"enum": [*MEMORY_KINDS, None]},
                            "render_memory_reason": {"type": "string"},
                        },
                    },
                },
            },
        },
    },
}


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def device_info(device: torch.device) -> dict[str, Any]:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"type": device.type, "name": name, "torch_threads": torch.get_num_threads()}


def build_report(
    runs: list[dict[str, Any]], settings: dict[str, Any], device: torch.device
) -> dict[str, Any]:
    """Wrap run entries with provenance; the result follows :data:`SCHEMA`."""
    return {
        "schema_version": SCHEMA_VERSION,
        "created_with": {
            "eugen_nerf": _version("eugen-nerf"),
            "nerfstudio": _version("nerfstudio"),
            "torch": torch.__version__,
            "command": " ".join(sys.argv),
        },
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device_info(device),
        "settings": settings,
        "runs": runs,
    }


def write_json(report: dict[str, Any], path: Path) -> None:
    """Write strict JSON (``allow_nan=False``: every number in a report is finite), atomically: an interrupted
    evaluation leaves the previous report, never half of a new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(report, indent=2, allow_nan=False) + "\n").encode())


def _stat_cell(stat: dict[str, Any] | None, digits: int) -> str:
    return "n/a" if stat is None else f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"


def _si(value: float) -> str:
    exponent = min(int(math.log10(value) // 3), 4) if value >= 1000 else 0
    return f"{value / 1000**exponent:.3g}{' kMGT'[exponent].strip()}"


def shown_speed(speed: dict[str, Any]) -> tuple[float, float]:
    """The FPS and rays per second that the table and the plot show, both from one timing: the side-by-side
    one where the runs were timed side by side (so they agree with the speed-up), else the run's own."""
    fps = speed.get("render_fps_side_by_side")
    if fps is None:
        return speed["render_fps"], speed["rays_per_second"]
    width, height = speed["resolution"]
    return fps, fps * width * height


def table(report: dict[str, Any]) -> Table:
    """Runs side by side: quality, speed and size. With several runs of one scene, FPS, rays/s and speed-up
    all come from the side-by-side timing, so the columns agree."""
    out = Table(title=f"eugen-eval ({report['device']['name']})")
    out.add_column("run", overflow="fold", min_width=12)
    out.add_column("method", overflow="fold")
    headers = (
        "PSNR",
        "SSIM",
        "LPIPS",
        "FPS",
        "speed-up",
        "rays/s",
        "field pts/s",
        "params",
        "ckpt MB",
        "render MB",
    )
    for header in headers:
        out.add_column(header, justify="right", no_wrap=True, min_width=len(header))
    for run in report["runs"]:
        metrics, speed, size = run["metrics"], run["speed"], run["size"]
        out.add_row(
            run["name"],
            run["method"],
            _stat_cell(metrics.get("psnr"), 2),
            _stat_cell(metrics.get("ssim"), 3),
            _stat_cell(metrics.get("lpips"), 3),
            f"{shown_speed(speed)[0]:.3g}",
            "n/a" if speed.get("render_speedup") is None else f"{speed['render_speedup']:.2f}x",
            _si(shown_speed(speed)[1]),
            "n/a" if speed["field_points_per_second"] is None else _si(speed["field_points_per_second"]),
            _si(size["parameters"]),
            f"{size['checkpoint_bytes'] / 2**20:.1f}",
            "n/a" if size["render_memory_bytes"] is None else f"{size['render_memory_bytes'] / 2**20:.1f}",
        )
    return out


def print_table(report: dict[str, Any], console: Console | None = None) -> None:
    (console or Console()).print(table(report))


def plot(report: dict[str, Any], out_dir: Path) -> list[Path]:
    """``psnr_vs_fps.png`` (one point per run) and ``per_view_psnr.png``; returns the written files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out_dir.mkdir(parents=True, exist_ok=True)
    runs = [run for run in report["runs"] if run["metrics"].get("psnr") is not None]

    fig, ax = plt.subplots(figsize=(6, 4))
    fps = [shown_speed(run["speed"])[0] for run in runs]  # the table's FPS
    for run, x in zip(runs, fps):
        ax.scatter(x, run["metrics"]["psnr"]["mean"], label=run["name"])
    wide = bool(fps) and max(fps) >= 10 * min(fps)  # log axis only when speeds span a decade
    ax.set(xscale="log" if wide else "linear", xlabel="render FPS (test resolution)", ylabel="PSNR (dB)")
    ax.set_title("Quality vs speed")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out_dir / "psnr_vs_fps.png", dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        ax.plot(run["metrics"]["psnr"]["per_view"], marker="o", label=run["name"])
    ax.set(xlabel="test view", ylabel="PSNR (dB)", title="Per-view PSNR")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out_dir / "per_view_psnr.png", dpi=120)
    plt.close(fig)
    return [out_dir / "psnr_vs_fps.png", out_dir / "per_view_psnr.png"]
