"""Every NeRF-family method on a canonical scene, its captured variant, and an unbounded scene (issue 16).

For each method (eugen/dense x nerf/nerfacto/siren) the script trains, at the same steps and seed:

- on the canonical object scene (``scenes/bunny64``, our frame, declared in scene.json) and on its captured
  variant (``scenes/bunny64_captured``: the same cameras rotated, offset and scaled as COLMAP writes them,
  OPENCV distortion applied to the images, JPEG). The frame must not matter: the goal is test PSNR equal
  within 0.3 dB (``goal_frame_invariant_met``), both runs scored against the same images: the captured run
  renders its test cameras (the canonical ones, in its frame) without lens distortion and is compared with
  the canonical scene's test images. Its PSNR on its own (distorted, JPEG) test images is recorded beside
  it: those images are another ground truth, so the gap between own-image PSNRs measures the images as
  much as the frame (``--scenes rotated recoded`` separates the two);
- on the unbounded 360 scene (``scenes/bunny64_unbounded``), beside stock ``nerfacto`` at the same steps
  and the same small sizes as our nerfacto-style methods.

Each run is evaluated on its test split from the saved checkpoint (``eugen_nerf.eval.runs.load_run``):
PSNR/SSIM (LPIPS when its offline weights exist) averaged over the test views; the framing each run chose
from its data is recorded. Writes ``benchmarks/datasets.json``.

Over ``--seeds`` (nerfstudio's seed and the EUGen projections' seed), each scene's metrics are the mean over
seeds, and the frame gap is the mean of the per-seed gaps (the same seed trains both scenes) with its
spread: one seed's gap is within the run-to-run noise of these short runs.

CPU example (the numbers in the shipped JSON): ``python scripts/bench_datasets.py --steps 300 --seeds 0 1 2
--only eugen-nerfacto dense-nerfacto nerfacto``; split across processes with ``--only`` and ``--output``, then
``--merge a.json b.json``.
"""

from __future__ import annotations

import copy
import json
import platform
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch
import tyro
from nerfstudio.configs.method_configs import method_configs as stock_methods
from nerfstudio.data.datamanagers.base_datamanager import VanillaDataManagerConfig
from nerfstudio.engine.trainer import TrainerConfig

from eugen_nerf.bench.seeds import mean_and_std, paired_gap, with_seed
from eugen_nerf.bench.training import train_in_process
from eugen_nerf.eval.evaluate import score_test_views
from eugen_nerf.eval.runs import load_run
from eugen_nerf.inputs.errors import usage_error
from eugen_nerf.methods import nerf as nerf_methods  # also installs offline LPIPS / checkpoint loading
from eugen_nerf.methods import nerfacto as nerfacto_methods
from eugen_nerf.methods import siren as siren_methods
from eugen_nerf.scenes import dataparser_config
from eugen_nerf.scenes.framing import FRAMING_KEY

REPO = Path(__file__).resolve().parents[1]
SCENES = {
    "canonical": REPO / "scenes" / "bunny64",
    "captured": REPO / "scenes" / "bunny64_captured",
    "unbounded": REPO / "scenes" / "bunny64_unbounded",
}
SPLIT_SCENES = ("rotated", "recoded")
"""What the captured variant changes, one thing at a time (made from the shipped scenes under the work dir):
``rotated``, the canonical images with every pose rotated as in the captured frame (scene.json kept, so used
verbatim); ``recoded``, the captured variant's distorted JPEG images with the canonical poses."""
GOAL_FRAME_PSNR_DB = 0.3
METHODS = ["eugen-nerf", "dense-nerf", "eugen-nerfacto", "dense-nerfacto", "eugen-siren", "dense-siren"]


