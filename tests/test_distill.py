"""End-to-end tests of ``eugen-distill`` on tiny teachers trained here on ``scenes/bunny32``.

The teachers are trained in-process with nerfstudio's own ``Trainer`` (what ``ns-train`` runs), for a
few iterations at tiny widths, once per module. Widths are chosen so the EUGen feature width ``k·m``
exceeds the layer width: the closed form then fits almost exactly and the student must render like
the teacher.
"""

from __future__ import annotations

import copy
import math
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from eugen_nerf.distill.cli import main as cli_main
from eugen_nerf.distill.options import DistillError, DistillInterrupted, DistillOptions
from eugen_nerf.distill.output import STATE_DIR
from eugen_nerf.eval.checkpoints import allow_numpy_checkpoints
from eugen_nerf.eval.lpips import install_offline_lpips
from eugen_nerf.layers import EUGenLinear, EUGenMLP, EUGenSpec, NormalEquations

SCENE = Path(__file__).resolve().parents[1] / "scenes" / "bunny32"
DENSE_LAYERS = ("field_coarse.trunk.layers.[1-3]", "field_fine.trunk.layers.[1-3]")


def train(config, output_dir: Path, iterations: int) -> Path:
    """Train ``config`` with nerfstudio's Trainer (as ``ns-train`` does); return its ``config.yml``."""
    install_offline_lpips()
    allow_numpy_checkpoints()
    config.output_dir = output_dir
    config.timestamp = "run"
    config.max_num_iterations = iterations
    config.steps_per_save = iterations
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**6
    config.vis = "tensorboard"
    config.machine.device_type = "cpu"
    config.mixed_precision = False
    config.pipeline.datamanager.train_num_rays_per_batch = 128
    config.save_config()
    trainer = config.setup(local_rank=0, world_size=1)
    trainer.setup()
    trainer.train()
    return config.get_base_dir() / "config.yml"


@pytest.fixture(scope="module")
def dense_teacher(tmp_path_factory) -> Path:
    from eugen_nerf.methods.nerf import dense_nerf

    config = copy.deepcopy(dense_nerf.config)
    config.data = SCENE
    config.pipeline.datamanager.data = SCENE
    model = config.pipeline.model
    model.trunk_width, model.head_width = 32, 16
    model.num_coarse_samples, model.num_importance_samples = 8, 8
    model.eval_num_rays_per_chunk = 512
    config.optimizers["fields"]["optimizer"].lr = 5e-3
    return train(config, tmp_path_factory.mktemp("dense"), iterations=60)


@pytest.fixture(scope="module")
def vanilla_teacher(tmp_path_factory) -> Path:
    from nerfstudio.configs.method_configs import method_configs

    from eugen_nerf.scenes import dataparser_config

    config = copy.deepcopy(method_configs["vanilla-nerf"])
    config.pipeline.datamanager.dataparser = dataparser_config(data=SCENE)
    config.pipeline.datamanager.data = SCENE
    config.pipeline.model.num_coarse_samples, config.pipeline.model.num_importance_samples = 8, 8
    config.pipeline.model.eval_num_rays_per_chunk = 512
    return train(config, tmp_path_factory.mktemp("vanilla"), iterations=5)


def options(teacher: Path, output_dir: Path, **overrides) -> DistillOptions:
    """Small, quick settings: about 1,300 rays in 6 batches."""
    eugen = {key: overrides.pop(key) for key in ("num_features", "degree") if key in overrides}
    values = dict(
        teacher=teacher,
        output_dir=output_dir,
        layers=DENSE_LAYERS,
        image_fraction=0.25,
        resolution_scale=0.5,
        pair_fraction=0.5,
        batch_rays=256,
        eval_views=2,
        fps_repeats=1,
        ridge=1e-6,
        projections="seeded",
        width_fraction=None,
        refine_steps=0,
        eugen=EUGenSpec(**{"num_features": 32, "degree": 2, "feature_map": "identity", **eugen}),
    )
    values.update(overrides)
    return DistillOptions(**values)


def distill(opts: DistillOptions):
    from eugen_nerf.distill.run import distill as run

    return run(opts)


def record_finetune(monkeypatch) -> list[dict]:
    """Replace the run's fine-tune by a recorder: each call's ``model``, ``rays``, ``targets`` and keyword
    arguments, answered with an empty log. What a run hands the fine-tune, without running it."""
    import eugen_nerf.distill.run as run_module
    from eugen_nerf.distill.finetune import FinetuneLog

    calls = []

    def record(model, rays, targets, *args, **kwargs):
        calls.append({"model": model, "rays": rays, "targets": targets, **kwargs})
        return FinetuneLog()

    monkeypatch.setattr(run_module, "finetune", record)
    return calls


@pytest.fixture(scope="module")
def dense_result(dense_teacher, tmp_path_factory, request):
    """One closed-form distillation of the dense teacher, checking no gradient is ever enabled."""
    grad_modes = []
    original = NormalEquations.update

    def spy(self, features, targets):
        grad_modes.append(torch.is_grad_enabled())
        return original(self, features, targets)

    NormalEquations.update = spy
    try:
        # timed on the CPU clock: the other runs of this file take the default wall clock
        result = distill(options(dense_teacher, tmp_path_factory.mktemp("student") / "run", fps_clock="cpu"))
    finally:
        NormalEquations.update = original
    return result, grad_modes


def test_closed_form_student_matches_teacher(dense_result):
    result, grad_modes = dense_result
    assert grad_modes and not any(grad_modes), "statistics were accumulated with gradients enabled"
    model = result.teacher.model
    assert all(p.grad is None for p in model.parameters()), "a gradient was computed"
    layers = [m for m in model.modules() if isinstance(m, EUGenLinear)]
    assert len(layers) == 6
    # random features fit a ReLU layer only partly (R² ~0.7 here); mismatched inputs and targets give ~0
    assert all(fit.r2_heldout > 0.5 for fit in result.fits.values()), {
        p: f.r2_heldout for p, f in result.fits.items()
    }
    report = result.report
    assert report["student"]["psnr"] == pytest.approx(report["teacher"]["psnr"], abs=0.3)
    # each 32-wide layer's 32x32 W became a 32x64 A (k·m = 2·32 features); frozen projections are not parameters
    assert report["student"]["parameters"] == report["teacher"]["parameters"] + 6 * 32 * (64 - 32)
    # the speed-up is timed with an untouched teacher beside the student: a ratio, positive and finite, on the
    # clock asked for
    assert 0 < report["render_speedup"] < float("inf")
    assert report["fps_clock"] == "cpu"
    # the changed MLPs' share of the untouched teacher's render bounds any student changing only them
    share = report["changed_mlps_render_share"]
    assert share["modules"] == ["field_coarse.trunk", "field_fine.trunk"]
    assert 0 < share["share"] < 1 and share["speedup_bound"] == pytest.approx(1 / (1 - share["share"]))


def test_side_by_side_fps_times_on_the_clock_given(dense_result, monkeypatch):
    from eugen_nerf.distill.report import side_by_side_fps
    from eugen_nerf.eval import timing

    result, _ = dense_result
    clocks = []
    original = timing.timed

    def spy(fn, device, clock="wall"):
        clocks.append(clock)
        return original(fn, device, clock)

    monkeypatch.setattr(timing, "timed", spy)
    model = result.teacher.model
    fps = side_by_side_fps(model, model, result.teacher.pipeline, views=1, repeats=1, clock="cpu")
    assert clocks == ["cpu", "cpu"] and all(0 < value < float("inf") for value in fps.values())


def test_cpu_fps_clock_refused_on_cuda_before_any_work(dense_teacher, tmp_path):
    with pytest.raises(DistillError, match="--fps-clock cpu times CPU work only"):
        distill(options(dense_teacher, tmp_path / "run", fps_clock="cpu", device="cuda"))
    assert not (tmp_path / "run").exists()


def test_student_run_directory_loads_strictly_and_renders_the_student(dense_result):
    from eugen_nerf.distill.report import evaluate
    from eugen_nerf.distill.teacher import load_teacher

    result, _ = dense_result
    run_dir = Path(result.run_dir)
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "config.yml",
        "distill_report.json",
        "nerfstudio_models",
    ]
    reloaded = load_teacher(run_dir)  # strict: every key and shape of the saved student must fit
    assert reloaded.config.get_checkpoint_dir() == run_dir / "nerfstudio_models"
    assert sum(isinstance(m, EUGenLinear) for m in reloaded.model.modules()) == 6
    scores = evaluate(reloaded.pipeline, views=2, label="reloaded")
    assert scores["psnr"] == pytest.approx(result.report["student"]["psnr"], abs=1e-4)
    # bit-identity holds per thread count, so the report says which
    assert result.report["torch_threads"] == torch.get_num_threads()


def test_converted_but_not_replaced_model_renders_like_the_teacher(dense_teacher, vanilla_teacher):
    """Converting the teacher's MLPs to dense EUGenMLPs changes nothing but float rounding: in eval mode they
    run the fused executor, which adds a skip's product into the layer's output instead of concatenating."""
    from eugen_nerf.distill.sampling import sample_rays
    from eugen_nerf.distill.student import convert_mlps, resolve_layers
    from eugen_nerf.distill.teacher import load_teacher

    for run, layers in (
        (vanilla_teacher, ["field_coarse.mlp_base.layers.2", "field_fine.mlp_head.layers.0"]),
        (dense_teacher, list(DENSE_LAYERS)),
    ):
        teacher = load_teacher(run)
        rays = sample_rays(teacher.pipeline.datamanager.train_dataset.cameras, 0.1, 0.25, 256, seed=0)
        with torch.no_grad():
            before = teacher.model(rays.batch(0, teacher.pipeline.device))
            convert_mlps(teacher.model, resolve_layers(teacher.model, layers))
            after = teacher.model(rays.batch(0, teacher.pipeline.device))
        for key in ("rgb_fine", "depth_fine"):
            torch.testing.assert_close(after[key], before[key], rtol=1e-5, atol=1e-5, msg=key)


