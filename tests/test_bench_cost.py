"""What a suite's training cost, read from its published report: every run's curve counted once, CPU seconds
where a chunk kept them, wall seconds where it did not, and the index page says it per suite."""

from __future__ import annotations

import json

import pytest

from eugen_nerf.bench.cost import RunCost, TrainingCost, curve_cost, run_costs
from eugen_nerf.bench.index import folder_cost
from eugen_nerf.inputs.errors import InputError


def chunk(step, seconds, cpu=None):
    return {
        "step": step,
        "psnr": 20.0,
        "train_seconds": seconds,
        **({"cpu_seconds_per_step": cpu} if cpu else {}),
    }


def test_a_chunk_costs_its_cpu_seconds_a_step_times_its_steps_else_its_wall_seconds_else_an_estimate():
    # 500 steps at 0.2 CPU-s, then 500 with only wall time (400 s), then a last chunk of 200 steps at 0.3
    run = curve_cost([chunk(500, 150.0, 0.2), chunk(1000, 550.0), chunk(1200, 620.0, 0.3)])
    assert (run.seconds, run.chunks, run.wall_chunks, run.estimated_chunks) == pytest.approx((560.0, 3, 1, 0))
    # steps that kept no time (before the curve's first record; a resumed chunk whose wall time did not
    # advance) cost the run's median CPU seconds a step
    run = curve_cost([chunk(1000, None), chunk(1500, 10.0, 0.4), chunk(2000, 10.0), chunk(2500, 20.0, 0.2)])
    assert run.seconds == pytest.approx(0.3 * 1500 + 0.4 * 500 + 0.2 * 500)
    assert (run.wall_chunks, run.estimated_chunks) == (0, 2)
    # without CPU records, at the median wall seconds a step
    run = curve_cost([chunk(1000, None), chunk(1500, 100.0), chunk(2000, 300.0)])
    assert run.seconds == pytest.approx(300.0 + 1000 * 0.3) and (run.wall_chunks, run.estimated_chunks) == (
        2,
        1,
    )


def test_every_run_and_every_seed_counts_once():
    report = {
        "families": {
            "zipnerf": {
                "runs": {
                    "eugen": {
                        "validation_curve": [chunk(500, 1.0, 1.0)],
                        "per_seed": [
                            {"seed": 0, "psnr": 20.0},  # the first seed's curve is the row's
                            {"seed": 1, "psnr": 20.0, "validation_curve": [chunk(500, 1.0, 2.0)]},
                        ],
                    },
                    "dense": {"validation_curve": [chunk(500, 1.0, 4.0)]},
                }
            }
        },
        "siren": {"history": [[100, 20.0], [200, 21.0]]},  # a curve of scores, not of training chunks
    }
    assert [run.seconds for run in run_costs(report)] == [500.0, 1000.0, 2000.0]
    assert run_costs({"families": {}, "wall_seconds": 9.0}) == [], "a suite that trains nothing"


def test_a_report_that_sums_its_runs_or_times_them_by_the_step_is_read_as_it_says():
    isdf = {"cost": {"train_cpu_seconds_all_runs": 7200.0, "runs": 24}, "plateau": {"curve": [{"step": 100}]}}
    assert sum(run.seconds for run in run_costs(isdf)) == pytest.approx(7200.0) and len(run_costs(isdf)) == 24
    capture = {
        "steps": 800,
        "runs": {"blender": {"seconds_per_step": 2.0}, "colmap": {"seconds_per_step": 1.5}},
    }
    bunny = {
        "steps": 600,
        "runs": {"dense": {"0": {"seconds_per_step": 0.5}, "1": {"seconds_per_step": 0.5}}},
    }
    assert [run.seconds for run in run_costs(capture)] == [1600.0, 1200.0]
    assert [run.seconds for run in run_costs(bunny)] == [300.0, 300.0]
    assert all(run.wall_chunks == run.chunks == 1 for run in run_costs(capture) + run_costs(bunny))