def small(config: TrainerConfig) -> TrainerConfig:
    """The README's small CPU configurations (as scripts/bench_methods.py), for any of our methods."""
    config = copy.deepcopy(config)
    model = config.pipeline.model
    if hasattr(model, "num_coarse_samples"):  # NeRF and SIREN
        config.pipeline.datamanager.train_num_rays_per_batch = 256
        model.num_coarse_samples = model.num_importance_samples = 32
        if "siren" not in config.method_name:
            config.optimizers["fields"]["optimizer"].lr = 2e-3
    else:  # nerfacto-style and nerfacto
        config.pipeline.datamanager.train_num_rays_per_batch = 512
        model.num_proposal_samples_per_ray = (64, 32)
        model.num_nerf_samples_per_ray = 32
        model.max_res = 512
        model.log2_hashmap_size = 16
    return config


def method_config(name: str, datamanager: type = VanillaDataManagerConfig) -> TrainerConfig:
    """One of our methods at the small sizes, or a stock method on ``datamanager`` (nerfstudio's plain one by
    default: no worker processes; a subclass such as ``FramingDataManagerConfig`` for its options)."""
    specs = {
        "eugen-nerf": nerf_methods.eugen_nerf,
        "dense-nerf": nerf_methods.dense_nerf,
        "eugen-nerfacto": nerfacto_methods.eugen_nerfacto,
        "dense-nerfacto": nerfacto_methods.dense_nerfacto,
        "eugen-siren": siren_methods.eugen_siren,
        "dense-siren": siren_methods.dense_siren,
    }
    if name in specs:
        return small(specs[name].config)
    config = small(stock_methods[name])  # stock nerfacto, on the plain datamanager (no worker processes)
    parallel = config.pipeline.datamanager
    config.pipeline.datamanager = datamanager(
        **{f.name: getattr(parallel, f.name) for f in fields(VanillaDataManagerConfig) if f.name != "_target"}
    )
    config.machine.device_type = "cuda" if torch.cuda.is_available() else "cpu"
    config.mixed_precision = False
    config.pipeline.model.implementation = "torch" if not torch.cuda.is_available() else "tcnn"
    return config


def split_scene(name: str, work_dir: Path) -> Path:
    """Write (once) the ``SPLIT_SCENES`` variant ``name`` under ``work_dir/scenes`` and return its folder."""
    import shutil

    import numpy as np

    folder = work_dir / "scenes" / name
    if (folder / "transforms.json").is_file():
        return folder
    canonical = json.loads((SCENES["canonical"] / "transforms.json").read_text())
    captured = json.loads((SCENES["captured"] / "transforms.json").read_text())
    source = SCENES["canonical"] if name == "rotated" else SCENES["captured"]
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("transforms_*.json"))
    meta = json.loads((folder / "transforms.json").read_text())
    poses = np.array([frame["transform_matrix"] for frame in canonical["frames"]])
    # the captured frame's rotation: every captured pose's rotation is R times the canonical one
    rotation = np.array(captured["frames"][0]["transform_matrix"])[:3, :3] @ poses[0, :3, :3].T
    for frame, pose in zip(meta["frames"], poses):
        if name == "rotated":
            pose = pose.copy()
            pose[:3, :3], pose[:3, 3] = rotation @ pose[:3, :3], rotation @ pose[:3, 3]
        frame["transform_matrix"] = pose.tolist()
    (folder / "transforms.json").write_text(json.dumps(meta))
    shutil.copy(SCENES["canonical"] / "scene.json", folder / "scene.json")  # declared frame: used verbatim
    return folder


def canonical_test_images():
    """The canonical scene's test split (the same cameras as the captured variant's, in the same order)."""
    from nerfstudio.data.datasets.base_dataset import InputDataset

    return InputDataset(
        dataparser_config(SCENES["canonical"]).resolved().setup().get_dataparser_outputs("test")
    )