def test_stock_vanilla_nerf_teacher_distills(vanilla_teacher, tmp_path):
    from eugen_nerf.distill.teacher import load_teacher

    opts = options(
        vanilla_teacher,
        tmp_path / "run",
        layers=["field_fine.mlp_base.layers.[23]"],
        num_features=16,
        degree=1,
        eval_views=1,
        ridge="auto",
    )
    result = distill(opts)
    assert set(result.fits) == {"field_fine.mlp_base.layers.2", "field_fine.mlp_base.layers.3"}
    assert all(torch.isfinite(fit.weight).all() for fit in result.fits.values())
    assert result.report["student"]["psnr"] == pytest.approx(result.report["teacher"]["psnr"], abs=1.0)
    reloaded = load_teacher(tmp_path / "run")
    assert isinstance(reloaded.model.get_submodule("field_fine.mlp_base.layers.3"), EUGenLinear)


def test_interrupted_run_resumes_to_the_same_solution(dense_teacher, tmp_path):
    reference = distill(options(dense_teacher, tmp_path / "reference", evaluate=False))
    run_dir = tmp_path / "resumed"
    with pytest.raises(DistillInterrupted):
        distill(options(dense_teacher, run_dir, evaluate=False, stop_after_batches=4))
    assert (run_dir / STATE_DIR).is_dir()
    assert not (run_dir / "config.yml").exists() and not list(run_dir.glob("nerfstudio_models/*.ckpt"))
    with pytest.raises(DistillError, match="different options"):
        distill(options(dense_teacher, run_dir, evaluate=False, num_features=16))
    resumed = distill(options(dense_teacher, run_dir, evaluate=False))
    assert not (run_dir / STATE_DIR).exists()
    assert set(resumed.fits) == set(reference.fits)
    for path, fit in reference.fits.items():
        torch.testing.assert_close(resumed.fits[path].weight, fit.weight, rtol=1e-12, atol=0)
        torch.testing.assert_close(resumed.fits[path].bias, fit.bias, rtol=1e-12, atol=0)


def test_a_resumed_run_reports_the_seconds_of_every_process(dense_teacher, tmp_path):
    """The stage seconds in the report are summed over the processes that worked on the run: what the stopped
    process spent before its last save is counted, not only the resumed part."""
    run_dir = tmp_path / "resumed"
    with pytest.raises(DistillInterrupted):
        distill(options(dense_teacher, run_dir, evaluate=False, stop_after_batches=4))
    (state_path,) = (run_dir / STATE_DIR).glob("*.pt")
    state = torch.load(state_path, weights_only=True)
    assert state["processes"] == 1 and state["seconds"]["capture"] > 0  # the running stage's time is saved
    state["seconds"]["capture"] += 1000.0  # as if the stopped process had captured for 1000 s more
    torch.save(state, state_path)
    resumed = distill(options(dense_teacher, run_dir, evaluate=False))
    assert resumed.report["processes"] == 2
    assert resumed.report["seconds"]["capture"] > 1000.0
    assert resumed.report["seconds"]["load"] >= state["seconds"]["load"] > 0


def test_a_capture_that_stops_each_render_once_recorded_fits_the_same_layers(
    dense_teacher, tmp_path, monkeypatch
):
    """After the first stage the capture stops each render once every hooked MLP has recorded its batch (the
    fine field's MLPs never run): the statistics, and so the fits, are those of whole renders."""
    from eugen_nerf.distill.capture import Capture

    begin = Capture.begin_batch
    stops = []

    def counting(self, generator, held_rays):
        stops.append(self.stop_when_recorded)
        begin(self, generator, held_rays)

    monkeypatch.setattr(Capture, "begin_batch", counting)
    stopped = distill(options(dense_teacher, tmp_path / "stopped", evaluate=False))
    assert any(stops) and not all(stops)  # the first stage renders whole, the later ones stop

    def whole(self, generator, held_rays):
        self.stop_when_recorded = False
        begin(self, generator, held_rays)

    monkeypatch.setattr(Capture, "begin_batch", whole)
    reference = distill(options(dense_teacher, tmp_path / "whole", evaluate=False))
    assert set(stopped.fits) == set(reference.fits)
    for path, fit in reference.fits.items():
        torch.testing.assert_close(stopped.fits[path].weight, fit.weight, rtol=1e-12, atol=0)
        torch.testing.assert_close(stopped.fits[path].bias, fit.bias, rtol=1e-12, atol=0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, teacher: str, output_dir: str, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    torch.set_num_threads(1)
    result = distill(options(Path(teacher), Path(output_dir), evaluate=False, fit="parallel"))
    torch.save(
        {"fits": {p: (f.weight, f.bias) for p, f in result.fits.items()}, "statistics": result.statistics},
        f"{out}.rank{rank}",
    )
    import torch.distributed as dist

    dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes: ~20 s
def test_two_gloo_processes_solve_like_one(dense_teacher, tmp_path):
    single = distill(options(dense_teacher, tmp_path / "single", evaluate=False, fit="parallel"))
    out = str(tmp_path / "multi.pt")
    mp.spawn(_rank_main, args=(2, _free_port(), str(dense_teacher), str(tmp_path / "multi"), out), nprocs=2)
    assert (tmp_path / "multi" / "config.yml").exists()
    for rank in range(2):
        multi = torch.load(f"{out}.rank{rank}", weights_only=True)
        for path, fit in single.fits.items():
            for key, value in single.statistics[path]["train"].items():
                torch.testing.assert_close(
                    multi["statistics"][path]["train"][key], value, rtol=1e-10, atol=1e-10
                )
            weight, bias = multi["fits"][path]
            # the statistics agree to 1e-10; the per-feature ridge leaves weak features lightly penalised, so
            # summation-order rounding shows in the weights at ~1e-7 (weights are O(0.1))
            torch.testing.assert_close(weight, fit.weight, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(bias, fit.bias, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--image-fraction", "0"], "image-fraction must be in (0, 1]"),
        (["--resolution-scale", "1.5"], "resolution-scale must be in (0, 1]"),
        (["--pair-fraction", "-0.1"], "pair-fraction must be in (0, 1]"),
        (["--layers", "field_coarse.trunk.layers.9"], "does not exist in the teacher model"),
        (["--layers", "field_coarse.trunk"], "is a EUGenMLP, not a linear layer"),
        (["--layers", "field_coarse.density_head"], "is a Linear outside any supported MLP"),
        (["--refine-steps", "-1"], "refine-steps must be an integer >= 0"),
        (["--finetune-novel-views", "-2"], "finetune-novel-views must be an integer >= 0"),
        (["--finetune-validation-views", "-1"], "finetune-validation-views must be an integer >= 0"),
    ],
)
def test_bad_input_is_a_clear_error_and_writes_nothing(dense_teacher, tmp_path, capsys, flags, message):
    output_dir = tmp_path / "out"
    assert cli_main(["--teacher", str(dense_teacher), "--output-dir", str(output_dir), *flags]) == 2
    # options tyro rejects while parsing come boxed on stderr (as for ns-train)
    captured = capsys.readouterr()
    assert message in " ".join((captured.out + captured.err).replace("│", " ").split())
    assert not output_dir.exists()


def test_an_option_out_of_range_is_one_line_not_the_parsers_box(tmp_path, capsys):
    output_dir = tmp_path / "out"
    assert (
        cli_main(["--teacher", str(tmp_path), "--output-dir", str(output_dir), "--image-fraction", "0"]) == 2
    )
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "eugen-distill: error: image-fraction must be in (0, 1], got 0.0"
    ]
    assert not output_dir.exists()


def test_not_a_run_directory(tmp_path, capsys):
    assert cli_main(["--teacher", str(tmp_path), "--output-dir", str(tmp_path / "out")]) == 2
    assert "not a nerfstudio run directory (no config.yml)" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "out").exists()


def test_checkpoint_from_another_method(dense_teacher, vanilla_teacher, tmp_path, capsys):
    run = tmp_path / "mixed"
    (run / "nerfstudio_models").mkdir(parents=True)
    (run / "config.yml").write_text(dense_teacher.read_text())
    for checkpoint in (vanilla_teacher.parent / "nerfstudio_models").glob("*.ckpt"):
        (run / "nerfstudio_models" / checkpoint.name).write_bytes(checkpoint.read_bytes())
    assert cli_main(["--teacher", str(run), "--output-dir", str(tmp_path / "out")]) == 2
    out = " ".join(capsys.readouterr().err.split())
    assert "does not fit the model of" in out and "different method" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_auto_selection_keeps_what_fits_the_budget_and_fine_tunes(dense_teacher, tmp_path):
    from torch import nn

    opts = options(
        dense_teacher,
        tmp_path / "run",
        layers=("auto",),
        psnr_budget=0.0,
        auto_views=1,
        image_fraction=0.05,
        finetune_steps=3,
        finetune_rays=64,
        eval_views=1,
    )
    result = distill(opts)
    report = result.report
    decisions = report["auto"]["decisions"]
    expected = [f"field_{f}.trunk.layers.{i}" for f in ("coarse", "fine") for i in (1, 2, 3, 5, 6, 7)]
    assert [d["path"] for d in decisions] == expected
    model = result.teacher.model
    for d in decisions:
        assert d["kept"] == (d["drop_db"] <= 0.0)
        assert isinstance(model.get_submodule(d["path"]), EUGenLinear if d["kept"] else nn.Linear), d
    assert set(result.fits) == {d["path"] for d in decisions if d["kept"]}
    losses = report["finetune_losses"]
    assert len(losses) == (3 if result.fits else 0) and all(torch.isfinite(torch.tensor(losses)))
    assert {"student_closed_form", "student", "teacher"} <= set(report)


