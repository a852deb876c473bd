#!/usr/bin/env python
"""Ablation of the closed-form distillation's choices on a NeRF teacher's fine field, offline.

Renders a seeded set of training rays once with the teacher, keeps the fine field's inputs (encoded
positions and directions, sample spacings), and then, for each variant, fits the chosen trunk layers
sequentially (each on the student's own inputs) and volume-renders the kept samples with the student.
The score is the PSNR of those renders against the teacher's own renders on **whole held-out cameras**
(a fifth of the cameras; never fitted). Sample positions stay the teacher's, so the coarse field plays
no part: this isolates what each choice does to the fitted layers.

Variants (each one change from the baseline, ``relu`` map, m = 64, k = 2, layers 2, 3, 5, 6, unweighted):
feature map; the projections (seeded Gaussian, the teacher's own units in every order, or pairs of units:
``z_s·z_t`` in order 2), with the scaling and the norm entry; pair weights (transmittance ``T`` of the teacher,
rendering weight ``T·α``); refitting the
dense layers after the replaced ones and the density head in closed form (pre-activation targets, the
density floored at -8); one ridge for all features vs a ridge per feature variance; more features; other
layer sets; per-layer refinement of ``G`` and ``A`` by gradient descent on the same layer loss (its steps and
learning rate, tied orders for the teacher's units, or on what the next layer sees of the output); and a joint
refinement of every replaced layer after it, on the teacher's render of the training samples (what
``--finetune-steps`` with ``--finetune-parameters eugen`` does in ``eugen-distill``) or on the teacher's trunk
output.

    python scripts/ablate_distill.py                       # paper-sized teacher, ~15 min on 2 cores
    python scripts/ablate_distill.py --quick               # three variants, small sample
    python scripts/ablate_distill.py --only 'layers 6, 7 + refine'   # some variants, merged into the JSON
Writes ``benchmarks/distill_ablation.json``.
"""

from __future__ import annotations

import copy
import functools
import json
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import tyro

from eugen_nerf.distill.capture import trace
from eugen_nerf.distill.field_match import recorded_fields
from eugen_nerf.distill.options import RIDGE_GRID
from eugen_nerf.distill.sampling import sample_rays
from eugen_nerf.distill.solve import pooled_r2
from eugen_nerf.distill.student import LayerRef, install_layer, make_student_layer
from eugen_nerf.distill.teacher import load_teacher
from eugen_nerf.layers import (
    EUGenLinear,
    EUGenSpec,
    NormalEquations,
    order_rows,
    pivoted_units,
    tie_order_gradients_,
    unit_projections,
)

