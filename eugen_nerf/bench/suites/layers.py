"""Points per second of an 8x256 NeRF-style trunk: dense vs EUGen unfused vs EUGen fused.

Every variant is timed side by side in one process (warm-up, then the median of repeats), with its
multiply-accumulate count per point, so the measured speedup can be read against the MAC ratio.
Writes the JSON report given by ``--output`` and its plot beside it (``.png``).

    eugen-bench layers                                              # the protocol's setting
    python -m eugen_nerf.bench.suites.layers --points 16384 --output /tmp/layers.json   # CPU (and CUDA)
"""

from __future__ import annotations

import copy
import functools
import platform
from dataclasses import dataclass, field
from pathlib import Path

import torch
import tyro

from eugen_nerf.bench.merge import publish_json
from eugen_nerf.bench.provenance import provenance
from eugen_nerf.bench.suites import command_line
from eugen_nerf.eval.timing import benchmark_interleaved
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.layers import EUGenMLP, EUGenSpec

IN_DIM = 63  # NeRF positional encoding of xyz: 3 + 3*2*10


def make_trunk(kind: str, m: int = 32, k: int = 2, compile_fused: bool = False) -> EUGenMLP:
    return EUGenMLP(
        in_dim=IN_DIM,
        num_layers=8,
        layer_width=256,
        out_dim=256,
        skip_connections=(4,),
        layer_types=kind,
        eugen=EUGenSpec(num_features=m, degree=k, feature_map="relu"),
        compile_fused=compile_fused,
    ).eval()


def bench_device(device: str, points: int, warmup: int, repeats: int, ms, ks, compile_fused: bool) -> list:
    x = torch.randn(points, IN_DIM, device=device)
    dense = make_trunk("dense").to(device)
    dense_macs = dense.macs_per_point()
    rows = []
    for m in ms:
        for k in ks:
            trunk = make_trunk("eugen", m, k).to(device)
            params = sum(p.numel() for p in trunk.parameters())
            unfused = copy.deepcopy(trunk)
            unfused.fuse_in_eval = False  # layer by layer, in the same passes of rows as the fused forms
            variants = {"dense": dense, "eugen_unfused": unfused, "eugen_fused": trunk}
            if compile_fused:
                variants["eugen_fused_compiled"] = make_trunk("eugen", m, k, compile_fused=True).to(device)
            with torch.no_grad():
                timings = benchmark_interleaved(
                    {k: functools.partial(fn, x) for k, fn in variants.items()}, x.device, warmup, repeats
                )
            seconds = {name: timing.median for name, timing in timings.items()}
            if not rows:
                rows.append(
                    {
                        "variant": "dense",
                        "m": None,
                        "k": None,
                        "macs_per_point": dense_macs,
                        "points_per_second": points / seconds["dense"],
                        "speedup": 1.0,
                        "mac_ratio": 1.0,
                        "speedup_over_mac_ratio": 1.0,
                        "parameters": sum(p.numel() for p in dense.parameters()),
                    }
                )
            fused_macs = trunk.fused().macs_per_point()
            for variant, macs in [("eugen_unfused", trunk.macs_per_point()), ("eugen_fused", fused_macs)] + (
                [("eugen_fused_compiled", fused_macs)] if compile_fused else []
            ):
                speedup = seconds["dense"] / seconds[variant]  # against the dense run of the same round
                mac_ratio = dense_macs / macs
                rows.append(
                    {
                        "variant": variant,
                        "m": m,
                        "k": k,
                        "macs_per_point": macs,
                        "points_per_second": points / seconds[variant],
                        "speedup": speedup,
                        "mac_ratio": mac_ratio,
                        "speedup_over_mac_ratio": speedup / mac_ratio,
                        "parameters": params,
                    }
                )
                print(
                    f"[{device}] {variant:14s} m={m:3d} k={k} speedup {speedup:5.2f}x  MAC ratio {mac_ratio:5.2f}x"
                )
    return rows


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    devices = list(results["devices"])
    fig, axes = plt.subplots(1, len(devices), figsize=(7 * len(devices), 4.5), squeeze=False)
    for ax, device in zip(axes[0], devices):
        rows = results["devices"][device]
        variants = [
            v
            for v in ("eugen_unfused", "eugen_fused", "eugen_fused_compiled")
            if any(row["variant"] == v for row in rows)
        ]
        labels = [f"m={row['m']}\nk={row['k']}" for row in rows if row["variant"] == "eugen_unfused"]
        width = 0.8 / len(variants)
        for j, variant in enumerate(variants):
            speedups = [row["speedup"] for row in rows if row["variant"] == variant]
            ax.bar(
                [i + (j - (len(variants) - 1) / 2) * width for i in range(len(labels))],
                speedups,
                width=width,
                label=variant.replace("eugen_", "EUGen ").replace("_", " "),
            )
        ax.axhline(1.0, color="k", linestyle="--", linewidth=1, label="dense")
        ax.set_xticks(list(range(len(labels))), labels, fontsize=8)
        ax.set_ylabel("speedup over dense (points/s)")
        ax.set_title(f"8x256 trunk, {device}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


@dataclass
class BenchLayers:
    points: int = 65536
    """points per forward pass"""
    warmup: int = 3
    """untimed warm-up rounds before the timed repeats."""
    repeats: int = 7
    """timed repeats of every variant (the median is reported)."""
    m: list[int] = field(default_factory=lambda: [16, 32, 64])
    """features per order"""
    k: list[int] = field(default_factory=lambda: [1, 2, 3])
    """degrees"""
    compile: bool = False
    """also time the torch.compile'd fused form"""
    output: Path = Path("benchmarks/layers/layers.json")
    """the JSON written (the plot goes beside it as .png)."""


def main() -> None:
    args = tyro.cli(BenchLayers, description=__doc__)
    if not args.m or not args.k:
        usage_error("eugen-bench layers", "--m and --k need at least one value each")

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    results = {
        "benchmark": "8x256 NeRF trunk (in 63, skip at 4, out 256), all layers EUGen, feature map relu",
        "command": command_line(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        "provenance": provenance(),
        "points": args.points,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "devices": {
            d: bench_device(d, args.points, args.warmup, args.repeats, args.m, args.k, args.compile)
            for d in devices
        },
    }
    publish_json(args.output, results)
    plot(results, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