def test_student_fused_form_renders_the_unfused_image_and_switching_loses_nothing(dense_result):
    from eugen_nerf.layers import EUGenMLP

    result, _ = dense_result
    model = result.teacher.model.eval()
    pipeline = result.teacher.pipeline
    camera = pipeline.datamanager.eval_dataset.cameras[0:1].to(pipeline.device)
    mlps = [m for m in model.modules() if isinstance(m, EUGenMLP) and m.has_eugen]
    assert mlps, "the student has no EUGen MLP"

    def render(fused: bool) -> torch.Tensor:
        for mlp in mlps:
            mlp.fuse_in_eval = fused
        with torch.no_grad():
            return model.get_outputs_for_camera(camera)["rgb"]

    first, unfused, again = render(True), render(False), render(True)
    # fp32 reassociation only: seen up to 3e-5 (the teacher fixture is not bit-reproducible across runs), a
    # fortieth of one 8-bit level at 1e-4
    torch.testing.assert_close(first, unfused, rtol=1e-4, atol=1e-4)
    assert torch.equal(first, again)


def test_novel_cameras_lie_between_the_training_ones_and_are_seeded(dense_teacher):
    from eugen_nerf.distill.sampling import novel_cameras
    from eugen_nerf.distill.teacher import load_teacher

    cameras = load_teacher(dense_teacher, "cpu").pipeline.datamanager.train_dataset.cameras
    novel, picks = novel_cameras(cameras, 6, seed=4)
    again, picks_again = novel_cameras(cameras, 6, seed=4)
    assert torch.equal(novel.camera_to_worlds, again.camera_to_worlds) and torch.equal(picks, picks_again)
    centres = cameras.camera_to_worlds[:, :, 3]
    spacing = torch.cdist(centres, centres).fill_diagonal_(float("inf")).min(dim=1).values.median()
    source = cameras.camera_to_worlds[picks]
    moved = (novel.camera_to_worlds[:, :, 3] - source[:, :, 3]).norm(dim=-1)
    assert (moved <= 0.5 * spacing + 1e-6).all() and (moved > 0).any()
    rotation = novel.camera_to_worlds[:, :, :3]
    assert torch.allclose(rotation @ rotation.transpose(1, 2), torch.eye(3).expand(6, 3, 3), atol=1e-5)
    turned = torch.einsum("nij,nij->n", rotation, source[:, :, :3]).sub(1).div(2).clamp(-1, 1).acos()
    assert (turned <= torch.deg2rad(torch.tensor(4.0)) + 1e-4).all()
    # trained novel views stand beside the cameras the fine-tune trains on, never beside held-out ones
    _, near_trained = novel_cameras(cameras, 40, seed=4, sources=[0, 2])
    assert set(near_trained.tolist()) == {0, 2}


def test_heldout_pairs_come_from_whole_heldout_cameras(dense_teacher):
    """R² and the ridge are judged on cameras the fit never saw: every sample of a held-out camera's rays goes
    to the held-out statistics, and no sample of another camera does."""
    from eugen_nerf.distill.capture import Capture
    from eugen_nerf.distill.sampling import sample_rays
    from eugen_nerf.distill.teacher import load_teacher

    cameras = load_teacher(dense_teacher, "cpu").pipeline.datamanager.train_dataset.cameras
    rays = sample_rays(cameras, 0.5, 0.25, batch_rays=100, seed=3)
    held = rays.heldout_cameras(0.25, seed=3)
    assert held and set(held) < set(rays.camera_indices) and held == rays.heldout_cameras(0.25, seed=3)
    # one camera: no view split
    assert sample_rays(cameras, 1e-3, 0.25, 100, 3).heldout_cameras(0.25, 3) == []
    capture = Capture({}, {}, [], pair_fraction=1.0, heldout_fraction=0.1)
    for b in range(rays.num_batches):
        capture.held_rays = rays.heldout_mask(b, held)
        owners = rays.batch(b, torch.device("cpu")).camera_indices.reshape(-1)
        samples = 7  # a field's MLP sees rays x samples rows, ray-major
        expected = torch.isin(owners, torch.tensor(held)).repeat_interleave(samples)
        assert torch.equal(capture.held_rows(len(owners) * samples), expected)


def test_units_are_chosen_without_the_heldout_cameras():
    """``--projections teacher`` picks units from teacher pre-activations: the held-out cameras' rays, which
    then judge the layers built from those units (R², ridge), are left out of that choice."""
    from eugen_nerf.distill.capture import PreactivationProbe, trace
    from eugen_nerf.distill.student import LayerRef
    from eugen_nerf.layers import EUGenMLP

    torch.manual_seed(0)
    teacher = EUGenMLP(4, 3, 8, 3).double().eval()
    ref = LayerRef("mlp", 1)
    probe = PreactivationProbe({"mlp": teacher}, {"mlp": teacher}, [ref], pair_fraction=1.0)
    rays, samples = 10, 3
    held = torch.zeros(rays, dtype=torch.bool)
    held[[2, 7]] = True
    x = torch.randn(rays * samples, 4, dtype=torch.double)
    x[held.repeat_interleave(samples)] *= 100  # held-out rows would dominate the Gram matrix
    with probe:
        probe.generator = torch.Generator().manual_seed(0)
        probe.held_rays = held
        teacher(x)
    z = trace(teacher, x[~held.repeat_interleave(samples)], 1)[2][1]
    z = z - z.mean(dim=0)
    assert torch.allclose(probe.grams()[ref.path].double(), z.T @ z, rtol=1e-6, atol=1e-8)


