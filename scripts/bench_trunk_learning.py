#!/usr/bin/env python
"""What a deep EUGen trunk learns, at equal parameters: why an all-EUGen 8 x 256 trunk trains worse than dense.

``scripts/bench_stability.py`` shows that an all-EUGen trunk stays finite, and that it ends 500 steps at a
training loss several times the dense trunk's. This benchmark separates the causes on the same task (its
regression target, its trunk, Adam at 1e-3, 256-point batches), each variant over ``--seeds``:

* the dense 256-wide trunk, and the dense trunk narrowed to the all-EUGen trunk's parameter count (what
  the loss should be compared with: a narrower network, not the wide one);
* all-EUGen trunks with the ReLU and the identity feature map: the first layer then sees the 63-d input
  through frozen random projections, so everything after it is a function of fixed random features of the
  input;
* the same with the first layer dense (learned input features), as the NeRF heads build it;
* the reviewers' baselines (low-rank, SNNK) in the same places, and trainable projections.

Loss is the mean squared error on the whole 16,384-point set after the run (no held-out set: this is a
question of what the optimiser reaches, as in the stability benchmark). Writes
``benchmarks/trunk_learning.json`` and ``benchmarks/trunk_learning.png``.

    python scripts/bench_trunk_learning.py
    python scripts/bench_trunk_learning.py --steps 100 --seeds 0   # quicker
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import tyro
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_stability import DEPTH, IN_DIM, OUT_DIM, WIDTH, target  # the same task and trunk

from eugen_nerf.eval.size import count_parameters  # frozen projections are buffers: not counted
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.layers import EUGenMLP, EUGenSpec

ROOT = Path(__file__).resolve().parents[1]


def trunk(first: str, rest: str, width: int = WIDTH, **spec) -> EUGenMLP:
    """An 8-layer trunk: layer 0 of type ``first``, layers 1-6 of type ``rest``, a dense output layer."""
    return EUGenMLP(
        IN_DIM,
        DEPTH,
        width,
        OUT_DIM,
        layer_types=[first] + [rest] * (DEPTH - 2) + ["dense"],
        eugen=EUGenSpec(**{"num_features": 32, "degree": 2, "feature_map": "relu", **spec}),
        fuse_in_eval=False,
    )


def narrowed_width(target_parameters: int) -> int:
    """The dense trunk's width whose parameter count is closest to ``target_parameters``."""
    return min(
        range(8, WIDTH + 1, 4),
        key=lambda w: abs(count_parameters(trunk("dense", "dense", w)) - target_parameters),
    )


def variants(m: int, k: int) -> dict[str, Callable[[], EUGenMLP]]:
    spec = {"num_features": m, "degree": k}
    width = narrowed_width(count_parameters(trunk("eugen", "eugen", **spec)))
    return {
        "dense": lambda: trunk("dense", "dense"),
        f"dense narrowed to {width} (EUGen's parameters)": lambda: trunk("dense", "dense", width),
        "all EUGen, relu": lambda: trunk("eugen", "eugen", **spec),
        "all EUGen, identity": lambda: trunk("eugen", "eugen", feature_map="identity", **spec),
        "all EUGen, relu, trainable projections": lambda: trunk(
            "eugen", "eugen", trainable_projections=True, **spec
        ),
        "first layer dense, EUGen relu": lambda: trunk("dense", "eugen", **spec),
        "first layer dense, EUGen identity": lambda: trunk("dense", "eugen", feature_map="identity", **spec),
        "first layer dense, low-rank": lambda: trunk("dense", "lowrank", **spec),
        "first layer dense, SNNK": lambda: trunk("dense", "snnk", **spec),
    }


def train(mlp: EUGenMLP, data, steps: int, seed: int) -> dict[str, float]:
    """Adam at 1e-3 on 256-point batches (as bench_stability); the whole set's MSE after the run."""
    torch.manual_seed(seed)
    x, y = data
    optimizer = torch.optim.Adam(mlp.parameters(), lr=1e-3)
    for _ in range(steps):
        index = torch.randint(0, x.shape[0], (256,))
        loss = torch.nn.functional.mse_loss(mlp(x[index]), y[index])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        out = mlp(x)
        if not torch.isfinite(out).all():
            raise RuntimeError("a trained trunk's output is not finite")
        return {"mse": torch.nn.functional.mse_loss(out, y).item()}


