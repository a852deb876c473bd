"""The iSDF suite's protocol (``eugen_nerf.bench.suites.isdf``): the plateau rule on the SDF error, a run
stopped anywhere continues exactly where it stopped, a finished run is reused, a run of another configuration
is refused, and nothing non-finite or incomplete is published. Tiny fields on the shipped bunny_rgbd; the
mesh metrics are stubbed (they are tested in test_isdf.py), so no test depends on a trained surface."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from eugen_nerf.bench.suites import isdf as suite
from eugen_nerf.fields.isdf import dense_isdf_config
from eugen_nerf.inputs.errors import InputError, NumericalError
from eugen_nerf.isdf.evaluate import EvaluationConfig

ROOT = Path(__file__).resolve().parents[1]
SCENE = ROOT / "scenes/bunny_rgbd"
TINY = dense_isdf_config(16)

pytestmark = pytest.mark.usefixtures("one_thread")


def errors(*pairs: tuple[int, float]) -> list[dict]:
    return [{"step": step, "sdf_error": error} for step, error in pairs]


def test_the_dense_field_plateaus_when_its_sdf_error_falls_by_less_than_two_percent():
    config = suite.BenchISDF(min_gain=0.02, window=0.2, smooth=1, settle_every=100)
    rule = suite.plateau_rule(config, min_steps=0, max_steps=5000)
    assert rule.min_gain_db == pytest.approx(-20 * math.log10(0.98))  # 0.175 dB
    falling = errors((160, 0.10), (260, 0.09), (360, 0.08), (460, 0.07))
    assert suite.status(rule, falling) is None  # 0.07 against 0.08 (the last at or before 80% of 460)
    slow = [*falling, *errors((560, 0.069), (660, 0.0685), (760, 0.068), (860, 0.0676))]
    # 860 against 660 (the last at or before 688): 0.0676 / 0.0685 is a 1.3% fall
    assert suite.status(rule, slow) == "plateau"
    still = [*falling, *errors((560, 0.066), (660, 0.062), (760, 0.058), (860, 0.055))]
    assert suite.status(rule, still) is None  # 11% over the last fifth
    assert suite.status(budget(config, 860), still) == "max_steps"
    assert suite.status(suite.plateau_rule(config, 2000, 5000), slow) is None, "no plateau before min_steps"
    # one high last score does not end training: the mean (in dB) of the last two scores is compared
    bump = [*falling, *errors((560, 0.066), (660, 0.062), (760, 0.058), (860, 0.0615))]
    assert suite.status(rule, bump) == "plateau"  # 0.0615 against 0.062 alone
    assert suite.status(suite.plateau_rule(replace(config, smooth=2), 0, 5000), bump) is None


def tiny_config(work: Path, **changes) -> suite.BenchISDF:
    settings = dict(
        data=SCENE,
        output=work / "report",
        mesh_dir=work / "work",
        seeds=[0],
        frame_stride=40,
        steps_per_frame=1,
        settle_every=1,
        min_gain=0.02,
        smooth=1,
        baselines=False,
        evaluation=EvaluationConfig(num_rays=200, samples_per_ray=2),
    )
    return suite.BenchISDF(**{**settings, **changes})


@pytest.fixture
def no_mesh(monkeypatch):
    """Mesh metrics stubbed: a field trained a few steps may have no surface yet."""
    calls = []

    def evaluate_field(sdf, *args, **kwargs):
        export = kwargs.get("export_to")
        calls.append(export)
        if export is not None:
            export.parent.mkdir(parents=True, exist_ok=True)
            export.write_text("mesh")
        return {key: 0.5 for key in suite.QUALITY_KEYS}

    monkeypatch.setattr(suite, "evaluate_field", evaluate_field)
    return calls


def budget(config: suite.BenchISDF, steps: int):
    """A fixed budget (what every run but the reference trains to)."""
    return suite.plateau_rule(config, steps, steps)


def weights(config: suite.BenchISDF, context: suite.Context, seed: int = 0) -> dict:
    return suite.load_trainer("tiny", TINY, seed, context).field.state_dict()


def test_a_stopped_run_continues_exactly_where_it_stopped(tmp_path: Path, no_mesh):
    config = tiny_config(tmp_path / "a")
    context = suite.Context.load(config)
    stream_steps = len(range(0, len(context.frames), config.frame_stride)) * config.steps_per_frame
    first = suite.train_run("tiny", TINY, 0, budget(config, stream_steps + 2), context)
    assert first["finished"] == "max_steps" and first["result"]["steps"] == stream_steps + 2
    assert [h["step"] for h in first["history"]] == [stream_steps, stream_steps + 1, stream_steps + 2]
    continued = suite.train_run("tiny", TINY, 0, budget(config, stream_steps + 4), context)
    assert [h["step"] for h in continued["history"]] == [stream_steps + i for i in range(5)]
    assert continued["history"][:3] == first["history"], "the earlier scores are kept, not retrained"

    # the same run without the stop: identical weights and scores
    straight_config = tiny_config(tmp_path / "b")
    straight_context = suite.Context.load(straight_config)
    straight = suite.train_run("tiny", TINY, 0, budget(straight_config, stream_steps + 4), straight_context)
    assert [h["sdf_error"] for h in straight["history"]] == [h["sdf_error"] for h in continued["history"]]
    resumed, uninterrupted = weights(config, context), weights(straight_config, straight_context)
    assert all(torch.equal(resumed[k], uninterrupted[k]) for k in resumed)


def test_a_stop_between_saving_the_state_and_the_record_is_scored_on_the_next_call(tmp_path: Path, no_mesh):
    config = tiny_config(tmp_path)
    context = suite.Context.load(config)
    record = suite.train_run("tiny", TINY, 0, budget(config, 8), context)
    folder = suite.run_dir(config, "tiny", 0)
    # the record as it was one chunk earlier (the state already saved past it)
    stale = {**record, "history": record["history"][:-1], "finished": None, "result": None}
    (folder / suite.RECORD).write_text(json.dumps(stale))
    again = suite.train_run("tiny", TINY, 0, budget(config, 8), context)
    assert [h["step"] for h in again["history"]] == [h["step"] for h in record["history"]]
    assert again["history"][-1]["sdf_error"] == pytest.approx(record["history"][-1]["sdf_error"])


def test_a_finished_run_is_reused_and_another_configuration_is_refused(tmp_path: Path, no_mesh):
    config = tiny_config(tmp_path)
    context = suite.Context.load(config)
    rule = budget(config, 6)
    record = suite.train_run("tiny", TINY, 0, rule, context)
    state = suite.run_dir(config, "tiny", 0) / suite.STATE
    written = state.stat().st_mtime_ns
    evaluations = len(no_mesh)
    assert suite.train_run("tiny", TINY, 0, rule, context) == record
    assert state.stat().st_mtime_ns == written, "a finished run is not trained again"
    assert len(no_mesh) == evaluations, "nor scored again"

    for changed in (
        tiny_config(tmp_path, steps_per_frame=2),  # another stream
        tiny_config(tmp_path, min_gain=0.05),  # another schedule
        replace(tiny_config(tmp_path), evaluation=EvaluationConfig(num_rays=300, samples_per_ray=2)),
    ):
        with pytest.raises(InputError, match="another configuration"):
            suite.train_run("tiny", TINY, 0, rule, suite.Context.load(changed))
    with pytest.raises(InputError, match="another configuration"):  # another field under the same name
        suite.train_run("tiny", dense_isdf_config(24), 0, rule, context)
    with pytest.raises(InputError, match="more than"):  # a smaller budget cannot be met by a longer run
        suite.train_run("tiny", TINY, 0, budget(config, 5), context)


def test_a_larger_budget_continues_a_finished_run(tmp_path: Path, no_mesh):
    config = tiny_config(tmp_path)
    context = suite.Context.load(config)
    suite.train_run("tiny", TINY, 0, budget(config, 5), context)
    longer = suite.train_run("tiny", TINY, 0, budget(config, 7), context)
    assert longer["result"]["steps"] == 7 and longer["history"][-1]["step"] == 7


def test_non_finite_metrics_are_refused(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(
        suite, "evaluate_field", lambda *a, **k: {key: float("nan") for key in suite.QUALITY_KEYS}
    )
    config = tiny_config(tmp_path)
    context = suite.Context.load(config)
    with pytest.raises(NumericalError, match="non-finite"):
        suite.train_run("tiny", TINY, 0, budget(config, 5), context)
    assert not (config.output / "isdf.json").exists()


def test_no_report_until_every_run_has_finished(tmp_path: Path, no_mesh, monkeypatch):
    config = tiny_config(tmp_path, max_steps=6)
    trained = []
    original = suite.train_run

    def stop_after_the_reference(name, sdf, seed, rule, context):
        if trained:
            raise KeyboardInterrupt
        trained.append(name)
        return original(name, dense_isdf_config(16), seed, rule, context)

    monkeypatch.setattr(suite, "train_run", stop_after_the_reference)
    with pytest.raises(KeyboardInterrupt):
        suite.main(config)
    assert trained == ["dense (iSDF, 256 wide)"]
    assert not (config.output / "isdf.json").exists() and not (config.output / "isdf.png").exists()
    assert (suite.run_dir(config, trained[0], 0) / suite.RECORD).is_file(), "the finished run is kept"


def test_a_run_being_trained_is_locked_against_a_second_process(tmp_path: Path):
    import fcntl

    with (
        suite.locked(tmp_path / "run"),
        open(tmp_path / "run" / "lock", "w") as other,
        pytest.raises(BlockingIOError),
    ):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(tmp_path / "run" / "lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released when training ends


def test_the_width_matched_to_eugens_speed_is_timed_once_and_kept(tmp_path: Path, monkeypatch):
    timed = []

    def narrowed_to_speed(eugen, repeats):
        timed.append(eugen)
        width = 96 + 16 * len(timed)  # another width each time it is timed
        return dense_isdf_config(width), {"width": width, "clock": "cpu", "threads": torch.get_num_threads()}

    monkeypatch.setattr(suite, "narrowed_to_speed", narrowed_to_speed)
    config = tiny_config(tmp_path, baselines=True)
    first = suite.variants(config)
    assert list(suite.variants(config)) == list(first) and len(timed) == 1
    assert "dense narrowed to EUGen's speed (width 112)" in first
    other = tiny_config(tmp_path, baselines=True, eugen=replace(config.eugen, num_features=32))
    assert "dense narrowed to EUGen's speed (width 128)" in suite.variants(other), (
        "another EUGen is timed again"
    )


def test_a_changed_eugen_default_keeps_the_dense_runs_but_not_the_eugen_ones():
    from eugen_nerf.bench.suites.isdf import same_run

    def key(layers, trainable):
        eugen = {"layers": layers, "num_features": 64, "trainable_projections": trainable}
        return {"scene": "h", "stream": {"sdf": {"width": 256, "eugen": eugen}, "seed": 0}, "evaluation": {}}

    assert same_run(key([], False), key([], True)), "the dense field has no EUGen layer to change"
    assert not same_run(key([1, 2, 3], False), key([1, 2, 3], True))
    assert not same_run(key([], False), key([1, 2, 3], False))
    other_scene = {**key([], True), "scene": "other"}
    assert not same_run(key([], True), other_scene)


def test_an_eugen_learning_rate_applies_to_eugen_variants_only_and_names_them():
    config = suite.BenchISDF(baselines=False, eugen_lr=0.00065)
    named = suite.variants(config)
    (dense_name, (dense, _)), (eugen_name, (eugen, _)) = list(named.items())[:2]
    assert "lr 0.00065" in eugen_name and "lr" not in dense_name
    assert suite.stream_config(eugen, 1, config).lr == 0.00065
    default = suite.StreamingConfig().lr
    assert suite.stream_config(dense, 1, config).lr == default
    assert suite.stream_config(eugen, 1, replace(config, eugen_lr=None)).lr == default