def test_max_rays_lowers_the_resolution_of_a_large_capture_and_leaves_a_small_one_alone(dense_teacher):
    """``--max-rays``: cameras with more pixels than the cap at ``--resolution-scale`` are rendered at a lower
    scale, to about the cap (what one default needs for 64-pixel scenes and for 800² photographs alike)."""
    from eugen_nerf.distill.sampling import sample_rays
    from eugen_nerf.distill.teacher import load_teacher

    cameras = load_teacher(dense_teacher, "cpu").pipeline.datamanager.train_dataset.cameras
    full = sample_rays(cameras, 0.5, 0.5, batch_rays=100, seed=3)
    assert sample_rays(cameras, 0.5, 0.5, 100, 3, max_rays=len(full.rays)).resolution_scale == 0.5
    capped = sample_rays(cameras, 0.5, 0.5, 100, 3, max_rays=len(full.rays) // 4)
    assert capped.camera_indices == full.camera_indices and capped.resolution_scale == pytest.approx(0.25)
    quarter = len(full.rays) // 4
    assert 0.8 * quarter <= len(capped.rays) <= quarter + len(full.camera_indices) * 16


@pytest.mark.parametrize("parameters", ["all", "eugen"])
def test_finetune_trains_the_whole_student_or_only_its_eugen_layers(dense_result, parameters):
    from eugen_nerf.distill.finetune import finetune
    from eugen_nerf.distill.sampling import novel_rays

    result, _ = dense_result
    model = copy.deepcopy(result.teacher.model)
    cameras = result.teacher.pipeline.datamanager.train_dataset.cameras
    rays = novel_rays(cameras, 2, 0.25, seed=0)
    targets = torch.rand(len(rays), 3)
    density_before = model.field_fine.density_head.weight.detach().clone()
    eugen = next(m for m in model.modules() if isinstance(m, EUGenLinear))
    eugen_before = eugen.weight.detach().clone()
    losses = finetune(
        model,
        rays,
        targets,
        steps=2,
        lr=1e-2,
        batch_rays=32,
        seed=0,
        device=torch.device("cpu"),
        parameters=parameters,
        show_progress=False,
    ).losses
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert not torch.equal(eugen.weight, eugen_before)
    assert torch.equal(model.field_fine.density_head.weight, density_before) == (parameters == "eugen")
    from eugen_nerf.distill.finetune import field_parameters

    trained = {id(p) for p in field_parameters(model)}
    fields = {id(p) for field in (model.field_coarse, model.field_fine) for p in field.parameters()}
    assert trained == fields  # the fields and their heads, nothing else (no metric network)


def test_finetune_keeps_the_state_that_renders_the_validation_rays_best(dense_result):
    """A fine-tune towards wrong colours must not leave the student worse on the validation rays than it started:
    with validation targets equal to the student's own render, the starting state is the one kept."""
    from eugen_nerf.distill.finetune import finetune, validation_mse
    from eugen_nerf.distill.sampling import novel_rays
    from eugen_nerf.eval.runs import final_rgb

    result, _ = dense_result
    model = copy.deepcopy(result.teacher.model)
    cameras = result.teacher.pipeline.datamanager.train_dataset.cameras
    rays = novel_rays(cameras, 2, 0.25, seed=0)
    held = novel_rays(cameras, 1, 0.25, seed=1)
    with torch.no_grad():
        model.eval()
        own = final_rgb(model(held)).detach()
    before = [p.detach().clone() for p in model.parameters()]
    cpu = torch.device("cpu")
    log = finetune(
        model,
        rays,
        torch.rand(len(rays), 3),
        steps=6,
        lr=1e-2,
        batch_rays=32,
        seed=0,
        device=cpu,
        show_progress=False,
        validation=(held, own),
        check_every=2,
    )
    assert [step for step, _ in log.validation] == [0, 2, 4, 6]
    assert log.validation[0][1] < min(error for _, error in log.validation[1:]), (
        "the wrong colours changed nothing"
    )
    assert log.kept_step == 0
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert validation_mse(model, held, own, cpu) == pytest.approx(log.validation[0][1])
    # towards the validation targets themselves, a later state is kept and renders them better
    targets = torch.rand(len(held), 3)
    log = finetune(
        model,
        held,
        targets,
        steps=6,
        lr=1e-2,
        batch_rays=64,
        seed=0,
        device=cpu,
        show_progress=False,
        validation=(held, targets),
        check_every=2,
    )
    assert log.kept_step > 0
    assert validation_mse(model, held, targets, cpu) == pytest.approx(min(e for _, e in log.validation))


def test_defaults_build_the_best_measured_student_and_the_baselines_keep_their_own_projections():
    """A plain ``eugen-distill --teacher T --output-dir D`` builds the closed form of the student measured best
    (the teacher's units as G, the ReLU map, polynomial scaling, no norm), and a fine-tune, when asked for,
    matches the teacher's fields. A baseline
    (which has no EUGen projections to take from the teacher) is not refused for the default."""
    defaults = DistillOptions(teacher=Path("teacher"))
    assert defaults.projections == "teacher" and defaults.finetune_target == "fields"
    assert (defaults.eugen.feature_map, defaults.eugen.scaling, defaults.eugen.use_norm) == (
        "relu",
        "polynomial",
        False,
    )
    assert defaults.eugen.degree == 1 and defaults.width_fraction == 5 / 8  # m = 160 of a 256-wide teacher
    # a low-rank layer has no G to refine
    assert (
        defaults.refine_steps == 300
        and DistillOptions(teacher=Path("t"), eugen=EUGenSpec(layer_type="lowrank")).refine_steps == 0
    )
    sampling = (defaults.image_fraction, defaults.resolution_scale, defaults.pair_fraction, defaults.max_rays)
    assert sampling == (0.25, 0.5, 0.25, 16384)  # the benchmark's sampling
    with pytest.raises(DistillError, match="max-rays must be an integer >= 1 or None"):
        DistillOptions(teacher=Path("t"), max_rays=0)
    assert defaults.spec.trainable_projections  # the teacher's units live in the student's checkpoint
    for layer_type in ("lowrank", "snnk"):
        assert (
            DistillOptions(teacher=Path("t"), eugen=EUGenSpec(layer_type=layer_type)).projections == "seeded"
        )
    with pytest.raises(DistillError, match="finetune-target must be one of"):
        DistillOptions(teacher=Path("t"), finetune_target="depth")
    # the fields fine-tune renders each batch: every pixel and new cameras
    assert (defaults.finetune_novel_rays, defaults.finetune_camera_rays, defaults.finetune_average) == (
        "fresh",
        "all",
        0.99,
    )
    colour = DistillOptions(teacher=Path("t"), finetune_target="colour")  # colours rendered ahead: the pools
    assert (colour.finetune_novel_rays, colour.finetune_camera_rays) == ("fixed", "capture")
    for no_fresh in ({"finetune_novel_views": 0}, {"finetune_rays": 1}):  # nothing to share with new cameras
        options = DistillOptions(teacher=Path("t"), **no_fresh)
        assert (options.finetune_novel_rays, options.finetune_camera_rays) == ("fixed", "all")
    chosen = DistillOptions(teacher=Path("t"), finetune_novel_rays="fixed", finetune_camera_rays="capture")
    assert (chosen.finetune_novel_rays, chosen.finetune_camera_rays) == ("fixed", "capture")  # kept as given
    with pytest.raises(DistillError, match="finetune-camera-rays must be one of"):
        DistillOptions(teacher=Path("t"), finetune_camera_rays="every")
    with pytest.raises(DistillError, match="--finetune-rays >= 2"):
        DistillOptions(teacher=Path("t"), finetune_novel_rays="fresh", finetune_rays=1)
    with pytest.raises(DistillError, match="finetune-novel-rays must be one of"):
        DistillOptions(teacher=Path("t"), finetune_novel_rays="new")
    with pytest.raises(DistillError, match="'fresh' needs --finetune-target fields"):
        DistillOptions(teacher=Path("t"), finetune_novel_rays="fresh", finetune_target="colour")
    with pytest.raises(DistillError, match="--finetune-novel-views >= 1"):
        DistillOptions(teacher=Path("t"), finetune_novel_rays="fresh", finetune_novel_views=0)


def test_field_loss_is_zero_for_the_teacher_itself_and_weighs_what_the_picture_shows(dense_result):
    """The student's fields are matched at the teacher's own samples: a copy of the teacher costs nothing, a
    changed density head costs something, only the student gets gradients, and the teacher's fields are left
    with their own forward afterwards. A sample's colour counts by the teacher's rendering weight ``T·α`` and its
    opacity by the transmittance ``T`` (both taken here from nerfstudio's own ``RaySamples`` helpers)."""
    from nerfstudio.cameras.rays import RaySamples
    from nerfstudio.field_components.field_heads import FieldHeadNames

    from eugen_nerf.distill.field_match import named_fields, recorded_fields, render_and_match_fields
    from eugen_nerf.distill.sampling import novel_rays

    result, _ = dense_result
    teacher = result.teacher.model  # the distilled model: any NeRF model serves as a teacher here
    teacher.eval()
    cameras = result.teacher.pipeline.datamanager.train_dataset.cameras
    rays = novel_rays(cameras, 1, 0.25, seed=0)[:64]
    with recorded_fields(teacher) as calls, torch.no_grad():
        teacher(rays)
    assert [call.name for call in calls] == ["field_coarse", "field_fine"]
    assert all("forward" not in field.__dict__ for field in named_fields(teacher).values())

    student = copy.deepcopy(teacher)
    colour, loss = render_and_match_fields(teacher, student, rays)
    assert float(loss) == pytest.approx(0.0, abs=1e-10)
    with torch.no_grad():
        # the colour target is the teacher's render of the batch
        assert torch.equal(colour, teacher(rays)["rgb"])
        student.field_fine.density_head.bias += 1.0
    _, loss = render_and_match_fields(teacher, student, rays)
    assert float(loss) > 1e-6
    loss.backward()
    assert student.field_fine.density_head.bias.grad is not None
    assert all(p.grad is None for p in teacher.parameters())

    # the fine field's colours inverted, or its density doubled, on a random half of its samples
    fine = calls[1]
    density, rgb = fine.outputs[FieldHeadNames.DENSITY], fine.outputs[FieldHeadNames.RGB]
    weights = fine.samples.get_weights(density)
    alpha = 1 - torch.exp(-density * fine.samples.deltas)
    transmittance = RaySamples.get_weights_and_transmittance_from_alphas(alpha)[1][:, :-1]
    changed = torch.rand(weights.shape, generator=torch.Generator().manual_seed(0)) < 0.5

    def loss_with(change):
        student = copy.deepcopy(teacher)
        forward = type(student.field_fine).forward

        def changed_forward(ray_samples, *args, **kwargs):
            return change(dict(forward(student.field_fine, ray_samples, *args, **kwargs)))

        student.field_fine.forward = changed_forward
        return float(render_and_match_fields(teacher, student, rays)[1])

    def inverted(outputs):
        outputs[FieldHeadNames.RGB] = torch.where(
            changed, 1 - outputs[FieldHeadNames.RGB], outputs[FieldHeadNames.RGB]
        )
        return outputs

    def doubled(outputs):
        outputs[FieldHeadNames.DENSITY] = torch.where(
            changed, 2 * outputs[FieldHeadNames.DENSITY], outputs[FieldHeadNames.DENSITY]
        )
        return outputs

    colour_cost = (weights * changed * (1 - 2 * rgb).square()).sum(1).mean()
    doubled_alpha = 1 - torch.exp(-2 * density * fine.samples.deltas)
    opacity_cost = (transmittance * changed * (doubled_alpha - alpha).square()).sum(1).mean()
    assert float(colour_cost) > 0 and float(opacity_cost) > 0
    assert loss_with(inverted) == pytest.approx(float(colour_cost), rel=1e-3)
    assert loss_with(doubled) == pytest.approx(float(opacity_cost), rel=1e-3)


def test_recorded_fields_restore_an_instance_forward_and_survive_an_error(dense_result):
    """A field that already had its own ``forward`` gets it back, and is still called through it; an error inside
    the block leaves no field wrapped."""
    from eugen_nerf.distill.field_match import named_fields, recorded_fields
    from eugen_nerf.distill.sampling import novel_rays

    result, _ = dense_result
    model = copy.deepcopy(result.teacher.model).eval()
    rays = novel_rays(result.teacher.pipeline.datamanager.train_dataset.cameras, 1, 0.25, seed=0)[:16]
    seen = []
    own = type(model.field_fine).forward

    def instance_forward(ray_samples, *args, **kwargs):
        seen.append(len(ray_samples))
        return own(model.field_fine, ray_samples, *args, **kwargs)

    model.field_fine.forward = instance_forward
    with torch.no_grad(), recorded_fields(model) as calls:
        model(rays)
    assert seen and [call.name for call in calls] == ["field_coarse", "field_fine"]
    assert model.field_fine.forward is instance_forward and "forward" not in model.field_coarse.__dict__
    with pytest.raises(RuntimeError, match="inside"), recorded_fields(model):
        raise RuntimeError("inside")
    assert model.field_fine.forward is instance_forward and "forward" not in model.field_coarse.__dict__
    assert len(named_fields(model)) == 2


@pytest.fixture(scope="module")
def nerfacto_teacher(tmp_path_factory) -> Path:
    from nerfstudio.configs.method_configs import method_configs

    from eugen_nerf.scenes import dataparser_config

    config = copy.deepcopy(method_configs["nerfacto"])
    config.pipeline.datamanager.dataparser = dataparser_config(data=SCENE)
    config.pipeline.datamanager.data = SCENE
    config.pipeline.model.eval_num_rays_per_chunk = 512
    config.pipeline.model.implementation = "torch"
    return train(config, tmp_path_factory.mktemp("nerfacto"), iterations=5)


@pytest.mark.slow
def test_stock_nerfacto_teacher_distills_with_the_same_report(nerfacto_teacher, tmp_path):
    """With eugen-distill's defaults: the teacher's units as G and a fine-tune that matches its field."""
    from dataclasses import replace

    from eugen_nerf.distill.options import distill_spec

    result = distill(
        options(
            nerfacto_teacher,
            tmp_path / "run",
            layers=("hidden",),
            projections="teacher",
            eugen=replace(distill_spec(), num_features=64),
            finetune_target="fields",
            finetune_steps=2,
            finetune_rays=64,
            finetune_novel_views=1,
        )
    )
    report = result.report
    assert result.fits and all(path.startswith(("field.", "proposal_networks.")) for path in result.fits), (
        result.fits
    )
    assert {"teacher", "student_closed_form", "student"} <= set(report)
    for key in ("psnr", "ssim", "fps", "parameters"):
        assert report["student"][key] > 0 and report["teacher"][key] > 0
    assert (tmp_path / "run" / "config.yml").is_file()


def test_finetune_is_validated_on_novel_cameras_it_never_trains_on(dense_teacher, tmp_path, monkeypatch):
    """``--finetune-validation-views N`` adds the teacher's render of N novel cameras (their own seed) to the rays
    that choose the kept fine-tune state; the fine-tune never trains on them."""
    import eugen_nerf.distill.run as run_module
    from eugen_nerf.distill.finetune import FinetuneLog

    calls = []

    def spy(model, rays, targets, *args, validation=None, **kwargs):
        calls.append((rays, targets, validation))
        return FinetuneLog()

    monkeypatch.setattr(run_module, "finetune", spy)
    for views in (0, 2):
        # the pool read below
        distill(
            options(
                dense_teacher,
                tmp_path / f"views{views}",
                evaluate=False,
                num_features=8,
                finetune_steps=1,
                finetune_novel_views=1,
                finetune_validation_views=views,
                finetune_camera_rays="capture",
                finetune_novel_rays="fixed",
            )
        )
    (train0, _, (held0, _)), (train2, _, (held2, held_rgb2)) = calls
    assert len(train2) == len(train0)  # the rays trained on do not change
    extra = len(held2) - len(held0)
    assert extra > 0 and extra % 2 == 0, extra  # two cameras' worth of rays
    torch.testing.assert_close(held2.origins[: len(held0)], held0.origins)  # the held-out cameras' rays first
    # every ray of a camera starts at its centre: the novel view trained on
    trained_novel = train2.origins[-1]
    for origin in (held2.origins[len(held0)], held2.origins[-1]):  # the two validation cameras
        assert not torch.allclose(origin, trained_novel)
    assert torch.isfinite(held_rgb2).all() and held_rgb2.min() >= 0 and held_rgb2.max() <= 1
    assert held_rgb2[len(held0) :].std() > 0  # the teacher's picture, not a constant


@pytest.mark.parametrize("target", ["colour", "fields"])
def test_fields_finetune_draws_novel_cameras_without_rendering_them_ahead(
    dense_teacher, tmp_path, monkeypatch, target
):
    """``--finetune-target fields``: the untouched teacher is handed to the fine-tune, which renders each batch
    itself, so the novel cameras trained on are not rendered ahead (only the validation cameras are); with
    ``colour`` every trained ray comes with the teacher's colour rendered ahead."""
    import eugen_nerf.distill.run as run_module

    calls, rendered = record_finetune(monkeypatch), []
    original = run_module.Distillation.novel_targets
    monkeypatch.setattr(
        run_module.Distillation,
        "novel_targets",
        lambda self, count, seed, near_heldout=False: (
            rendered.append(count) or original(self, count, seed, near_heldout)
        ),
    )
    distill(
        options(
            dense_teacher,
            tmp_path / "run",
            evaluate=False,
            num_features=8,
            finetune_steps=1,
            finetune_novel_views=3,
            finetune_validation_views=1,
            finetune_target=target,
        )
    )
    (call,) = calls
    student, rays, targets, teacher = call["model"], call["rays"], call["targets"], call["teacher"]
    if target == "fields":
        assert rendered == [1] and targets is None
        assert teacher is not None and teacher is not student
        assert not any(isinstance(m, EUGenLinear) for m in teacher.modules())  # the untouched teacher
    else:
        assert rendered == [3, 1] and teacher is None and len(targets) == len(rays)


def test_fresh_novel_rays_are_new_every_step_and_fill_their_share_of_each_batch(dense_result, monkeypatch):
    """``fresh``: every step asks for its own novel rays once and takes ``fresh_rays`` of them after the
    pool's share; the teacher renders the whole batch; the pool alone never reaches the batch."""
    import eugen_nerf.distill.finetune as finetune_module
    from eugen_nerf.distill.sampling import novel_rays

    result, _ = dense_result
    teacher = result.teacher.model
    cameras = result.teacher.pipeline.datamanager.train_dataset.cameras
    pool = novel_rays(cameras, 1, 0.25, seed=0)
    asked, batches = [], []

    def fresh(step):
        asked.append(step)
        rays = novel_rays(cameras, 1, 0.25, seed=100 + step)
        rays.origins[:] = float(step)  # marks the step the ray was drawn for
        return rays

    original = finetune_module.render_and_match_fields
    monkeypatch.setattr(
        finetune_module,
        "render_and_match_fields",
        lambda t, s, batch: batches.append(batch.origins.clone()) or original(t, s, batch),
    )
    student, cpu = copy.deepcopy(teacher), torch.device("cpu")
    log = finetune_module.finetune(
        student,
        pool,
        None,
        steps=4,
        lr=1e-3,
        batch_rays=64,
        seed=0,
        device=cpu,
        show_progress=False,
        teacher=teacher,
        fresh=fresh,
        fresh_rays=16,
    )
    assert asked == [1, 2, 3, 4] and len(log.losses) == 4 and all(math.isfinite(x) for x in log.losses)
    for step, origins in enumerate(batches, start=1):
        assert origins.shape == (64, 3)
        assert (origins[48:] == float(step)).all()  # this step's fresh rays, never an earlier step's
        assert torch.isin(origins[:48], pool.origins).all()
    with pytest.raises(ValueError, match="fresh_rays must be in"):
        finetune_module.finetune(
            student,
            pool,
            None,
            steps=1,
            lr=1e-3,
            batch_rays=64,
            seed=0,
            device=cpu,
            show_progress=False,
            teacher=teacher,
            fresh=fresh,
            fresh_rays=64,
        )
    with pytest.raises(ValueError, match="fresh rays need a teacher"):
        finetune_module.finetune(
            student,
            pool,
            torch.zeros(len(pool), 3),
            steps=1,
            lr=1e-3,
            batch_rays=64,
            seed=0,
            device=cpu,
            show_progress=False,
            fresh=fresh,
            fresh_rays=16,
        )


def test_fresh_finetune_hands_the_fixed_pools_novel_share_and_new_cameras_each_step(
    dense_teacher, tmp_path, monkeypatch
):
    """``eugen-distill --finetune-novel-rays fresh``: the pool holds the capture rays only, the fresh share of
    a batch is the share the fixed novel cameras would have had, and two steps get different cameras."""
    from eugen_nerf.distill.sampling import novel_rays

    calls = record_finetune(monkeypatch)
    result = distill(
        options(
            dense_teacher,
            tmp_path / "run",
            evaluate=False,
            num_features=8,
            finetune_steps=2,
            finetune_rays=100,
            finetune_novel_views=3,
            finetune_validation_views=1,
            finetune_target="fields",
            finetune_novel_rays="fresh",
            finetune_camera_rays="capture",
        )
    )
    (kwargs,) = calls
    pool = kwargs["rays"]
    first, second = kwargs["fresh"](1), kwargs["fresh"](2)
    assert len(first) == len(second) and not torch.allclose(first.origins, second.origins)
    assert torch.equal(kwargs["fresh"](1).origins, first.origins)  # seeded: a rerun draws the same cameras
    share = len(first) / (len(pool) + len(first))
    assert kwargs["fresh_rays"] == round(100 * share) and 0 < kwargs["fresh_rays"] < 100
    cameras = result.teacher.pipeline.datamanager.train_dataset.cameras
    centres = cameras.camera_to_worlds[pool.camera_indices.reshape(-1), :, 3]
    assert torch.allclose(pool.origins, centres)  # training cameras only: no novel camera in the pool
    fixed, checked = novel_rays(cameras, 3, 0.5, seed=0), kwargs["validation"][0]
    for other in (fixed.origins, checked.origins):  # the fixed cameras' seed, the validation cameras' + 1
        assert not torch.isin(first.origins[:, 0], other[:, 0]).any()


def test_pixel_rays_are_the_camera_rays_generated_as_drawn():
    """:class:`PixelRays` gives, for any draw (repeats, any order, the ``extra`` rays mixed in), exactly the
    rays that indexing the materialised :func:`camera_rays` followed by ``extra`` would, on cameras of two
    sizes."""
    from nerfstudio.cameras.cameras import Cameras

    from eugen_nerf.distill.sampling import PixelRays, camera_rays, cat_rays, novel_rays

    c2w = torch.eye(4)[:3].repeat(5, 1, 1)
    c2w[:, 0, 3] = torch.arange(5.0)
    cameras = Cameras(
        camera_to_worlds=c2w,
        fx=30.0,
        fy=30.0,
        cx=16.0,
        cy=12.0,
        width=torch.tensor([[32], [32], [20], [32], [20]]),
        height=24,
    )
    extra = novel_rays(cameras, 2, 0.5, seed=3)
    pool, flat = PixelRays(cameras, [0, 2, 4], extra), cat_rays(camera_rays(cameras, [0, 2, 4], 1.0), extra)
    assert len(pool) == len(flat) == 24 * (32 + 20 + 20) + len(extra)
    for pick in (
        torch.randint(len(pool), (500,), generator=torch.Generator().manual_seed(0)),
        torch.tensor([len(pool) - 1, 0, 0, 24 * 32]),
    ):
        drawn, expected = pool[pick], flat[pick]
        for name in ("origins", "directions", "pixel_area", "camera_indices"):
            assert torch.equal(getattr(drawn, name), getattr(expected, name)), name
        assert torch.equal(drawn.metadata["directions_norm"], expected.metadata["directions_norm"])
    assert len(PixelRays(cameras, [1])[torch.tensor([3, 5])]) == 2  # without extra rays


def test_all_camera_rays_are_every_training_pixel_but_the_held_out_cameras(
    dense_teacher, tmp_path, monkeypatch
):
    """``--finetune-camera-rays all``: the fine-tune's pool is every full-resolution pixel ray of every
    training camera except those held out for validation, whose rays still validate; with ``colour`` it is
    refused."""
    from eugen_nerf.distill.sampling import PixelRays, camera_rays

    calls = record_finetune(monkeypatch)
    result = distill(
        options(
            dense_teacher,
            tmp_path / "run",
            evaluate=False,
            num_features=8,
            finetune_steps=1,
            finetune_novel_views=0,
            finetune_validation_views=0,
            finetune_target="fields",
            finetune_camera_rays="all",
        )
    )
    (kwargs,) = calls
    pool = kwargs["rays"]
    cameras = result.teacher.pipeline.datamanager.train_dataset.cameras
    held = kwargs["validation"][0].camera_indices.unique().tolist()
    assert held and set(held) <= set(range(len(cameras)))
    kept = [i for i in range(len(cameras)) if i not in held]
    assert isinstance(pool, PixelRays)  # generated as drawn, not held
    every = pool[torch.arange(len(pool))]
    assert sorted(every.camera_indices.unique().tolist()) == kept
    assert len(pool) == sum(int(cameras.width[i]) * int(cameras.height[i]) for i in kept)
    assert torch.equal(every.directions, camera_rays(cameras, kept, 1.0).directions)
    with pytest.raises(DistillError, match="'all' needs --finetune-target fields"):
        DistillOptions(teacher=Path("t"), finetune_camera_rays="all", finetune_target="colour")


def test_averaged_finetune_hands_back_the_moving_average_of_the_steps(dense_result, monkeypatch):
    """``average = a``: the student handed back is ``m_t = a·m_{t-1} + (1-a)·p_t`` over the optimiser's
    steps, from the starting parameters (no validation, so nothing else is chosen); with validation, the state
    kept is the average that rendered the validation rays best."""
    from eugen_nerf.distill.finetune import field_parameters, finetune, validation_mse
    from eugen_nerf.distill.sampling import novel_rays

    result, _ = dense_result
    teacher = result.teacher.model
    cameras = result.teacher.pipeline.datamanager.train_dataset.cameras
    rays, held = novel_rays(cameras, 1, 0.25, seed=0), novel_rays(cameras, 1, 0.25, seed=1)
    student, cpu = copy.deepcopy(teacher), torch.device("cpu")
    with torch.no_grad():
        student.field_fine.color_head.layers[-1].bias += 0.5
    params = field_parameters(student)
    expected = [p.detach().clone() for p in params]
    original = torch.optim.Adam.step
    history = []  # the average after each step

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        for mean, p in zip(expected, params):
            mean.mul_(0.75).add_(p.detach(), alpha=0.25)
        history.append([mean.clone() for mean in expected])
        return out

    monkeypatch.setattr(torch.optim.Adam, "step", spy)
    trained = [p.detach().clone() for p in params]
    finetune(
        student,
        rays,
        None,
        steps=4,
        lr=1e-2,
        batch_rays=64,
        seed=0,
        device=cpu,
        show_progress=False,
        teacher=teacher,
        average=0.75,
    )
    assert any(not torch.equal(p, q) for p, q in zip(params, trained))  # it trained
    for p, mean in zip(params, expected):
        assert torch.allclose(p, mean, atol=1e-6)
    teacher.eval()
    with torch.no_grad():
        targets = torch.cat([teacher(held[i : i + 512])["rgb"] for i in range(0, len(held), 512)])
    student = copy.deepcopy(teacher)  # a fresh one, far off, so that the averages improve on the start
    with torch.no_grad():
        for field in (student.field_coarse, student.field_fine):
            field.color_head.layers[-1].bias += 1.0
    params[:] = field_parameters(student)
    expected[:] = [p.detach().clone() for p in params]
    history.clear()
    log = finetune(
        student,
        rays,
        None,
        steps=6,
        lr=3e-3,
        batch_rays=128,
        seed=0,
        device=cpu,
        show_progress=False,
        teacher=teacher,
        average=0.75,
        validation=(held, targets),
        check_every=1,
    )
    assert log.kept_step > 0
    for p, mean in zip(params, history[log.kept_step - 1]):  # that step's average, not its raw parameters
        assert torch.allclose(p, mean, atol=1e-6)
    best = min(e for _, e in log.validation)
    assert validation_mse(student, held, targets, cpu) == pytest.approx(best)
    with pytest.raises(ValueError, match="average must be in"):
        finetune(
            student,
            rays,
            None,
            steps=1,
            lr=1e-2,
            batch_rays=64,
            seed=0,
            device=cpu,
            show_progress=False,
            teacher=teacher,
            average=1.0,
        )
    with pytest.raises(DistillError, match="finetune-average must be in"):
        DistillOptions(teacher=Path("t"), finetune_average=-0.1)


def test_fields_finetune_brings_a_perturbed_student_back_to_its_teacher(dense_result):
    """Trained against the teacher's own render and fields, a student whose density and colour were shifted moves
    back: its field mismatch on cameras it never trained on falls by more than half, and its training loss falls."""
    from eugen_nerf.distill.field_match import render_and_match_fields
    from eugen_nerf.distill.finetune import finetune
    from eugen_nerf.distill.sampling import novel_rays

    result, _ = dense_result
    teacher = result.teacher.model
    cameras = result.teacher.pipeline.datamanager.train_dataset.cameras
    rays, held = novel_rays(cameras, 2, 0.25, seed=0), novel_rays(cameras, 1, 0.25, seed=1)
    teacher.eval()
    student = copy.deepcopy(teacher)
    with torch.no_grad():
        for field in (student.field_coarse, student.field_fine):
            field.density_head.bias += 2.0
            field.color_head.layers[-1].bias += 1.0
    before = float(render_and_match_fields(teacher, student, held)[1])
    teacher.train()  # the fine-tune must render it in eval mode, as the test does, and leave it so
    log = finetune(
        student,
        rays,
        None,
        steps=20,
        lr=3e-3,
        batch_rays=128,
        seed=0,
        device=torch.device("cpu"),
        show_progress=False,
        teacher=teacher,
    )
    losses = torch.tensor(log.losses)
    assert len(losses) == 20 and torch.isfinite(losses).all()
    assert losses[-5:].mean() < losses[:5].mean()
    student.eval()
    assert float(render_and_match_fields(teacher, student, held)[1]) < 0.5 * before
    assert not teacher.training  # handed back in eval mode


def test_refinement_keeps_or_improves_each_layer_and_the_student_loads_strictly(dense_teacher, tmp_path):
    from eugen_nerf.distill.teacher import load_teacher

    result = distill(
        options(
            dense_teacher, tmp_path / "run", evaluate=False, num_features=8, refine_steps=30, refine_rows=2048
        )
    )
    assert result.fits
    for fit in result.fits.values():
        assert fit.projections is not None and fit.r2_heldout_closed_form is not None
        assert fit.r2_heldout >= fit.r2_heldout_closed_form
    assert any(fit.r2_heldout > fit.r2_heldout_closed_form for fit in result.fits.values()), (
        "30 steps from the closed form improved no layer: the refinement does nothing"
    )
    student = load_teacher(tmp_path / "run", "cpu").model  # strict: every key, the refined G included
    for path, fit in result.fits.items():
        layer = student.get_submodule(path)
        assert layer.trainable_projections
        torch.testing.assert_close(layer.projections.detach(), fit.projections.to(layer.projections))


@pytest.mark.slow
def test_interrupted_refined_run_resumes_to_the_same_solution(dense_teacher, tmp_path):
    refine = dict(evaluate=False, num_features=8, refine_steps=10, refine_rows=2048)
    reference = distill(options(dense_teacher, tmp_path / "reference", **refine))
    with pytest.raises(DistillInterrupted):
        distill(options(dense_teacher, tmp_path / "resumed", stop_after_batches=4, **refine))
    resumed = distill(options(dense_teacher, tmp_path / "resumed", **refine))
    for path, fit in reference.fits.items():
        for key in ("weight", "bias", "projections"):
            torch.testing.assert_close(
                getattr(resumed.fits[path], key), getattr(fit, key), rtol=1e-6, atol=1e-7
            )


def test_refinement_under_torchrun_is_refused_before_anything_is_written(
    dense_teacher, tmp_path, monkeypatch
):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(DistillError, match="refine-steps runs in one process"):
        distill(options(dense_teacher, tmp_path / "run", refine_steps=5))
    assert not (tmp_path / "run").exists()


def test_lowrank_baseline_fits_in_closed_form_at_its_rank_and_loads_strictly(dense_teacher, tmp_path):
    """The reviewers' low-rank baseline, fitted the same way (reduced-rank regression on the captured
    pre-activations; the ReLU stays after it). At full rank it is the teacher; at rank 8 it has rank 8."""
    from eugen_nerf.distill.teacher import load_teacher
    from eugen_nerf.layers import LowRankLinear

    full = distill(
        options(dense_teacher, tmp_path / "full", eugen=EUGenSpec(layer_type="lowrank", num_features=32))
    )
    assert all(fit.r2_heldout > 0.9999 for fit in full.fits.values()), {
        p: f.r2_heldout for p, f in full.fits.items()
    }
    assert full.report["student"]["psnr"] == pytest.approx(full.report["teacher"]["psnr"], abs=0.05)
    narrow = distill(
        options(
            dense_teacher,
            tmp_path / "rank8",
            evaluate=False,
            eugen=EUGenSpec(layer_type="lowrank", lowrank_rank=8),
        )
    )
    assert all(0.2 < fit.r2_heldout < 0.9999 for fit in narrow.fits.values())
    student = load_teacher(tmp_path / "rank8", "cpu").model  # strict
    for path, fit in narrow.fits.items():
        layer = student.get_submodule(path)
        assert isinstance(layer, LowRankLinear) and layer.rank == 8
        torch.testing.assert_close(
            (layer.up @ layer.down).double(), fit.weight.double(), rtol=1e-4, atol=1e-5
        )
        parent = student.get_submodule(path.rsplit(".layers.", 1)[0])
        assert parent.applies_activation(int(path.rsplit(".", 1)[1])), (
            "the ReLU after a low-rank layer was lost"
        )


def test_snnk_baseline_fits_in_closed_form_and_loads_strictly(dense_teacher, tmp_path):
    from eugen_nerf.distill.teacher import load_teacher

    result = distill(
        options(
            dense_teacher,
            tmp_path / "run",
            evaluate=False,
            eugen=EUGenSpec(layer_type="snnk", num_features=32),
        )
    )
    assert all(fit.r2_heldout > 0.5 for fit in result.fits.values())
    student = load_teacher(tmp_path / "run", "cpu").model
    for path in result.fits:
        layer = student.get_submodule(path)
        assert isinstance(layer, EUGenLinear)
        assert (layer.degree, layer.use_norm, layer.feature_map, layer.feature_dim) == (1, False, "relu", 64)


@pytest.mark.parametrize(
    "layer_type, extra, message",
    [
        ("dense", {}, "replaces nothing"),
        ("lowrank", {"refine_steps": 5}, "lowrank has none"),
    ],
)
def test_layer_types_distillation_cannot_build_are_refused(
    dense_teacher, tmp_path, layer_type, extra, message
):
    with pytest.raises(DistillError, match=message):
        options(dense_teacher, tmp_path / "run", eugen=EUGenSpec(layer_type=layer_type), **extra)
    assert not (tmp_path / "run").exists()


def test_teacher_projections_are_the_teachers_units_fit_better_and_survive_resume_and_loading(
    dense_teacher, tmp_path
):
    """``--projections teacher``: every order's rows are teacher units' own rows (stored in the checkpoint, as
    refined G is); the per-unit polynomials fit the ReLU layers better than seeded projections at the same m; an
    interrupted run resumes to the same units and solution."""
    from eugen_nerf.distill.teacher import load_teacher

    small = dict(evaluate=False, num_features=16)
    seeded = distill(options(dense_teacher, tmp_path / "seeded", **small))
    aligned = distill(options(dense_teacher, tmp_path / "aligned", projections="teacher", **small))
    for path, fit in aligned.fits.items():
        assert fit.r2_heldout > seeded.fits[path].r2_heldout, (
            path,
            fit.r2_heldout,
            seeded.fits[path].r2_heldout,
        )
    teacher = load_teacher(dense_teacher, "cpu").model
    student = load_teacher(tmp_path / "aligned", "cpu").model  # strict: G is in the checkpoint
    for path, fit in aligned.fits.items():
        layer = student.get_submodule(path)
        assert layer.trainable_projections
        torch.testing.assert_close(layer.projections.detach(), fit.projections.to(layer.projections))
        dense = teacher.get_submodule(path)
        rows = torch.cat([dense.weight, dense.bias[:, None], torch.zeros(dense.out_features, 1)], 1).detach()
        rows = rows / rows.norm(dim=1, keepdim=True)
        g = layer.projections.detach().view(layer.num_projection_matrices, layer.num_features, -1)
        cosine = g[0] @ rows.T  # each row of G is one of the teacher's unit rows
        torch.testing.assert_close(cosine.max(dim=1).values, torch.ones(layer.num_features))
        torch.testing.assert_close(g[1], g[0])  # every order the same units
    with pytest.raises(DistillInterrupted):
        distill(
            options(dense_teacher, tmp_path / "resumed", projections="teacher", stop_after_batches=3, **small)
        )
    resumed = distill(options(dense_teacher, tmp_path / "resumed", projections="teacher", **small))
    for path, fit in aligned.fits.items():
        for key in ("weight", "bias", "projections"):
            torch.testing.assert_close(
                getattr(resumed.fits[path], key), getattr(fit, key), rtol=1e-10, atol=0
            )


def test_width_fraction_sizes_each_layer_from_the_one_it_replaces_and_the_student_loads_with_it(
    dense_teacher, tmp_path
):
    """``--width-fraction f``: each new layer has ``round(f · outputs)`` features and as many of the teacher's
    units; the student's config carries ``f``, so ``ns-eval`` builds the same layers (strict load)."""
    from eugen_nerf.distill.teacher import load_teacher

    result = distill(
        options(
            dense_teacher,
            tmp_path / "half",
            projections="teacher",
            evaluate=False,
            width_fraction=0.25,
            degree=1,
            num_features=EUGenSpec.num_features,
        )
    )
    loaded = load_teacher(tmp_path / "half", "cpu")  # strict: the layer shapes must match the checkpoint
    assert loaded.config.pipeline.model.width_fraction == 0.25
    student = loaded.model
    for path in result.fits:
        layer = student.get_submodule(path)
        assert layer.num_features == round(0.25 * layer.out_features) == 8  # the test teacher is 32 wide
        assert layer.projections.shape[0] == 8


def test_width_fraction_of_gives_the_layers_it_matches_their_own_width_and_the_student_loads_with_it(
    dense_teacher, tmp_path
):
    """``--width-fraction-of PATTERN=FRACTION``: the layers whose path matches take that fraction, the others
    ``--width-fraction``; the student's config carries both, so ``ns-eval`` builds the same layers (strict
    load), and its fused form renders what its layers compute."""
    from eugen_nerf.distill.teacher import load_teacher

    result = distill(
        options(
            dense_teacher,
            tmp_path / "mixed",
            projections="teacher",
            evaluate=False,
            width_fraction=0.25,
            width_fraction_of=("field_*.trunk.layers.2=1/2", "field_fine.trunk.layers.3=3/4"),
            degree=1,
            num_features=EUGenSpec.num_features,
        )
    )
    expected = {"1": 8, "2": 16, "3": 8}  # of the 32-wide test teacher
    loaded = load_teacher(tmp_path / "mixed", "cpu")
    assert loaded.config.pipeline.model.width_fraction_of == (
        "field_*.trunk.layers.2=1/2",
        "field_fine.trunk.layers.3=3/4",
    )
    student = loaded.model.eval()
    assert len(result.fits) == 6
    for path in result.fits:
        layer = student.get_submodule(path)
        m = 24 if path == "field_fine.trunk.layers.3" else expected[path[-1]]
        assert layer.num_features == layer.projections.shape[0] == m, path
    trunk = student.get_submodule("field_fine.trunk")
    points = torch.randn(512, trunk.in_dim)
    with torch.no_grad():
        fused = trunk(points)
        unfused = trunk.forward_unfused(points)
    torch.testing.assert_close(fused, unfused, rtol=1e-4, atol=1e-5)


def test_narrowing_is_off_by_default_and_refused_where_it_cannot_apply():
    """Every layer keeps its width unless --narrow-fraction is given; the baselines, seeded projections and one
    m for every layer have nothing it can narrow, so a fraction given with them is an error."""
    teacher = Path("teachers/shiny128/dense-nerf/paper")
    assert DistillOptions(teacher=teacher).narrow_fraction is None
    assert DistillOptions(teacher=teacher, narrow_fraction=7 / 16).narrow_fraction == 7 / 16
    for other in (
        dict(eugen=EUGenSpec(layer_type="lowrank")),
        dict(eugen=EUGenSpec(layer_type="snnk")),
        dict(projections="seeded"),
        dict(width_fraction=None),
    ):
        with pytest.raises(DistillError, match="narrow-fraction"):
            DistillOptions(teacher=teacher, narrow_fraction=1 / 2, **other)


@pytest.mark.parametrize("degree", [1, 2])
def test_a_layer_narrowed_from_its_statistics_is_the_layer_distilled_at_the_narrow_width(
    dense_teacher, tmp_path, degree
):
    """``--narrow-fraction f``: a layer solved from its statistics restricted to its first ``f`` units is the
    layer a run at width ``f`` fits (same units, same inputs, same solve), so with every layer narrowed the two
    students are equal; the student's config names each narrowed layer, and it loads with those widths. At
    ``--narrow-r2 1`` no layer narrows, and the decisions say so. Every layer reads the teacher's inputs
    (``--fit parallel``): with the student's own, the rounding of one layer moves the next one's inputs, and
    where two of the teacher's units fit nearly as well the pivoting may pick either."""
    from eugen_nerf.distill.teacher import load_teacher

    common = dict(
        projections="teacher",
        evaluate=False,
        degree=degree,
        num_features=EUGenSpec.num_features,
        fit="parallel",
    )
    narrow = distill(
        options(
            dense_teacher, tmp_path / "n", width_fraction=0.5, narrow_fraction=0.25, narrow_r2=-1.0, **common
        )
    )
    direct = distill(options(dense_teacher, tmp_path / "d", width_fraction=0.25, **common))
    assert set(narrow.fits) == set(direct.fits)
    for path, fit in direct.fits.items():  # equal but for rounding
        assert narrow.fits[path].r2_heldout == pytest.approx(fit.r2_heldout, abs=1e-5)
        for key in ("weight", "bias", "projections"):
            ours, theirs = getattr(narrow.fits[path], key), getattr(fit, key)
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4 * float(theirs.abs().max()))

    decisions = narrow.report["narrowed"]
    assert [d["path"] for d in decisions] == sorted(narrow.fits, key=list(narrow.fits).index)
    assert all(d["kept"] and d["features"] == [16, 8] for d in decisions)
    loaded = load_teacher(tmp_path / "n", "cpu")
    assert set(loaded.config.pipeline.model.width_fraction_of) == {f"{path}=1/4" for path in narrow.fits}
    for path in narrow.fits:
        assert loaded.model.get_submodule(path).num_features == 8

    kept = distill(
        options(
            dense_teacher, tmp_path / "k", width_fraction=0.5, narrow_fraction=0.25, narrow_r2=1.0, **common
        )
    )
    assert not any(d["kept"] for d in kept.report["narrowed"])
    assert all(fit.weight.shape[1] == 16 * degree for fit in kept.fits.values())
    assert load_teacher(tmp_path / "k", "cpu").config.pipeline.model.width_fraction_of == ()


