"""Stability of deep all-EUGen stacks: 8 x 256 trunks, k <= 3, m in {16, 32, 64}, fp32 and autocast.

Every layer of the trunk is EUGen (no dense layer in between to rescue the scale). Each configuration is
checked at initialisation on inputs of RMS 1, 1.5 and 10, then trained for ``--steps`` Adam steps on a
smooth regression target (random Fourier features of a 63-d positional encoding, as a NeRF trunk sees);
the run records whether every output and gradient stayed finite, the largest hidden-activation RMS, and
the final loss beside a dense 8 x 256 ReLU trunk trained the same way. The ``projected`` scaling runs as the
NeRF and Zip-NeRF heads use it (identity map, no norm entry); ``polynomial`` scaling (the theorem's form) is
included to show what the default scalings fix.

Writes the JSON report given by ``--output`` and its plot beside it (``.png``).

    eugen-bench stability                                           # bf16 autocast on the CPU, fp16 on CUDA
    python -m eugen_nerf.bench.suites.stability --steps 100 --output /tmp/stability.json   # quicker
"""

from __future__ import annotations

import json
import math
import platform
from dataclasses import dataclass, field
from pathlib import Path

import torch
import tyro
from tqdm import tqdm

from eugen_nerf.bench.provenance import provenance
from eugen_nerf.bench.suites import command_line
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.inputs.outputs import atomic_write_bytes
from eugen_nerf.layers import SCALINGS, EUGenMLP, EUGenSpec

IN_DIM, WIDTH, DEPTH, OUT_DIM = 63, 256, 8, 4
DEFAULT_SCALINGS = ("linear", "unit", "projected")
"""The scalings layers are built with (the layer's default, its alternative, the heads'): they must stay finite."""


def layer_spec(m: int, k: int, scaling: str) -> EUGenSpec:
    """The EUGen layers a scaling ships with: ``projected`` as the NeRF and Zip-NeRF heads use it (the identity
    map, no norm entry), the others with the layer's ReLU map and norm entry."""
    if scaling == "projected":
        return EUGenSpec(num_features=m, degree=k, feature_map="identity", use_norm=False, scaling=scaling)
    return EUGenSpec(num_features=m, degree=k, feature_map="relu", use_norm=True, scaling=scaling)


def trunk(kind: str, m: int, k: int, scaling: str) -> EUGenMLP:
    return EUGenMLP(
        IN_DIM,
        DEPTH,
        WIDTH,
        OUT_DIM,
        layer_types=[kind] * (DEPTH - 1) + ["dense"],
        eugen=layer_spec(m, k, scaling),
        fuse_in_eval=False,
    )


def hidden_rms(mlp: EUGenMLP, x: torch.Tensor) -> list:
    """RMS of every layer's output (float, inf or nan)."""
    rms, h = [], x
    for i, layer in enumerate(mlp.layers):
        h = layer(h)
        if mlp.applies_activation(i):
            h = mlp.activation(h)
        rms.append(float(h.float().square().mean().sqrt()))
    return rms


def run(kind, m, k, scaling, precision, device, steps, data, generator_seed=0):
    torch.manual_seed(generator_seed)
    mlp = trunk(kind, m, k, scaling).to(device)
    autocast = torch.autocast(
        device.type,
        dtype=torch.bfloat16 if device.type == "cpu" else torch.float16,
        enabled=precision == "autocast",
    )
    init = {}
    with torch.no_grad(), autocast:
        for scale in (1.0, 1.5, 10.0):
            init[str(scale)] = max(hidden_rms(mlp, torch.randn(1024, IN_DIM, device=device) * scale))
    x_train, y_train = data
    optimizer = torch.optim.Adam(mlp.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "autocast" and device.type == "cuda")
    finite, losses, first_bad = True, [], None
    for step in range(steps):
        index = torch.randint(0, x_train.shape[0], (256,), device=device)
        with autocast:
            loss = torch.nn.functional.mse_loss(mlp(x_train[index]).float(), y_train[index])
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        grads_finite = all(torch.isfinite(p.grad).all() for p in mlp.parameters() if p.grad is not None)
        if not (math.isfinite(loss.item()) and grads_finite):
            finite, first_bad = False, step
            break
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    with torch.no_grad(), autocast:
        final_rms = max(hidden_rms(mlp, x_train[:1024]))
    spec = layer_spec(m, k, scaling)
    return {
        "kind": kind,
        "m": m,
        "k": k,
        "scaling": scaling,
        "feature_map": spec.feature_map if kind == "eugen" else "relu",
        "use_norm": spec.use_norm if kind == "eugen" else None,
        "precision": precision,
        "init_max_hidden_rms": init,
        "finite_at_init": all(math.isfinite(v) for v in init.values()),
        "finite_through_training": finite,
        "first_non_finite_step": first_bad,
        "steps": steps,
        "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])) if finite else None,
        "final_max_hidden_rms": final_rms,
    }