ROOT = Path(__file__).resolve().parents[1]
BASE = dict(
    layers=(2, 3, 5, 6),
    m=64,
    k=2,
    feature_map="relu",
    weight="none",
    refit=(),
    standardise=True,
    refine_steps=0,
    joint=None,
    non_negative=False,
    projections="seeded",
    scaling="linear",
    use_norm=True,
    refine_view="output",
    refine_lr=1e-3,
    layer_m=(),
    units_from="pre-activation",
    pair_shift=1,
)
REFINED = dict(feature_map="identity", refine_steps=300)
VARIANTS = {
    "baseline (relu, m=64, k=2, layers 2,3,5,6)": {},
    "feature map identity": dict(feature_map="identity"),
    "weights: teacher transmittance T": dict(weight="T"),
    "weights: teacher rendering weight T*alpha": dict(weight="Talpha"),
    "refit downstream (layers 4, 7, density head, colour layer 0)": dict(refit=(4, 7, "density", "colour")),
    "weights T + refit downstream": dict(weight="T", refit=(4, 7, "density", "colour")),
    "one ridge for all features (not standardised)": dict(standardise=False),
    "m=128 (k*m = 256, as wide as the layer)": dict(m=128),
    "refine G and A per layer (300 Adam steps)": dict(refine_steps=300),
    "layers 5, 6 only": dict(layers=(5, 6)),
    "layers 6, 7 only": dict(layers=(6, 7)),
    "identity + refine": REFINED,
    "identity + refine, then jointly on the teacher's render (300 steps)": dict(REFINED, joint="render"),
    "identity + refine, then jointly on the teacher's trunk output (300 steps)": dict(REFINED, joint="trunk"),
    "identity + refine, layers 5, 6, 7": dict(REFINED, layers=(5, 6, 7)),
    "identity + refine, layers 6, 7": dict(REFINED, layers=(6, 7)),
    "identity + refine, layer 7": dict(REFINED, layers=(7,)),
    "identity + refine, layers 1-7": dict(REFINED, layers=(1, 2, 3, 4, 5, 6, 7)),
    "identity + refine, non-negative (the ReLU kept after each EUGen layer: A no longer merges)": dict(
        REFINED, non_negative=True
    ),
    "identity + refine, layers 6, 7, non-negative": dict(REFINED, layers=(6, 7), non_negative=True),
    "identity, G = the teacher's units (--projections teacher)": dict(
        feature_map="identity", projections="teacher"
    ),
    "identity + refine, G = the teacher's units": dict(REFINED, projections="teacher"),
    "identity, G = the teacher's units, m=128 (k*m = 256)": dict(
        feature_map="identity", projections="teacher", m=128
    ),
    "relu, G = the teacher's units": dict(projections="teacher"),
    "relu + refine, G = the teacher's units": dict(refine_steps=300, projections="teacher"),
    "identity, G = pairs of the teacher's units": dict(feature_map="identity", projections="teacher-pairs"),
    "relu, G = pairs of the teacher's units": dict(projections="teacher-pairs"),
    "relu + refine, G = pairs of the teacher's units": dict(refine_steps=300, projections="teacher-pairs"),
    "relu + refine 1000 steps, G = the teacher's units": dict(refine_steps=1000, projections="teacher"),
    "relu, G = the teacher's units, polynomial scaling, no norm": dict(
        projections="teacher", scaling="polynomial", use_norm=False
    ),
    "relu + refine, G = the teacher's units, polynomial scaling, no norm": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False
    ),
    "relu + refine, G = pairs of the teacher's units, polynomial scaling, no norm": dict(
        refine_steps=300, projections="teacher-pairs", scaling="polynomial", use_norm=False
    ),
    "relu + refine, G = the teacher's units, polynomial scaling, no norm, m=96": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, m=96
    ),
    "relu + refine on the next layer's view, G = the teacher's units, polynomial scaling, no norm": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, refine_view="next"
    ),
    "relu + refine 1000 steps, G = the teacher's units, polynomial scaling, no norm": dict(
        refine_steps=1000, projections="teacher", scaling="polynomial", use_norm=False
    ),
    "relu + refine at lr 3e-3, G = the teacher's units, polynomial scaling, no norm": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, refine_lr=3e-3
    ),
    "relu + refine at lr 3e-4, G = the teacher's units, polynomial scaling, no norm": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, refine_lr=3e-4
    ),
    "relu + refine, G = the teacher's units, polynomial scaling, no norm, "
    "k=3 (order 3 of the same projection)": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, k=3
    ),
    "relu + refine, G = the teacher's units, polynomial scaling, no norm, m=80": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, m=80
    ),
    "relu + refine, G = pairs within the teacher's units (shift 32), polynomial scaling, no norm": dict(
        refine_steps=300,
        projections="teacher-pairs-within",
        scaling="polynomial",
        use_norm=False,
        pair_shift=32,
    ),
    "relu + refine, k=3, G = triples within the teacher's units, polynomial scaling, no norm": dict(
        refine_steps=300, projections="teacher-pairs-within", scaling="polynomial", use_norm=False, k=3
    ),
    "relu, k=1, m=128, G = the teacher's units, no norm (pruned to 128 units, refitted)": dict(
        projections="teacher", scaling="polynomial", use_norm=False, k=1, m=128
    ),
    "relu + refine, k=1, m=128, G = the teacher's units, no norm": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, k=1, m=128
    ),
    "relu, k=1, m=96, G = the teacher's units, no norm (pruned to 96 units, refitted)": dict(
        projections="teacher", scaling="polynomial", use_norm=False, k=1, m=96
    ),
    "relu + refine, k=1, m=96, G = the teacher's units, no norm": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, k=1, m=96
    ),
    "relu, G = pairs within the teacher's units, polynomial scaling, no norm": dict(
        projections="teacher-pairs-within", scaling="polynomial", use_norm=False
    ),
    "relu + refine, G = pairs within the teacher's units, polynomial scaling, no norm": dict(
        refine_steps=300, projections="teacher-pairs-within", scaling="polynomial", use_norm=False
    ),
    "relu, G = the teacher's units chosen on their activations, polynomial scaling, no norm": dict(
        projections="teacher", scaling="polynomial", use_norm=False, units_from="output"
    ),
    "relu + refine, G = the teacher's units chosen on their activations, polynomial scaling, no norm": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, units_from="output"
    ),
    "relu + refine, G = the teacher's units, polynomial scaling, no norm, m=96, layers 1, 2, 3, 5, 6": dict(
        refine_steps=300,
        projections="teacher",
        scaling="polynomial",
        use_norm=False,
        m=96,
        layers=(1, 2, 3, 5, 6),
    ),
    "relu + refine, G = the teacher's units, polynomial scaling, no norm, m=128 at layer 2": dict(
        refine_steps=300, projections="teacher", scaling="polynomial", use_norm=False, layer_m=((2, 128),)
    ),
    "relu + refine, G = the teacher's units, polynomial scaling, no norm, m=96 at layers 2, 3": dict(
        refine_steps=300,
        projections="teacher",
        scaling="polynomial",
        use_norm=False,
        layer_m=((2, 96), (3, 96)),
    ),
}
QUICK = (
    "baseline (relu, m=64, k=2, layers 2,3,5,6)",
    "feature map identity",
    "weights: teacher transmittance T",
)


