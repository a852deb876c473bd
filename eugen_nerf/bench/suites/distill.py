"""Distillation with ``eugen-distill``'s defaults: wall time by stage, student/teacher PSNR, render speed.

Runs ``eugen-distill`` on ``--teacher`` exactly as a user does with its defaults (every hidden layer but
skip layers and the first of each MLP, closed form and per-layer refinement, no fine-tune unless
``--finetune-steps``), then reports the student against the teacher on the test split: PSNR, SSIM, LPIPS, parameters, checkpoint
size, and the render speed of both timed side by side in one process (the fused student against the
teacher), beside the goals:

* closed form (load + probe + capture + solve + build) in <= 60 s on a 2-core CPU;
* student/teacher PSNR >= 99% closed form (>= 99.8% after a fine-tune, when one runs);
* student/teacher render speed >= 1.5x.

Writes the JSON report given by ``--output`` and its plot beside it (``.png``).

    eugen-bench distill                                             # the paper-sized teacher
    python -m eugen_nerf.bench.suites.distill --teacher teachers/bunny64/dense-nerf/shipped --output /tmp/d.json
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tyro

from eugen_nerf.bench.index import machine
from eugen_nerf.bench.suites import command_line
from eugen_nerf.distill.options import DistillOptions
from eugen_nerf.distill.run import distill
from eugen_nerf.inputs.errors import usage_error

GOALS = {
    "closed_form_seconds": 60.0,
    "psnr_ratio_closed_form": 0.99,
    "psnr_ratio_finetuned": 0.998,
    "fps_ratio": 1.5,
}


@dataclass
class BenchDistill:
    teacher: Path = Path("teachers/bunny64/dense-nerf/paper")
    """the teacher's config.yml or the run directory holding it."""
    output: Path = Path("benchmarks/distill/distill.json")
    """the JSON written (the plot goes beside it as .png)."""
    student_dir: Path | None = None
    """keep the student run here, to look at it (eugen-viewer, eugen-eval); default: a temporary folder."""
    image_fraction: float | None = None
    """eugen-distill --image-fraction (default: eugen-distill's)."""
    resolution_scale: float | None = None
    """eugen-distill --resolution-scale (default: eugen-distill's)."""
    refine_steps: int | None = None
    """eugen-distill --refine-steps (default: eugen-distill's)."""
    finetune_steps: int | None = None
    """eugen-distill --finetune-steps (default: eugen-distill's, no fine-tune)."""
    fps_repeats: int | None = None
    """eugen-distill --fps-repeats (default: eugen-distill's)."""


OVERRIDES = ("image_fraction", "resolution_scale", "refine_steps", "finetune_steps", "fps_repeats")


def summarise(report: dict) -> dict:
    """The figures the goals speak of, measured and judged."""
    seconds = report["seconds"]
    closed_form = sum(seconds.get(stage, 0.0) for stage in ("load", "probe", "capture", "solve", "build"))
    teacher, student = report["teacher"], report["student"]
    closed = report.get("student_closed_form", student)
    measured = {
        "closed_form_seconds": closed_form,
        "refine_seconds": seconds.get("refine", 0.0),
        "psnr_ratio_closed_form": closed["psnr"] / teacher["psnr"],
        "fps_ratio": report["render_speedup"],
    }
    if "student_closed_form" in report:
        measured["psnr_ratio_finetuned"] = student["psnr"] / teacher["psnr"]
    met = {
        key: (value <= GOALS[key] if key.endswith("seconds") else value >= GOALS[key])
        for key, value in measured.items()
        if key in GOALS and value is not None
    }
    return {"measured": measured, "goals": GOALS, "met": met}


def plot(report: dict, summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    stages = {k: v for k, v in report["seconds"].items() if k != "evaluate"}
    left.barh(list(stages), list(stages.values()), color="tab:blue")
    left.axvline(
        GOALS["closed_form_seconds"], color="tab:red", ls="--", label="closed-form goal (60 s, total)"
    )
    left.set_xlabel("seconds")
    left.set_title(f"time by stage (closed form {summary['measured']['closed_form_seconds']:.1f} s)")
    left.legend(loc="lower right", fontsize=8)
    keys = [
        k for k in ("psnr_ratio_closed_form", "psnr_ratio_finetuned", "fps_ratio") if k in summary["measured"]
    ]
    names = {
        "psnr_ratio_closed_form": "PSNR",
        "psnr_ratio_finetuned": "PSNR fine-tuned",
        "fps_ratio": "render FPS",
    }
    values = [summary["measured"][k] or 0.0 for k in keys]
    goals = [GOALS[k] for k in keys]
    labels = [names[k] for k in keys]
    bars = right.bar(
        labels, values, color=["tab:green" if v >= g else "tab:orange" for v, g in zip(values, goals)]
    )
    right.scatter(labels, goals, color="tab:red", marker="_", s=600, label="goal", zorder=3)
    right.bar_label(bars, fmt="%.3f")
    right.set_ylim(0, max(values + goals) * 1.15)  # room for the labels
    right.set_ylabel("student / teacher")
    right.set_title("student vs teacher (test split)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    args = tyro.cli(BenchDistill, description=__doc__)
    given = {name: getattr(args, name) for name in OVERRIDES if getattr(args, name) is not None}
    if any(value < 0 for value in given.values()):
        usage_error("eugen-bench distill", f"negative value in {given}")
    with tempfile.TemporaryDirectory(prefix="bench-distill-") as tmp:
        options = DistillOptions(
            teacher=args.teacher,
            output_dir=args.student_dir or Path(tmp) / "student",
            overwrite=args.student_dir is not None,
            **given,
        )
        report = distill(options).report
    summary = summarise(report)
    result = {
        "command": command_line(),
        "machine": machine(),
        "teacher": str(args.teacher),
        "options_given": given,
        **summary,
        "report": {k: v for k, v in report.items() if k != "finetune_losses"},
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=str) + "\n")
    plot(report, summary, args.output.with_suffix(".png"))
    for key, value in summary["measured"].items():
        goal = f"  goal {'<=' if key.endswith('seconds') else '>='} {GOALS[key]}" if key in GOALS else ""
        print(f"{key:>24}: {value:8.4f}{goal}")
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
