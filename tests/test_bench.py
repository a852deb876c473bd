"""``eugen-bench``: the protocol is checked before anything runs, the generated tables (README, docs/) equal
what the JSON says, and a suite's --quick mode runs end to end."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from _scripts import run_main

from eugen_nerf.bench.protocol import load_protocol
from eugen_nerf.bench.tables import Tables, documents
from eugen_nerf.inputs.errors import InputError

ROOT = Path(__file__).resolve().parents[1]


def test_generated_tables_match_the_benchmark_json():
    tables = Tables(ROOT / "configs/bench/tables.yaml", ROOT)
    pages = documents(ROOT)
    assert pages[0] == ROOT / "README.md" and ROOT / "docs/viewer.md" in pages
    names = [name for page in pages for name in tables.names_in(page)]
    assert sorted(names) == sorted(tables.tables), "each spec'd table in one document, each marked one spec'd"
    assert tables.update_documents(pages, check=True) == [], "run `eugen-bench --tables`"


def test_a_table_lost_or_marked_twice_is_one_clear_error(tmp_path):
    for name in ("configs", "docs"):
        shutil.copytree(ROOT / name, tmp_path / name)
    readme = (ROOT / "README.md").read_text()
    renamed = readme.replace("<!-- bench-table: layers -->", "<!-- bench-table: nope -->")
    (tmp_path / "README.md").write_text(renamed)
    tables = Tables(tmp_path / "configs/bench/tables.yaml", tmp_path)
    with pytest.raises(InputError, match=r"not spec'd \['nope'\], spec'd but in no document \['layers'\]"):
        tables.update_documents(documents(tmp_path), check=True)
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "docs/page.md").write_text("<!-- bench-table: layers -->\n<!-- /bench-table -->\n")
    with pytest.raises(InputError, match=r"marked twice \['layers'\]"):
        tables.update_documents(documents(tmp_path), check=True)


def test_a_changed_figure_makes_its_tables_stale(tmp_path):
    for name in ("configs", "benchmarks", "docs"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("*.png"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    report = json.loads((tmp_path / "benchmarks/distill_paper.json").read_text())
    report["measured"]["fps_ratio"] += 1.0
    (tmp_path / "benchmarks/distill_paper.json").write_text(json.dumps(report))
    tables, pages = Tables(tmp_path / "configs/bench/tables.yaml", tmp_path), documents(tmp_path)
    assert tables.update_documents(pages, check=True) == ["distill-goals", "goals"]  # in docs/
    tables.update_documents(pages)
    assert f"{report['measured']['fps_ratio']:.2f}×" in (tmp_path / "docs/distillation.md").read_text()
    assert Tables(tmp_path / "configs/bench/tables.yaml", tmp_path).update_documents(pages, check=True) == []


def test_both_protocols_load_and_name_existing_scripts_and_paths():
    for device in ("cpu", "cuda"):
        protocol = load_protocol(ROOT / f"configs/bench/{device}.yaml", ROOT)
        assert protocol.device == device and protocol.suites
        for suite in protocol.suites.values():
            assert suite.script.is_file() and suite.outputs
            assert any("{quick_dir}" in a for a in suite.quick_args), (
                f"{suite.name}: --quick must not write benchmarks/"
            )


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s["suites"]["layers"].pop("args"), "missing the key(s) args"),
        (
            lambda s: s["suites"]["inference"].update(needs=["scenes/no-such-scene"]),
            "needs scenes/no-such-scene",
        ),
        (lambda s: s["suites"]["layers"].update(script="scripts/no_such.py"), "does not exist"),
        (lambda s: s.update(device="tpu"), "device must be"),
    ],
)
def test_bad_protocol_is_one_clear_error(tmp_path, edit, message):
    protocol = yaml.safe_load((ROOT / "configs/bench/cpu.yaml").read_text())
    edit(protocol)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(protocol))
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_protocol(path, ROOT)


def test_seeds_define_one_suite_per_seed_with_the_seed_and_its_suffix_filled_in(tmp_path):
    path = tmp_path / "seeded.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "suites": {
                    "fit": {
                        "description": "a fit at seed {seed}",
                        "seeds": [0, 2],
                        "script": "scripts/bench_siren.py",
                        "args": ["--seed", "{seed}", "--output", "benchmarks/fit{seed_suffix}"],
                        "quick_args": ["--seed", "{seed}", "--output", "{quick_dir}"],
                        "outputs": ["benchmarks/fit{seed_suffix}/siren.json"],
                    }
                }
            }
        )
    )
    suites = load_protocol(path, ROOT).suites
    assert list(suites) == ["fit", "fit-seed2"]
    assert suites["fit"].args == ("--seed", "0", "--output", "benchmarks/fit")
    assert suites["fit-seed2"].args == ("--seed", "2", "--output", "benchmarks/fit_seed2")
    assert suites["fit-seed2"].quick_args == ("--seed", "2", "--output", "{quick_dir}")
    assert suites["fit-seed2"].outputs == (Path("benchmarks/fit_seed2/siren.json"),)
    assert suites["fit-seed2"].description == "a fit at seed 2"


def test_a_name_holding_the_seed_names_the_repeats_of_a_richer_first_run(tmp_path):
    """``fit`` measured several rates at seed 0; ``fit-seed{seed}`` repeats the best one at seeds 1 and 2."""
    repeat = {
        "description": "the best rate at seed {seed}",
        "seeds": [1, 2],
        "script": "scripts/bench_siren.py",
        "args": ["--seed", "{seed}", "--output", "benchmarks/fit{seed_suffix}"],
        "quick_args": ["{quick_dir}"],
        "outputs": ["benchmarks/fit{seed_suffix}/siren.json"],
    }
    first = {
        **{k: v for k, v in repeat.items() if k != "seeds"},
        "args": ["--rates", "2"],
        "outputs": ["benchmarks/fit/siren.json"],
    }
    path = tmp_path / "seeded.yaml"
    path.write_text(yaml.safe_dump({"suites": {"fit": first, "fit-seed{seed}": repeat}}))
    suites = load_protocol(path, ROOT).suites
    assert list(suites) == ["fit", "fit-seed1", "fit-seed2"]
    assert suites["fit"].args == ("--rates", "2")
    assert suites["fit-seed1"].args == ("--seed", "1", "--output", "benchmarks/fit_seed1")
    assert suites["fit-seed2"].description == "the best rate at seed 2"


@pytest.mark.parametrize(
    "seeds, extra, message",
    [
        ([1, 1], {}, "seeds lists a seed twice"),
        ([-1], {}, "seeds must be a list of integers >= 0"),
        ("0", {}, "seeds must be a list of integers >= 0"),
        ([0, 1], {"fit-seed1": None}, "the suite 'fit-seed1' is defined twice"),
    ],
)
def test_bad_seeds_are_one_clear_error(tmp_path, seeds, extra, message):
    entry = {
        "seeds": seeds,
        "script": "scripts/bench_siren.py",
        "args": [],
        "quick_args": ["{quick_dir}"],
        "outputs": ["benchmarks/fit{seed_suffix}.json"],
    }
    suites = {"fit": entry, **{name: {**entry, "seeds": [0]} for name in extra}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"suites": suites}))
    with pytest.raises(InputError, match=message):
        load_protocol(path, ROOT)


def run_bench(*args: str):
    return run_main("eugen_nerf.bench.cli", *args, module=True)


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path):
    result = run_bench("no-such-suite", "--quick", "--quick-dir", str(tmp_path / "q"))
    assert result.returncode == 2
    assert result.stdout.strip().splitlines() == [
        f"eugen-bench: error: unknown suite(s) 'no-such-suite' in {ROOT / 'configs/bench/cpu.yaml'}; known: "
        + ", ".join(load_protocol(ROOT / "configs/bench/cpu.yaml", ROOT).suites)
    ]
    assert not (tmp_path / "q").exists()
    import torch

    if not torch.cuda.is_available():
        result = run_bench("--device", "cuda")
        assert result.returncode == 2 and "no CUDA device" in result.stdout


def test_bench_zipnerf_unknown_method_is_one_line_and_writes_nothing(tmp_path):
    result = run_main(
        "bench_zipnerf.py",
        "--methods",
        "dense-zipnerf",
        "zipnerf-large",
        "--work-dir",
        tmp_path / "w",
        "--output",
        tmp_path / "z.json",
    )
    assert result.returncode == 2
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "error" in line]
    assert errors == [
        (
            "bench_zipnerf: error: --methods ['zipnerf-large']: choose among ['dense-zipnerf', "
            "'eugen-zipnerf', 'nerfacto', 'nerfacto (white background)', "
            "'nerfacto (white background, multiscale rays)']"
        )
    ]
    assert not any(tmp_path.iterdir())


def test_bench_siren_unknown_variant_is_one_line_and_writes_nothing(tmp_path):
    result = run_main(
        "bench_siren.py", "--variants", "dense lr1e-3", "dense lr9e-9", "--output", tmp_path / "out"
    )
    assert result.returncode == 2
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "error" in line]
    expected = "bench_siren: error: unknown variant(s) ['dense lr9e-9']"
    assert len(errors) == 1 and errors[0].startswith(expected)
    assert not any(tmp_path.iterdir())


def test_bench_siren_replot_redraws_from_the_json_alone(tmp_path):
    out = tmp_path / "out"
    fit = run_main(
        "bench_siren.py",
        "--size",
        "8",
        "--width",
        "8",
        "--steps",
        "2",
        "--log-every",
        "1",
        "--variants",
        "dense lr1e-3",
        "--output",
        out,
    )
    assert fit.returncode == 0, fit.stdout + fit.stderr
    (out / "siren.png").unlink()
    json_before = (out / "siren.json").read_text()
    redrawn = run_main("bench_siren.py", "--replot", "--output", out)
    assert redrawn.returncode == 0, redrawn.stdout + redrawn.stderr
    assert (out / "siren.png").stat().st_size > 0 and (out / "siren.json").read_text() == json_before
    missing = run_main("bench_siren.py", "--replot", "--output", tmp_path / "none")
    assert missing.returncode == 2 and "--replot: " in missing.stderr and not (tmp_path / "none").exists()


def test_bench_zipnerf_goal_bounds_eugens_loss_not_its_lead():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from bench_zipnerf import twin_goals
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    speeds = {"render": {"speedup": 1.3}, "field": {"speedup": 1.2}}
    for gap, met in ((+0.18, True), (0.0, True), (-0.1, True), (-0.11, False)):
        goals = twin_goals({"1/1": {"mean_db": gap}}, speeds)
        assert goals["eugen_within_0.1_db_of_dense"] is met, gap
    assert goals["eugen_render_speedup_ge_1.25"] is True and goals["eugen_field_speedup_ge_1.25"] is False


def test_bench_methods_unknown_variant_is_one_line_and_writes_nothing(tmp_path):
    result = run_main(
        "bench_methods.py",
        "--families",
        "nerf",
        "--variants",
        "eugen",
        "lowrnk",
        "--output-dir",
        tmp_path / "runs",
        "--out",
        tmp_path / "methods.json",
    )
    assert result.returncode == 2
    errors = [line for line in (result.stdout + result.stderr).splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("bench_methods: error: unknown --variants lowrnk")
    assert not any(tmp_path.iterdir())


def test_bench_methods_goals_judge_only_the_variants_measured():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from bench_methods import goals
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def row(psnr_by_seed):
        per_seed = [{"seed": seed, "psnr": psnr} for seed, psnr in psnr_by_seed.items()]
        return {"psnr": sum(psnr_by_seed.values()) / len(psnr_by_seed), "fps": 1.0, "per_seed": per_seed}

    rows = {"E": row({0: 19.0, 1: 18.0, 2: 18.5}), "L": row({0: 18.5, 1: 18.2, 2: 18.6})}
    judged = goals(rows, {"eugen": "E", "lowrank": "L"})
    assert "goal_quality_met" not in judged and "goal_equal_parameters_met" not in judged
    assert judged["goal_ahead_of_every_baseline_met"] is True  # mean 18.5 vs 18.43
    gap = judged["eugen_minus_variant_per_seed_db"]["L"]
    assert gap["per_seed"] == pytest.approx({"0": 0.5, "1": -0.2, "2": -0.1})
    assert gap["mean"] == pytest.approx(0.2 / 3)
    # a variant trained at fewer seeds (--baseline-seeds) is compared on the seeds it shares with EUGen:
    # seed 0's 19.0 against 18.6 is ahead, although EUGen's mean over its three seeds (18.5) is not
    rows["N"] = row({0: 18.6})
    assert (
        goals(rows, {"eugen": "E", "lowrank": "L", "narrowed": "N"})["goal_ahead_of_every_baseline_met"]
        is True
    )
    rows["S"] = row({0: 19.1})
    judged = goals(rows, {"eugen": "E", "lowrank": "L", "narrowed": "N", "snnk": "S"})
    assert judged["psnr_gain_vs_baselines_db"]["S"] == pytest.approx(-0.1)
    assert judged["goal_ahead_of_every_baseline_met"] is False


def test_bench_methods_judges_later_variants_against_the_rows_measured_before():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from bench_methods import goals, keep_earlier_rows, kind_by_label, variants
    finally:
        sys.path.remove(str(ROOT / "scripts"))

    def row(psnr_by_seed, fps=1.0, **extra):
        per_seed = [{"seed": seed, "psnr": psnr} for seed, psnr in psnr_by_seed.items()]
        return {
            "psnr": sum(psnr_by_seed.values()) / len(psnr_by_seed),
            "fps": fps,
            "per_seed": per_seed,
            **extra,
        }

    earlier = {
        "command": "first",
        "steps": 1200,
        "scene": "scenes/bunny64",
        "runs": {
            "E": row({0: 19.0, 1: 18.0}, fps=2.0),
            "D": row({0: 18.9, 1: 18.1}),
            "N": row({0: 17.0, 1: 17.0}, kind="narrowed", measured_by="old"),
        },
    }
    now = {
        "S (speed)": {**row({0: 18.8, 1: 18.3}, fps=2.1), "kind": "narrowed-speed", "measured_by": "second"}
    }
    labels = {"narrowed-speed": "S (speed)"}
    kinds = {"E": "eugen", "D": "dense", "N": "narrowed"}
    # another step count or scene keeps nothing: those runs are other runs
    assert keep_earlier_rows(earlier, dict(now), dict(labels), 600, "scenes/bunny64", kinds) == []
    assert keep_earlier_rows(earlier, dict(now), dict(labels), 1200, "scenes/other", kinds) == []
    rows, kept_labels = dict(now), dict(labels)
    assert keep_earlier_rows(earlier, rows, kept_labels, 1200, "scenes/bunny64", kinds) == ["E", "D", "N"]
    assert kept_labels == {"narrowed-speed": "S (speed)", "eugen": "E", "dense": "D", "narrowed": "N"}
    assert rows["E"]["measured_by"] == "first" and rows["N"]["measured_by"] == "old"  # who timed each row
    judged = goals(rows, kept_labels)
    assert judged["eugen_and_dense_timed_together"] is True
    assert judged["psnr_gain_vs_speed_matched_dense_db"] == pytest.approx(18.5 - 18.55)
    assert judged["goal_equal_speed_met"] is False and judged["goal_ahead_of_every_baseline_met"] is False
    assert judged["goal_equal_parameters_met"] is True
    # a run without --baselines still recognises the baselines' rows of an earlier run by their labels
    configs = variants("nerf", False, False, "identity")
    known = kind_by_label(configs)
    assert "lowrank" not in configs and known["eugen-nerf (layer-type=lowrank)"] == "lowrank"
    assert (
        known["eugen-nerf (feature-map=identity)"] == "eugen"
        and known["eugen-nerf (layer-type=snnk)"] == "snnk"
    )
    # a kind this run measured again is not taken from the earlier report
    rows, again = dict(now), {"narrowed-speed": "S (speed)", "narrowed": "N2"}
    rows["N2"] = row({0: 17.5})
    assert "N" not in keep_earlier_rows(earlier, rows, again, 1200, "scenes/bunny64", kinds)


def test_trunk_learning_summary_compares_eugen_trunks_with_the_narrowed_dense_one():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from bench_trunk_learning import summarise
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    rows = {
        "dense": {"mse": 0.1},
        "dense narrowed to 132 (EUGen's parameters)": {"mse": 0.2},
        "all EUGen, relu": {"mse": 0.6},
        "first layer dense, EUGen identity": {"mse": 0.205},
        "first layer dense, low-rank": {"mse": 0.19},
    }
    summary = summarise(rows)
    assert set(summary["mse_over_narrowed_dense"]) == {"all EUGen, relu", "first layer dense, EUGen identity"}
    assert summary["best_eugen"] == "first layer dense, EUGen identity"
    assert summary["best_eugen_mse_over_narrowed_dense"] == pytest.approx(1.025)
    assert summary["best_eugen_learns_like_narrowed_dense"] is True
    rows["first layer dense, EUGen identity"]["mse"] = 0.25
    assert summarise(rows)["best_eugen_learns_like_narrowed_dense"] is False


def test_quick_layers_suite_runs_and_leaves_the_readme_alone(tmp_path):
    before = (ROOT / "README.md").read_text(), (ROOT / "benchmarks/layers.json").read_text()
    result = run_bench("layers", "--quick", "--quick-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads((tmp_path / "layers.json").read_text())
    assert rows
    assert ((ROOT / "README.md").read_text(), (ROOT / "benchmarks/layers.json").read_text()) == before


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a NeRF suite's quick mode trains and evaluates runs: 5-8 min on busy cores
@pytest.mark.parametrize("suite", list(load_protocol(ROOT / "configs/bench/cpu.yaml", ROOT).suites))
def test_every_suite_has_a_quick_mode_that_runs(suite, tmp_path):
    result = run_bench(suite, "--quick", "--quick-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    named = [
        a.format(quick_dir=tmp_path)
        for a in load_protocol(ROOT / "configs/bench/cpu.yaml", ROOT).suites[suite].quick_args
        if a.startswith("{quick_dir}/") and a.endswith(".json")
    ]
    written = [Path(p) for p in named] or list(tmp_path.glob("*.json"))
    assert written and all(p.is_file() and json.loads(p.read_text()) for p in written), (
        named,
        list(tmp_path.iterdir()),
    )


def test_table_rows_from_lists_with_a_filter_a_pivot_a_default_and_the_source_file(tmp_path):
    (tmp_path / "b.json").write_text(
        json.dumps(
            {
                "scene": "s1",
                "rows": [
                    {"variant": "fused", "m": 16, "speedup": 9.5},
                    {"variant": "unfused", "m": 16, "speedup": 1.6, "extra": 3},
                    {"variant": "fused", "m": 32, "speedup": 3.6},
                    {"variant": "unfused", "m": 32, "speedup": 1.4},
                ],
                "std": {"0": 0.25},
            }
        )
    )
    spec = {
        "tables": {
            "t": {
                "header": ["m", "fused", "unfused", "extra", "scene", "name"],
                "rows_from": [
                    {
                        "file": "b.json",
                        "key": "rows",
                        "where": {"variant": "fused"},
                        "columns": [
                            {"key": "m"},
                            {
                                "key": ["rows.{name}.speedup", "std.{name}"],
                                "file": "b.json",
                                "fmt": "{:.1f} ± {:.2f}",
                                "default": "-",
                            },
                            {
                                "key": "speedup",
                                "join": {"variant": "unfused"},
                                "same": ["m"],
                                "fmt": "{:.1f}×",
                            },
                            {"key": "extra", "join": {"variant": "unfused"}, "same": ["m"], "default": "n/a"},
                            {"key": "@file.scene"},
                            {"key": "@name"},
                        ],
                    }
                ],
            }
        }
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    # "{name}" is the entry's index (a list): std.0 exists, std.2 does not (its default shows)
    assert Tables(tmp_path / "spec.yaml", tmp_path).render("t").splitlines()[2:] == [
        "| 16 | 9.5 ± 0.25 | 1.6× | 3 | s1 | 0 |",
        "| 32 | - | 1.4× | n/a | s1 | 2 |",
    ]
    # a default may be another cell: the speed-up alone where its spread is absent
    spec["tables"]["t"]["rows_from"][0]["columns"][1]["default"] = {"key": "speedup", "fmt": "{:.1f}"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert (
        Tables(tmp_path / "spec.yaml", tmp_path).render("t").splitlines()[3]
        == "| 32 | 3.6 | 1.4× | n/a | s1 | 2 |"
    )
    spec["tables"]["t"]["rows_from"][0]["columns"][2]["same"] = []
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError, match="matches 2 entries, not one"):
        Tables(tmp_path / "spec.yaml", tmp_path).render("t")


def test_a_suite_run_replaces_only_the_sections_it_measured(tmp_path):
    from eugen_nerf.bench.merge import write_report

    path = tmp_path / "methods.json"
    write_report(
        path, {"command": "first", "families": {"nerf": {"psnr": 1}, "zipnerf": {"psnr": 2}}}, [("families",)]
    )
    merged = write_report(path, {"command": "second", "families": {"zipnerf": {"psnr": 3}}}, [("families",)])
    assert merged == json.loads(path.read_text())
    assert merged == {"command": "second", "families": {"zipnerf": {"psnr": 3}, "nerf": {"psnr": 1}}}
    path.write_text("{not json")  # an unreadable earlier file is replaced, not merged
    assert write_report(path, {"families": {"a": {}}}, [("families",)]) == {"families": {"a": {}}}


def test_a_finished_run_is_reused_only_for_the_same_seed_model_and_scales(tmp_path, monkeypatch):
    """A benchmark rerun must not measure a run trained at another seed, with another model default or at
    other training scales."""
    import copy

    from eugen_nerf.bench import training
    from eugen_nerf.methods.zipnerf import eugen_zipnerf

    config = copy.deepcopy(eugen_zipnerf.config)
    config.machine.seed = 3
    calls = []

    class FakeTrainer:  # training is not what is tested: it writes the final checkpoint and nothing else
        def setup(self):
            pass

        def train(self):
            calls.append(1)
            models = tmp_path / "run" / "scene" / config.method_name / "bench" / "nerfstudio_models"
            models.mkdir(parents=True, exist_ok=True)
            (models / "step-000000001.ckpt").write_bytes(b"")

    monkeypatch.setattr(type(config), "setup", lambda self, **kwargs: FakeTrainer())
    scene = tmp_path / "scene"
    first, _ = training.train_in_process(config, scene, 2, tmp_path / "run", reuse=True)
    again, _ = training.train_in_process(config, scene, 2, tmp_path / "run", reuse=True)
    assert first == again and len(calls) == 1
    other_seed = copy.deepcopy(config)
    other_seed.machine.seed = 4
    training.train_in_process(other_seed, scene, 2, tmp_path / "run", reuse=True)
    assert len(calls) == 2
    other_model = copy.deepcopy(other_seed)
    other_model.pipeline.model.eugen.density_layers = (1,)
    training.train_in_process(other_model, scene, 2, tmp_path / "run", reuse=True)
    assert len(calls) == 3
    training.train_in_process(other_model, scene, 2, tmp_path / "run", reuse=True)
    assert len(calls) == 3
    full_resolution_only = copy.deepcopy(other_model)
    full_resolution_only.pipeline.datamanager.train_scales = (1,)
    training.train_in_process(full_resolution_only, scene, 2, tmp_path / "run", reuse=True)
    assert len(calls) == 4

    class InterruptedTrainer:  # a retraining stopped before its checkpoint: the old checkpoint is still there
        def setup(self):
            pass

        def train(self):
            raise KeyboardInterrupt

    monkeypatch.setattr(type(config), "setup", lambda self, **kwargs: InterruptedTrainer())
    with pytest.raises(KeyboardInterrupt):
        training.train_in_process(other_model, scene, 2, tmp_path / "run", reuse=True)
    monkeypatch.setattr(type(config), "setup", lambda self, **kwargs: FakeTrainer())
    training.train_in_process(other_model, scene, 2, tmp_path / "run", reuse=True)
    assert len(calls) == 5  # trained again, not the interrupted run's predecessor passed off as it


def test_mean_and_std_over_seeds_skips_missing_metrics():
    from eugen_nerf.bench.seeds import mean_and_std

    means, spread = mean_and_std(
        [{"psnr": 20.0, "lpips": None}, {"psnr": 22.0, "lpips": 0.2}], ("psnr", "lpips")
    )
    assert means == {"psnr": 21.0, "lpips": 0.2} and spread == {"psnr": 1.0, "lpips": 0.0}
    with pytest.raises(ValueError):
        mean_and_std([])


def test_paired_gap_is_over_the_shared_seeds_only():
    from eugen_nerf.bench.seeds import paired_gap

    gap = paired_gap({0: 21.0, 1: 20.0, 2: 30.0}, {0: 20.0, 1: 20.5, 3: 0.0})
    assert gap["per_seed"] == {"0": 1.0, "1": -0.5}
    assert gap["mean"] == pytest.approx(0.25) and gap["std"] == pytest.approx(0.75)
    assert paired_gap({2: 1.0}, {0: 1.0}) is None


def test_bench_datasets_merge_combines_the_scenes_of_a_method(tmp_path):
    """Parts measuring different scenes of one method (canonical and captured in one run, unbounded in another)
    merge into one entry per method with every scene, not the last part's alone."""

    def part(name, runs):
        path = tmp_path / name
        path.write_text(json.dumps({"command": name, "seeds": [0], "runs": runs}))
        return path

    scene = lambda psnr: {"psnr": psnr, "per_seed": [{"seed": 0, "psnr": psnr}]}
    first = part("a.json", {"eugen-nerf": {"canonical": scene(18.0), "captured": scene(18.1)}})
    second = part(
        "b.json", {"eugen-nerf": {"unbounded": scene(22.0)}, "nerfacto": {"unbounded": scene(21.0)}}
    )
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from bench_datasets import merge_parts
    finally:
        sys.path.pop(0)
    merged = merge_parts([first, second])
    assert set(merged["runs"]["eugen-nerf"]) == {"canonical", "captured", "unbounded"}
    assert merged["command"] == ["a.json", "b.json"]
    assert merged["unbounded_vs_nerfacto"]["eugen-nerf"]["psnr_minus_nerfacto_db"] == pytest.approx(1.0)
    assert merged["frame_invariance"]["eugen-nerf"]["psnr_captured_minus_canonical_db"] == pytest.approx(0.1)
    # a captured run scored on the canonical images too: the goal is judged on the same images, and a merged
    # report merges again (its command list is flattened)
    merged_path = tmp_path / "merged.json"
    merged_path.write_text(json.dumps(merged))
    captured = {"psnr": 19.0, "per_seed": [{"seed": 0, "psnr": 19.0, "psnr_same_truth": 18.2}]}
    again = merge_parts([merged_path, part("c.json", {"eugen-nerf": {"captured": captured}})])
    frame = again["frame_invariance"]["eugen-nerf"]
    assert again["command"] == ["a.json", "b.json", "c.json"]
    assert frame["psnr_captured_minus_canonical_db"] == pytest.approx(1.0)
    assert frame["psnr_same_truth_minus_canonical_db"] == pytest.approx(0.2)
    assert frame["goal_frame_invariant_met"] is True