@pytest.mark.parametrize("projections, degree", [("teacher", 2), ("teacher-pairs", 2), ("teacher", 1)])
def test_refined_teacher_units_stay_one_projection_and_the_loaded_student_projects_them_once(
    dense_teacher, tmp_path, projections, degree
):
    """``--projections teacher`` (or ``teacher-pairs``) ``--refine-steps N`` with the ReLU map, polynomial
    scaling and no norm entry: refining trains G but keeps every order's rows the first order's (the same, or
    moved one place down), so the student loaded from disk fuses each replaced layer into one m-row projection
    with no norm rows, and renders what its unfused layers compute. Degree 1 (a narrower ReLU layer of the
    teacher's units, refitted) has one order: m rows all the same."""
    from eugen_nerf.distill.teacher import load_teacher
    from eugen_nerf.layers import order_rows

    spec = EUGenSpec(num_features=16, degree=degree, feature_map="relu", scaling="polynomial", use_norm=False)
    result = distill(
        options(
            dense_teacher,
            tmp_path / "run",
            eugen=spec,
            projections=projections,
            refine_steps=40,
            evaluate=False,
        )
    )
    refined = [
        fit
        for fit in result.fits.values()
        if fit.r2_heldout_closed_form is not None and fit.r2_heldout > fit.r2_heldout_closed_form
    ]
    assert refined, "no layer's refinement was kept: the test would not see refined projections"
    student = load_teacher(tmp_path / "run", "cpu").model.eval()
    for path, fit in result.fits.items():
        layer = student.get_submodule(path)
        torch.testing.assert_close(layer.projections.detach(), fit.projections.to(layer.projections))
        rows = order_rows(layer)  # pairs: order 2 is order 1's rows moved one place down
        assert (rows is not None) == (degree > 1), path
        if degree > 1:
            shift = int(projections == "teacher-pairs")
            assert rows[1].tolist() == torch.arange(16).roll(shift).tolist(), path
    mlps = {id(m): m for m in student.modules() if isinstance(m, EUGenMLP) and "eugen" in m.layer_types}
    assert mlps
    for mlp in mlps.values():
        steps = mlp.fused().steps
        for step in steps:
            if step.layer is not None:
                assert (step.factors is not None) == (degree > 1) and step.norm_rows == 0
                assert step.weight.shape[0] == step.layer.num_features
        with torch.no_grad():
            x = torch.randn(64, mlp.in_dim)
            torch.testing.assert_close(mlp(x), mlp.forward_unfused(x), rtol=1e-4, atol=1e-4)


