"""Benchmark (not a test): SIREN image fitting, dense vs EUGen vs narrowed dense, PSNR against steps.

All variants fit the same image (cameraman) in one process with the same seed; training throughput is
timed inside :func:`eugen_nerf.siren.fit_image.fit` (synchronised, optimisation step only), inference
throughput with warm-up + median in eval mode (EUGen layers merged). Writes ``benchmarks/siren.json`` and
``benchmarks/siren.png``, and in ``pictures/`` the image fitted (``target.png``) and each variant's fit of it.

Variants: dense SIREN at five learning rates (the paper's 1e-4 and four larger, so the baseline is tuned,
not just run), the chosen EUGen SIREN at equal parameters (and at the paper's lr), the design alternatives
it was chosen against, at its learning rate (frozen projections, degree 2, identity feature map, ω = 1, no
learning-rate scale for G; frozen orthogonal projections at m = w, a dense SIREN's weight reparameterised as
ω·G·A, at two larger learning rates), the parity variants that keep every sine unit at the dense parameter
count (m = w, the first G learned, later G frozen orthogonal, the last A the output layer; five G / A
learning-rate pairs; and started as the SIREN they stand for, ``siren init``, also at m = w/2 beside a dense
SIREN narrowed to its parameters and MACs, and at m = 2w sine units over a w/2-wide h, also with A's rate
halved), and a half-size EUGen SIREN against a dense SIREN narrowed to the same size; and the reviewers'
baselines at the dense parameter count (a low-rank sine layer of rank w/2, an SNNK layer of w frozen ReLU
random features), at the dense SIREN's two best learning rates.

Goal reported against: at equal parameters the EUGen SIREN is no worse in PSNR than the dense one.

    .venv/bin/eugen-bench siren        # = scripts/bench_siren.py with its defaults (128², width 128, 200 steps)
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import matplotlib
import torch
import tyro

from eugen_nerf.eval.timing import benchmark
from eugen_nerf.fields.siren import SirenEUGenSpec, siren_mlp, siren_parameters
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.inputs.outputs import file_stem
from eugen_nerf.layers import EUGenMLP
from eugen_nerf.siren.fit_image import LrSchedule, fit, save_png
from eugen_nerf.siren.image import load_image, pixel_grid

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CHOSEN = "eugen (chosen: k1 sin w3 trainable G x30 lr) lr1e-3"
PARITY_RATES = ((10, 10), (30, 10), (3, 10), (10, 30), (3, 30))
"""(G, A) learning-rate factors of the parity variants (eugen.projection-lr-scale, eugen.weight-lr-scale)."""
SIREN_INIT = "eugen parity, siren init (m=w, w30: G lr x30, A lr x1) lr3e-3"
"""The parity variant started as the SIREN it stands for (``--eugen.init siren``), ω = ω₀ = 30."""
SIREN_HALF = "eugen half, siren init (m=w/2, w30: G lr x30, A lr x1) lr3e-3"
"""The same with m = w/2: w/2 sine units in every hidden layer after the first, about 1/3 of the MACs."""
SIREN_WIDE = "eugen wide features, siren init (w/2 wide, m=2w: twice the sine units) lr3e-3"
"""The same start with the parameters spent the other way: ``A`` maps m = 2w sine units to a w/2-wide ``h``
and the frozen ``G`` (seeded, not stored) spreads it back over 2w units, so each hidden layer has twice the
dense SIREN's sine units at its parameter count (49,985 against 50,049 at w = 128), for three times its MACs
merged (147,840 against 49,536 a point)."""
SIREN_WIDE_SCALED = "eugen wide features, siren init (w/2 wide, m=2w, A lr x0.5) lr3e-3"
"""``SIREN_WIDE`` with ``A``'s rate scaled by w/m: each next pre-activation sums m = 2w sine units, so
Adam's first (sign-like) steps on ``A`` move it about m/w times as far as a step on SIREN's ``W`` at the
same rate."""

LOWRANK = "lowrank (rank w/2: sin(w0 (U V x + b)), the dense parameter count)"
"""The reviewers' low-rank baseline: sine layers whose weight is a learned rank-w/2 product."""
SNNK = "snnk (A ReLU(G x+) + c, M = w, frozen G: the dense parameter count)"
"""The reviewers' SNNK baseline: ReLU random features of frozen projections, learned A."""
BASELINE_RATES = ("1e-3", "3e-3")
"""Learning rates of the baselines (the dense SIREN's best two at 256², cosine)."""
DENSE_RATES = ("3e-4", "1e-3", "2e-3", "3e-3", "4e-3", "5e-3", "1e-2")
"""The dense SIREN's learning-rate bracket (each a variant ``dense lr<rate>``)."""
SIREN_INIT_RATES = ("3e-3", "1e-3", "2e-3", "4e-3", "5e-3")
"""Rates of the siren-init EUGen SIREN (``SIREN_INIT`` names its 3e-3 variant)."""