def is_eugen(name: str) -> bool:
    return "EUGen" in name and not name.startswith("dense")


def summarise(rows: dict[str, dict]) -> dict[str, object]:
    """Each EUGen trunk's mean MSE over the narrowed dense trunk's (equal parameters), and whether the best
    one learns like it (within 5%)."""
    narrowed = next(name for name in rows if name.startswith("dense narrowed"))
    ratios = {name: row["mse"] / rows[narrowed]["mse"] for name, row in rows.items() if is_eugen(name)}
    best = min(ratios, key=ratios.get)
    return {
        "narrowed_dense": narrowed,
        "mse_over_narrowed_dense": ratios,
        "best_eugen": best,
        "best_eugen_mse_over_narrowed_dense": ratios[best],
        "best_eugen_learns_like_narrowed_dense": ratios[best] <= 1.05,
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["rows"]
    names = list(rows)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, name in enumerate(names):
        per_seed = [s["mse"] for s in rows[name]["per_seed"]]
        colour = "C0" if is_eugen(name) else "C7"
        ax.scatter(per_seed, [i] * len(per_seed), color=colour, zorder=3, s=18)
        ax.vlines(rows[name]["mse"], i - 0.3, i + 0.3, color="k")
    ax.set_yticks(range(len(names)), [f"{n} ({rows[n]['parameters']:,})" for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel(f"MSE after {report['steps']} Adam steps (dots: seeds, bar: mean); parameters in brackets")
    ax.set_title(f"8 x 256 trunks, m = {report['m']}, k = {report['k']}: what the optimiser reaches")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@dataclass
class BenchTrunkLearning:
    steps: int = 500
    """Adam steps each trunk is trained for (as bench_stability)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """seeds of the initialisation and the batches (the EUGen projections keep their seed 0)."""
    num_features: int = 32
    """m of the EUGen layers (and of the baselines' parameter count)."""
    degree: int = 2
    """k of the EUGen layers."""
    output: Path = ROOT / "benchmarks" / "trunk_learning.json"
    """the JSON written (the plot goes beside it as .png)."""


def main() -> None:
    args = tyro.cli(BenchTrunkLearning, description=__doc__)
    if not args.seeds or args.steps < 1:
        usage_error("bench_trunk_learning", "--seeds needs at least one seed and --steps must be >= 1")
    try:
        EUGenSpec(num_features=args.num_features, degree=args.degree)
    except ValueError as error:
        usage_error("bench_trunk_learning", str(error))
    torch.set_num_threads(1)
    data = target(torch.device("cpu"))
    rows = {}
    chosen = variants(args.num_features, args.degree)
    for name, make in tqdm(chosen.items(), desc="trunks"):
        per_seed = []
        for seed in args.seeds:
            torch.manual_seed(seed)
            mlp = make()
            per_seed.append({"seed": seed, **train(mlp, data, args.steps, seed)})
        values = [s["mse"] for s in per_seed]
        rows[name] = {
            "parameters": count_parameters(mlp),
            "mse": statistics.fmean(values),
            "mse_std": statistics.pstdev(values),
            "per_seed": per_seed,
        }
        tqdm.write(
            f"{name:50s} {rows[name]['parameters']:>9,d} parameters  MSE {rows[name]['mse']:.4f} "
            f"± {rows[name]['mse_std']:.4f}"
        )
    command = " ".join(["python", "scripts/bench_trunk_learning.py", *sys.argv[1:]])
    report = {
        "command": command,
        "host": platform.node(),
        "torch": torch.__version__,
        "threads": 1,
        "steps": args.steps,
        "seeds": args.seeds,
        "m": args.num_features,
        "k": args.degree,
        "rows": rows,
        "summary": summarise(rows),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))
    plot(report, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
