"""Distillation with ``eugen-distill``'s defaults: wall time by stage, student/teacher PSNR, render speed.

Runs ``eugen-distill`` on ``--teacher`` exactly as a user does with its defaults (every hidden layer, or the
EUGen twin's layers of a teacher without one, closed form and per-layer refinement, no fine-tune unless
``--finetune-steps``), then reports the student against the teacher on the test split: PSNR, SSIM, LPIPS, parameters, checkpoint
size, and the render speed of both timed side by side in one process (the fused student against the
teacher), beside the goals:

* closed form (load + probe + capture + solve + build) in <= 60 s on a 2-core CPU;
* student/teacher PSNR >= 99% closed form (>= 99.8% after a fine-tune, when one runs);
* student/teacher render speed >= 1.5x.

With ``--scene``, the teacher is first trained (or its training continued) on that scene until it plateaus,
in chunks of 500 steps scored on the validation views (:class:`~eugen_nerf.bench.training.PlateauRule`):
``--teacher-method dense-nerf`` (default), the paper-sized dense NeRF (trunk 8 x 256, 16 + 16 samples, 256 rays
a step, RAdam 1e-3), written to ``--teachers/<scene>/dense-nerf/paper``; ``dense-zipnerf``, Zip-NeRF at the
benchmarks' CPU preset (its 256-wide MLPs kept), written to ``--teachers/<scene>/dense-zipnerf/cpu``. A rerun
continues an interrupted training from its last checkpoint.

Writes the JSON report given by ``--output`` and its plot beside it (``.png``).

    eugen-bench distill                                             # the protocol's teacher and scene
    python -m eugen_nerf.bench.suites.distill --scene scenes/shiny128 --teachers teachers --output /tmp/d.json
    python -m eugen_nerf.bench.suites.distill --scene scenes/garden200 --teacher-method dense-zipnerf --output /tmp/z.json
    python -m eugen_nerf.bench.suites.distill --teacher teachers/bunny64/dense-nerf/shipped --output /tmp/d.json
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import tyro

from eugen_nerf.bench.merge import publish_json
from eugen_nerf.bench.provenance import provenance
from eugen_nerf.bench.suites import command_line
from eugen_nerf.bench.training import PlateauRule, train_to_plateau
from eugen_nerf.distill.options import DistillOptions, distill_spec
from eugen_nerf.distill.run import distill
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.inputs.outputs import atomic_write_bytes

GOALS = {
    "closed_form_seconds": 60.0,
    "psnr_ratio_closed_form": 0.99,
    "psnr_ratio_finetuned": 0.998,
    "fps_ratio": 1.5,
}


FINETUNE_STEPS = 1000
"""Fine-tuning steps of the ``finetuned`` variant (the command docs/distillation.md shows)."""

VARIANTS: dict[str, dict] = {
    "default": {},
    "closed-form": {"refine_steps": 0},
    "finetuned": {"finetune_steps": FINETUNE_STEPS},
    "unfolded": {"fold_out_activation": False},
    "lowrank": {"layer_type": "lowrank"},
    "snnk": {"layer_type": "snnk"},
}
"""Students distilled from the same teacher: eugen-distill's defaults (closed form, then per-layer refinement),
the closed form alone, the defaults then fine-tuned, the defaults with the activation after the trunk kept
(``--no-fold-out-activation``), and the reviewers' low-rank and SNNK layers fitted the same way (same layers, capture
and parameter budget)."""

TEACHER_RULE = PlateauRule(eval_every=500, window=0.2, min_gain_db=0.1, min_steps=3000, max_steps=12000)
"""When the teacher counts as trained: < 0.1 dB validation PSNR gained over the last 20% of its steps."""


def paper_nerf_teacher():
    """The paper-sized dense NeRF teacher's training configuration (``dense-nerf`` at its defaults, with the
    CPU's ray batch and samples)."""
    from eugen_nerf.methods.nerf import dense_nerf

    config = copy.deepcopy(dense_nerf.config)
    config.pipeline.datamanager.train_num_rays_per_batch = 256
    config.pipeline.model.num_coarse_samples = config.pipeline.model.num_importance_samples = 16
    config.optimizers["fields"]["optimizer"].lr = 1e-3
    return config