def target(device, n=16384):
    """A smooth target on NeRF-like inputs: a positional encoding of 3-d points, random Fourier outputs."""
    g = torch.Generator().manual_seed(1)
    points = torch.rand(n, 3, generator=g) * 2 - 1
    bands = 2.0 ** torch.arange(10)
    angles = points[:, None, :] * bands[:, None] * math.pi
    encoding = torch.cat([points, angles.sin().flatten(1), angles.cos().flatten(1)], dim=1)
    freqs = torch.randn(3, OUT_DIM, generator=g) * 2
    values = torch.sin(points @ freqs * math.pi)
    return encoding.to(device), values.to(device)


def plot(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = sorted({(r["scaling"], r["precision"]) for r in rows if r["kind"] == "eugen"})
    for scaling, precision in labels:
        sel = [
            r
            for r in rows
            if r["kind"] == "eugen" and r["scaling"] == scaling and r["precision"] == precision
        ]
        names = [f"m{r['m']} k{r['k']}" for r in sel]
        rms = [
            min(r["init_max_hidden_rms"]["1.5"], 1e30)
            if math.isfinite(r["init_max_hidden_rms"]["1.5"])
            else 1e30
            for r in sel
        ]
        loss = [r["final_loss"] if r["final_loss"] is not None else float("nan") for r in sel]
        axes[0].semilogy(names, rms, "o-", label=f"{scaling}, {precision}")
        axes[1].semilogy(names, loss, "o-", label=f"{scaling}, {precision}")
    for r in rows:
        if r["kind"] == "dense":
            axes[1].axhline(
                r["final_loss"], ls="--", color="k", alpha=0.5, label=f"dense ReLU, {r['precision']}"
            )
    axes[0].set_title("largest hidden RMS at init, input RMS 1.5 (1e30 = inf/NaN)")
    axes[1].set_title("training loss after the run (missing = not finite)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=60)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


@dataclass
class BenchStability:
    steps: int = 500
    """Adam steps each trunk is trained for."""
    device: str = field(default_factory=lambda: "cuda" if torch.cuda.is_available() else "cpu")
    """torch device the trunks run on (cuda when available, else cpu)."""
    scalings: list[str] = field(default_factory=lambda: ["linear", "projected", "polynomial"])
    """EUGen scalings to run (bf16 autocast on a CPU is slow: one scaling takes ~20 min). ``projected`` runs
    with the identity map and no norm entry, as the NeRF and Zip-NeRF heads use it; the others with ReLU
    features and the norm entry."""
    output: Path = Path("benchmarks/stability/stability.json")
    """the JSON written (the plot goes beside it as .png)."""


def main() -> None:
    args = tyro.cli(BenchStability, description=__doc__)
    if not args.scalings:
        usage_error("eugen-bench stability", "--scalings needs at least one scaling")
    unknown = [s for s in args.scalings if s not in SCALINGS]
    if unknown:
        usage_error(
            "eugen-bench stability", f"--scalings: unknown {unknown}; choose from {', '.join(SCALINGS)}"
        )
    args.scalings = list(dict.fromkeys(args.scalings))
    device = torch.device(args.device)
    data = target(device)
    configs = [("dense", 0, 0, "linear", prec) for prec in ("fp32", "autocast")]
    configs += [
        ("eugen", m, k, s, prec)
        for s in args.scalings
        for prec in ("fp32", "autocast")
        for k in (1, 2, 3)
        for m in (16, 32, 64)
    ]
    rows = []
    for kind, m, k, scaling, precision in tqdm(configs, desc="trunks"):
        rows.append(run(kind, max(m, 1), max(k, 1), scaling, precision, device, args.steps, data))
    eugen = [r for r in rows if r["kind"] == "eugen"]
    broken = {
        scaling: sum(
            not (r["finite_at_init"] and r["finite_through_training"])
            for r in eugen
            if r["scaling"] == scaling
        )
        for scaling in args.scalings
    }
    summary = {
        "goal": "all-EUGen 8x256 trunks, k<=3, m in {16,32,64}: finite at init and through training, fp32 and autocast",
        "default_scalings_all_finite": all(broken[s] == 0 for s in broken if s in DEFAULT_SCALINGS),
        "non_finite_by_scaling": broken,
        "runs_by_scaling": {
            scaling: sum(r["scaling"] == scaling for r in eugen) for scaling in args.scalings
        },
        "polynomial_non_finite": broken.get("polynomial"),
    }
    result = {
        "command": command_line(),
        "device": str(device),
        "host": platform.node(),
        "torch": torch.__version__,
        "provenance": provenance(),
        "steps": args.steps,
        "summary": summary,
        "rows": rows,
    }
    # the one report that keeps NaN: a diverged training's losses are its findings, not figures to average
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.output, json.dumps(result, indent=1, allow_nan=True).encode())
    plot(rows, args.output.with_suffix(".png"))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
