"""Training to plateau (``eugen_nerf.bench.training``): the rule, and a run stopped at any point continues
where it stopped when the same call is made again."""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch

from eugen_nerf.bench.training import PLATEAU_RECORD, PlateauRule, train_to_plateau
from eugen_nerf.inputs.errors import InputError, TrainingStopped
from eugen_nerf.methods.nerf import dense_nerf

ROOT = Path(__file__).resolve().parents[1]
SCENE = ROOT / "scenes/bunny32"


def history(*pairs: tuple[int, float]) -> list[dict]:
    return [{"step": step, "psnr": psnr, "train_seconds": None} for step, psnr in pairs]


def test_the_rule_stops_on_a_small_gain_over_the_last_fifth_of_the_steps():
    rule = PlateauRule(eval_every=500, window=0.2, min_gain_db=0.1, min_steps=2000, max_steps=10000, smooth=1)
    rising = history((500, 20.0), (1000, 22.0), (1500, 23.0), (2000, 23.5), (2500, 23.7))
    assert rule.gain(rising) == pytest.approx(0.2)  # 2500 against 2000, the last at or before 80% of 2500
    assert rule.status(rising) is None
    flat = [*rising, *history((3000, 23.75), (3500, 23.78), (4000, 23.79), (4500, 23.8), (5000, 23.82))]
    assert rule.gain(flat) == pytest.approx(23.82 - 23.79)  # 5000 against 4000
    assert rule.status(flat) == "plateau"
    early = history((500, 20.0), (1000, 20.01))
    assert rule.status(early) is None, "no plateau before min_steps"
    assert rule.status(history((500, 20.0))) is None
    capped = [*rising, *history((10000, 30.0))]
    assert rule.status(capped) == "max_steps"
    for bad in (
        PlateauRule(window=1.0),
        PlateauRule(eval_every=0),
        PlateauRule(eval_every=600, max_steps=500),
        PlateauRule(smooth=0),
    ):
        with pytest.raises(InputError):
            bad.check()


def test_one_low_score_does_not_end_training_when_scores_are_smoothed():
    dip = history((1000, 18.0), (1500, 20.3), (2000, 21.4), (2500, 20.2), (3000, 21.9))
    single = PlateauRule(min_steps=3000, smooth=1)
    assert single.gain(dip) == pytest.approx(21.9 - 21.4)
    pair = PlateauRule(min_steps=3000, smooth=2)
    # mean of (2500, 3000) against the mean of (1500, 2000): the dip at 2500 is averaged, not decisive
    assert pair.gain(dip) == pytest.approx((20.2 + 21.9) / 2 - (20.3 + 21.4) / 2)
    assert pair.status(dip) is None
    stalled = [*dip, *history((3500, 21.0), (4000, 21.05), (4500, 21.0), (5000, 21.02))]
    assert pair.status(stalled) == "plateau"


def tiny_config():
    config = copy.deepcopy(dense_nerf.config)
    config.pipeline.datamanager.train_num_rays_per_batch = 64
    model = config.pipeline.model
    model.trunk_width, model.head_width = 16, 8
    model.num_coarse_samples = model.num_importance_samples = 4
    model.eval_num_rays_per_chunk = 4096
    return config