def test_teacher_projections_are_refused_for_the_baselines(dense_teacher, tmp_path):
    with pytest.raises(DistillError, match="projections 'teacher' sets the projections of EUGen layers"):
        options(dense_teacher, tmp_path / "run", projections="teacher", eugen=EUGenSpec(layer_type="lowrank"))
    assert not (tmp_path / "run").exists()


def test_the_default_layers_are_the_hidden_ones_or_else_the_teachers_eugen_twins(vanilla_teacher):
    from eugen_nerf.distill.options import DistillOptions
    from eugen_nerf.distill.student import resolve_layers
    from eugen_nerf.distill.teacher import load_teacher
    from eugen_nerf.eval.memory import build_untrained
    from eugen_nerf.methods import nerf, nerfacto, zipnerf

    assert DistillOptions(teacher=SCENE).layers == ("hidden", "twin")

    def chosen(config, patterns=("hidden", "twin")):
        model, _ = build_untrained(config, SCENE)
        return [ref.path for ref in resolve_layers(model, patterns)]

    # NeRF's trunk: 'hidden' is every layer but the first and the skip layer, the last included (its ReLU'd
    # output feeds the heads); 'twin' is eugen-nerf's own EUGen layers, the same ones
    trunk = [f"field_{f}.trunk.layers.{i}" for f in ("coarse", "fine") for i in (1, 2, 3, 5, 6, 7)]
    assert chosen(nerf.dense_nerf.config) == trunk == chosen(nerf.dense_nerf.config, ("hidden",))
    assert chosen(nerf.dense_nerf.config, ("twin",)) == trunk
    # the colour head's layers: the first reads the view encoding, the last is the output
    assert not any("color_head" in path for path in chosen(nerf.dense_nerf.config))
    # Zip-NeRF's view MLP: layer 0 is the MLP's first and layer 1 its skip layer, so 'hidden' finds nothing
    # and the default takes the twin's
    assert chosen(zipnerf.dense_zipnerf.config) == ["field.view_mlp.layers.0", "field.view_mlp.layers.1"]
    assert chosen(zipnerf.dense_zipnerf.config, ("hidden",)) == []
    assert chosen(nerfacto.dense_nerfacto.config, ("twin",)) == ["field.color_mlp.layers.1"]
    assert chosen(zipnerf.eugen_zipnerf.config) == []  # its twin's layers are EUGen already
    # a stock nerfstudio teacher has no EUGen twin: 'twin' is 'hidden'
    stock = load_teacher(vanilla_teacher).model
    assert [r.path for r in resolve_layers(stock, ["twin"])] == [
        r.path for r in resolve_layers(stock, ["hidden"])
    ]