def evaluate(config_path: Path, same_truth: bool = False) -> dict[str, object]:
    """Mean test metrics of a saved run (the shared evaluation loop), and the framing its datamanager chose;
    ``same_truth``: also ``psnr_same_truth``, scored against the canonical scene's test images."""
    run = load_run(config_path)
    scored = score_test_views(run.pipeline, warmup=0, label=run.name)
    framing = run.pipeline.datamanager.train_dataset.metadata.get(FRAMING_KEY)
    result: dict[str, object] = dict(scored.means())
    if same_truth:
        canonical = score_test_views(
            run.pipeline,
            warmup=0,
            lpips=False,
            truth=canonical_test_images(),
            pinhole=True,
            label=f"{run.name} on the canonical images",
        )
        result["psnr_same_truth"] = canonical.means()["psnr"]
    result["test_views"] = len(scored.views)
    result["framing"] = framing.describe() if framing is not None else "stock (nerfacto's own settings)"
    return result


def per_seed_psnr(scene: dict[str, object], key: str = "psnr") -> dict[int, float]:
    """Test PSNR (``key``) by training seed (a run from before --seeds is seed 0)."""
    runs = scene.get("per_seed", [{"seed": 0, **scene}])
    return {s["seed"]: s[key] for s in runs if key in s}


def over_seeds(per_seed: list[dict[str, object]]) -> dict[str, object]:
    """A scene's row: the first seed's run with its metrics replaced by the means over seeds."""
    row = {k: v for k, v in per_seed[0].items() if k != "seed"}
    means, spread = mean_and_std(per_seed, ("psnr", "psnr_same_truth", "ssim", "lpips", "seconds_per_step"))
    row.update(means)
    row.update(
        {f"{key}_std": spread[key] for key in ("psnr", "psnr_same_truth", "ssim", "lpips") if key in spread}
    )
    row["per_seed"] = [
        {k: s[k] for k in ("seed", "psnr", "psnr_same_truth", "ssim", "lpips") if k in s} for s in per_seed
    ]
    return row


def summarise(runs: dict[str, dict[str, dict[str, object]]]) -> dict[str, object]:
    frame = {}
    for method, scenes in runs.items():
        if "canonical" in scenes and "captured" in scenes:
            canonical = per_seed_psnr(scenes["canonical"])
            own = paired_gap(per_seed_psnr(scenes["captured"]), canonical)
            if own is None:
                continue
            row = {
                "psnr_captured_minus_canonical_db": own["mean"],
                "psnr_captured_minus_canonical_std_db": own["std"],
                "per_seed_gap_db": own["per_seed"],
            }
            same = paired_gap(per_seed_psnr(scenes["captured"], "psnr_same_truth"), canonical)
            if same:  # the goal: both runs against the same (canonical) test images
                row.update(
                    {
                        "psnr_same_truth_minus_canonical_db": same["mean"],
                        "psnr_same_truth_minus_canonical_std_db": same["std"],
                        "per_seed_same_truth_gap_db": same["per_seed"],
                    }
                )
            row["goal_frame_invariant_met"] = abs((same or own)["mean"]) <= GOAL_FRAME_PSNR_DB
            split = {}
            # what the captured variant changes, one at a time
            for scene in (name for name in SPLIT_SCENES if name in scenes):
                for key, label in (("psnr", scene), ("psnr_same_truth", f"{scene} (canonical images)")):
                    gap = paired_gap(per_seed_psnr(scenes[scene], key), canonical)
                    if gap:
                        split[label] = {
                            "minus_canonical_db": gap["mean"],
                            "std_db": gap["std"],
                            "per_seed_gap_db": gap["per_seed"],
                        }
            if split:
                row["split"] = split
            frame[method] = row
    unbounded = {}
    reference = runs.get("nerfacto", {}).get("unbounded")
    for method, scenes in runs.items():
        if method != "nerfacto" and "unbounded" in scenes and reference is not None:
            unbounded[method] = {"psnr_minus_nerfacto_db": scenes["unbounded"]["psnr"] - reference["psnr"]}
    return {"frame_invariance": frame, "unbounded_vs_nerfacto": unbounded}