@dataclass
class BenchSiren:
    output: Path = Path("benchmarks")
    """folder that receives siren.json and siren.png."""
    image: str = "camera"
    """a skimage.data image by name (camera, astronaut, ...) or an image file."""
    size: int = 128
    """the image is resized to size x size pixels."""
    width: int = 128
    """hidden width of the dense SIREN; the EUGen SIREN is sized to its parameter count."""
    hidden_layers: int = 3
    """hidden layers of every variant."""
    steps: int = 200
    """Adam steps of every variant (full-image batches)."""
    log_every: int = 20
    """steps between two logged PSNRs (the plot's curves)."""
    threads: int = 1
    """torch CPU threads (1 keeps timings comparable on a shared machine)."""
    lr_schedule: LrSchedule = "constant"
    """every variant's learning-rate schedule: constant, or cosine decay towards 1% (the final PSNR then sits
    near the best one reached instead of wherever a full-batch oscillation leaves it)."""
    seed: int = 0
    """seeds every variant's initialisation and its EUGen projections (the same for all variants of a run;
    seed s offsets the projections' seeds by 1000·s, so no layer of one seed shares a draw with another's)."""
    replot: bool = False
    """only redraw siren.png from the siren.json already in --output (after a change to the plot), no fitting."""
    variants: tuple[str, ...] = ()
    """names of the variants to run (default: all); the goal is judged when the dense ones at --width and
    the chosen EUGen SIREN are among them."""


@dataclass
class Variant:
    name: str
    layers: str
    width: int
    lr: float
    eugen: SirenEUGenSpec = field(default_factory=SirenEUGenSpec)


def narrowed_width(params: int, hidden_layers: int) -> int:
    """Width of a dense SIREN (2 -> w, hidden w -> w, w -> 1) with about ``params`` parameters."""
    a, b, c = hidden_layers, 3 + hidden_layers + 1, 1 - params  # a w² + b w + c = 0
    return max(1, round((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)))