FOLD_LAYERS = ("field_coarse.trunk.layers.[67]", "field_fine.trunk.layers.[67]")


def test_fold_out_activation_fits_the_activated_trunk_and_the_student_folds_its_heads(
    dense_teacher, tmp_path
):
    """The trunk's last layer is fitted to the teacher's output after its ReLU, the student runs without that ReLU
    (saved in its config), and eugen-nerf's field then merges the layer's A into its heads."""
    from eugen_nerf.distill.report import evaluate
    from eugen_nerf.distill.teacher import load_teacher

    opts = options(dense_teacher, tmp_path / "run", layers=FOLD_LAYERS)
    assert opts.fold_out_activation  # the default
    opts.eugen = EUGenSpec(num_features=64, degree=1, feature_map="relu")
    result = distill(opts)
    folded = ["field_coarse.trunk", "field_fine.trunk"]
    assert result.report["folded"] == folded
    # the student the run scored (and would fine-tune) is the one it writes: no ReLU after the folded layer
    assert all(result.teacher.model.get_submodule(path).out_activation is None for path in folded)
    teacher = load_teacher(dense_teacher, "cpu").model.eval()
    run = load_teacher(tmp_path / "run", "cpu")
    assert sorted(run.config.pipeline.model.unactivated) == folded
    scores = evaluate(run.pipeline, views=2, label="reloaded")
    assert scores["psnr"] == pytest.approx(result.report["student"]["psnr"], abs=1e-4)
    student = run.model.eval()
    for name in ("field_coarse", "field_fine"):
        field, dense = student.get_submodule(name), teacher.get_submodule(name)
        assert field.trunk.out_activation is None and isinstance(dense.trunk.out_activation, torch.nn.ReLU)
        assert field.folded_heads() is not None
        x = field.position_encoding(torch.rand(4096, 3, generator=torch.Generator().manual_seed(0)) * 2 - 1)
        with torch.no_grad():
            out = field.trunk.forward_unfused(x)
            dense.trunk.out_activation = None
            pre = dense.trunk.forward_unfused(x)
        post = torch.relu(pre)
        assert (pre < 0).float().mean() > 0.1  # the ReLU matters on these inputs
        # fitted to the activated output, not to the pre-activation the unfolded student's layer fits
        assert (out - post).square().mean() < 0.5 * (out - pre).square().mean()


