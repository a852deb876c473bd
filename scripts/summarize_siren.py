"""Benchmark summary (not a test): one EUGen SIREN against the tuned dense SIREN over several seeds.

``bench_siren.py`` runs one seed per suite; this reads one ``siren.json`` (or ``screen_siren.py``'s
``screens.json``, a screen standing for the variant) per seed for the EUGen side and any number per seed for
the dense side (a learning-rate bracket may span several suites; the same file may serve both sides), pairs
them by the seed each file records, takes the EUGen variant's final PSNR and the best of the named dense
variants' over that seed's files (the dense SIREN tuned over its learning rates, per seed), and writes the
per-seed pairs, mean ± std (population, as every suite's: ``bench.seeds``) of each side and of the paired gap,
and whether the goal (EUGen ≥ the tuned dense SIREN, on the mean) is met.

    python scripts/summarize_siren.py --eugen A/siren.json B/siren.json --dense C/siren.json D/siren.json \\
        --eugen-variant NAME --dense-variants 'dense lr3e-3' --output benchmarks/S.json
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screen_siren import bench_setting  # the setting screens.json leaves out

from eugen_nerf.bench.seeds import mean_and_std
from eugen_nerf.inputs.errors import usage_error

PARAMETER_TOLERANCE = 0.01
"""Equal parameters: EUGen's count is at most the dense SIREN's and within this fraction of it (a layout
whose widths cannot hit the dense count exactly, as twice the sine units over a half-wide h, 49,985 against
50,049)."""


@dataclass
class SummarizeSiren:
    eugen: tuple[Path, ...]
    """one bench_siren output (siren.json) or screen_siren output (screens.json) per seed holding the EUGen
    variant (a screen by its name)."""
    dense: tuple[Path, ...]
    """bench_siren outputs holding the dense variants, one or more per seed of --eugen (paired by seed)."""
    eugen_variant: str
    """the EUGen variant's name in those files."""
    dense_variants: tuple[str, ...]
    """the dense variants' names; per seed the best of those present is the tuned dense SIREN."""
    output: Path
    """the summary JSON to write."""


def read_runs(path: Path) -> dict:
    """One seed's runs: a ``bench_siren`` output (``siren.json``, variants by name) or a ``screen_siren`` one
    (``screens.json``, screens by name)."""
    if not path.is_file():
        usage_error("summarize_siren", f"{path} does not exist (run its eugen-bench suite first)")
    payload = json.loads(path.read_text())
    if "screens" in payload:
        return {
            "seed": payload["seed"],
            "setting": {**{key: payload.get(key) for key in SETTING}, **bench_setting()},
            "results": {name: {"name": name, **run} for name, run in payload["screens"].items()},
        }
    setting = {key: payload["config"].get(key) for key in SETTING}
    return {
        "seed": payload["config"].get("seed", 0),
        "setting": setting,
        "results": {r["name"]: r for r in payload["results"]},
    }


SETTING = ("image", "size", "width", "steps", "hidden_layers", "lr_schedule")
"""What two runs must share to be compared (the seed too, pairwise; the parameter count per pair)."""


def main(config: SummarizeSiren) -> None:
    if not config.eugen or not config.dense:
        usage_error("summarize_siren", "--eugen and --dense each need at least one file")
    dense_by_seed: dict = {}
    for dense_path in config.dense:
        dense = read_runs(dense_path)
        dense_by_seed.setdefault(dense["seed"], []).append((dense_path, dense))
    eugen_runs = [(path, read_runs(path)) for path in config.eugen]
    seeds = [run["seed"] for _, run in eugen_runs]
    if len(set(seeds)) != len(seeds) or set(seeds) != set(dense_by_seed):
        usage_error(
            "summarize_siren",
            f"--eugen needs one file per seed and --dense files of the same seeds "
            f"(EUGen seeds {seeds}, dense seeds {sorted(dense_by_seed)})",
        )
    pairs = []
    for eugen_path, eugen in eugen_runs:
        tuned = []
        for dense_path, dense in dense_by_seed[eugen["seed"]]:
            if eugen["setting"] != dense["setting"]:
                usage_error(
                    "summarize_siren",
                    f"{eugen_path} and {dense_path} fit different settings "
                    f"({eugen['setting']} against {dense['setting']})",
                )
            tuned += [dense["results"][name] for name in config.dense_variants if name in dense["results"]]
        if config.eugen_variant not in eugen["results"]:
            usage_error("summarize_siren", f"{eugen_path} has no variant {config.eugen_variant!r}")
        if not tuned:
            usage_error(
                "summarize_siren",
                f"the dense files of seed {eugen['seed']} have none of the dense "
                f"variants {config.dense_variants}",
            )
        best = max(tuned, key=lambda r: r["final_psnr"])
        ours = eugen["results"][config.eugen_variant]
        if not best["parameters"] * (1 - PARAMETER_TOLERANCE) <= ours["parameters"] <= best["parameters"]:
            usage_error(
                "summarize_siren",
                f"{config.eugen_variant!r} has {ours['parameters']} parameters, "
                f"{best['name']!r} {best['parameters']}: the goal compares equal parameters (EUGen's "
                f"at most the dense count, within {PARAMETER_TOLERANCE:.0%})",
            )
        pairs.append(
            {
                "seed": eugen["seed"],
                "image": eugen["setting"]["image"],
                "eugen_psnr": ours["final_psnr"],
                "eugen_parameters": ours["parameters"],
                "dense_best": best["name"],
                "dense_psnr": best["final_psnr"],
                "dense_parameters": best["parameters"],
                "dense_tried": [r["name"] for r in tuned],
                "gap": ours["final_psnr"] - best["final_psnr"],
            }
        )
    mean, std = mean_and_std(pairs, ("eugen_psnr", "dense_psnr", "gap"))
    summary = {
        "command": shlex.join(["python", "scripts/summarize_siren.py", *sys.argv[1:]]),
        "goal": "EUGen SIREN PSNR >= the tuned dense SIREN's (mean over seeds)",
        "eugen_variant": config.eugen_variant,
        "seeds": [p["seed"] for p in pairs],
        "pairs": pairs,
        "eugen_mean": mean["eugen_psnr"],
        "eugen_std": std["eugen_psnr"],
        "dense_mean": mean["dense_psnr"],
        "dense_std": std["dense_psnr"],
        "gap_mean": mean["gap"],
        "gap_std": std["gap"],
        "every_seed_met": all(p["gap"] >= 0 for p in pairs),
        "met": mean["eugen_psnr"] >= mean["dense_psnr"],
    }
    config.output.parent.mkdir(parents=True, exist_ok=True)
    config.output.write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "pairs"}, indent=2))


if __name__ == "__main__":
    main(tyro.cli(SummarizeSiren, description=__doc__))