def test_a_stopped_run_continues_from_its_checkpoint(tmp_path: Path):
    from nerfstudio.utils import writer

    rule = PlateauRule(eval_every=2, min_steps=100, max_steps=2)
    config_path, first = train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    run = config_path.parent
    assert first["finished"] == "max_steps" and [h["step"] for h in first["history"]] == [2]
    checkpoint = run / "nerfstudio_models/step-000000001.ckpt"
    weights = torch.load(checkpoint, map_location="cpu")["pipeline"]

    # the same call with a larger cap: one more chunk, loaded from the checkpoint (optimiser included)
    _, second = train_to_plateau(
        tiny_config(), SCENE, tmp_path, PlateauRule(eval_every=2, min_steps=100, max_steps=4)
    )
    assert [h["step"] for h in second["history"]] == [2, 4]
    assert writer.GLOBAL_BUFFER["max_iter"] == 4, "progress counts against the run's steps, not the chunk's"
    assert not writer.EVENT_WRITERS, "each chunk's event writers are closed, not left to log the next chunks"
    assert len(list(run.glob("events.out.tfevents.*"))) == 2
    assert second["history"][0] == first["history"][0], "the first chunk is not trained again"
    assert second["history"][1]["train_seconds"] > first["history"][0]["train_seconds"]
    assert sorted(p.name for p in (run / "nerfstudio_models").iterdir()) == ["step-000000003.ckpt"]
    state = torch.load(run / "nerfstudio_models/step-000000003.ckpt", map_location="cpu")
    assert state["step"] == 3 and "optimizers" in state
    assert any(not torch.equal(weights[k], state["pipeline"][k]) for k in weights), "the second chunk trained"

    # stopped between saving a checkpoint and scoring it: the rerun scores it and trains nothing
    record = json.loads((run / PLATEAU_RECORD).read_text())
    record["history"].pop()
    (run / PLATEAU_RECORD).write_text(json.dumps(record))
    written = (run / "nerfstudio_models/step-000000003.ckpt").stat().st_mtime_ns
    _, third = train_to_plateau(
        tiny_config(), SCENE, tmp_path, PlateauRule(eval_every=2, min_steps=100, max_steps=4)
    )
    assert [h["step"] for h in third["history"]] == [2, 4] and third["finished"] == "max_steps"
    assert third["history"][1]["psnr"] == pytest.approx(second["history"][1]["psnr"], abs=1e-4)
    assert (run / "nerfstudio_models/step-000000003.ckpt").stat().st_mtime_ns == written

    # another seed, rule or model in the same folder is refused, never overwritten
    other_seed = tiny_config()
    other_seed.machine.seed = 7
    other_width = tiny_config()
    other_width.pipeline.model.trunk_width = 24
    for config, rule in (
        (other_seed, PlateauRule(eval_every=2, min_steps=100, max_steps=4)),
        (tiny_config(), PlateauRule(eval_every=2, min_gain_db=0.5, min_steps=100, max_steps=4)),
        (other_width, PlateauRule(eval_every=2, min_steps=100, max_steps=4)),
    ):
        with pytest.raises(InputError, match="another configuration"):
            train_to_plateau(config, SCENE, tmp_path, rule)
    assert (run / "nerfstudio_models/step-000000003.ckpt").stat().st_mtime_ns == written


def test_a_stop_while_a_chunk_is_scored_keeps_what_the_chunk_cost(tmp_path: Path, monkeypatch):
    """Scoring runs with no signal handler: a stop then ends the process. The chunk's training time is on disk
    before scoring starts, so the rerun scores the saved checkpoint, trains nothing and counts the chunk."""
    from eugen_nerf.eval import evaluate

    rule = PlateauRule(eval_every=2, min_steps=100, max_steps=2)

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt("SIGTERM")

    with monkeypatch.context() as patch:
        patch.setattr(evaluate, "score_test_views", stopped)
        with pytest.raises(KeyboardInterrupt):
            train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    run = tmp_path / SCENE.name / "dense-nerf" / "plateau"
    saved = json.loads((run / PLATEAU_RECORD).read_text())["history"]
    assert [h["step"] for h in saved] == [2] and saved[0]["psnr"] is None
    assert saved[0]["train_seconds"] > 0 and saved[0]["cpu_seconds_per_step"] > 0
    written = (run / "nerfstudio_models/step-000000001.ckpt").stat().st_mtime_ns
    _, record = train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    assert record["finished"] == "max_steps" and record["history"][0]["psnr"] is not None
    assert record["history"][0]["train_seconds"] == saved[0]["train_seconds"]
    assert (run / "nerfstudio_models/step-000000001.ckpt").stat().st_mtime_ns == written, "nothing retrained"


