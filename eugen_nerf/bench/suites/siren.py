"""SIREN's image fit: the EUGen SIREN against the dense SIREN at equal parameters, paired over seeds.

Both networks fit the same image (``--image``, resized to ``--size``²) with full-image Adam steps, the same
learning rate and schedule, once per seed (the seed sets the initialisation and the EUGen projections):

* the dense SIREN (ω₀ = 30, SIREN initialisation), ``--width`` wide, ``--hidden-layers`` hidden layers;
* the EUGen SIREN at the same parameter count: m = w sine features per hidden layer, the first projection
  learned and the later ones frozen orthogonal (so each frozen G merges with the previous A into one w × w
  matrix), the last A the output layer, started as the SIREN it stands for (``init="siren"``, ω = 30,
  G's learning rate ×30).

Reported: the final PSNR of each fit, the per-seed gap (EUGen minus dense) with its mean and std, training
and inference throughput (one thread, inference in eval mode with the EUGen layers merged). Each finished fit
is kept in ``--work-dir`` and reused by a rerun with the same setting. Writes ``siren.json`` and
``siren.png`` into ``--output``.

    eugen-bench siren                                               # cameraman 256², 400 steps, seeds 0-4
    python -m eugen_nerf.bench.suites.siren --size 64 --steps 50 --seeds 0 --output /tmp/siren
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import tyro

from eugen_nerf.bench.index import machine
from eugen_nerf.bench.merge import publish_json
from eugen_nerf.bench.provenance import provenance
from eugen_nerf.bench.seeds import mean_and_std, paired_gap
from eugen_nerf.bench.suites import command_line
from eugen_nerf.eval.timing import benchmark
from eugen_nerf.fields.siren import SirenEUGenSpec, siren_mlp
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.siren.fit_image import LrSchedule, fit
from eugen_nerf.siren.image import load_image, pixel_grid

DENSE, EUGEN = "dense", "eugen"


@dataclass
class BenchSiren:
    output: Path = Path("benchmarks/siren")
    """folder that receives siren.json and siren.png."""
    work_dir: Path = Path("outputs/bench/siren")
    """where each finished fit is kept (a rerun with the same setting reuses it)."""
    image: str = "camera"
    """a skimage.data image by name (camera, astronaut, ...) or an image file."""
    size: int = 256
    """the image is resized to size x size pixels."""
    width: int = 128
    """hidden width of the dense SIREN; the EUGen SIREN has its parameter count."""
    hidden_layers: int = 3
    """hidden layers of both networks."""
    steps: int = 400
    """Adam steps of every fit (full-image batches)."""
    lr: float = 3e-3
    """learning rate of both networks."""
    lr_schedule: LrSchedule = "cosine"
    """constant, or cosine decay towards 1% (the final PSNR then sits near the best one reached)."""
    log_every: int = 40
    """steps between two logged PSNRs (the history kept in the JSON)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2, 3, 4])
    """seeds of the paired fits."""
    threads: int = 1
    """torch CPU threads (1 keeps timings comparable on a shared machine)."""


@dataclass
class Variant:
    name: str
    layers: str
    eugen: SirenEUGenSpec = field(default_factory=SirenEUGenSpec)


def variants(width: int) -> list[Variant]:
    """The dense SIREN and the EUGen SIREN at its parameter count (see the module docstring)."""
    eugen = SirenEUGenSpec(
        num_features=width,
        trainable_projections=False,
        projection="orthogonal",
        learn_first_projections=True,
        readout=True,
        init="siren",
        projection_scale=30.0,
        projection_lr_scale=30.0,
        weight_lr_scale=1.0,
    )
    return [Variant(DENSE, "dense"), Variant(EUGEN, "eugen", eugen)]


def seeded_network(variant: Variant, seed: int, width: int, channels: int, hidden_layers: int):
    """``variant``'s network as a run at ``seed`` starts it, with its EUGen spec (what ``fit`` is given)."""
    torch.manual_seed(seed)
    spec = variant.eugen.offset_seed(1000 * seed)  # layer i draws seed + i: a stride keeps seeds apart
    return siren_mlp(2, width, channels, (variant.layers,) * hidden_layers, spec), spec


def setting(config: BenchSiren) -> dict:
    """What a fit depends on (a kept fit is reused only for the same setting)."""
    return {k: v for k, v in asdict(config).items() if k not in ("output", "work_dir", "seeds", "threads")}


def run_variant(variant: Variant, seed: int, target: torch.Tensor, config: BenchSiren) -> dict:
    kept = config.work_dir / f"seed{seed}-{variant.name}.json"
    wanted = json.loads(json.dumps(setting(config), default=str))
    if kept.is_file():
        saved = json.loads(kept.read_text())
        if saved.get("setting") == wanted:
            return saved["result"]
    model, spec = seeded_network(variant, seed, config.width, target.shape[-1], config.hidden_layers)
    steps, lr, schedule = config.steps, config.lr, config.lr_schedule
    result = fit(model, target, steps, lr, config.log_every, spec, progress=False, lr_schedule=schedule)
    coords = pixel_grid(*target.shape[:2])
    model.eval()
    with torch.no_grad():
        inference = benchmark(lambda: model(coords), "cpu", warmup=2, repeats=5).median
    out = {
        "seed": seed,
        "layers": variant.layers,
        "eugen": asdict(variant.eugen) if variant.layers != "dense" else None,
        "parameters": result.num_parameters,
        "history": result.history,
        "final_psnr": result.final_psnr,
        "train_pixels_per_second": result.pixels_per_second,
        "inference_pixels_per_second": coords.shape[0] / inference,
    }
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps({"setting": wanted, "result": out}, indent=1) + "\n")
    return out