def test_a_benchmark_run_is_seeded_like_ns_train_whatever_ran_before(tmp_path, one_thread):
    """Two trainings of the same config and seed, after different draws from every generator, end with the same
    weights: a benchmark's numbers do not depend on what the process ran before."""
    import copy
    import random

    import numpy as np
    import torch

    from eugen_nerf.bench import training
    from eugen_nerf.methods.nerf import dense_nerf

    config = copy.deepcopy(dense_nerf.config)
    config.machine.device_type = "cpu"
    config.pipeline.datamanager.train_num_rays_per_batch = 32
    model = config.pipeline.model
    model.num_coarse_samples = model.num_importance_samples = 4
    model.trunk_width, model.head_width = 16, 8
    states = []
    for run, draws in enumerate((1, 7)):
        random.random(), np.random.rand(draws), torch.rand(draws)  # the process drew something before
        path, _ = training.train_in_process(config, ROOT / "scenes" / "bunny32", 2, tmp_path / f"run{run}")
        checkpoint = next((path.parent / "nerfstudio_models").glob("*.ckpt"))
        states.append(torch.load(checkpoint, map_location="cpu", weights_only=False)["pipeline"])
    assert states[0].keys() == states[1].keys()
    assert all(torch.equal(states[0][key], states[1][key]) for key in states[0])