def test_a_fixed_step_run_never_trains_into_a_run_trained_to_plateau(tmp_path: Path):
    """Both kinds of benchmark run name their folders alike: a fixed-step training reaching a plateau run's
    folder (the same suite without --plateau) is refused, and the plateau run and its record stay as they were."""
    from eugen_nerf.bench.training import train_in_process

    run = tmp_path / SCENE.name / "dense-nerf" / "same"
    train_to_plateau(
        tiny_config(), SCENE, tmp_path, PlateauRule(eval_every=2, min_steps=10, max_steps=2), "same"
    )
    before = {p.name: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    for reuse in (True, False):
        with pytest.raises(InputError, match="trained to plateau"):
            train_in_process(tiny_config(), SCENE, 2, tmp_path, "same", reuse=reuse)
    assert {p.name: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()} == before


def test_a_run_of_a_scene_that_changed_since_is_refused(tmp_path: Path):
    """A plateau run is continued by the scene's path: once the scene's content changed, the run (trained on the
    old one) is refused with one line, its record untouched."""
    scene = tmp_path / "data" / SCENE.name
    shutil.copytree(SCENE, scene)
    rule = PlateauRule(eval_every=2, min_steps=10, max_steps=2)
    config_path, record = train_to_plateau(tiny_config(), scene, tmp_path, rule)
    assert record["scene_hash"]
    written = (config_path.parent / PLATEAU_RECORD).stat().st_mtime_ns
    train_to_plateau(tiny_config(), scene, tmp_path, rule)  # unchanged: the finished run is read back
    assert (config_path.parent / PLATEAU_RECORD).stat().st_mtime_ns == written, "its record left as it was"
    image = min(scene.rglob("*.png"))
    image.write_bytes(image.read_bytes() + b"\0")
    saved = (config_path.parent / PLATEAU_RECORD).read_bytes()
    with pytest.raises(InputError, match="another version"):
        train_to_plateau(tiny_config(), scene, tmp_path, rule)
    assert (config_path.parent / PLATEAU_RECORD).read_bytes() == saved


def test_a_folder_holding_something_else_is_refused(tmp_path: Path):
    run = tmp_path / SCENE.name / "dense-nerf" / "plateau"
    run.mkdir(parents=True)
    (run / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a run of this configuration"):
        train_to_plateau(tiny_config(), SCENE, tmp_path, PlateauRule(eval_every=2, min_steps=10, max_steps=2))
    assert (run / "notes.txt").read_text() == "mine"


def test_a_run_another_process_is_training_is_refused_until_it_lets_go(tmp_path: Path):
    """Two processes reaching one run (a suite started twice, or two suites sharing a training folder) would
    both write its checkpoints and record: the second stops with one line and writes nothing."""
    from eugen_nerf.bench.training import training_lock

    run = tmp_path / SCENE.name / "dense-nerf" / "plateau"
    rule = PlateauRule(eval_every=2, min_steps=10, max_steps=2)
    with training_lock(run):  # as the process training the run holds it (a lock of its own open file)
        with pytest.raises(InputError, match="another process is training"):
            train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
        assert not run.exists()
    _, record = train_to_plateau(tiny_config(), SCENE, tmp_path, rule)  # let go: it trains
    assert [h["step"] for h in record["history"]] == [2] and record["history"][0]["psnr"] is not None


def test_a_run_stopped_before_its_first_checkpoint_starts_again(tmp_path: Path):
    rule = PlateauRule(eval_every=2, min_steps=100, max_steps=2)
    config_path, _ = train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    # as a run killed during its first chunk leaves it: its config.yml, no checkpoint and no record
    shutil.rmtree(config_path.parent / "nerfstudio_models")
    (config_path.parent / PLATEAU_RECORD).unlink()
    _, record = train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    assert [h["step"] for h in record["history"]] == [2] and record["history"][0]["psnr"] is not None
    assert (config_path.parent / "nerfstudio_models/step-000000001.ckpt").is_file()
    # the same leftovers of another model are still refused
    shutil.rmtree(config_path.parent / "nerfstudio_models")
    (config_path.parent / PLATEAU_RECORD).unlink()
    other_width = tiny_config()
    other_width.pipeline.model.trunk_width = 24
    with pytest.raises(InputError, match="not a run of this configuration"):
        train_to_plateau(other_width, SCENE, tmp_path, rule)


def test_a_checkpoint_off_the_schedule_is_continued_to_the_next_scored_step(tmp_path: Path):
    rule = PlateauRule(eval_every=2, min_steps=100, max_steps=2)
    config_path, _ = train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    models = config_path.parent / "nerfstudio_models"
    assert sorted(p.name for p in models.iterdir()) == ["step-000000001.ckpt"], "one checkpoint a chunk"
    # a run stopped after a checkpoint between scored steps (3 steps done): as a mid-chunk save leaves it
    state = torch.load(models / "step-000000001.ckpt", map_location="cpu")
    state["step"] = 2
    torch.save(state, models / "step-000000002.ckpt")
    (models / "step-000000001.ckpt").unlink()

    _, record = train_to_plateau(
        tiny_config(), SCENE, tmp_path, PlateauRule(eval_every=2, min_steps=100, max_steps=6)
    )
    assert [h["step"] for h in record["history"]] == [2, 4, 6], "scored on the schedule only"
    assert all(h["psnr"] is not None for h in record["history"])
    assert sorted(p.name for p in models.iterdir()) == ["step-000000005.ckpt"]
    assert torch.load(models / "step-000000005.ckpt", map_location="cpu")["step"] == 5


def signal_during_steps(monkeypatch, signals: dict[int, int]) -> None:
    """Send this process ``signals[step]`` signals (SIGTERM, as a deadline's ``kill`` does) in the middle of
    training step ``step``, after its loss and before it ends."""
    from eugen_nerf.methods.trainer import SceneTrainer

    original = SceneTrainer.train_iteration

    def signalled(self, step: int):
        out = original(self, step)
        for _ in range(signals.get(step, 0)):
            os.kill(os.getpid(), signal.SIGTERM)
        return out

    monkeypatch.setattr(SceneTrainer, "train_iteration", signalled)


def test_a_run_stopped_by_a_signal_saves_its_last_step_and_loses_no_training(
    tmp_path: Path, monkeypatch, capsys
):
    rule = PlateauRule(eval_every=4, min_steps=100, max_steps=4)
    run = tmp_path / SCENE.name / "dense-nerf" / "plateau"
    models = run / "nerfstudio_models"

    # a second signal during the step stops at once: that step is not saved (none is, before the first)
    signal_during_steps(monkeypatch, {1: 2})
    with pytest.raises(TrainingStopped) as stop:
        train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    assert stop.value.code == 130 and stop.value.step is None
    assert not list(models.glob("*.ckpt")) and not (run / PLATEAU_RECORD).exists()
    assert "; no checkpoint was written" in capsys.readouterr().err

    # one signal: the step finishes and is saved (another signal during that save is ignored), and the record
    # keeps what the stopped part cost
    monkeypatch.undo()
    signal_during_steps(monkeypatch, {2: 1})
    from eugen_nerf.methods.trainer import SceneTrainer

    save = SceneTrainer.save_checkpoint

    def save_while_signalled(self, step: int) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        save(self, step)

    monkeypatch.setattr(SceneTrainer, "save_checkpoint", save_while_signalled)
    with pytest.raises(TrainingStopped) as stop:
        train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    assert stop.value.code == 130 and stop.value.step == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "interrupted (SIGTERM)" in line]
    assert "at step 2; saved step 2 as " in line and line.endswith("(run the same command again to continue)")
    assert sorted(p.name for p in models.iterdir()) == ["step-000000002.ckpt"]
    assert torch.load(models / "step-000000002.ckpt", map_location="cpu")["step"] == 2
    record = json.loads((run / PLATEAU_RECORD).read_text())
    assert record["history"] == [] and record["stopped"]["step"] == 3 and record["stopped"]["steps"] == 3
    assert record["stopped"]["train_seconds"] > 0 and record["stopped"]["cpu_seconds"] > 0

    # the same call continues with the chunk's last step alone, and the chunk counts both parts
    monkeypatch.undo()
    _, finished = train_to_plateau(tiny_config(), SCENE, tmp_path, rule)
    assert [h["step"] for h in finished["history"]] == [4] and "stopped" not in finished
    assert finished["history"][0]["train_seconds"] > record["stopped"]["train_seconds"]
    assert finished["history"][0]["psnr"] is not None
    assert sorted(p.name for p in models.iterdir()) == ["step-000000003.ckpt"]
    assert torch.load(models / "step-000000003.ckpt", map_location="cpu")["step"] == 3


def test_time_to_the_dense_final_psnr_counts_steps_and_cpu_seconds_per_step():
    from eugen_nerf.bench.suites.methods import time_to_dense_final

    def curve(*rows):
        return [
            {"step": s, "psnr": p, "train_seconds": w, **({"cpu_seconds_per_step": c} if c else {})}
            for s, p, w, c in rows
        ]

    dense = curve((500, 20.0, 900.0, 2.0), (1000, 22.0, 2000.0, 2.2), (1500, 22.0, 3000.0, 2.4))
    curves = {
        "dense": dense,
        "eugen": curve((500, 21.0, 700.0, 1.0), (1000, 22.5, 1300.0, 1.0), (1500, 23.0, 1900.0, 1.0)),
        "narrow": curve((500, 19.0, 500.0, 1.0), (1000, 21.9, 1000.0, 1.0), (1500, 21.9, 1500.0, 1.0)),
        "unknown_cpu": curve((500, 22.1, 800.0, None)),
    }
    timing = time_to_dense_final(curves, dense)
    assert timing["dense_final_validation_psnr"] == 22.0
    assert timing["steps"] == {"dense": 1000, "eugen": 1000, "narrow": None, "unknown_cpu": 500}
    assert timing["seconds"] == {"dense": 2000.0, "eugen": 1300.0, "narrow": None, "unknown_cpu": 800.0}
    assert timing["cpu_seconds"]["dense"] == pytest.approx(1000 * 2.2)  # steps x median CPU s/step
    assert timing["cpu_seconds"]["eugen"] == pytest.approx(1000.0)
    assert timing["cpu_seconds"]["narrow"] is None and timing["cpu_seconds"]["unknown_cpu"] is None


def test_train_only_trains_a_variant_behind_the_dense_twin_never_past_it(tmp_path: Path, monkeypatch, capsys):
    """``--train-only`` lets a second process train EUGen while another trains the dense twin: EUGen goes as
    far as the dense twin has been scored, waits while it trains, and ends at its final steps; a run past an
    unfinished dense twin waits for it, and one that trained other steps than the finished dense twin is
    refused."""
    from eugen_nerf.bench.suites import methods

    args = methods.BenchMethods(
        scene=SCENE,
        families=("nerf",),
        variants=("eugen",),
        plateau=True,
        train_only=True,
        steps=6,
        eval_every=2,
        min_steps=2,
        output_dir=tmp_path,
    )
    configs = methods.variants("nerf", False, False, {})
    dense_run = tmp_path / SCENE.name / "dense-nerf" / "dense-nerf"
    eugen_run = tmp_path / SCENE.name / "eugen-nerf" / methods.timestamp(configs["eugen"][0])

    def dense_scored(*steps: int, finished: str | None = None) -> None:
        """What the dense twin's own process leaves: its record, scored at ``steps``."""
        dense_run.mkdir(parents=True, exist_ok=True)
        history = [{"step": step, "psnr": 10.0 + step, "train_seconds": 1.0} for step in steps]
        (dense_run / PLATEAU_RECORD).write_text(json.dumps({"finished": finished, "history": history}))

    # the dense twin trains elsewhere: nothing scored, then 2 steps, then it plateaus at 4
    progress = iter([lambda: dense_scored(2), lambda: dense_scored(2, 4, finished="plateau")])
    waits = []
    monkeypatch.setattr(methods.time, "sleep", lambda seconds: (waits.append(seconds), next(progress)()))
    assert methods.dense_progress(args, configs) == (0, False)
    methods.train_only(args)
    assert len(waits) == 2 and all(w == methods.FOLLOW_POLL_SECONDS for w in waits)
    assert "waiting for the dense twin's run" in capsys.readouterr().out
    record = json.loads((eugen_run / PLATEAU_RECORD).read_text())
    assert [h["step"] for h in record["history"]] == [2, 4] and record["finished"] == "max_steps"
    assert methods.variant_steps(args, *configs["eugen"], 0) == 4
    assert sorted(p.name for p in dense_run.iterdir()) == [PLATEAU_RECORD], "the dense twin is not trained"

    # a run past an unfinished dense twin is left alone until the dense twin has caught up
    dense_scored(2)
    progress = iter([lambda: dense_scored(2, 4, finished="max_steps")])
    methods.train_only(args)
    assert json.loads((eugen_run / PLATEAU_RECORD).read_text())["history"] == record["history"]

    # the dense twin finished at 2 steps: the EUGen run, at 4, is refused
    dense_scored(2, finished="plateau")
    with pytest.raises(InputError, match="trained 4 steps and the dense twin 2"):
        methods.train_only(args)


def test_runs_off_the_compared_curves_are_scored_on_the_coarser_schedule_once_the_dense_twin_has_finished(
    tmp_path: Path, monkeypatch
):
    """``--eval-every-others``: EUGen's first-seed run follows the dense twin on its schedule; its second seed
    (and every baseline) waits for the dense twin's final steps, then trains to them scored on the coarser
    schedule and at its last step. A run continued on another schedule than it started with is refused."""
    from eugen_nerf.bench.suites import methods

    args = methods.BenchMethods(
        scene=SCENE,
        families=("nerf",),
        variants=("eugen",),
        seeds=[0, 1],
        plateau=True,
        train_only=True,
        steps=8,
        eval_every=2,
        eval_every_others=4,
        min_steps=2,
        output_dir=tmp_path,
    )
    assert [methods.eval_schedule(args, kind, seed) for kind, seed in [("eugen", 0), ("dense", 0)]] == [2, 2]
    assert [methods.eval_schedule(args, kind, 0) for kind in ("narrowed", "lowrank", "snnk")] == [4, 4, 4]
    assert [methods.eval_schedule(args, kind, 1) for kind in ("eugen", "dense")] == [4, 4]
    configs = methods.variants("nerf", False, False, {})
    label = configs["eugen"][0]
    dense_run = tmp_path / SCENE.name / "dense-nerf" / "dense-nerf"
    runs = [tmp_path / SCENE.name / "eugen-nerf" / methods.timestamp(label, seed) for seed in (0, 1)]

    def dense_scored(*steps: int, finished: str | None = None) -> None:
        dense_run.mkdir(parents=True, exist_ok=True)
        history = [{"step": step, "psnr": 10.0 + step, "train_seconds": 1.0} for step in steps]
        (dense_run / PLATEAU_RECORD).write_text(json.dumps({"finished": finished, "history": history}))

    seen = []

    def dense_goes_on(seconds: float) -> None:
        seen.append([methods.variant_steps(args, *configs["eugen"], seed) for seed in (0, 1)])
        dense_scored(2, 4, 6, 8, finished="plateau")

    dense_scored(2)
    monkeypatch.setattr(methods.time, "sleep", dense_goes_on)
    methods.train_only(args)
    assert seen == [[2, 0]], "while the dense twin trains, only the run on its schedule follows it"
    steps = [[h["step"] for h in json.loads((run / PLATEAU_RECORD).read_text())["history"]] for run in runs]
    assert steps == [[2, 4, 6, 8], [4, 8]]

    # the second seed's run, asked to continue on the dense twin's schedule, is refused
    fine = copy.deepcopy(args)
    fine.eval_every_others, fine.steps = None, 10
    dense_scored(2, 4, 6, 8, 10, finished="plateau")
    with pytest.raises(InputError, match="another configuration, seed or plateau rule"):
        methods.train_only(fine)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--eval-every-others", "0"], "--eval-every and --eval-every-others must be >= 1"),
        (["--eval-every", "0"], "--eval-every and --eval-every-others must be >= 1"),
        (["--steps", "0"], "--steps and --repeats must be >= 1"),
        (["--variants", "wide"], "unknown --variants wide"),
        (["--variants", "lowrank"], "--variants lowrank and snnk need --baselines"),
        (["--plateau", "--retrain"], "--retrain does not apply to --plateau runs"),
        (["--seeds", "0", "1", "0"], "must not repeat a seed"),
        (["--baseline-seeds", "2", "2"], "must not repeat a seed"),
    ],
)
def test_the_methods_suite_refuses_unusable_values_in_one_line_before_writing(
    tmp_path: Path, monkeypatch, capsys, argv, message
):
    from eugen_nerf.bench.suites import methods

    monkeypatch.setattr(
        sys,
        "argv",
        ["methods", "--scene", str(SCENE), "--output-dir", str(tmp_path / "work"), *argv],
    )
    with pytest.raises(SystemExit) as stop:
        methods.main()
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not (tmp_path / "work").exists()