def capture(teacher, image_fraction: float, resolution_scale: float, seed: int) -> dict:
    """The fine field's inputs for every sample of the chosen rays, and the teacher's rendered colours."""
    model = teacher.model
    field = model.field_fine
    cameras = teacher.pipeline.datamanager.train_dataset.cameras
    rays = sample_rays(cameras, image_fraction, resolution_scale, 1024, seed)
    with torch.no_grad(), recorded_fields(model) as calls:
        for b in range(rays.num_batches):
            model(rays.batch(b, teacher.pipeline.device))
        kept = [
            dict(
                x=field.position_encoding(call.samples.frustums.get_positions()),
                d=field.direction_encoding(call.samples.frustums.directions),
                delta=call.samples.deltas,
            )
            for call in calls
            if call.name == "field_fine"
        ]
    data = {key: torch.cat([k[key] for k in kept]) for key in kept[0]}
    data["camera"] = rays.rays.camera_indices.reshape(-1)
    return data


def composite(field, data: dict, background: float) -> tuple:
    """Volume-render the kept samples with ``field``: colours, weights ``T·α`` and transmittance ``T``."""
    features = field.trunk(data["x"])
    density = torch.nn.functional.softplus(field.density_head(features))
    colour = field.color_head(torch.cat([data["d"], features], -1))
    alpha = 1 - torch.exp(-density * data["delta"])
    transmittance = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1 - alpha[:, :-1] + 1e-10], 1), 1)
    weights = alpha * transmittance
    return (weights * colour).sum(1) + (1 - weights.sum(1)) * background, weights, transmittance


def best_solve(train: NormalEquations, heldout: NormalEquations, standardise: bool):
    """``eugen-distill``'s ridge selection (its grid, pooled held-out R²), with the standardisation as a choice."""
    solutions = [train.solve(ridge, standardise=standardise) for ridge in RIDGE_GRID]
    return max(((pooled_r2(heldout, s.weight, s.bias), s) for s in solutions), key=lambda pair: pair[0])


def fit_rows(inputs, targets, weights, train_rows, held_rows, standardise):
    train, held = (
        NormalEquations(inputs.shape[-1], targets.shape[-1]),
        NormalEquations(inputs.shape[-1], targets.shape[-1]),
    )
    train.update(inputs[train_rows], targets[train_rows], weights[train_rows])
    held.update(inputs[held_rows], targets[held_rows], weights[held_rows])
    return best_solve(train, held, standardise)