def test_the_index_line_says_how_the_cost_was_counted_and_a_shared_run_counts_once(tmp_path):
    assert TrainingCost([RunCost(5400.0, 5), RunCost(5400.0, 5)]).describe() == (
        "Training cost: 3.0 CPU-hours over 2 runs."
    )
    assert "(1 of 10 chunks counted at its wall time)" in TrainingCost([RunCost(3600.0, 10, 1)]).describe()
    assert TrainingCost([RunCost(1800.0, 4, 3, 1)]).describe() == (
        "Training cost: 0.5 hours over 1 run, wall clock (no CPU-time record; 1 of 4 chunks kept no time: "
        "estimated at the run's median cost a step)."
    )
    teacher = [chunk(500, 1.0, 3.6)]
    for name, curves in (("a-teacher", [teacher]), ("b-fields", [teacher, [chunk(500, 1.0, 7.2)]])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "r.json").write_text(
            json.dumps({"history": curves[0], "more": {"history": curves[-1]}})
        )
    counted = {}
    first = folder_cost(tmp_path / "a-teacher", counted)
    second = folder_cost(tmp_path / "b-fields", counted)
    assert first.seconds == 1800.0 and len(first.runs) == 1 and not first.shared
    assert second.seconds == 3600.0 and len(second.runs) == 1 and second.shared == {"a-teacher": 1}
    assert second.describe().endswith("It uses 1 run trained and counted under `a-teacher`.")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "c.json").write_text("{")
    with pytest.raises(InputError, match="c.json is not valid JSON"):
        folder_cost(tmp_path / "c")


def test_the_methods_suite_keeps_every_seeds_curve_so_its_cost_counts_every_run(tmp_path, monkeypatch):
    """Two seeds of EUGen and the dense twin (training and scoring replaced by records): the report keeps the
    first seed's curve on the row and each later seed's on its entry, and the cost counts all four runs."""
    from eugen_nerf.bench.suites import methods

    cpu = {("dense", 0): 0.4, ("dense", 1): 0.5, ("eugen", 0): 0.3, ("eugen", 1): 0.2}

    def record(kind, seed):
        return {
            "history": [chunk(2, 1.0, cpu[kind, seed]), chunk(4, 2.0, cpu[kind, seed])],
            "finished": "max_steps",
        }

    def train_dense(args, configs):
        return tmp_path / "dense0/config.yml", {**record("dense", 0), "rule": {}}

    def train_variant(args, kind, label, config, seed, steps):
        return tmp_path / f"{kind}{seed}/config.yml", record(kind, seed), 0.5

    scores = {"psnr": 20.0, "ssim": 0.5, "lpips": 0.3}
    monkeypatch.setattr(methods, "train_dense_to_plateau", train_dense)
    monkeypatch.setattr(methods, "train_variant", train_variant)
    monkeypatch.setattr(methods, "measure", lambda path, repeats: {**scores, "fps": 1.0, "parameters": 10})
    monkeypatch.setattr(methods, "quality", lambda path: dict(scores))
    monkeypatch.setattr(methods, "provenance", lambda scene: {})
    monkeypatch.setattr(methods, "plot", lambda report, path: None)
    monkeypatch.setattr(methods, "side_by_side", lambda *args, **kwargs: {})
    out = tmp_path / "fields.json"
    argv = [
        "--scene",
        "scenes/bunny32",
        "--families",
        "zipnerf",
        "--plateau",
        "--steps",
        "4",
        "--eval-every",
        "2",
    ]
    argv += ["--min-steps", "2", "--seeds", "0", "1", "--variants", "eugen", "dense", "--out", str(out)]
    monkeypatch.setattr("sys.argv", ["methods", *argv])
    methods.main()
    runs = json.loads(out.read_text())["families"]["zipnerf"]["runs"]
    for row in runs.values():
        assert "validation_curve" in row and "validation_curve" not in row["per_seed"][0]
        assert [len(entry.get("validation_curve", [])) for entry in row["per_seed"]] == [0, 2]
    runs = run_costs(json.loads(out.read_text()))
    assert len(runs) == 4 and sum(run.seconds for run in runs) == pytest.approx(4 * sum(cpu.values()))