def test_the_dense_twin_narrowed_to_eugens_speed_is_timed_by_the_suites_clock_and_kept(
    tmp_path: Path, monkeypatch
):
    """``narrowed-speed``: the width is found by :func:`closest_in_time` on the suite's ``--clock`` (CPU seconds
    by default: a render's cost whatever else runs), kept with the clock in the cache file, and reused."""
    from eugen_nerf.bench.suites import methods
    from eugen_nerf.eval import timing

    calls = []

    def fake_closest(reference, candidates, device, warmup=1, repeats=5, sizes=None, clock="wall"):
        calls.append(clock)
        assert set(sizes) == set(candidates)
        return "64", {name: timing.Timing([1.0]) for name in ["reference", *candidates]}

    monkeypatch.setattr(timing, "closest_in_time", fake_closest)
    args = methods.BenchMethods(scene=SCENE, families=("nerf",), output_dir=tmp_path, baselines=True)
    source = methods.speed_source(args, ("eugen", "dense", "narrowed-speed"))
    assert source == (SCENE, tmp_path / "narrowed_to_speed.json", "cpu")
    assert methods.speed_source(args, ("eugen", "dense")) is None
    for _ in range(2):
        label, _ = methods.variants("nerf", False, True, {}, source)["narrowed-speed"]
    assert calls == ["cpu"], "timed once, then read from the cache"
    kept = json.loads(source[1].read_text())
    assert [entry["width"] for entry in kept.values()] == [64] and [e["clock"] for e in kept.values()] == [
        "cpu"
    ]
    assert "=64, EUGen's render speed" in label


