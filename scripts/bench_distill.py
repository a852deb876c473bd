#!/usr/bin/env python
"""Distillation benchmark on the shipped teacher: wall time by stage, PSNR ratio, FPS ratio.

Runs ``eugen-distill`` once with a fine-tune, so one run gives both the closed-form student (scored
before the fine-tune) and the fine-tuned one, and compares them with the issue's goals:

* closed form (load + capture + solve + build) in <= 60 s on a 2-core CPU,
* student/teacher PSNR >= 99% closed form and >= 99.8% after the fine-tune,
* student/teacher render FPS >= 1.5 (the fused student against the paper-sized teacher).

Writes ``benchmarks/distill.json`` and ``benchmarks/distill.png``.

    python scripts/bench_distill.py
    python scripts/bench_distill.py --teacher outputs/.../config.yml --finetune-steps 100
"""

from __future__ import annotations

import json
import platform
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
import tyro

from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.distill.options import DistillOptions
from eugen_nerf.distill.run import distill
from eugen_nerf.layers import EUGenSpec

ROOT = Path(__file__).resolve().parents[1]
TEACHER = Path("teachers/bunny64/dense-nerf/shipped/config.yml")
GOALS = {"closed_form_seconds": 60.0, "psnr_ratio_closed_form": 0.99, "psnr_ratio_finetuned": 0.998, "fps_ratio": 1.5}


@dataclass
class BenchDistill:
    teacher: Path = TEACHER
    """the teacher's config.yml or the run directory holding it."""
    layers: list[str] = field(default_factory=lambda: ["field_*.trunk.layers.[2356]"])
    """layer paths or glob patterns of the layers replaced by EUGen layers."""
    num_features: int = 32
    """features per order (m) of the EUGen layers."""
    degree: int = 2
    """polynomial degree (k) of the EUGen layers."""
    feature_map: str = "identity"
    """feature map of the EUGen layers."""
    image_fraction: float = 0.25
    """fraction of the training images whose rays are rendered."""
    resolution_scale: float = 0.5
    """camera resolution scale of the rendered images."""
    pair_fraction: float = 0.25
    """fraction of the recorded (input, output) pairs that enter the fit."""
    finetune_steps: int = 300
    """steps of the whole-student fine-tune after the closed form."""
    finetune_rays: int = 512
    """rays per fine-tune step."""
    finetune_novel_views: int = 8
    """cameras near the training ones that the teacher renders as extra fine-tune targets."""
    finetune_parameters: Literal["all", "eugen"] = "all"
    """all: every field parameter; eugen: only the EUGen layers."""
    refine_steps: int = 0
    """per-layer refinement of G and A (0: closed form)"""
    fps_repeats: int = 2
    """timed renders per test view in the report."""
    output: Path = ROOT / "benchmarks" / "distill.json"
    """the JSON written (the plot goes beside it as .png)."""


def parse_args() -> BenchDistill:
    args = tyro.cli(BenchDistill, description=__doc__)
    if not args.layers:
        usage_error("bench_distill", "--layers needs at least one layer path or pattern")
    return args


def ratio(student: dict, teacher: dict, key: str) -> float:
    return student[key] / teacher[key]


def summarise(report: dict) -> dict:
    seconds = report["seconds"]
    closed_form = seconds["load"] + seconds["capture"] + seconds["solve"] + seconds["build"]
    teacher, closed, tuned = report["teacher"], report["student_closed_form"], report["student"]
    measured = {
        "closed_form_seconds": closed_form,
        "refine_seconds": seconds.get("refine", 0.0),
        "psnr_ratio_closed_form": ratio(closed, teacher, "psnr"),
        "psnr_ratio_finetuned": ratio(tuned, teacher, "psnr"),
        "fps_ratio": ratio(tuned, teacher, "fps"),
    }
    met = {key: (value <= GOALS[key] if key.endswith("seconds") else value >= GOALS[key])
           for key, value in measured.items() if key in GOALS}
    return {"measured": measured, "goals": GOALS, "met": met}


def plot(report: dict, summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    stages = {k: v for k, v in report["seconds"].items() if k != "evaluate"}
    left.barh(list(stages), list(stages.values()), color="tab:blue")
    left.axvline(GOALS["closed_form_seconds"], color="tab:red", ls="--", label="closed-form goal (60 s, total)")
    left.set_xlabel("seconds")
    left.set_title(f"distillation time by stage (closed form {summary['measured']['closed_form_seconds']:.1f} s)")
    left.legend(loc="lower right", fontsize=8)
    names = ["PSNR closed form", "PSNR fine-tuned", "render FPS"]
    values = [summary["measured"][k] for k in ("psnr_ratio_closed_form", "psnr_ratio_finetuned", "fps_ratio")]
    goals = [GOALS[k] for k in ("psnr_ratio_closed_form", "psnr_ratio_finetuned", "fps_ratio")]
    bars = right.bar(names, values, color=["tab:green" if v >= g else "tab:orange" for v, g in zip(values, goals)])
    right.scatter(names, goals, color="tab:red", marker="_", s=600, label="goal", zorder=3)
    right.bar_label(bars, fmt="%.3f")
    right.set_ylabel("student / teacher")
    right.set_title("student vs teacher (test split)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-distill-") as tmp:
        options = DistillOptions(
            teacher=args.teacher, output_dir=Path(tmp) / "student", layers=tuple(args.layers),
            eugen=EUGenSpec(num_features=args.num_features, degree=args.degree, feature_map=args.feature_map),
            image_fraction=args.image_fraction, resolution_scale=args.resolution_scale,
            pair_fraction=args.pair_fraction, finetune_steps=args.finetune_steps, fps_repeats=args.fps_repeats,
            finetune_rays=args.finetune_rays, finetune_novel_views=args.finetune_novel_views,
            finetune_parameters=args.finetune_parameters, refine_steps=args.refine_steps,
        )
        report = distill(options).report
    summary = summarise(report)
    result = {
        "machine": {"platform": platform.platform(), "cpu_threads": torch.get_num_threads(),
                    "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None},
        "command": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        **summary,
        "report": {k: v for k, v in report.items() if k != "finetune_losses"},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=str) + "\n")
    plot(report, summary, args.output.with_suffix(".png"))
    for key, value in summary["measured"].items():
        if key not in GOALS:
            print(f"{key:>24}: {value:8.4f}")
            continue
        print(f"{key:>24}: {value:8.4f}  goal {'<=' if key.endswith('seconds') else '>='} {GOALS[key]}  "
              f"{'met' if summary['met'][key] else 'NOT met'}")
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