@pytest.mark.parametrize("layer_type", ["lowrank", "snnk"])
def test_baseline_students_fold_nothing_and_keep_the_teachers_activation(dense_teacher, tmp_path, layer_type):
    """Folding is on by default for EUGen layers; the baselines keep the teacher's ReLU after their layers, so
    their students run the trunk's output as the teacher does."""
    from eugen_nerf.distill.teacher import load_teacher

    assert options(dense_teacher, tmp_path / "eugen").fold_out_activation
    opts = options(dense_teacher, tmp_path / "run", layers=FOLD_LAYERS, evaluate=False)
    spec = EUGenSpec(layer_type=layer_type, lowrank_rank=32 if layer_type == "lowrank" else None)
    opts = DistillOptions(**{**vars(opts), "eugen": spec})
    assert not opts.fold_out_activation
    distill(opts)
    run = load_teacher(tmp_path / "run", "cpu")
    assert not run.config.pipeline.model.unactivated
    for name in ("field_coarse", "field_fine"):
        assert isinstance(run.model.get_submodule(name).trunk.out_activation, torch.nn.ReLU)


def test_without_folding_or_a_field_that_merges_the_student_keeps_the_activation(
    dense_teacher, vanilla_teacher, tmp_path
):
    """--no-fold-out-activation keeps the ReLU after an EUGen trunk's last layer; a stock nerfstudio field,
    which cannot merge that layer into its heads, keeps it by default."""
    from eugen_nerf.distill.teacher import load_teacher

    cases = {
        "unfolded": (dense_teacher, FOLD_LAYERS, {"fold_out_activation": False}),
        "stock": (vanilla_teacher, ("field_coarse.mlp_base.layers.7", "field_fine.mlp_base.layers.7"), {}),
    }
    for name, (teacher, layers, given) in cases.items():
        result = distill(options(teacher, tmp_path / name, layers=layers, evaluate=False, **given))
        assert result.report["folded"] == [], name
        run = load_teacher(tmp_path / name, "cpu")
        assert not run.config.pipeline.model.unactivated, name
        mlps = [m for m in run.model.modules() if hasattr(m, "out_activation") and hasattr(m, "layers")]
        assert any(len(m.layers) == 8 for m in mlps), name
        for mlp in (m for m in mlps if len(m.layers) == 8):
            assert isinstance(mlp.out_activation, torch.nn.ReLU), name


@pytest.mark.parametrize("flag", ["--width-fraction", "--narrow-fraction"])
def test_an_optional_fraction_reads_none_and_names_a_bad_value(flag, capsys):
    import tyro

    from eugen_nerf.distill.cli import DistillCommand

    base = ["--teacher", "T", "--output-dir", "D"]
    parsed = tyro.cli(DistillCommand, args=[*base, flag, "3/8"])
    assert getattr(parsed, flag[2:].replace("-", "_")) == pytest.approx(0.375)
    assert getattr(tyro.cli(DistillCommand, args=[*base, flag, "None"]), flag[2:].replace("-", "_")) is None
    with pytest.raises(SystemExit):
        tyro.cli(DistillCommand, args=[*base, flag, "3/0"])
    text = capsys.readouterr().err
    assert "not a number: '3/0'" in text and "PrimitiveConstructorSpec" not in text


def test_report_json_writes_a_non_finite_score_as_null(tmp_path):
    import json

    from eugen_nerf.distill.report import write_json_atomic

    path = tmp_path / "distill_report.json"
    data = {"teacher": {"lpips": float("nan"), "psnr": 24.9}, "views": [float("inf"), 1.0], "step": 3}
    write_json_atomic(path, data)
    strict = json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert strict == {"teacher": {"lpips": None, "psnr": 24.9}, "views": [None, 1.0], "step": 3}