def test_one_run_stands_for_the_twin_narrowed_to_eugens_parameters_and_to_its_speed_when_widths_agree(
    tmp_path: Path, monkeypatch
):
    """Zip-NeRF's view MLP narrowed to EUGen's parameters is 96 wide; when 96 is also the width that renders at
    EUGen's speed, ``narrowed-speed`` is the same run (label and configuration), so it trains once."""
    from eugen_nerf.bench.suites import methods
    from eugen_nerf.eval import timing

    configs = methods.variants("zipnerf", False, True, {})
    width = configs["narrowed"][1].pipeline.model.hidden_dim_color
    chosen = iter([str(width), str(width + 16)])

    def fake_closest(reference, candidates, device, warmup=1, repeats=5, sizes=None, clock="wall"):
        return next(chosen), {name: timing.Timing([1.0]) for name in ["reference", *candidates]}

    monkeypatch.setattr(timing, "closest_in_time", fake_closest)
    source = (SCENE, tmp_path / "same.json", "cpu")
    same = methods.variants("zipnerf", False, True, {}, source)
    assert same["narrowed-speed"] is same["narrowed"]
    other = methods.variants("zipnerf", False, True, {}, (SCENE, tmp_path / "other.json", "cpu"))
    assert other["narrowed-speed"][0] != other["narrowed"][0]
    assert other["narrowed-speed"][1].pipeline.model.hidden_dim_color == width + 16


