"""Reproducibility on the CPU: the same seed gives bit-identical checkpoints and distilled students.

Training runs in-process through nerfstudio's ``train_loop`` (what ``ns-train`` runs after parsing, seeding
included) at tiny sizes, twice with one seed and once with another; every tensor of the checkpoints
(``pipeline``, optimiser and scheduler state) must be equal with ``torch.equal``, and the other seed must
change the model (so the comparison is not vacuous). ``eugen-distill`` of the shipped teacher, with a short
fine-tune, runs twice with the same options: the student checkpoints must be bit-identical. Each test's own work
takes a few seconds (the first one also pays nerfstudio's import), so they run in the default suite.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCENE = REPO / "scenes" / "bunny32"
TEACHER = REPO / "teachers" / "bunny64" / "dense-nerf" / "shipped"
ITERATIONS = 5


def tiny_config(method: str):
    if method == "eugen-nerfacto":
        from eugen_nerf.methods.nerfacto import eugen_nerfacto as spec

        config = copy.deepcopy(spec.config)
        model = config.pipeline.model
        model.num_proposal_samples_per_ray, model.num_nerf_samples_per_ray = (16, 8), 8
        model.log2_hashmap_size, model.max_res = 12, 64
    else:
        from eugen_nerf.methods.nerf import eugen_nerf as spec

        config = copy.deepcopy(spec.config)
        model = config.pipeline.model
        model.num_coarse_samples, model.num_importance_samples = 8, 8
        model.trunk_width, model.head_width = 32, 16
    model.eval_num_rays_per_chunk = 512
    config.pipeline.datamanager.train_num_rays_per_batch = 64
    return config


def train(method: str, output_dir: Path, seed: int) -> dict:
    """``ns-train METHOD --machine.seed SEED`` at tiny sizes, in-process; the final checkpoint."""
    from nerfstudio.scripts.train import train_loop

    from eugen_nerf.eval.checkpoints import allow_numpy_checkpoints

    allow_numpy_checkpoints()
    config = tiny_config(method)
    config.data = config.pipeline.datamanager.data = SCENE
    config.output_dir, config.timestamp = output_dir, "run"
    config.max_num_iterations = config.steps_per_save = ITERATIONS
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**6
    config.vis, config.machine.device_type, config.mixed_precision = "tensorboard", "cpu", False
    config.machine.seed = seed
    config.save_config()
    train_loop(local_rank=0, world_size=1, config=config)  # seeds torch, numpy and random as ns-train does
    (checkpoint,) = (config.get_base_dir() / "nerfstudio_models").glob("step-*.ckpt")
    return torch.load(checkpoint, map_location="cpu", weights_only=False)


def differences(a, b, where: str = "") -> list[str]:
    """Paths at which two nested checkpoint structures differ (tensors compared bit for bit)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
        return [] if same else [where]
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [f"{where}: keys {sorted(set(a) ^ set(b), key=str)}"]
        return [d for key in a for d in differences(a[key], b[key], f"{where}/{key}")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: lengths {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [where]


@pytest.mark.parametrize("method", ["eugen-nerfacto", "eugen-nerf"])
def test_same_seed_trains_bit_identical_checkpoints(method: str, tmp_path: Path, one_thread):
    first = train(method, tmp_path / "first", seed=42)
    second = train(method, tmp_path / "second", seed=42)
    assert first["step"] == second["step"] == ITERATIONS - 1
    assert first["pipeline"], "empty model state"
    for key in first["pipeline"]:  # the model state, key by key
        assert torch.equal(first["pipeline"][key], second["pipeline"][key]), key
    assert differences(first, second) == []  # and everything else: optimisers, schedulers, scaler

    other = train(method, tmp_path / "other", seed=43)
    changed = [
        k
        for k, v in first["pipeline"].items()
        if v.is_floating_point() and not torch.equal(v, other["pipeline"][k])
    ]
    assert changed, "another seed trained the same model: the comparison above proves nothing"


def distill_student(output_dir: Path) -> dict:
    from eugen_nerf.distill.options import DistillOptions
    from eugen_nerf.distill.run import distill
    from eugen_nerf.layers import EUGenSpec

    options = DistillOptions(
        teacher=TEACHER,
        output_dir=output_dir,
        layers=("field_coarse.trunk.layers.[1-3]", "field_fine.trunk.layers.[1-3]"),
        eugen=EUGenSpec(num_features=16, degree=2, feature_map="identity", seed=3),
        width_fraction=None,
        refine_steps=0,
        image_fraction=0.1,
        resolution_scale=0.25,
        pair_fraction=0.5,
        batch_rays=256,
        ridge="auto",
        finetune_steps=3,
        finetune_rays=128,
        evaluate=False,
    )
    distill(options)
    (checkpoint,) = (output_dir / "nerfstudio_models").glob("step-*.ckpt")
    return torch.load(checkpoint, map_location="cpu", weights_only=False)


def test_same_options_distill_bit_identical_students(tmp_path: Path, monkeypatch, one_thread):
    monkeypatch.chdir(REPO)  # the shipped teacher names its scene relative to the repository
    torch.manual_seed(1)  # the global generators differ between the runs: the student must not depend on them
    first = distill_student(tmp_path / "first")
    torch.manual_seed(2)
    second = distill_student(tmp_path / "second")
    teacher = torch.load(
        next((TEACHER / "nerfstudio_models").glob("step-*.ckpt")), map_location="cpu", weights_only=False
    )["pipeline"]
    assert set(first["pipeline"]) - set(teacher), "no layer of the teacher was replaced"
    for key in first["pipeline"]:
        assert torch.equal(first["pipeline"][key], second["pipeline"][key]), key
    assert differences(first, second) == []