def test_a_changed_eugen_default_retrains_eugen_runs_but_not_the_dense_twins(tmp_path):
    from eugen_nerf.bench.training import same_model
    from eugen_nerf.methods.nerf import dense_nerf, eugen_nerf

    for method, dense in ((eugen_nerf, False), (dense_nerf, True)):
        saved = copy.deepcopy(method.config)
        saved.output_dir, saved.experiment_name, saved.timestamp = tmp_path, "scene", f"run_{dense}"
        saved.save_config()
        path = saved.get_base_dir() / "config.yml"
        assert same_model(path, method.config)
        changed = copy.deepcopy(method.config)
        changed.pipeline.model.eugen.feature_map = "softplus"  # a knob of the EUGen layers only
        assert same_model(path, changed) is dense
        changed.pipeline.model.eugen.trunk_layers = (3,)  # selecting a layer is a new model for both
        assert not same_model(path, changed)


def test_a_scored_run_is_read_back_until_its_checkpoint_or_key_changes(tmp_path):
    from eugen_nerf.bench.training import cached_for_checkpoint

    config = tmp_path / "config.yml"
    config.write_text("")
    (tmp_path / "nerfstudio_models").mkdir()
    checkpoint = tmp_path / "nerfstudio_models" / "step-000000009.ckpt"
    checkpoint.write_bytes(b"weights")
    calls = []

    def score():
        calls.append(1)
        return {"psnr": float(len(calls))}

    assert cached_for_checkpoint(config, "q.json", score, scales=[1, 2]) == {"psnr": 1.0}
    assert cached_for_checkpoint(config, "q.json", score, scales=[1, 2]) == {"psnr": 1.0}
    assert len(calls) == 1
    assert cached_for_checkpoint(config, "q.json", score, scales=[1]) == {"psnr": 2.0}  # another key
    stat = checkpoint.stat()
    os.utime(checkpoint, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # retrained: same name, new time
    assert cached_for_checkpoint(config, "q.json", score, scales=[1]) == {"psnr": 3.0}


def test_summarize_siren_pairs_seeds_with_the_tuned_dense_siren_and_refuses_mismatched_runs(tmp_path):
    """Per seed the best of the named dense variants is the tuned dense SIREN; the goal is judged on the mean;
    files of different seeds are refused in one line."""

    def run(seed: int, psnrs: dict) -> Path:
        path = tmp_path / f"s{seed}" / "siren.json"
        path.parent.mkdir()
        results = [{"name": name, "final_psnr": value, "parameters": 10} for name, value in psnrs.items()]
        path.write_text(json.dumps({"config": {"seed": seed, "image": "camera"}, "results": results}))
        return path

    files = [run(0, {"e": 41.0, "d1": 40.0, "d3": 42.0}), run(1, {"e": 44.0, "d1": 43.5, "d3": 41.0})]
    script = [
        "summarize_siren.py",
        "--eugen",
        *map(str, files),
        "--dense",
        *map(str, files),
        "--eugen-variant",
        "e",
        "--dense-variants",
        "d1",
        "d3",
    ]
    result = run_main(*script, "--output", tmp_path / "sum.json")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "sum.json").read_text())
    assert [p["dense_best"] for p in summary["pairs"]] == ["d3", "d1"]
    assert summary["gap_mean"] == pytest.approx(-0.25) and summary["met"] is False
    assert summary["gap_std"] == pytest.approx(0.75)  # gaps -1 and +0.5: the population std, as every suite's
    assert summary["every_seed_met"] is False and summary["eugen_mean"] == pytest.approx(42.5)
    swapped = [*script[:2], str(files[1]), *script[3:]]  # seed 1's EUGen against seed 0's dense
    result = run_main(*swapped, "--output", tmp_path / "bad.json")
    assert result.returncode == 2 and "one file per seed" in result.stderr
    assert not (tmp_path / "bad.json").exists()
    # a rate bracket split over two suites of one seed: the best over both files is the tuned dense SIREN
    other = tmp_path / "s0b.json"
    other.write_text(
        json.dumps(
            {
                "config": {"seed": 0, "image": "camera"},
                "results": [{"name": "d2", "final_psnr": 42.5, "parameters": 10}],
            }
        )
    )
    split = [*script[:4], "--dense", *map(str, files), str(other), *script[7:], "d2"]
    result = run_main(*split, "--output", tmp_path / "split.json")
    assert result.returncode == 0, result.stderr
    assert [p["dense_best"] for p in json.loads((tmp_path / "split.json").read_text())["pairs"]] == [
        "d2",
        "d1",
    ]
    wider = json.loads(other.read_text())
    wider["config"]["width"] = 256
    other.write_text(json.dumps(wider))
    result = run_main(*split, "--output", tmp_path / "bad.json")
    assert (
        result.returncode == 2
        and "fit different settings" in result.stderr
        and not (tmp_path / "bad.json").exists()
    )