def test_a_stopped_fixed_step_run_continues_from_the_step_its_stop_saved(tmp_path: Path, monkeypatch):
    """``train_in_process`` (the suites without --plateau): a SIGTERM saves the last finished step, and the same
    call continues from it instead of training from step 0 over the saved checkpoint."""
    from eugen_nerf.bench.training import RECORD, train_in_process

    run = tmp_path / SCENE.name / "dense-nerf" / "fixed"
    models = run / "nerfstudio_models"
    signal_during_steps(monkeypatch, {1: 1})
    with pytest.raises(TrainingStopped) as stop:
        train_in_process(tiny_config(), SCENE, 4, tmp_path, "fixed", reuse=True)
    assert stop.value.step == 1
    stopped = json.loads((run / RECORD).read_text())["stopped"]
    assert stopped["step"] == 2 and stopped["seconds"] > 0
    saved = torch.load(models / "step-000000001.ckpt", map_location="cpu")["pipeline"]

    monkeypatch.undo()
    from eugen_nerf.methods.trainer import SceneTrainer

    started: list[int] = []
    original = SceneTrainer.train_iteration

    def recording(self, step: int):
        started.append(step)
        return original(self, step)

    monkeypatch.setattr(SceneTrainer, "train_iteration", recording)
    path, seconds_per_step = train_in_process(tiny_config(), SCENE, 4, tmp_path, "fixed", reuse=True)
    assert started == [2, 3], "the continued run trains the steps after the saved one, and only those"
    assert sorted(p.name for p in models.iterdir()) == ["step-000000003.ckpt"]
    state = torch.load(models / "step-000000003.ckpt", map_location="cpu")
    assert state["step"] == 3 and any(not torch.equal(saved[k], state["pipeline"][k]) for k in saved)
    record = json.loads((run / RECORD).read_text())
    assert "stopped" not in record and seconds_per_step == record["seconds_per_step"] > stopped["seconds"] / 4
    # finished: the same call trains nothing
    started.clear()
    assert train_in_process(tiny_config(), SCENE, 4, tmp_path, "fixed", reuse=True)[0] == path and not started