def summarise(runs: dict[str, dict[int, dict]]) -> dict:
    """The paired comparison of the EUGen SIREN with the dense one over the seeds both ran."""
    psnr = {name: {seed: r["final_psnr"] for seed, r in by_seed.items()} for name, by_seed in runs.items()}
    gap = paired_gap(psnr[EUGEN], psnr[DENSE])
    means, spread = {}, {}
    for name in (EUGEN, DENSE):
        mean, std = mean_and_std([{"psnr": v} for v in psnr[name].values()])
        means[name], spread[name] = mean["psnr"], std["psnr"]
    params = {name: next(iter(by_seed.values()))["parameters"] for name, by_seed in runs.items()}
    return {
        "goal": "EUGen SIREN PSNR >= the dense SIREN's at equal parameters (mean over seeds)",
        "parameters": params,
        "pairs": [
            {"seed": int(seed), "eugen_psnr": psnr[EUGEN][seed], "dense_psnr": psnr[DENSE][seed], "gap": g}
            for seed, g in ((int(s), v) for s, v in gap["per_seed"].items())
        ],
        "eugen_mean": means[EUGEN],
        "eugen_std": spread[EUGEN],
        "dense_mean": means[DENSE],
        "dense_std": spread[DENSE],
        "gap_mean": gap["mean"],
        "gap_std": gap["std"],
        "met": gap["mean"] >= 0,
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    config = report["config"]
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(11, 4))
    pairs = report["pairs"]
    x = range(len(pairs))
    bars.bar([i - 0.2 for i in x], [p["dense_psnr"] for p in pairs], 0.4, label="dense SIREN")
    bars.bar([i + 0.2 for i in x], [p["eugen_psnr"] for p in pairs], 0.4, label="EUGen SIREN")
    bars.set_xticks(list(x), [f"seed {p['seed']}" for p in pairs])
    low = min(min(p["dense_psnr"], p["eugen_psnr"]) for p in pairs)
    bars.set_ylim(low - 3, None)
    bars.set_ylabel("final PSNR (dB)")
    bars.set_title(
        f"EUGen − dense: {report['gap_mean']:+.2f} ± {report['gap_std']:.2f} dB "
        f"({report['parameters']['eugen']:,} vs {report['parameters']['dense']:,} parameters)",
        fontsize=9,
    )
    bars.legend(fontsize=8)
    for name, style in ((DENSE, "--"), (EUGEN, "-")):
        for i, run in enumerate(report["runs"][name].values()):
            steps, psnrs = zip(*run["history"])
            curves.plot(
                steps,
                psnrs,
                style,
                color="tab:blue" if name == DENSE else "tab:orange",
                alpha=0.7,
                label=("dense SIREN" if name == DENSE else "EUGen SIREN") if i == 0 else None,
            )
    curves.set(xlabel="step", ylabel="PSNR (dB)")
    curves.legend(fontsize=8)
    fig.suptitle(
        f"SIREN fit of {config['image']} {config['size']}², width {config['width']}, "
        f"{config['hidden_layers']} hidden layers, {config['steps']} steps, lr {config['lr']:g} ({config['lr_schedule']})",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(config: BenchSiren) -> None:
    if not config.seeds or config.steps < 1 or config.size < 8 or config.width < 2:
        usage_error("eugen-bench siren", "--seeds needs a seed; --steps >= 1, --size >= 8, --width >= 2")
    torch.set_num_threads(config.threads)
    target = torch.from_numpy(load_image(config.image, config.size))
    runs: dict[str, dict[int, dict]] = {}
    for seed in config.seeds:
        for variant in variants(config.width):
            result = run_variant(variant, seed, target, config)
            runs.setdefault(variant.name, {})[seed] = result
            print(
                f"seed {seed} {variant.name:5s} {result['parameters']:7d} params  PSNR {result['final_psnr']:6.2f} dB",
                flush=True,
            )
    report = {
        "command": command_line(),
        "machine": machine(),
        "provenance": provenance(),
        "config": json.loads(json.dumps(setting(config), default=str))
        | {"seeds": config.seeds, "threads": config.threads},
        **summarise(runs),
        "runs": {name: {str(seed): r for seed, r in by_seed.items()} for name, by_seed in runs.items()},
    }
    publish_json(config.output / "siren.json", report)
    plot(report, config.output / "siren.png")
    print(f"EUGen − dense: {report['gap_mean']:+.2f} ± {report['gap_std']:.2f} dB; wrote {config.output}")


if __name__ == "__main__":
    main(tyro.cli(BenchSiren, description=__doc__))