@pytest.mark.parametrize(
    "eugen_parameters, accepted", [(1000, True), (995, True), (989, False), (1001, False)]
)
def test_summarize_siren_compares_equal_parameters_eugen_at_most_the_dense_count(
    tmp_path, eugen_parameters, accepted
):
    path = tmp_path / "siren.json"
    path.write_text(
        json.dumps(
            {
                "config": {"seed": 0, "image": "camera"},
                "results": [
                    {"name": "e", "final_psnr": 41.0, "parameters": eugen_parameters},
                    {"name": "d", "final_psnr": 40.0, "parameters": 1000},
                ],
            }
        )
    )
    result = run_main(
        "summarize_siren.py",
        "--eugen",
        path,
        "--dense",
        path,
        "--eugen-variant",
        "e",
        "--dense-variants",
        "d",
        "--output",
        tmp_path / "sum.json",
    )
    assert (result.returncode == 0) is accepted, result.stderr
    assert (tmp_path / "sum.json").exists() is accepted
    if not accepted:
        assert "the goal compares equal parameters" in result.stderr


def test_summarize_distill_reports_seeds_against_the_goals_and_refuses_other_recipes(tmp_path):
    """Mean ± std over seeds, each goal judged on the mean and at every seed (seconds at most, ratios at
    least); runs of different recipes or of one seed twice are refused in one line, nothing written."""
    goals = {"closed_form_seconds": 60.0, "psnr_ratio_closed_form": 0.99, "fps_ratio": 1.5}

    def run(seed: int, seconds: float, ratio: float, fps: float, **command) -> Path:
        path = tmp_path / f"d{seed}_{len(command)}.json"
        report = {
            "teacher": {"psnr": 27.0},
            "student_closed_form": {"psnr": 27.0 * ratio},
            "student": {"psnr": 27.0 * ratio},
        }
        path.write_text(
            json.dumps(
                {
                    "command": {"degree": 1, "seed": seed, "output": str(path), **command},
                    "goals": goals,
                    "measured": {
                        "closed_form_seconds": seconds,
                        "psnr_ratio_closed_form": ratio,
                        "fps_ratio": fps,
                    },
                    "report": report,
                }
            )
        )
        return path

    files = [run(0, 50.0, 0.995, 1.6), run(1, 70.0, 0.993, 1.7), run(2, 45.0, 0.992, 1.8)]
    result = run_main("summarize_distill.py", *files, "--output", tmp_path / "sum.json")
    assert result.returncode == 0, result.stderr
    summary = json.loads((tmp_path / "sum.json").read_text())
    assert summary["seeds"] == [0, 1, 2] and summary["mean"]["closed_form_seconds"] == pytest.approx(55.0)
    assert summary["met_on_mean"] == {
        "closed_form_seconds": True,
        "psnr_ratio_closed_form": True,
        "fps_ratio": True,
    }
    assert summary["met_at_every_seed"]["closed_form_seconds"] is False  # seed 1 took 70 s
    assert summary["std"]["fps_ratio"] == pytest.approx(0.0816, abs=1e-3)
    for bad, message in (
        ([files[0], run(1, 50.0, 0.99, 1.6, degree=2)], "differ in degree"),
        ([files[0], files[0]], "share a seed"),
    ):
        result = run_main("summarize_distill.py", *bad, "--output", tmp_path / "bad.json")
        assert result.returncode == 2 and message in result.stderr and not (tmp_path / "bad.json").exists()