def cpu_zipnerf_teacher():
    """The Zip-NeRF teacher's training configuration: ``dense-zipnerf`` at the realistic scenes' CPU preset
    (:func:`~eugen_nerf.bench.suites.methods.scene_zipnerf`: smaller hash grids and fewer samples, the 256-wide
    MLPs that distillation replaces kept; the fields suites' dense twin)."""
    from eugen_nerf.bench.suites.methods import scene_zipnerf
    from eugen_nerf.methods.zipnerf import dense_zipnerf

    config = copy.deepcopy(dense_zipnerf.config)
    scene_zipnerf(config)
    return config


TEACHER_METHODS = {"dense-nerf": (paper_nerf_teacher, "paper"), "dense-zipnerf": (cpu_zipnerf_teacher, "cpu")}
"""``--teacher-method``: the training configuration and the run folder's name under <teachers>/<scene>/<method>."""


def trained_teacher(
    scene: Path, teachers: Path, method: str = "dense-nerf", rule: PlateauRule = TEACHER_RULE
) -> tuple[Path, dict]:
    """The ``method`` teacher (:data:`TEACHER_METHODS`) on ``scene`` trained to plateau by ``rule`` in
    ``teachers`` (continued when interrupted)."""
    if not any((scene / name).is_file() for name in ("transforms_train.json", "transforms.json")):
        usage_error(
            "eugen-bench distill",
            f"{scene} is not a scene (no transforms_train.json or transforms.json); "
            f"make it with: eugen-scenes blender {scene.name.rstrip('0123456789')} --output {scene}",
        )
    make_config, timestamp = TEACHER_METHODS[method]
    return train_to_plateau(
        make_config(),
        scene,
        teachers,
        rule,
        timestamp=timestamp,
        label=f"{method} teacher on {scene.name}",
    )


@dataclass
class BenchDistill:
    teacher: Path = Path("teachers/bunny64/dense-nerf/paper")
    """the teacher's config.yml or the run directory holding it (ignored with --scene)."""
    scene: Path | None = None
    """train the --teacher-method teacher on this scene to plateau first (resumable), and distil it."""
    teachers: Path = Path("teachers")
    """where --scene's teacher is trained: <teachers>/<scene>/dense-nerf/paper (dense-zipnerf/cpu)."""
    teacher_method: Literal["dense-nerf", "dense-zipnerf"] = "dense-nerf"
    """with --scene: the teacher trained, the paper-sized dense NeRF or Zip-NeRF at the CPU preset."""
    teacher_min_steps: int = TEACHER_RULE.min_steps
    """with --scene: the teacher's plateau rule, at least this many steps."""
    teacher_max_steps: int = TEACHER_RULE.max_steps
    """with --scene: the teacher's plateau rule, at most this many steps."""
    teacher_eval_every: int = TEACHER_RULE.eval_every
    """with --scene: the teacher's plateau rule, validation PSNR scored every this many steps."""
    teacher_only: bool = False
    """with --scene: train the teacher to plateau and stop."""
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
    fps_clock: Literal["wall", "cpu"] | None = None
    """eugen-distill --fps-clock (default: eugen-distill's, the wall clock; cpu: each render's CPU seconds)."""
    variants: list[str] = field(default_factory=lambda: ["default"])
    """the students distilled, each scored and timed against the teacher: default (eugen-distill's defaults),
    closed-form (no refinement), finetuned (the defaults, then 1000 fine-tuning steps), unfolded (the defaults with
    --no-fold-out-activation), lowrank, snnk (the reviewers' layers fitted the same way). The first is the report's
    headline."""
    work_dir: Path = Path("outputs/bench/distill")
    """where the students are kept (<work-dir>/<teacher's scene>/<variant>); a finished student distilled
    with the same options is reused, so an interrupted suite resumes."""


OVERRIDES = (
    "image_fraction",
    "resolution_scale",
    "refine_steps",
    "finetune_steps",
    "fps_repeats",
    "fps_clock",
)


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
        # what no student changing only these MLPs can beat: the rest of the render is the teacher's
        "fps_ratio_bound": (report.get("changed_mlps_render_share") or {}).get("speedup_bound"),
    }
    if "student_closed_form" in report:
        measured["psnr_ratio_finetuned"] = student["psnr"] / teacher["psnr"]
    met = {
        key: (value <= GOALS[key] if key.endswith("seconds") else value >= GOALS[key])
        for key, value in measured.items()
        if key in GOALS and value is not None
    }
    return {"measured": measured, "goals": GOALS, "met": met}