def refine(
    layer: EUGenLinear, inputs, targets, weights, steps: int, seed: int, view=None, lr: float = 1e-3
) -> EUGenLinear:
    """The paper's refinement: ``G`` (trainable: the layer was made so) and ``A`` trained on the same weighted
    layer loss, from the closed form. With ``view = (V, offsets, relu)`` the loss compares what the next layer
    makes of the output, ``φ(y Vᵀ + offsets)``, instead of the output itself."""
    layer.requires_grad_(True)
    rows = order_rows(layer)  # eugen-distill keeps the teacher's units one projection while refining
    optimizer = torch.optim.Adam(layer.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        pick = torch.randint(inputs.shape[0], (4096,), generator=generator)
        output, target = layer(inputs[pick]), targets[pick]
        if view is not None:
            matrix, offsets, relu = view
            seen = [y @ matrix.T + (offsets[pick] if offsets is not None else 0) for y in (output, target)]
            output, target = (torch.relu(t) for t in seen) if relu else seen
        loss = (weights[pick, None] * (output - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        tie_order_gradients_(layer, rows)
        optimizer.step()
        schedule.step()
    return layer.requires_grad_(False)


def joint_refine(
    student,
    data: dict,
    reference,
    train_rays,
    layers,
    background,
    target: str,
    steps: int,
    seed: int,
    rays_per_step: int = 256,
):
    """Every replaced layer's ``G``, ``A``, ``c`` trained together, from their per-layer fits, to match the
    teacher's render of the training samples (``render``) or the teacher's trunk output (``trunk``)."""
    params = [p for index in layers for p in student.trunk.layers[index].parameters()]  # G trainable: made so
    for p in params:
        p.requires_grad_(True)
    student.train()  # eval mode runs the fused form, which is built without gradients
    optimizer = torch.optim.Adam(params, lr=1e-3)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    generator = torch.Generator().manual_seed(seed + 7)
    goal = reference[0] if target == "render" else reference[3]
    with torch.enable_grad():
        for _ in range(steps):
            pick = train_rays[torch.randint(len(train_rays), (rays_per_step,), generator=generator)]
            if target == "render":
                out, _, _ = composite(
                    student, {k: t[pick] for k, t in data.items() if k != "camera"}, background
                )
            else:
                out = student.trunk(data["x"][pick])
            loss = (out - goal[pick]).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    for p in params:
        p.requires_grad_(False)
    return student.eval()


@torch.no_grad()
def run_variant(teacher_field, data, reference, held_cameras, background, pair_fraction, seed, **v) -> dict:
    start = time.perf_counter()
    rays, samples = data["x"].shape[:2]
    held_ray = torch.isin(data["camera"], held_cameras)
    keep = torch.rand(rays, samples, generator=torch.Generator().manual_seed(seed + 1)) < pair_fraction
    train_rows, held_rows = keep & ~held_ray[:, None], keep & held_ray[:, None]
    _, render_weight, transmittance, _ = reference
    weights = {
        "none": torch.ones(rays, samples),
        "T": transmittance[..., 0],
        "Talpha": render_weight[..., 0],
    }[v["weight"]]
    weights = weights / weights[train_rows].mean()
    student = copy.deepcopy(teacher_field)
    # refined G is a parameter
    spec = EUGenSpec(
        num_features=v["m"],
        degree=v["k"],
        feature_map=v["feature_map"],
        seed=seed,
        scaling=v["scaling"],
        use_norm=v["use_norm"],
        trainable_projections=bool(v["refine_steps"] or v["joint"]),
    )
    layer_m = dict(v["layer_m"])  # (layer, m) pairs: more features where a layer fits worst

    def m_of(index: int) -> int:
        return layer_m.get(index, v["m"])

    teacher_in, teacher_out, _ = trace(teacher_field.trunk, data["x"], 7)
    trunk = teacher_field.trunk

    @functools.cache  # the next-layer view asks for a layer's units before its own turn does
    def units_of(index: int, count: int):  # the teacher's units at ``index``, from its training rows
        if v["units_from"] == "output":  # the units whose activations best span the layer's output (order 1)
            pre = teacher_out[index][train_rows].double()
        else:
            pre = trunk.layers[index](teacher_in[index][train_rows]).double()
        pre = pre - pre.mean(0)
        return pivoted_units(pre.T @ pre, count)

    def next_view(index: int):
        """What the layer after ``index`` sees of its output: its units' rows (a replaced layer, teacher units),
        or its pre-activation and ReLU (a dense layer; the skip input's share as a per-row offset)."""
        following = index + 1
        if following >= len(trunk.layers):
            return None
        dense = trunk.layers[following]
        weight, bias = dense.weight.detach(), dense.bias.detach()
        if following in v["layers"]:
            rows = torch.cat([weight, bias[:, None]], 1)[units_of(following, m_of(following))]
            return (rows / rows.norm(dim=1, keepdim=True))[:, : weight.shape[1]], None, False
        if following in trunk.skip_connections:
            split = trunk.in_dim
            offsets = data["x"][train_rows] @ weight[:, :split].T + bias
            return weight[:, split:], offsets, True
        return weight, bias.expand(int(train_rows.sum()), -1), True

    fits = []
    for index in v["layers"]:
        layer = make_student_layer(
            student.trunk, LayerRef("trunk", index), replace(spec, num_features=m_of(index))
        )
        student_in = trace(student.trunk, data["x"], index)[0]
        if v["projections"] != "seeded":  # units from the teacher's pre-activations on the training rows
            dense = teacher_field.trunk.layers[index]
            units = units_of(index, m_of(index) * (2 if v["projections"] == "teacher-pairs" else 1))
            within = v["projections"] == "teacher-pairs-within"  # z_s * z_t, t another of the m units
            shift = v["pair_shift"] if within else 0
            projections = unit_projections(layer, dense, units[: m_of(index)], shift)
            if v["projections"] == "teacher-pairs":  # order 2 multiplies two different units: z_s * z_t
                second = unit_projections(layer, dense, units[m_of(index) :]).view(v["k"], m_of(index), -1)
                projections.view(v["k"], m_of(index), -1)[1:] = second[1:]
            layer.projections.copy_(projections)
        features = layer.features(student_in[index])
        score, solution = fit_rows(
            features, teacher_out[index], weights, train_rows, held_rows, v["standardise"]
        )
        layer.weight.copy_(solution.weight)
        layer.bias.copy_(solution.bias)
        if v["refine_steps"]:
            with torch.enable_grad():
                layer = refine(
                    layer,
                    student_in[index][train_rows],
                    teacher_out[index][train_rows],
                    weights[train_rows],
                    v["refine_steps"],
                    seed,
                    next_view(index) if v["refine_view"] == "next" else None,
                    v["refine_lr"],
                )
        # non-negative: wrapped, the layer is no longer an EUGenLinear to the MLP, which then applies its ReLU
        install_layer(student.trunk, index, torch.nn.Sequential(layer) if v["non_negative"] else layer)
        fits.append({"layer": index, "r2_heldout": score, "ridge": solution.ridge})
    for target in v["refit"]:
        if target == "density":  # the density head's pre-activation, floored where it renders the same
            inputs = student.trunk(data["x"])
            goal = teacher_field.density_head(teacher_out[7]).clamp_min(-8.0)
            module = student.density_head
        elif target == "colour":  # the colour head's first layer, weighted by where colour is seen
            inputs = torch.cat([data["d"], student.trunk(data["x"])], -1)
            goal = teacher_field.color_head.layers[0](torch.cat([data["d"], teacher_out[7]], -1))
            module = student.color_head.layers[0]
        else:  # a dense trunk layer after a replaced one: its pre-activation from the student's inputs
            inputs = trace(student.trunk, data["x"], target)[0][target]
            goal = teacher_field.trunk.layers[target](teacher_in[target])
            module = student.trunk.layers[target]
        row_weights = (
            render_weight[..., 0] / render_weight[..., 0][train_rows].mean()
            if target == "colour"
            else weights
        )
        score, solution = fit_rows(inputs, goal, row_weights, train_rows, held_rows, v["standardise"])
        module.weight.copy_(solution.weight)
        module.bias.copy_(solution.bias)
        fits.append({"layer": str(target), "r2_heldout": score, "ridge": solution.ridge})
    if v["joint"]:
        student = joint_refine(
            student,
            data,
            reference,
            torch.nonzero(~held_ray).squeeze(1),
            v["layers"],
            background,
            v["joint"],
            300,
            seed,
        )
    student.eval()
    rgb, _, _ = composite(student, {k: t[held_ray] for k, t in data.items() if k != "camera"}, background)
    mse = (rgb - reference[0][held_ray]).square().mean()
    return {
        "psnr_vs_teacher_heldout_cameras": float(-10 * torch.log10(mse)),
        "fits": fits,
        "seconds": time.perf_counter() - start,
        "options": {k: list(x) if isinstance(x, tuple) else x for k, x in v.items()},
    }


@dataclass
class AblateDistill:
    teacher: Path = Path("teachers/bunny64/dense-nerf/paper")
    """the NeRF teacher's config.yml or the run directory holding it."""
    image_fraction: float = 0.25
    """fraction of the training images whose rays are captured."""
    resolution_scale: float = 0.5
    """scale of the captured images' resolution."""
    pair_fraction: float = 0.25
    """fraction of the captured (input, target) pairs each layer is fitted on."""
    seed: int = 0
    """seed of the ray capture, the held-out cameras and the fits."""
    quick: bool = False
    """three variants on 1/10 of the images at 1/4 resolution"""
    output: Path = ROOT / "benchmarks" / "distill_ablation.json"
    """the JSON written (with --quick, written only when given)."""
    only: tuple[str, ...] = ()
    """run these variants only (names as in the JSON) and merge them into an existing --output"""


def main() -> None:
    args = tyro.cli(AblateDistill, description=__doc__)
    if args.quick:
        args.image_fraction, args.resolution_scale = 0.1, 0.25
    teacher = load_teacher(args.teacher, "cpu")
    field = copy.deepcopy(teacher.model.field_fine).eval()
    if not hasattr(field, "trunk") or len(field.trunk.layers) != 8:
        raise SystemExit(f"ablate_distill: {args.teacher} is not a NeRF teacher with an 8-layer trunk")
    colour = teacher.model.renderer_rgb.background_color
    if not isinstance(colour, torch.Tensor) and colour not in ("white", "black"):
        raise SystemExit(f"ablate_distill: needs a constant background, the teacher has {colour!r}")
    background = (
        float(colour.reshape(-1)[0]) if isinstance(colour, torch.Tensor) else float(colour == "white")
    )
    data = capture(teacher, args.image_fraction, args.resolution_scale, args.seed)
    with torch.no_grad():
        reference = (*composite(field, data, background), field.trunk(data["x"]))
    cameras = data["camera"].unique()
    held_cameras = cameras[
        torch.randperm(len(cameras), generator=torch.Generator().manual_seed(args.seed))[
            : max(1, len(cameras) // 5)
        ]
    ]
    unknown = [name for name in args.only if name not in VARIANTS]
    if unknown:
        raise SystemExit(f"ablate_distill: unknown variant(s) {unknown}; the variants are {list(VARIANTS)}")
    previous = json.loads(args.output.read_text()) if args.only and args.output.is_file() else {}
    results = previous.get("variants", {})
    for name in args.only or (QUICK if args.quick else VARIANTS):
        results[name] = run_variant(
            field,
            data,
            reference,
            held_cameras,
            background,
            args.pair_fraction,
            args.seed,
            **{**BASE, **VARIANTS[name]},
        )
        print(
            f"{results[name]['psnr_vs_teacher_heldout_cameras']:6.2f} dB  {name}  "
            f"({results[name]['seconds']:.0f} s)",
            flush=True,
        )
    out = {
        "machine": {"platform": platform.platform(), "cpu_threads": torch.get_num_threads()},
        "command": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "held_out_cameras": held_cameras.tolist(),
        "variants": results,
    }
    if previous:  # variants added to an earlier run: keep how that run was made, and how each addition was
        this = out["command"]
        out["command"] = previous["command"]
        out["added_by"] = previous.get("added_by", []) + [this]
    if not args.quick or args.output != AblateDistill.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