def test_summarize_siren_reads_a_screen_as_the_eugen_side_in_the_screens_setting(tmp_path):
    """A ``screen_siren`` output stands for the EUGen side (a screen by name), with the setting its networks
    and schedule fix; a dense run of another schedule is refused."""
    screens = tmp_path / "screens.json"
    screens.write_text(
        json.dumps(
            {
                "image": "camera",
                "size": 256,
                "steps": 400,
                "seed": 2,
                "screens": {"s": {"final_psnr": 43.0, "parameters": 1000}},
            }
        )
    )
    config = {"seed": 2, "image": "camera", "size": 256, "steps": 400, "width": 128, "hidden_layers": 3}
    dense = tmp_path / "siren.json"
    for schedule, code in (("cosine", 0), ("constant", 2)):
        results = [{"name": "d", "final_psnr": 42.5, "parameters": 1000}]
        dense.write_text(json.dumps({"config": {**config, "lr_schedule": schedule}, "results": results}))
        sides = ("--eugen", screens, "--dense", dense, "--eugen-variant", "s", "--dense-variants", "d")
        result = run_main("summarize_siren.py", *sides, "--output", tmp_path / f"{schedule}.json")
        assert result.returncode == code, result.stderr
    summary = json.loads((tmp_path / "cosine.json").read_text())
    assert summary["seeds"] == [2] and summary["gap_mean"] == pytest.approx(0.5) and summary["met"] is True
    assert not (tmp_path / "constant.json").exists()