def plot(report: dict, summary: dict, path: Path, variants: dict | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    others = variants or {}
    fig, axes = plt.subplots(1, 3 if len(others) > 1 else 2, figsize=(15 if len(others) > 1 else 10, 3.8))
    left, right = axes[0], axes[1]
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
    if len(others) > 1:
        students = axes[2]
        ratios = [
            v["psnr_ratio_finetuned" if "psnr_ratio_finetuned" in v else "psnr_ratio_closed_form"]
            for v in others.values()
        ]
        bars = students.bar(list(others), ratios, color="tab:blue")
        students.bar_label(
            bars,
            labels=[f"{r:.3f}\n{v['fps_ratio']:.2f}x FPS" for r, v in zip(ratios, others.values())],
            fontsize=8,
        )
        students.axhline(
            GOALS["psnr_ratio_closed_form"], color="tab:red", ls="--", lw=1, label="closed-form goal"
        )
        if any("psnr_ratio_finetuned" in v for v in others.values()):
            students.axhline(
                GOALS["psnr_ratio_finetuned"], color="tab:purple", ls=":", lw=1, label="fine-tuned goal"
            )
        students.set_ylim(min(ratios) * 0.95, 1.05)
        students.tick_params(axis="x", labelsize=8, labelrotation=20)
        students.set_ylabel("student PSNR / teacher PSNR")
        students.set_title("students of one teacher (label: PSNR, FPS ratio)")
        students.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def variant_overrides(name: str, given: dict) -> dict:
    """eugen-distill options of the student ``name``: what defines the variant wins over ``given`` (the
    closed form stays unrefined; a low-rank layer has nothing to refine), except a given fine-tune length."""
    overrides = {**given, **VARIANTS[name]}
    if name == "finetuned" and "finetune_steps" in given:
        overrides["finetune_steps"] = given["finetune_steps"]
    if overrides.get("layer_type") == "lowrank":
        overrides.pop("refine_steps", None)
    return overrides


def variant_options(teacher: Path, name: str, given: dict, output_dir: Path) -> DistillOptions:
    """eugen-distill's options for the student ``name`` of :data:`VARIANTS` (``given`` overrides on top)."""

    overrides = variant_overrides(name, given)
    layer_type = overrides.pop("layer_type", None)
    spec = distill_spec() if layer_type is None else replace(distill_spec(), layer_type=layer_type)
    return DistillOptions(teacher=teacher, output_dir=output_dir, overwrite=True, eugen=spec, **overrides)


def teacher_checkpoint(run_dir: Path) -> dict | None:
    """The name and SHA-256 of the newest checkpoint in ``run_dir`` (``None`` without one): what makes a teacher
    the same teacher, so one trained again or replaced at the same path is distilled again."""
    from eugen_nerf.eval.runs import EvalInputError, latest_checkpoint

    try:
        checkpoint = latest_checkpoint(run_dir / "config.yml")
    except EvalInputError:
        return None
    return {"name": checkpoint.name, "sha256": hashlib.sha256(checkpoint.read_bytes()).hexdigest()}


def distilled(teacher: Path, name: str, given: dict, work_dir: Path, student_dir: Path | None = None) -> dict:
    """The distillation report of the student ``name``: reused from its folder when a finished student there
    was made from the same teacher (path and checkpoint) with the same options (eugen-distill's defaults
    included, so a student made under other defaults is distilled again), distilled (and recorded) otherwise."""
    run_dir = teacher if teacher.is_dir() else teacher.parent  # .../<scene>/<method>/<timestamp>
    folder = student_dir or work_dir / f"{run_dir.parent.parent.name}-{run_dir.name}" / name
    record = folder / "bench_distill.json"
    options = variant_options(teacher, name, given, folder)
    identity = json.loads(
        json.dumps(
            {
                "teacher": str(teacher),
                "teacher_checkpoint": teacher_checkpoint(run_dir),
                "variant": name,
                "options": options.recorded(),
                # the timing's clock: a student timed on another clock is timed again (wall, the default,
                # is left out so that students timed before the option existed stay reusable)
                **({"fps_clock": options.fps_clock} if options.fps_clock != "wall" else {}),
            },
            default=str,
        )
    )
    if record.is_file():
        try:
            saved = json.loads(record.read_text())
        except ValueError:  # cut short: the student is distilled again
            saved = {}
        if saved.get("identity") == identity and (folder / "config.yml").is_file():
            print(f"[distill] reusing the {name} student in {folder}", flush=True)
            return saved["report"]
    record.unlink(missing_ok=True)
    print(f"[distill] {name} student -> {folder}", flush=True)
    report = distill(options).report
    report = {k: v for k, v in report.items() if k != "finetune_losses"}
    record_text = json.dumps({"identity": identity, "report": report}, indent=2, default=str) + "\n"
    atomic_write_bytes(record, record_text.encode())
    return report


def variant_summary(name: str, report: dict) -> dict:
    """One student's figures: test-split scores of teacher and student (and of the student before its
    fine-tune), the PSNR ratios and the render-FPS ratio timed side by side, parameters, the goals met."""
    scores = ("psnr", "ssim", "lpips", "parameters", "fps")
    summary = summarise(report)
    out = {
        "overrides": VARIANTS[name],
        **summary["measured"],
        "met": summary["met"],
        "teacher": {k: report["teacher"].get(k) for k in scores},
        "student": {k: report["student"].get(k) for k in scores},
    }
    if "student_closed_form" in report:
        out["student_before_finetune"] = {k: report["student_closed_form"].get(k) for k in scores[:3]}
        out["finetune_kept_step"] = report.get("finetune_kept_step")
    return out


def main() -> None:
    args = tyro.cli(BenchDistill, description=__doc__)
    given = {name: getattr(args, name) for name in OVERRIDES if getattr(args, name) is not None}
    if any(not isinstance(value, str) and value < 0 for value in given.values()):
        usage_error("eugen-bench distill", f"negative value in {given}")
    unknown = [name for name in args.variants if name not in VARIANTS]
    if unknown or not args.variants:
        usage_error("eugen-bench distill", f"--variants {args.variants}: choose among {list(VARIANTS)}")
    training = None
    if args.scene is not None:
        rule = dataclasses.replace(
            TEACHER_RULE,
            min_steps=args.teacher_min_steps,
            max_steps=args.teacher_max_steps,
            eval_every=args.teacher_eval_every,
        )
        config_path, training = trained_teacher(args.scene, args.teachers, args.teacher_method, rule)
        args.teacher = config_path.parent
        if args.teacher_only:
            print(f"teacher trained to plateau: {args.teacher} ({training['history'][-1]['step']} steps)")
            return
    reports: dict[str, dict] = {}
    for number, name in enumerate(args.variants):
        student_dir = args.student_dir if number == 0 and args.student_dir else None
        reports[name] = distilled(args.teacher, name, given, args.work_dir, student_dir)
        write_result(args, given, training, reports)  # after every student: an interrupted suite keeps them
    summary = summarise(reports[args.variants[0]])
    for key, value in summary["measured"].items():
        goal = f"  goal {'<=' if key.endswith('seconds') else '>='} {GOALS[key]}" if key in GOALS else ""
        print(f"{key:>24}: {value:8.4f}{goal}")
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


def write_result(args: BenchDistill, given: dict, training: dict | None, reports: dict[str, dict]) -> None:
    """The suite's JSON and plot from the students distilled so far (the first variant is the headline);
    ``complete`` says whether every requested variant is in."""
    headline = args.variants[0]
    report = reports[headline]
    summary = summarise(report)
    result = {
        "command": command_line(),
        "provenance": provenance(*([args.scene] if args.scene else [])),
        "teacher": str(args.teacher),
        "teacher_training": training,
        "teacher_steps": training["history"][-1]["step"] if training else None,
        "options_given": given,
        "headline_variant": headline,
        "complete": list(reports) == list(args.variants),
        **summary,
        "report": {k: v for k, v in report.items() if k != "finetune_losses"},
        "variants": {name: variant_summary(name, reports[name]) for name in reports},
    }
    publish_json(args.output, result, default=str)
    plot(report, summary, args.output.with_suffix(".png"), result["variants"])


if __name__ == "__main__":
    main()