@dataclass
class BenchDatasets:
    steps: int = 300
    """training steps of every run."""
    only: list[str] = field(default_factory=lambda: METHODS + ["nerfacto"])
    """methods to run"""
    scenes: list[str] = field(default_factory=lambda: list(SCENES))
    """scenes to run: canonical, captured, unbounded (stock nerfacto runs only the unbounded one), or what the
    captured variant changes one at a time: rotated (the frame's rotation), recoded (its images)"""
    seeds: list[int] = field(default_factory=lambda: [0])
    """training seeds of every run (metrics: means over them; finished runs are reused)"""
    output: Path = REPO / "benchmarks" / "datasets.json"
    """the JSON written (rewritten after every run)."""
    work_dir: Path = Path("outputs/bench_datasets")
    """where the training runs go (one folder per method)."""
    threads: int = 1
    """torch CPU threads"""
    merge: list[Path] = field(default_factory=list)
    """merge partial reports into --output and exit"""


def merge_parts(paths: list[Path]) -> dict[str, object]:
    """One report from partial ones: per method and scene, so a part measuring another scene of a method adds
    to it (the first part's header; every part's command)."""
    parts = [json.loads(Path(path).read_text()) for path in paths]
    runs: dict[str, dict[str, dict[str, object]]] = {}
    for part in parts:
        for method, scenes in part["runs"].items():
            runs.setdefault(method, {}).update(scenes)
    commands = [
        c
        for part in parts
        for c in (part["command"] if isinstance(part["command"], list) else [part["command"]])
    ]
    return {**parts[0], "command": commands, "runs": runs, **summarise(runs)}


def main() -> None:
    args = tyro.cli(BenchDatasets, description=__doc__)

    if args.merge:
        report = merge_parts(args.merge)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps({k: report[k] for k in ("frame_invariance", "unbounded_vs_nerfacto")}, indent=2))
        return

    unknown = sorted(set(args.scenes) - set(SCENES) - set(SPLIT_SCENES))
    if unknown or not args.seeds:
        usage_error(
            "bench_datasets",
            f"unknown scene(s) {unknown}: choose from {list(SCENES) + list(SPLIT_SCENES)}"
            if unknown
            else "--seeds needs at least one seed",
        )
    torch.set_num_threads(args.threads)
    runs: dict[str, dict[str, dict[str, object]]] = {}
    for method in args.only:
        scenes: list[str] = [s for s in args.scenes if method != "nerfacto" or s == "unbounded"]
        for scene in scenes:
            per_seed = []
            for seed in args.seeds:
                config = with_seed(method_config(method), seed)
                data = SCENES[scene] if scene in SCENES else split_scene(scene, args.work_dir)
                config_path, seconds = train_in_process(
                    config,
                    data,
                    args.steps,
                    args.work_dir / method,
                    "bench" if seed == 0 else f"bench_seed{seed}",
                    reuse=True,
                )
                per_seed.append(
                    {
                        "seed": seed,
                        **evaluate(config_path, same_truth=scene in ("captured", "recoded")),
                        "seconds_per_step": seconds,
                        "steps": args.steps,
                    }
                )
                print(
                    f"{method:14s} {scene:10s} seed {seed} PSNR {per_seed[-1]['psnr']:.2f}  "
                    f"{per_seed[-1]['framing']}",
                    flush=True,
                )
                runs.setdefault(method, {})[scene] = over_seeds(per_seed)
                write_report(args, runs)  # after every run: an interrupted benchmark keeps what it measured
    print(json.dumps(summarise(runs), indent=2))


def write_report(args: BenchDatasets, runs: dict[str, dict[str, dict[str, object]]]) -> None:
    report = {
        "description": "test PSNR of each method on bunny64 vs its captured variant (same steps and seeds; "
        "means over seeds); "
        "unbounded scene vs stock nerfacto. CPU, small configurations, short runs.",
        "command": " ".join(["python", "scripts/bench_datasets.py", *sys.argv[1:]]),
        "platform": {
            "machine": platform.machine(),
            "torch": torch.__version__,
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "threads": args.threads,
        },
        "seeds": args.seeds,
        "goal_frame_psnr_db": GOAL_FRAME_PSNR_DB,
        "runs": runs,
        **summarise(runs),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
