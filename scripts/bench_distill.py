#!/usr/bin/env python
"""Distillation benchmark on the shipped teacher: wall time by stage, PSNR ratio, FPS ratio.

Runs ``eugen-distill`` once with a fine-tune, so one run gives both the closed-form student (scored
before the fine-tune) and the fine-tuned one, and compares them with the issue's goals:

* closed form (load + capture + solve + build) in <= 60 s on a 2-core CPU,
* student/teacher PSNR >= 99% closed form and >= 99.8% after the fine-tune,
* student/teacher render FPS >= 1.5 (the fused student against the paper-sized teacher).

Writes ``benchmarks/distill.json`` and ``benchmarks/distill.png``.

``--front P1 P2 ...`` instead distils once per layer pattern (closed form, with ``--refine-steps`` if given,
no fine-tune), the teacher scored once, and writes the quality/speed front: which layers a user can replace
for which loss (``benchmarks/distill_front.json`` and its plot).

    python scripts/bench_distill.py
    python scripts/bench_distill.py --teacher outputs/.../config.yml --finetune-steps 100
    python scripts/bench_distill.py --teacher teachers/bunny64/dense-nerf/paper --num-features 64 --refine-steps 300 \
        --front 'field_*.trunk.layers.[67]' 'field_*.trunk.layers.[567]' --output benchmarks/distill_front.json
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

from eugen_nerf.distill.options import DistillOptions
from eugen_nerf.distill.run import distill
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.layers import EUGenSpec

ROOT = Path(__file__).resolve().parents[1]
TEACHER = Path("teachers/bunny64/dense-nerf/shipped/config.yml")
GOALS = {
    "closed_form_seconds": 60.0,
    "psnr_ratio_closed_form": 0.99,
    "psnr_ratio_finetuned": 0.998,
    "fps_ratio": 1.5,
}


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
    scaling: Literal["linear", "unit", "polynomial"] = "linear"
    """scaling of the EUGen features (eugen-distill --eugen.scaling)."""
    use_norm: bool = True
    """the norm entry of x+ (eugen-distill --eugen.use-norm)."""
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
    finetune_lr: float = 1e-3
    """Adam learning rate of the fine-tune at its start (cosine-decayed)."""
    finetune_novel_views: int = 8
    """cameras near the training ones that the teacher renders as extra fine-tune targets."""
    finetune_average: float = 0.0
    """decay of the moving average of the fine-tuned parameters that is validated and kept (0: none;
    eugen-distill --finetune-average)."""
    finetune_camera_rays: Literal["capture", "all"] = "capture"
    """capture: the closed form's rays; all: every pixel of every training camera but the held-out ones
    (fields only; eugen-distill --finetune-camera-rays, whose default with fields is all: this one stays
    capture so that the recorded suites mean what they measured)."""
    finetune_novel_rays: Literal["fixed", "fresh"] = "fixed"
    """fixed: the novel cameras drawn once; fresh: new ones every step (fields only; eugen-distill
    --finetune-novel-rays, whose default with fields is fresh: this one stays fixed, as above)."""
    finetune_validation_views: int = 4
    """other novel cameras the teacher renders to choose the kept fine-tune state (eugen-distill
    --finetune-validation-views)."""
    finetune_parameters: Literal["all", "eugen"] = "all"
    """all: every field parameter; eugen: only the EUGen layers."""
    seed: int = 0
    """eugen-distill --eugen.seed: the sampled rays, seeded projections, novel cameras and fine-tune batches."""
    finetune_target: Literal["colour", "fields"] = "colour"
    """colour: the teacher's rendered colours; fields: also its fields at its samples (eugen-distill
    --finetune-target)."""
    refine_steps: int = 0
    """per-layer refinement of G and A (0: closed form)"""
    projections: Literal["seeded", "teacher", "teacher-pairs"] = "seeded"
    """G of the EUGen layers: the seeded Gaussian draw, or the teacher layer's own units, in every order or
    paired with the unit pivoted before (eugen-distill --projections)."""
    layer_type: Literal["eugen", "snnk", "lowrank"] = "eugen"
    """what the layers become (the front mode reads it from each entry instead): EUGen, or a reviewers' baseline
    fitted the same way (see --front)."""
    lowrank_rank: int | None = None
    """rank of low-rank layers (None: EUGen's parameter count, l*k*m/(d+l))."""
    fit: Literal["sequential", "parallel"] = "sequential"
    """sequential: each layer fitted on the inputs of the student built so far; parallel: every layer on the
    teacher's own inputs, one capture (see eugen-distill --fit)."""
    fps_repeats: int = 2
    """timed renders per test view in the report."""
    student_dir: Path | None = None
    """keep the student run here, to look at it (eugen-eval --load-config DIR/config.yml, ns-viewer); a run
    already there is replaced once the new one is complete (eugen-distill --overwrite). Default: a temporary
    folder, removed."""
    front: list[str] = field(default_factory=list)
    """layer patterns (several in one entry: comma-separated), one distillation each (closed form and
    --refine-steps, no fine-tune): the front mode. An entry 'snnk: PATTERN' or 'lowrank: PATTERN' fits a
    reviewers' baseline the same way, at EUGen's feature width / parameter count: SNNK (ReLU random features of
    width k*m, refined like EUGen) or low-rank (reduced-rank regression of the pre-activation at rank
    l*k*m/(d+l), the ReLU kept, no refinement)."""
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
    closed_form = (
        seconds["load"] + seconds.get("probe", 0.0) + seconds["capture"] + seconds["solve"] + seconds["build"]
    )
    teacher, closed, tuned = report["teacher"], report["student_closed_form"], report["student"]
    # the fine-tuned student beside the teacher, timed side by side
    measured = {
        "closed_form_seconds": closed_form,
        "refine_seconds": seconds.get("refine", 0.0),
        "psnr_ratio_closed_form": ratio(closed, teacher, "psnr"),
        "psnr_ratio_finetuned": ratio(tuned, teacher, "psnr"),
        "fps_ratio": report["render_speedup"],
        "fps_ratio_sequential": ratio(tuned, teacher, "fps"),
    }
    met = {
        key: (value <= GOALS[key] if key.endswith("seconds") else value >= GOALS[key])
        for key, value in measured.items()
        if key in GOALS
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
    left.set_title(
        f"distillation time by stage (closed form {summary['measured']['closed_form_seconds']:.1f} s)"
    )
    left.legend(loc="lower right", fontsize=8)
    names = ["PSNR closed form", "PSNR fine-tuned", "render FPS"]
    values = [summary["measured"][k] for k in ("psnr_ratio_closed_form", "psnr_ratio_finetuned", "fps_ratio")]
    goals = [GOALS[k] for k in ("psnr_ratio_closed_form", "psnr_ratio_finetuned", "fps_ratio")]
    bars = right.bar(
        names, values, color=["tab:green" if v >= g else "tab:orange" for v, g in zip(values, goals)]
    )
    right.scatter(names, goals, color="tab:red", marker="_", s=600, label="goal", zorder=3)
    right.bar_label(bars, fmt="%.3f")
    right.set_ylim(0, max(values + goals) * 1.15)  # room for the labels
    right.set_ylabel("student / teacher")
    kind = report.get("options", {}).get("eugen", {}).get("layer_type", "eugen")
    right.set_title(f"{'EUGen' if kind == 'eugen' else kind} student vs teacher (test split)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def front(args: BenchDistill) -> None:
    """One closed-form (and refined) student per pattern of ``--front``, scored beside the teacher (scored once);
    rerunning the same command keeps the points already measured. Speed: every student's architecture and the
    teacher rendered side by side, interleaved, in one process (:func:`render_speedups`)."""
    from eugen_nerf.distill.report import evaluate
    from eugen_nerf.distill.teacher import load_teacher

    device = "cuda" if torch.cuda.is_available() else "cpu"
    settings = {k: v for k, v in front_command(args).items() if k not in FRONT_SELECTION}
    previous = json.loads(args.output.read_text()) if args.output.is_file() else {}
    # options added since a previous run count as equal when at their defaults (which is what it ran with)
    defaults = {k: v for k, v in front_command(BenchDistill()).items() if k not in FRONT_SELECTION}
    old = {k: v for k, v in previous.get("command", {}).items() if k not in FRONT_SELECTION}
    same = bool(previous) and {**{k: defaults[k] for k in settings.keys() - old.keys()}, **old} == settings
    done = (
        {point_key(p["layers"], p.get("layer_type", "eugen")): p for p in previous.get("points", [])}
        if same
        else {}
    )
    teacher_scores = previous["teacher"] if same else None
    if teacher_scores is None:
        teacher = load_teacher(args.teacher, device)
        teacher_scores = evaluate(teacher.pipeline, None, args.fps_repeats, "teacher")
        del teacher
    points = []
    for entry in args.front:
        layer_type, pattern = split_entry(entry)
        key = point_key(pattern, layer_type)
        if key in done:
            point = done[key]
            point.setdefault("layer_type", "eugen")  # a point from before the baselines
            # a point from before the timing
            point.setdefault("fps_ratio_sequential", point.pop("fps_ratio", None))
            points.append(point)
            continue
        refine_steps = 0 if layer_type == "lowrank" else args.refine_steps
        with tempfile.TemporaryDirectory(prefix="bench-distill-front-") as tmp:
            options = DistillOptions(
                teacher=args.teacher,
                output_dir=Path(tmp) / "student",
                layers=tuple(pattern.split(",")),
                eugen=front_spec(args, layer_type),
                width_fraction=None,
                image_fraction=args.image_fraction,
                resolution_scale=args.resolution_scale,
                fit=args.fit,
                pair_fraction=args.pair_fraction,
                refine_steps=refine_steps,
                evaluate=False,
                projections=args.projections if layer_type == "eugen" else "seeded",
            )
            result = distill(options)
            student = evaluate(result.teacher.pipeline, None, args.fps_repeats, f"student {key}")
        points.append(
            {
                "layers": pattern,
                "layer_type": layer_type,
                "refine_steps": refine_steps,
                "replaced": [fit.path for fit in result.fits.values()],
                "student": student,
                "psnr_ratio": student["psnr"] / teacher_scores["psnr"],
                "fps_ratio_sequential": student["fps"] / teacher_scores["fps"],
                "r2_heldout": {fit.path: fit.r2_heldout for fit in result.fits.values()},
                "seconds": result.report.get("seconds", {}),
            }
        )
        print(
            f"{key}: PSNR {student['psnr']:.2f} dB ({points[-1]['psnr_ratio']:.3f} of the teacher)",
            flush=True,
        )
        write_front(args, teacher_scores, points)
    speed = render_speedups(
        args,
        device,
        {point_key(p["layers"], p["layer_type"]): (p["layers"].split(","), p["layer_type"]) for p in points},
    )
    for point in points:
        point["fps_ratio"] = speed[point_key(point["layers"], point["layer_type"])]
        print(
            f"{point_key(point['layers'], point['layer_type'])}: {point['psnr_ratio']:.3f} of the teacher's PSNR "
            f"at {point['fps_ratio']:.2f}x its render speed",
            flush=True,
        )
    write_front(args, teacher_scores, points)


FRONT_SELECTION = ("front", "output")
"""Options that choose which points a front run measures (not how): a rerun that adds points keeps the others."""


def split_entry(entry: str) -> tuple:
    """``'lowrank: PATTERN'`` -> ``("lowrank", PATTERN)``; a bare pattern is EUGen."""
    head, sep, rest = entry.partition(":")
    if sep and head.strip() in ("eugen", "snnk", "lowrank"):
        return head.strip(), rest.strip()
    return "eugen", entry


def point_key(pattern: str, layer_type: str) -> str:
    return pattern if layer_type == "eugen" else f"{layer_type}: {pattern}"


def front_spec(args: BenchDistill, layer_type: str = "eugen") -> EUGenSpec:
    # --feature-map is EUGen's: SNNK is ReLU features by definition, and a low-rank layer has none
    eugen = layer_type == "eugen"
    return EUGenSpec(
        layer_type=layer_type,
        num_features=args.num_features,
        degree=args.degree,
        seed=args.seed,
        feature_map=args.feature_map if eugen else "relu",
        lowrank_rank=args.lowrank_rank,
        **(dict(scaling=args.scaling, use_norm=args.use_norm) if eugen else {}),
    )


def front_command(args: BenchDistill) -> dict:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}


def render_speedups(args: BenchDistill, device: str, students: dict, views: int = 2) -> dict:
    """Render-speed ratio teacher / student for each of ``students`` (name -> (layer patterns, layer type)): the
    students' architectures (EUGen layers fused in eval mode; the fitted values do not change the cost) beside the
    untouched teacher, timed side by side (``eugen_nerf.distill.report.render_speedup``)."""
    import copy

    from eugen_nerf.distill.report import render_speedup
    from eugen_nerf.distill.student import apply_student
    from eugen_nerf.distill.teacher import load_teacher

    run = load_teacher(args.teacher, device)
    models = {}
    for name, (patterns, layer_type) in students.items():
        student = copy.deepcopy(run.model)
        apply_student(student, patterns, front_spec(args, layer_type))
        models[name] = student.eval()
    return render_speedup(run.model, models, run.pipeline, views=views, repeats=args.fps_repeats)


def write_front(args: BenchDistill, teacher: dict, points: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = {
        "machine": {
            "platform": platform.platform(),
            "cpu_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
        "command": front_command(args),
        "goals": {"psnr_ratio_closed_form": GOALS["psnr_ratio_closed_form"], "fps_ratio": GOALS["fps_ratio"]},
        "teacher": teacher,
        "points": points,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2, default=str) + "\n")
    fig, ax = plt.subplots(figsize=(6, 4))
    points = [p for p in points if "fps_ratio" in p]  # timed side by side once every point is fitted
    styles = {
        "eugen": ("tab:blue", "o", "EUGen"),
        "snnk": ("tab:orange", "s", "SNNK (k = 1, ReLU)"),
        "lowrank": ("tab:green", "^", "low-rank (reduced-rank regression)"),
    }
    for layer_type, (colour, marker, label) in styles.items():
        mine = [p for p in points if p.get("layer_type", "eugen") == layer_type]
        if mine:
            ax.scatter(
                [p["fps_ratio"] for p in mine],
                [p["psnr_ratio"] for p in mine],
                color=colour,
                marker=marker,
                label=label,
            )
    for p in points:
        ax.annotate(
            p["layers"].replace("field_*.", "").replace("trunk.layers.", "trunk "),
            (p["fps_ratio"], p["psnr_ratio"]),
            fontsize=6,
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.axhline(GOALS["psnr_ratio_closed_form"], color="tab:red", ls="--", lw=1, label="PSNR goal (99%)")
    ax.axvline(GOALS["fps_ratio"], color="tab:red", ls=":", lw=1, label="speed goal (1.5x)")
    ax.set_xlabel("student / teacher render FPS (fused, side by side)")
    ax.set_ylabel("student / teacher test PSNR")
    ax.set_title(
        f"EUGen: closed form{' + refinement' if args.refine_steps else ''}, m = {args.num_features}, "
        f"k = {args.degree}, {args.feature_map} feature map\nbaselines at EUGen's feature width / parameters "
        f"(low-rank: closed form only)",
        fontsize=9,
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output.with_suffix(".png"), dpi=120)
    plt.close(fig)


def main() -> None:
    args = parse_args()
    if args.front:
        front(args)
        return
    with tempfile.TemporaryDirectory(prefix="bench-distill-") as tmp:
        options = DistillOptions(
            teacher=args.teacher,
            output_dir=args.student_dir or Path(tmp) / "student",
            layers=tuple(args.layers),
            eugen=front_spec(args, args.layer_type),
            width_fraction=None,
            image_fraction=args.image_fraction,
            resolution_scale=args.resolution_scale,
            fit=args.fit,
            pair_fraction=args.pair_fraction,
            finetune_steps=args.finetune_steps,
            fps_repeats=args.fps_repeats,
            finetune_rays=args.finetune_rays,
            finetune_novel_views=args.finetune_novel_views,
            finetune_lr=args.finetune_lr,
            finetune_parameters=args.finetune_parameters,
            finetune_validation_views=args.finetune_validation_views,
            finetune_target=args.finetune_target,
            finetune_novel_rays=args.finetune_novel_rays,
            finetune_camera_rays=args.finetune_camera_rays,
            finetune_average=args.finetune_average,
            refine_steps=0 if args.layer_type == "lowrank" else args.refine_steps,
            projections=args.projections if args.layer_type == "eugen" else "seeded",
            overwrite=args.student_dir is not None,
        )
        report = distill(options).report
    summary = summarise(report)
    result = {
        "machine": {
            "platform": platform.platform(),
            "cpu_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
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
        print(
            f"{key:>24}: {value:8.4f}  goal {'<=' if key.endswith('seconds') else '>='} {GOALS[key]}  "
            f"{'met' if summary['met'][key] else 'NOT met'}"
        )
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