def variants(config: BenchSiren) -> list[Variant]:
    w, half = config.width, config.width // 2
    chosen = SirenEUGenSpec(num_features=half)  # trainable G at m = w/2: the dense layer's parameter count
    small = replace(chosen, num_features=half // 2)
    small_params = siren_parameters(2, w, 1, ("eugen",) * config.hidden_layers, small)
    # Every sine unit kept at the dense parameter count: frozen G_{l+1} merges with A_l into a w x w matrix,
    # the first G (after the dense input layer) is learned, and the last A is the output layer.
    parity = replace(
        chosen,
        num_features=w,
        trainable_projections=False,
        projection="orthogonal",
        learn_first_projections=True,
        readout=True,
    )
    started = replace(
        parity, init="siren", projection_scale=30.0, projection_lr_scale=30.0, weight_lr_scale=1.0
    )
    halved = replace(started, num_features=half)  # w/2 sine units after the input layer: fewer MACs
    half_params = siren_parameters(2, w, 1, ("eugen",) * config.hidden_layers, halved)
    half_macs = siren_mlp(2, w, 1, ("eugen",) * config.hidden_layers, halved).fused().macs_per_point()
    return [
        Variant("dense lr1e-4 (SIREN paper)", "dense", w, 1e-4),
        *(Variant(f"dense lr{name}", "dense", w, float(name)) for name in DENSE_RATES),
        Variant(CHOSEN, "eugen", w, 1e-3, chosen),
        Variant("eugen lr1e-4", "eugen", w, 1e-4, chosen),
        Variant("eugen G lr x1", "eugen", w, 1e-3, replace(chosen, projection_lr_scale=1.0)),
        Variant("eugen w1", "eugen", w, 1e-3, replace(chosen, projection_scale=1.0)),
        Variant("eugen k2 sin", "eugen", w, 1e-3, replace(chosen, degree=2, num_features=half // 2)),
        Variant(
            "eugen k2 identity (polynomial)",
            "eugen",
            w,
            1e-3,
            replace(chosen, degree=2, num_features=half // 2, feature_map="identity"),
        ),
        Variant(
            "eugen frozen G (m=w)",
            "eugen",
            w,
            1e-3,
            replace(chosen, num_features=w, trainable_projections=False),
        ),
        *(
            Variant(
                f"eugen frozen orthogonal G (m=w) lr{name}",
                "eugen",
                w,
                float(name),
                replace(chosen, num_features=w, trainable_projections=False, projection="orthogonal"),
            )
            for name in ("3e-3", "5e-3")
        ),
        *(
            Variant(
                f"eugen parity (m=w: first G learned x{g}, frozen orthogonal G, readout, A lr x{a}) lr3e-3",
                "eugen",
                w,
                3e-3,
                replace(parity, projection_lr_scale=float(g), weight_lr_scale=float(a)),
            )
            for g, a in PARITY_RATES
        ),
        *(
            Variant(SIREN_INIT.replace("lr3e-3", f"lr{name}"), "eugen", w, float(name), started)
            for name in SIREN_INIT_RATES
        ),
        Variant(SIREN_HALF, "eugen", w, 3e-3, halved),
        Variant(SIREN_WIDE, "eugen", half, 3e-3, replace(started, num_features=2 * w)),
        Variant(
            SIREN_WIDE_SCALED, "eugen", half, 3e-3, replace(started, num_features=2 * w, weight_lr_scale=0.5)
        ),
        Variant(
            "dense narrowed to the half siren-init's parameters lr3e-3",
            "dense",
            narrowed_width(half_params, config.hidden_layers),
            3e-3,
        ),
        Variant(
            "dense narrowed to the half siren-init's MACs lr3e-3",
            "dense",
            narrowed_width(half_macs, config.hidden_layers),
            3e-3,
        ),
        Variant(
            "eugen parity, siren init (m=w, w3: G lr x30, A lr x10) lr3e-3",
            "eugen",
            w,
            3e-3,
            replace(
                parity, init="siren", projection_scale=3.0, projection_lr_scale=30.0, weight_lr_scale=10.0
            ),
        ),
        Variant("eugen half size (m=w/4)", "eugen", w, 1e-3, small),
        Variant(
            "narrowed dense (= half size) lr1e-3",
            "dense",
            narrowed_width(small_params, config.hidden_layers),
            1e-3,
        ),
        # the reviewers' baselines at the dense (and parity EUGen) parameter count
        *(
            Variant(f"{LOWRANK} lr{name}", "lowrank", w, float(name), replace(chosen, lowrank_rank=half))
            for name in BASELINE_RATES
        ),
        *(
            Variant(
                f"{SNNK} lr{name}",
                "snnk",
                w,
                float(name),
                replace(chosen, num_features=w, trainable_projections=False),
            )
            for name in BASELINE_RATES
        ),
    ]


def seeded_network(
    variant: Variant, seed: int, channels: int, hidden_layers: int
) -> tuple[EUGenMLP, SirenEUGenSpec]:
    """``variant``'s network as a run at ``seed`` starts it, with its EUGen spec (what ``fit`` is given)."""
    torch.manual_seed(seed)
    spec = variant.eugen.offset_seed(1000 * seed)  # layer i draws seed + i: a stride keeps seeds apart
    return siren_mlp(2, variant.width, channels, (variant.layers,) * hidden_layers, spec), spec


def run_variant(variant: Variant, target: torch.Tensor, config: BenchSiren) -> dict:
    model, spec = seeded_network(variant, config.seed, target.shape[-1], config.hidden_layers)
    result = fit(
        model,
        target,
        config.steps,
        variant.lr,
        config.log_every,
        spec,
        progress=False,
        lr_schedule=config.lr_schedule,
    )
    (config.output / "pictures").mkdir(parents=True, exist_ok=True)  # to look at beside the image
    save_png(config.output / "pictures" / (file_stem(variant.name) + ".png"), result.reconstruction)
    coords = pixel_grid(*target.shape[:2])
    model.eval()
    with torch.no_grad():
        inference = benchmark(lambda: model(coords), "cpu", warmup=2, repeats=5).median
    return {
        "name": variant.name,
        "layers": variant.layers,
        "width": variant.width,
        "lr": variant.lr,
        "eugen": asdict(variant.eugen) if variant.layers != "dense" else None,
        "parameters": result.num_parameters,
        "history": result.history,
        "final_psnr": result.final_psnr,
        "best_logged_psnr": max(value for _, value in result.history),
        "train_pixels_per_second": result.pixels_per_second,
        "inference_pixels_per_second": coords.shape[0] / inference,
    }


def plot(results: list[dict], path: Path, config: BenchSiren) -> None:
    """PSNR against steps and throughput; a variant whose hidden width is not ``--width`` names its own."""
    title = (
        f"SIREN fit, {config.image} {config.size}², width {config.width} unless labelled,\n"
        f"{config.hidden_layers} hidden layers, {config.steps} steps"
    )
    fig, (curves, bars) = plt.subplots(1, 2, figsize=(15, 6))
    for result in results:
        steps, psnrs = zip(*result["history"])
        style = "-" if result["layers"] == "eugen" else "--"
        width = "" if result["width"] == config.width else f"width {result['width']}, "
        curves.plot(steps, psnrs, style, label=f"{result['name']} ({width}{result['parameters'] / 1e3:.0f}k)")
    curves.set(xlabel="step", ylabel="PSNR (dB)", title=title)
    curves.legend(fontsize=7)
    names = [r["name"] for r in results]
    y = range(len(results))
    bars.barh([i + 0.2 for i in y], [r["train_pixels_per_second"] / 1e3 for r in results], 0.4, label="train")
    bars.barh(
        [i - 0.2 for i in y],
        [r["inference_pixels_per_second"] / 1e3 for r in results],
        0.4,
        label="inference",
    )
    bars.set_yticks(list(y), names, fontsize=7)
    bars.set(xlabel="k pixels / s (CPU, 1 thread)", title="throughput")
    bars.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def replot(config: BenchSiren) -> None:
    """Redraw ``siren.png`` from ``siren.json`` with the run's own configuration."""
    path = config.output / "siren.json"
    if not path.is_file():
        usage_error("bench_siren", f"--replot: {path} does not exist")
    payload = json.loads(path.read_text())
    known = {f.name for f in fields(BenchSiren)} - {"output", "variants", "replot"}
    run = BenchSiren(**{k: v for k, v in payload["config"].items() if k in known})
    plot(payload["results"], config.output / "siren.png", run)


def main(config: BenchSiren) -> None:
    if config.replot:
        return replot(config)
    every = variants(config)
    names = [variant.name for variant in every]
    unknown = [name for name in config.variants if name not in names]
    if unknown:
        usage_error("bench_siren", f"unknown variant(s) {unknown}: choose from {names}")
    selected = [variant for variant in every if not config.variants or variant.name in config.variants]
    torch.set_num_threads(config.threads)
    target = torch.from_numpy(load_image(config.image, config.size))
    (config.output / "pictures").mkdir(parents=True, exist_ok=True)
    save_png(config.output / "pictures" / "target.png", target.numpy())
    results = []
    for variant in selected:
        results.append(run_variant(variant, target, config))
        print(
            f"{variant.name:55s} {results[-1]['parameters']:7d} params  PSNR {results[-1]['final_psnr']:6.2f} dB  "
            f"train {results[-1]['train_pixels_per_second']:9.0f} px/s  "
            f"infer {results[-1]['inference_pixels_per_second']:9.0f} px/s",
            flush=True,
        )
    dense = [r for r in results if r["layers"] == "dense" and r["width"] == config.width]
    chosen = next((r for r in results if r["name"] == CHOSEN), None)
    goal = None if not dense or chosen is None else judge(dense, chosen)
    config.output.mkdir(parents=True, exist_ok=True)
    payload = {
        "config": json.loads(json.dumps(asdict(config), default=str)),
        "device": "cpu",
        "goal": goal,
        "results": results,
    }
    (config.output / "siren.json").write_text(json.dumps(payload, indent=2))
    plot(results, config.output / "siren.png", config)
    print(json.dumps(goal, indent=2))


def judge(dense: list[dict], chosen: dict) -> dict:
    """The goal: the chosen EUGen SIREN against the best-tuned dense SIREN of the same parameter count."""
    dense_best = max(dense, key=lambda r: r["final_psnr"])
    return {
        "goal": "at equal parameters, EUGen SIREN PSNR >= dense SIREN PSNR",
        "dense_best": dense_best["name"],
        "dense_best_psnr": dense_best["final_psnr"],
        "dense_best_logged_psnr_any_lr": max(r["best_logged_psnr"] for r in dense),
        "eugen_psnr": chosen["final_psnr"],
        "parameter_ratio": chosen["parameters"] / dense_best["parameters"],
        "met": chosen["final_psnr"] >= dense_best["final_psnr"],
        "train_speed_ratio": chosen["train_pixels_per_second"] / dense_best["train_pixels_per_second"],
        "inference_speed_ratio": chosen["inference_pixels_per_second"]
        / dense_best["inference_pixels_per_second"],
    }


if __name__ == "__main__":
    main(tyro.cli(BenchSiren))
