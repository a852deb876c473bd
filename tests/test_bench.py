"""``eugen-bench``: the protocol (package data) is checked before anything runs, the generated tables (README's
headline, docs/benchmarks.md) and the index page equal what the JSON says, ``benchmarks/`` holds one folder per
suite, bad input is one line, and each suite's --quick mode runs end to end (slow suite)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from _scripts import run_main

from eugen_nerf.bench.index import COMMAND_FILE, DEFAULT_PLACES, measured_now, render_index
from eugen_nerf.bench.protocol import PROTOCOLS, Places, load_protocol
from eugen_nerf.bench.tables import DOCUMENTS, Tables, documents
from eugen_nerf.inputs.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
SPEC = PROTOCOLS / "tables.yaml"
CPU = load_protocol(PROTOCOLS / "cpu.yaml")
OTHER_HELPERS = {"scenes", "scenes_capture"}
"""Folders of benchmarks/ that other commands fill (scene checks, exports): not suite results."""


def run_bench(*args: str):
    return run_main("eugen_nerf.bench.cli", *args, module=True)


def checkout_copy(tmp_path: Path) -> Path:
    """README.md, docs/benchmarks.md and benchmarks/ (without the plots) of this checkout under tmp_path, its
    tables generated."""
    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    for name in DOCUMENTS:
        shutil.copy(ROOT / name, root / name)
    shutil.copytree(ROOT / "benchmarks", root / "benchmarks", ignore=shutil.ignore_patterns("*.png"))
    Tables(SPEC, root).update_documents(documents(root))  # the copy's tables as the JSON says
    return root


def test_generated_tables_and_the_index_match_the_benchmark_json():
    tables = Tables(SPEC, ROOT)
    pages = documents(ROOT)
    assert pages == [ROOT / "README.md", ROOT / "docs/benchmarks.md"]
    assert tables.names_in(ROOT / "README.md") == ["headline"], "the README holds exactly the headline table"
    names = [name for page in pages for name in tables.names_in(page)]
    assert sorted(names) == sorted(tables.tables), "each spec'd table in one document, each marked one spec'd"
    assert tables.update_documents(pages, check=True) == [], "run `eugen-bench --tables`"
    index = (ROOT / "benchmarks/README.md").read_text()
    assert index == render_index(CPU, ROOT / "benchmarks"), "run `eugen-bench --tables`"


def test_the_headline_table_is_short_and_names_its_setting():
    headline = Tables(SPEC, ROOT).tables["headline"]
    # one row a result: NeRF twice, Zip-NeRF over three scenes, two teachers distilled, iSDF, SIREN, web, CUDA
    assert len(headline["rows"]) <= 10
    assert headline["header"][:3] == ["result", "setting", "hardware"]
    # the CUDA row names the GPU its figures come from, read from the CUDA run's own record
    (cuda,) = [row for row in headline["rows"] if "CUDA" in str(row[0])]
    assert cuda[2]["file"] == "benchmarks/cuda/cuda.json" and "machine.gpu" in cuda[2]["key"]
    gpu = json.loads((ROOT / "benchmarks/cuda/cuda.json").read_text())["machine"]["gpu"]
    assert gpu and gpu in Tables(SPEC, ROOT).render("headline")


def test_a_table_lost_or_marked_twice_is_one_clear_error(tmp_path):
    root = checkout_copy(tmp_path)
    page = root / "docs/benchmarks.md"
    text = page.read_text()
    page.write_text(text.replace("<!-- bench-table: layers -->", "<!-- bench-table: nope -->"))
    tables = Tables(SPEC, root)
    with pytest.raises(InputError, match=r"not spec'd \['nope'\], spec'd but in no document \['layers'\]"):
        tables.update_documents(documents(root), check=True)
    page.write_text(text + "\n<!-- bench-table: layers -->\n<!-- /bench-table -->\n")
    with pytest.raises(InputError, match=r"marked twice \['layers'\]"):
        tables.update_documents(documents(root), check=True)


def test_markers_in_other_pages_are_not_read(tmp_path):
    root = checkout_copy(tmp_path)
    (root / "docs/datasets.md").write_text(
        "<!-- bench-table: datasets-frame -->\nold\n<!-- /bench-table -->\n"
    )
    assert Tables(SPEC, root).update_documents(documents(root), check=True) == []
    assert "old" in (root / "docs/datasets.md").read_text()


def test_a_changed_figure_makes_its_tables_stale_and_tables_rewrites_them(tmp_path):
    root = checkout_copy(tmp_path)
    path = root / "benchmarks/distill/distill.json"
    report = json.loads(path.read_text())
    report["measured"]["fps_ratio"] += 1.0
    path.write_text(json.dumps(report))
    check = run_bench("--tables", "--check", "--root", str(root))
    assert check.returncode == 1 and "headline" in check.stdout and "distill-goals" in check.stdout
    assert run_bench("--tables", "--root", str(root)).returncode == 0
    assert f"{report['measured']['fps_ratio']:.2f}×" in (root / "README.md").read_text()
    assert f"{report['measured']['fps_ratio']:.2f}×" in (root / "docs/benchmarks.md").read_text()
    again = run_bench("--tables", "--check", "--root", str(root))
    assert again.returncode == 0, again.stdout


def test_a_cell_over_several_reports_reduces_their_figures_to_one(tmp_path):
    for name, gain, speedup in (("a", -0.3, 1.2), ("b", 0.1, 1.5), ("c", 0.5, 1.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"goals": {"gain": gain, "speedup": speedup}}))
    spec = tmp_path / "tables.yaml"
    files = ["a.json", "b.json", "c.json"]
    cells = [
        {"files": files, "key": "goals.gain", "reduce": "mean", "fmt": "{:+.2f}"},
        {"files": files, "key": "goals.speedup", "reduce": "geomean", "fmt": "{:.3f}"},
        {"files": files, "key": ["goals.gain", "goals.speedup"], "reduce": "min", "fmt": "{} {}"},
    ]
    spec.write_text(yaml.safe_dump({"tables": {"t": {"header": ["x", "y", "z"], "rows": [cells]}}}))
    row = Tables(spec, tmp_path).render("t").splitlines()[-1]
    assert row == f"| +0.10 | {(1.2 * 1.5) ** (1 / 3):.3f} | -0.3 1.0 |"
    # a cell given as pieces: the mean, then one report's own figure, in one sentence
    one = {"file": "a.json", "key": "goals.gain", "fmt": "{:+.1f}"}
    spec.write_text(
        yaml.safe_dump({"tables": {"t": {"header": ["x"], "rows": [[[cells[0], " dB (a: ", one, ")"]]]}}})
    )
    assert Tables(spec, tmp_path).render("t").splitlines()[-1] == "| +0.10 dB (a: -0.3) |"
    # a reduction the spec does not name, or a ratio that is not positive: one error naming the table
    for edit, message in (
        ({"reduce": "median"}, "needs reduce: one of mean, geomean"),
        ({"key": "goals.gain"}, "positive"),
    ):
        spec.write_text(
            yaml.safe_dump({"tables": {"t": {"header": ["y"], "rows": [[{**cells[1], **edit}]]}}})
        )
        with pytest.raises(InputError, match=message):
            Tables(spec, tmp_path).render("t")
    # a report whose figure is not measured yet leaves the cell "not yet measured"
    (tmp_path / "c.json").write_text(json.dumps({"goals": {"gain": None, "speedup": 1.0}}))
    spec.write_text(yaml.safe_dump({"tables": {"t": {"header": ["x"], "rows": [[cells[0]]]}}}))
    assert Tables(spec, tmp_path).render("t").splitlines()[-1] == "| not yet measured |"


def test_a_verdict_cell_names_the_parts_of_a_goal_that_were_missed(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"goals": {"gain": -0.3, "speedup": 1.6, "memory": 0.9}}))
    (tmp_path / "b.json").write_text(json.dumps({"goals": {"gain": 0.0, "speedup": 1.2, "memory": None}}))
    spec = tmp_path / "tables.yaml"

    def verdict(*checks) -> str:
        spec.write_text(
            yaml.safe_dump({"tables": {"t": {"header": ["v"], "rows": [[{"verdict": list(checks)}]]}}})
        )
        return Tables(spec, tmp_path).render("t").splitlines()[-1]

    gain = {"file": "a.json", "key": "goals.gain", "at_least": -0.1, "name": "quality"}
    speed = {"file": "a.json", "key": "goals.speedup", "at_least": 1.5, "name": "speed"}
    memory = {"file": "a.json", "key": "goals.memory", "at_most": 0.8, "name": "memory"}
    assert verdict(speed) == "| met |"
    assert verdict(gain, speed, memory) == "| **missed**: quality, memory |"
    assert verdict({**memory, "at_most": 0.9}) == "| met |"  # a bound is inclusive
    # over several reports, reduced as a cell is; a figure not measured yet leaves the verdict open
    over_both = {k: v for k, v in gain.items() if k != "file"} | {
        "files": ["a.json", "b.json"],
        "reduce": "mean",
    }
    assert verdict(over_both) == "| **missed**: quality |"
    assert verdict({**over_both, "reduce": "max"}) == "| met |"
    assert verdict(speed, {**memory, "file": "b.json"}) == "| not yet measured |"
    for bad in (
        {**speed, "at_most": 2},
        {k: v for k, v in speed.items() if k != "name"},
        {**speed, "key": "goals"},
    ):
        with pytest.raises(InputError, match="verdict check"):
            verdict(bad)
    # a NaN passes no comparison and would read "met": it is refused, in a verdict and in a cell
    (tmp_path / "a.json").write_text('{"goals": {"gain": NaN, "speedup": 1.6}}')
    with pytest.raises(InputError, match="finite"):
        verdict(gain)
    spec.write_text(yaml.safe_dump({"tables": {"t": {"header": ["x"], "rows": [[gain]]}}}))
    with pytest.raises(InputError, match="non-finite"):
        Tables(spec, tmp_path).render("t")


def test_tables_change_no_document_when_one_table_cannot_be_rendered(tmp_path):
    root = checkout_copy(tmp_path)
    path = root / "benchmarks/layers/layers.json"  # read by the benchmarks page only, after the README
    report = json.loads(path.read_text())
    del report["devices"]
    path.write_text(json.dumps(report))
    distill = root / "benchmarks/distill/distill.json"  # a README figure that changed as well
    changed = json.loads(distill.read_text())
    changed["measured"]["fps_ratio"] += 1.0
    distill.write_text(json.dumps(changed))
    before = {name: (root / name).read_text() for name in DOCUMENTS}
    assert run_bench("--tables", "--root", str(root)).returncode != 0
    assert {name: (root / name).read_text() for name in DOCUMENTS} == before


def test_tables_refuse_a_folder_that_is_not_a_checkout(tmp_path):
    result = run_bench("--tables", "--root", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"eugen-bench: error: --tables: {tmp_path} is not a checkout of eugen-nerf (no README.md); pass --root"
    ]
    assert not any(tmp_path.iterdir())


def test_both_protocols_load_with_at_most_16_suites_writing_only_under_their_folders():
    for device in ("cpu", "cuda"):
        protocol = load_protocol(PROTOCOLS / f"{device}.yaml")
        assert protocol.device == device and 0 < len(protocol.suites) <= 16
        places = Places(Path("/o"), Path("/w"), Path("/s"), Path("/t"))
        for suite in protocol.suites.values():
            assert suite.outputs and suite.description and suite.setting
            for quick in (False, True):
                flags = suite.command(places, quick)
                assert flags[:2] == ["-m", f"eugen_nerf.bench.suites.{suite.module}"]
                written = [f for f in flags if f.startswith(("/o", "/w"))]
                mine = (f"/o/{suite.name}", f"/w/{suite.work or suite.name}")  # or the runs it shares
                assert all(f.startswith(mine) for f in written), (suite.name, flags)
                assert any(f.startswith(f"/o/{suite.name}") for f in written), suite.name
                assert not any("benchmarks" in f or "{" in f for f in flags), (suite.name, flags)


def test_a_suite_sharing_another_suites_runs_trains_them_the_same_way():
    """A suite whose ``work`` names another resumes that suite's runs: a scene, step cap or schedule of its own
    would train those runs on (or refuse them) and leave the other suite's published figures without their runs."""

    def flag(flags: tuple[str, ...], name: str) -> str | None:
        return flags[flags.index(name) + 1] if name in flags else None

    shared = 0
    for device in ("cpu", "cuda"):
        suites = load_protocol(PROTOCOLS / f"{device}.yaml").suites
        for suite in suites.values():
            if suite.work:
                shared += 1
                owner = suites[suite.work]
                for name in (
                    "--scene",
                    "--families",
                    "--steps",
                    "--min-steps",
                    "--eval-every",
                    "--dense-run",
                ):
                    for quick in (False, True):
                        mine = suite.quick_args if quick else suite.args
                        theirs = owner.quick_args if quick else owner.args
                        assert flag(mine, name) == flag(theirs, name), (device, suite.name, name, quick)
                    assert ("--full-size" in suite.args) == ("--full-size" in owner.args), (
                        device,
                        suite.name,
                    )
    assert shared >= 1  # fields-seeds on fields' runs


def test_benchmarks_holds_one_folder_per_suite_with_its_json_plot_and_command():
    top = {p.name for p in (ROOT / "benchmarks").iterdir()}
    suites = top - OTHER_HELPERS - {"README.md"}
    assert suites <= set(CPU.suites) | {"cuda"}, suites - set(CPU.suites)
    for name in suites & set(CPU.suites):
        folder = ROOT / "benchmarks" / name
        assert {p.name for p in folder.iterdir()} == {*CPU.suites[name].outputs, COMMAND_FILE}, name
        assert (
            (folder / COMMAND_FILE).read_text().startswith(f"eugen-bench {name}\npython -m eugen_nerf.bench.")
        )
    files = [p for p in (ROOT / "benchmarks").rglob("*") if p.is_file()]
    assert len(files) <= 72  # a few files a suite, not a lab notebook


def test_the_package_runs_and_reads_nothing_outside_itself():
    """No module of the package puts a folder on sys.path or names the checkout's scripts/, tests/ or
    configs/ (the suites and their protocol are in the package)."""
    pattern = re.compile(
        r"sys\.path\.(insert|append)|[\"'](scripts|tests|configs)/|parents\[\d\] ?/ ?\"(scripts|tests|configs)"
    )
    offending = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in (ROOT / "eugen_nerf").rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offending == []
    assert not (ROOT / "configs").exists()
    # setup here, the demo, and the bundle and runner that carry the training suites to a GPU machine
    assert sorted(p.name for p in (ROOT / "scripts").iterdir()) == [
        "demo.sh",
        "gpu_bundle.sh",
        "gpu_suite.sh",
        "setup.sh",
    ]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s["suites"]["layers"].pop("args"), "missing the key(s) args"),
        (lambda s: s["suites"]["layers"].update(module="no_such"), "module eugen_nerf.bench.suites.no_such"),
        (lambda s: s["suites"]["inference"].update(needs=["x"]), "needs must map each path"),
        (lambda s: s.update(device="tpu"), "device must be"),
        (lambda s: s["suites"]["fields-seeds"].update(work="fieldz"), "work must name another suite"),
        (lambda s: s["suites"]["fields-seeds"].update(work="fields-seeds"), "work must name another suite"),
    ],
)
def test_bad_protocol_is_one_clear_error(tmp_path, edit, message):
    protocol = yaml.safe_load((PROTOCOLS / "cpu.yaml").read_text())
    edit(protocol)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(protocol))
    with pytest.raises(InputError, match=re.escape(message)):
        load_protocol(path)


def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path):
    out = ["--output-dir", str(tmp_path / "b"), "--work-dir", str(tmp_path / "w")]
    result = run_bench("no-such-suite", *out)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "eugen-bench: error: unknown suite(s) 'no-such-suite'; known: " + ", ".join(CPU.suites)
    ]
    result = run_bench("inference", "--scenes", str(tmp_path / "none"), *out)
    assert result.returncode == 2
    missing = tmp_path / "none" / "shiny128"
    assert result.stderr.strip().splitlines() == [
        f"eugen-bench: error: suite 'inference' needs {missing}, which does not exist; "
        + f"make it with: eugen-scenes blender shiny --output {missing} --resolution 128 --views 24 4 8"
    ]
    # a teachers folder that does not exist: one line, no teacher trained into it
    for suite, missing in (
        ("distill", tmp_path / "nowhere"),
        ("fields-unbounded", tmp_path / "nowhere" / "garden200" / "dense-zipnerf" / "cpu"),
    ):
        result = run_bench(suite, "--teachers", str(tmp_path / "nowhere"), *out)
        assert result.returncode == 2 and f"needs {missing}, which does not exist" in result.stderr
        assert not (tmp_path / "nowhere").exists()
    import torch

    if not torch.cuda.is_available():
        result = run_bench("--device", "cuda", *out)
        assert result.returncode == 2 and "no CUDA device" in result.stderr
    # --check without --tables would otherwise run (and publish) every suite
    result = run_bench("--check", *out)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "eugen-bench: error: --check works with --tables: eugen-bench --tables --check ..."
    ]
    # --tables regenerates every table, and --quick writes under --quick-dir: what they would ignore is refused
    result = run_bench("--tables", "--check", "nerf", *out)
    assert result.returncode == 2 and "leave out the suite name(s) nerf" in result.stderr
    result = run_bench("--quick", "nerf", *out)
    assert result.returncode == 2 and "--quick writes under --quick-dir; --output-dir" in result.stderr
    assert not any(tmp_path.iterdir())


def test_list_names_every_suite_and_what_it_reads():
    result = run_bench("--list", "--scenes", "S")
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    # each suite's name starts a line; its description and setting wrap in the column beside it
    assert [line.split()[0] for line in lines if not line.startswith(" ")] == list(CPU.suites)
    width = max(map(len, CPU.suites)) + 2
    assert all(line[:width].strip() in ("", *CPU.suites) for line in lines)
    assert "reads S/branches128" in result.stdout  # the nerf suite's scene


def test_quick_layers_suite_writes_its_folder_and_leaves_benchmarks_alone(tmp_path):
    before = (ROOT / "benchmarks/layers/layers.json").read_text()
    result = run_bench("layers", "--quick", "--quick-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "layers/layers.json").read_text())["devices"]["cpu"]
    command = (tmp_path / "layers" / COMMAND_FILE).read_text().splitlines()
    assert command[0] == "eugen-bench layers --quick"
    assert command[1].startswith("python -m eugen_nerf.bench.suites.layers --points 1024")
    assert command[2].startswith("# machine: ")
    assert (tmp_path / "layers/layers.png").is_file()
    assert (ROOT / "benchmarks/layers/layers.json").read_text() == before


def test_siren_suite_pairs_the_seeds_and_reuses_finished_fits(tmp_path, monkeypatch):
    from eugen_nerf.bench.suites import siren

    config = siren.BenchSiren(
        output=tmp_path / "out",
        work_dir=tmp_path / "work",
        size=8,
        width=8,
        steps=2,
        log_every=1,
        seeds=[0, 1],
    )
    siren.main(config)
    report = json.loads((tmp_path / "out/siren.json").read_text())
    assert [p["seed"] for p in report["pairs"]] == [0, 1]
    assert report["parameters"]["eugen"] == report["parameters"]["dense"]  # equal parameters
    gaps = [p["eugen_psnr"] - p["dense_psnr"] for p in report["pairs"]]
    assert [p["gap"] for p in report["pairs"]] == pytest.approx(gaps)
    assert report["gap_mean"] == pytest.approx(sum(gaps) / 2) and report["met"] is (report["gap_mean"] >= 0)
    monkeypatch.setattr(siren, "fit", lambda *a, **k: pytest.fail("a finished fit was trained again"))
    siren.main(config)  # every fit is kept in work_dir
    assert json.loads((tmp_path / "out/siren.json").read_text())["pairs"] == report["pairs"]
    with pytest.raises(pytest.fail.Exception):  # another setting is another fit
        siren.main(replace(config, steps=3))


def test_distill_suite_summary_judges_the_closed_form_and_a_fine_tune():
    from eugen_nerf.bench.suites.distill import summarise

    seconds = {"load": 1.0, "probe": 1.0, "capture": 40.0, "solve": 1.0, "build": 1.0, "refine": 30.0}
    report = {"seconds": seconds, "teacher": {"psnr": 30.0}, "student": {"psnr": 29.8}, "render_speedup": 1.7}
    summary = summarise(report)
    assert summary["measured"]["closed_form_seconds"] == pytest.approx(44.0)
    assert summary["measured"]["psnr_ratio_closed_form"] == pytest.approx(29.8 / 30.0)
    assert "psnr_ratio_finetuned" not in summary["measured"]
    assert summary["met"] == {"closed_form_seconds": True, "psnr_ratio_closed_form": True, "fps_ratio": True}
    tuned = {**report, "student_closed_form": {"psnr": 29.0}, "render_speedup": 1.2}
    summary = summarise(tuned)
    assert summary["measured"]["psnr_ratio_finetuned"] == pytest.approx(29.8 / 30.0)
    assert summary["met"]["psnr_ratio_closed_form"] is False and summary["met"]["fps_ratio"] is False


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a NeRF suite's quick mode trains and evaluates runs: minutes on busy cores
@pytest.mark.parametrize("suite", list(CPU.suites))
def test_every_suite_has_a_quick_mode_that_runs(suite, tmp_path):
    if suite == "capture" and shutil.which("colmap") is None:
        pytest.skip("the capture suite runs COLMAP: install it with bash scripts/setup.sh --scenes")
    result = run_bench(suite, "--quick", "--quick-dir", str(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder = tmp_path / suite
    for name in CPU.suites[suite].outputs:
        assert (folder / name).is_file(), (name, list(folder.iterdir()))
        if name.endswith(".json"):
            assert json.loads((folder / name).read_text())
    assert (folder / COMMAND_FILE).is_file()


def test_nerf_suite_goals_judge_only_the_variants_measured():
    from eugen_nerf.bench.suites.methods import goals

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
    judged = goals(rows, {"eugen": "E", "lowrank": "L", "narrowed": "N", "narrowed-speed": "N"})
    assert judged["goal_ahead_of_every_baseline_met"] is True
    assert judged["psnr_gain_vs_narrowed_dense_db"] == pytest.approx(0.4)  # not 18.5 - 18.6
    assert judged["psnr_gain_vs_speed_matched_dense_db"] == pytest.approx(0.4)
    assert judged["goal_equal_parameters_met"] is True and judged["goal_equal_speed_met"] is True
    rows["S"] = row({0: 19.1})
    judged = goals(rows, {"eugen": "E", "lowrank": "L", "narrowed": "N", "snnk": "S"})
    assert judged["psnr_gain_vs_baselines_db"]["S"] == pytest.approx(-0.1)
    assert judged["psnr_gain_vs_baselines_db"]["N"] == pytest.approx(0.4)  # every variant the goal compares
    assert judged["goal_ahead_of_every_baseline_met"] is False
    # the dense twin too is compared seed by seed: measured at seed 0 only (a row kept from an earlier run), it
    # is 0.2 dB behind EUGen's seed 0, although EUGen's mean over three seeds (18.5) is 0.3 dB behind it
    rows["D"] = row({0: 18.8})
    judged = goals(rows, {"eugen": "E", "dense": "D"})
    assert judged["psnr_loss_vs_dense_db"] == pytest.approx(-0.2) and judged["goal_quality_met"] is True
    assert "compared_unpaired" not in judged
    rows["D"] = row({5: 18.8})  # no seed shared: the means, and the report says so
    judged = goals(rows, {"eugen": "E", "dense": "D"})
    assert judged["psnr_loss_vs_dense_db"] == pytest.approx(0.3) and judged["compared_unpaired"] == ["D"]


def test_nerf_suite_judges_later_variants_against_the_rows_measured_before():
    from eugen_nerf.bench.suites.methods import goals, keep_earlier_rows, kind_by_label, variants

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
    assert judged["fps_speedup_vs_dense"] == pytest.approx(2.0 / rows["D"]["fps"])
    # EUGen and its dense twin timed by different runs: no speed-up is published, no speed goal judged
    apart = {**rows, "D": {**rows["D"], "measured_by": "another run"}}
    unjudged = goals(apart, kept_labels)
    assert unjudged["eugen_and_dense_timed_together"] is False
    assert unjudged["fps_speedup_vs_dense"] is None and unjudged["goal_speed_and_quality_met"] is None
    assert judged["psnr_gain_vs_speed_matched_dense_db"] == pytest.approx(18.5 - 18.55)
    assert judged["goal_equal_speed_met"] is False and judged["goal_ahead_of_every_baseline_met"] is False
    assert judged["goal_equal_parameters_met"] is True
    # a run without --baselines still recognises the baselines' rows of an earlier run by their labels
    configs = variants("nerf", False, False, {"feature_map": "identity"})
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


def test_the_methods_suite_sets_the_eugen_knobs_asked_for_and_names_them_in_the_run():
    import tyro

    from eugen_nerf.bench.suites.methods import BenchMethods, overrides, timestamp, variants

    argv = ["--families", "nerf", "--num-features", "32", "--scaling", "linear", "--use-norm", "True"]
    args = tyro.cli(BenchMethods, args=argv)
    knobs = overrides(args)
    assert knobs == {"num_features": 32, "scaling": "linear", "use_norm": True}
    configs = variants("nerf", False, False, knobs)
    label, config = configs["eugen"]
    spec = config.pipeline.model.eugen
    assert (spec.num_features, spec.scaling, spec.use_norm) == (32, "linear", True)
    assert spec.feature_map == "identity" and spec.trunk_layers == (1, 2, 3, 5, 6, 7)  # the method's own
    assert label == "eugen-nerf (num-features=32, scaling=linear, use-norm=True)"
    assert timestamp(label) == "eugen-nerf_num-features32_scalinglinear_use-normTrue"
    # a baseline trained with the same knobs is kept apart from one trained with the method's own
    with_baselines = variants("nerf", False, True, knobs)
    assert with_baselines["lowrank"][0] == (
        "eugen-nerf (layer-type=lowrank, num-features=32, scaling=linear, use-norm=True)"
    )
    assert variants("nerf", False, True)["snnk"][0] == "eugen-nerf (layer-type=snnk)"
    # the dense twin is untouched, and the twin narrowed to EUGen's parameters follows the smaller m
    default_narrowed = variants("nerf", False)["narrowed"][0]
    assert configs["dense"][1].pipeline.model.eugen.trunk_layers == ()
    assert configs["narrowed"][0] != default_narrowed
    # no knob given: the method as shipped, its plain name
    assert overrides(tyro.cli(BenchMethods, args=["--families", "nerf"])) == {}
    assert variants("nerf", False)["eugen"][0] == "eugen-nerf"
    with pytest.raises(ValueError):
        variants("nerf", False, False, {"num_features": 0})


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


def test_a_report_holding_a_non_finite_figure_is_not_written_and_the_earlier_one_survives(tmp_path):
    """A methods or inference report with an inf or NaN anywhere (its own rows or those kept from earlier runs)
    is refused with the figure's path, and the report already on disk is left as it was."""
    from eugen_nerf.bench.merge import write_report
    from eugen_nerf.eval.timing import NonFiniteOutput

    path = tmp_path / "fields.json"
    write_report(path, {"families": {"nerf": {"runs": {"eugen": {"psnr": 25.0}}}}}, [("families",)])
    before = path.read_bytes()
    bad = {"families": {"zipnerf": {"runs": {"dense": {"psnr": 24.0, "fps": float("nan")}}}}}
    with pytest.raises(NonFiniteOutput, match=r"families\.zipnerf\.runs\.dense\.fps"):
        write_report(path, bad, [("families",)])
    with pytest.raises(NonFiniteOutput, match=r"per_seed\[1\]"):
        write_report(path, {"families": {"x": {"per_seed": [1.0, float("inf")]}}}, [("families",)])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["fields.json"]  # no temporary file left behind


def fake_training(config, output_dir: Path):
    """A stand-in for ``config``'s trainer set-up (training is not what is tested): its trainer writes the final
    checkpoint of a 2-step run on ``scene`` under ``output_dir`` and nothing else. Returns the list each
    training appends to, and the set-up to patch in."""
    calls: list[int] = []

    class FakeTrainer:
        def setup(self):
            pass

        def train(self):
            calls.append(1)
            models = output_dir / "scene" / config.method_name / "bench" / "nerfstudio_models"
            models.mkdir(parents=True, exist_ok=True)
            (models / "step-000000001.ckpt").write_bytes(b"")

    return calls, lambda self, **kwargs: FakeTrainer()


def test_a_finished_run_is_reused_only_for_the_same_seed_model_and_scales(tmp_path, monkeypatch):
    """A benchmark rerun must not measure a run trained at another seed, with another model default or at
    other training scales."""
    import copy

    from eugen_nerf.bench import training
    from eugen_nerf.methods.zipnerf import eugen_zipnerf

    config = copy.deepcopy(eugen_zipnerf.config)
    config.machine.seed = 3
    calls, fake_setup = fake_training(config, tmp_path / "run")
    monkeypatch.setattr(type(config), "setup", fake_setup)
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
    monkeypatch.setattr(type(config), "setup", fake_setup)
    training.train_in_process(other_model, scene, 2, tmp_path / "run", reuse=True)
    assert len(calls) == 5  # trained again, not the interrupted run's predecessor passed off as it


def test_a_finished_run_is_not_reused_once_its_scene_changed(tmp_path, monkeypatch):
    """Runs are found by the scene's path: a scene rendered again in place trains afresh, never passes the old
    scene's run off as its own."""
    import copy

    from eugen_nerf.bench import training
    from eugen_nerf.methods.zipnerf import eugen_zipnerf

    config = copy.deepcopy(eugen_zipnerf.config)
    calls, fake_setup = fake_training(config, tmp_path / "run")
    monkeypatch.setattr(type(config), "setup", fake_setup)
    scene = tmp_path / "scene"
    scene.mkdir()
    (scene / "transforms_train.json").write_text("{}")
    training.train_in_process(config, scene, 2, tmp_path / "run", reuse=True)
    training.train_in_process(config, scene, 2, tmp_path / "run", reuse=True)
    assert len(calls) == 1
    (scene / "transforms_train.json").write_text('{"frames": []}')
    training.train_in_process(config, scene, 2, tmp_path / "run", reuse=True)
    assert len(calls) == 2


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


def test_a_changed_learning_rate_is_another_run(tmp_path):
    from eugen_nerf.bench.training import same_model
    from eugen_nerf.methods.zipnerf import dense_zipnerf

    saved = copy.deepcopy(dense_zipnerf.config)
    saved.output_dir, saved.experiment_name, saved.timestamp = tmp_path, "scene", "run"
    saved.save_config()
    path = saved.get_base_dir() / "config.yml"
    changed = copy.deepcopy(dense_zipnerf.config)
    changed.optimizers["extra_group"] = copy.deepcopy(changed.optimizers["field_mlps"])
    assert same_model(path, changed)  # a group the saved run does not name is not compared
    changed.optimizers["field_mlps"]["optimizer"].lr *= 3
    assert not same_model(path, changed)
    changed = copy.deepcopy(dense_zipnerf.config)
    changed.optimizers["fields"]["scheduler"].lr_final /= 2
    assert not same_model(path, changed)
    # another seed is another run, even where no benchmark record says which seed trained it (ns-train started
    # it): a dense twin's model config does not hold the seed (its EUGen knobs are not compared), its machine does
    changed = copy.deepcopy(dense_zipnerf.config)
    changed.machine.seed += 1
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


def test_the_methods_suite_scores_a_finished_run_once_per_checkpoint_and_repeats(tmp_path, monkeypatch):
    from eugen_nerf.bench.suites import methods

    config = tmp_path / "config.yml"
    config.write_text("")
    (tmp_path / "nerfstudio_models").mkdir()
    (tmp_path / "nerfstudio_models" / "step-000000009.ckpt").write_bytes(b"weights")
    calls = []
    lpips = {"available": False}
    monkeypatch.setattr(
        methods, "lpips_unavailable_reason", lambda: None if lpips["available"] else "no weights"
    )
    monkeypatch.setattr(
        methods,
        "_measure",
        lambda path, repeats: (
            calls.append(repeats) or {"fps": len(calls), **({"lpips": 0.1} if lpips["available"] else {})}
        ),
    )
    assert methods.measure(config, 1) == methods.measure(config, 1) == {"fps": 1}
    assert methods.measure(config, 3) == {"fps": 2}  # other repeats: timed again
    assert calls == [1, 3]
    lpips["available"] = True  # the weights installed since: scored again, with LPIPS, then kept
    assert methods.measure(config, 3) == methods.measure(config, 3) == {"fps": 3, "lpips": 0.1}
    assert calls == [1, 3, 3]


def test_zipnerf_suite_goal_bounds_eugens_loss_not_its_lead():
    from eugen_nerf.bench.suites.zipnerf import twin_goals

    speeds = {"render": {"speedup": 1.3}, "field": {"speedup": 1.2}}
    for gap, met in ((+0.18, True), (0.0, True), (-0.1, True), (-0.11, False)):
        goals = twin_goals({"1/1": {"mean_db": gap}}, speeds)
        assert goals["eugen_within_0.1_db_of_dense"] is met, gap
    assert goals["eugen_render_speedup_ge_1.25"] is True and goals["eugen_field_speedup_ge_1.25"] is False


def test_the_index_says_which_results_an_earlier_setting_made(tmp_path: Path):
    suite = CPU.suites["layers"]
    folder = tmp_path / "layers"
    folder.mkdir()
    current = "python " + " ".join(suite.command(DEFAULT_PLACES))
    (folder / COMMAND_FILE).write_text(f"eugen-bench layers\n{current}\n# machine: test\n")
    assert measured_now(suite, folder / COMMAND_FILE)
    assert "earlier setting" not in render_index(CPU, tmp_path)
    (folder / COMMAND_FILE).write_text(
        "eugen-bench layers\npython -m eugen_nerf.bench.suites.layers --points 8\n"
    )
    assert not measured_now(suite, folder / COMMAND_FILE)
    assert "**Measured with an earlier setting of the suite**" in render_index(CPU, tmp_path)


def test_distill_suite_variants_define_themselves_and_finished_students_are_reused(monkeypatch, tmp_path):
    from eugen_nerf.bench.suites import distill as suite

    given = {"refine_steps": 2, "finetune_steps": 5}
    assert (
        suite.variant_overrides("closed-form", given)["refine_steps"] == 0
    )  # the variant's own setting wins
    assert (
        suite.variant_overrides("finetuned", given)["finetune_steps"] == 5
    )  # a given fine-tune length stays
    assert "refine_steps" not in suite.variant_overrides(
        "lowrank", given
    )  # a low-rank layer has no G to refine
    options = suite.variant_options(tmp_path / "teacher", "snnk", {}, tmp_path / "student")
    assert options.eugen.layer_type == "snnk" and options.overwrite
    assert suite.variant_options(tmp_path / "t", "default", {}, tmp_path / "s").eugen == suite.distill_spec()

    calls = []

    def fake_distill(options):
        calls.append(options)
        options.output_dir.mkdir(parents=True, exist_ok=True)
        (options.output_dir / "config.yml").write_text("")
        report = {"teacher": {"psnr": 30.0}, "student": {"psnr": 29.9}, "finetune_losses": [1.0]}
        return type("Result", (), {"report": report})()

    monkeypatch.setattr(suite, "distill", fake_distill)
    teacher = tmp_path / "teachers" / "shiny128" / "dense-nerf" / "paper"
    teacher.mkdir(parents=True)
    first = suite.distilled(teacher, "snnk", {}, tmp_path / "work")
    assert calls[0].output_dir == tmp_path / "work" / "shiny128-paper" / "snnk"
    assert "finetune_losses" not in first
    assert suite.distilled(teacher, "snnk", {}, tmp_path / "work") == first and len(calls) == 1  # reused
    suite.distilled(teacher, "snnk", {"refine_steps": 9}, tmp_path / "work")  # other options: distilled again
    assert len(calls) == 2
    # timed on another clock: distilled (and timed) again; the default clock keeps former students reusable
    suite.distilled(teacher, "snnk", {"refine_steps": 9, "fps_clock": "wall"}, tmp_path / "work")
    assert len(calls) == 2
    suite.distilled(teacher, "snnk", {"refine_steps": 9, "fps_clock": "cpu"}, tmp_path / "work")
    assert len(calls) == 3 and calls[-1].fps_clock == "cpu"
    calls.pop()
    # eugen-distill's defaults change: a student of the former defaults is not reused
    suite.distilled(teacher, "default", {}, tmp_path / "work")
    assert len(calls) == 3
    former = suite.variant_options

    def other_defaults(*args):
        return replace(former(*args), width_fraction=1 / 4)

    monkeypatch.setattr(suite, "variant_options", other_defaults)
    suite.distilled(teacher, "default", {}, tmp_path / "work")
    assert len(calls) == 4 and calls[-1].width_fraction == 1 / 4
    # the teacher trained again (or replaced) at the same path: its students are distilled again
    checkpoints = teacher / "nerfstudio_models"
    checkpoints.mkdir()
    (checkpoints / "step-000000999.ckpt").write_bytes(b"first")
    suite.distilled(teacher, "snnk", {}, tmp_path / "work")
    assert len(calls) == 5
    suite.distilled(teacher, "snnk", {}, tmp_path / "work")
    assert len(calls) == 5  # the same checkpoint: reused
    (checkpoints / "step-000000999.ckpt").write_bytes(b"other")
    suite.distilled(teacher, "snnk", {}, tmp_path / "work")
    assert len(calls) == 6


def test_distill_suite_trains_the_teacher_method_asked_for_and_checks_its_variants_first(
    monkeypatch, tmp_path
):
    import sys

    from eugen_nerf.bench.suites import distill as suite

    nerf_config, zipnerf_config = (make() for make, _ in suite.TEACHER_METHODS.values())
    assert (nerf_config.method_name, zipnerf_config.method_name) == ("dense-nerf", "dense-zipnerf")
    assert zipnerf_config.pipeline.model.log2_hashmap_size == 16  # the CPU preset, the MLPs at full width
    assert zipnerf_config.pipeline.model.hidden_dim_color == 256
    trained = []
    monkeypatch.setattr(
        suite,
        "train_to_plateau",
        lambda config, scene, out, rule, **kw: (
            trained.append((config.method_name, out, rule, kw["timestamp"]))
            or (out / "config.yml", {"history": [{"step": 4}]})
        ),
    )
    scene = tmp_path / "scene"
    scene.mkdir()
    (scene / "transforms.json").write_text("{}")  # a nerfstudio-format scene is accepted, as a Blender one
    argv = [
        "distill",
        "--scene",
        str(scene),
        "--teachers",
        str(tmp_path / "t"),
        "--teacher-method",
        "dense-zipnerf",
    ]
    monkeypatch.setattr(
        sys, "argv", [*argv, "--teacher-only", "--teacher-max-steps", "40", "--teacher-eval-every", "4"]
    )
    suite.main()
    method, out, rule, timestamp = trained[0]
    assert (method, out, timestamp) == ("dense-zipnerf", tmp_path / "t", "cpu")
    assert (rule.max_steps, rule.eval_every, rule.min_steps) == (40, 4, suite.TEACHER_RULE.min_steps)
    # an unknown variant is refused before any teacher trains
    monkeypatch.setattr(sys, "argv", [*argv, "--variants", "default", "widest"])
    with pytest.raises(SystemExit) as stop:
        suite.main()
    assert stop.value.code == 2 and len(trained) == 1


def test_nerf_suite_times_every_run_side_by_side_and_measures_its_render_memory(monkeypatch):
    """The rows' render FPS come from one interleaved timing of every run (here the shipped teacher twice, on
    the CPU clock) and their render memory from a fresh process each; the speed goal compares those."""
    from eugen_nerf.bench.suites import methods

    teacher = ROOT / "teachers" / "bunny64" / "dense-nerf" / "shipped" / "config.yml"
    measured = []
    monkeypatch.setattr(
        methods,
        "render_memory",
        lambda path, view, size, device: (
            measured.append((path, view, size)) or {"render_memory_bytes": 100, "render_memory_kind": "rss"}
        ),
    )
    figures = methods.side_by_side({"A": teacher, "B": teacher}, view=1, repeats=2, clock="cpu", size=12)
    assert set(figures) == {"A", "B"} and measured == [(teacher, 1, 12), (teacher, 1, 12)]
    for row in figures.values():
        assert row["timing"]["clock"] == "cpu" and row["timing"]["view"] == 1
        assert row["timing"]["resolution"] == [12, 12]
        assert len(row["timing"]["seconds"]) == 2 and row["fps"] > 0
        height, width = row["timing"]["resolution"]
        assert row["rays_per_sec"] == pytest.approx(row["fps"] * height * width)
        assert row["render_memory_bytes"] == 100
    rows = {
        "E": {"psnr": 20.0, "fps": 1.3, "render_memory_bytes": 70, "per_seed": [{"seed": 0, "psnr": 20.0}]},
        "D": {
            "psnr": 20.05,
            "fps": 1.0,
            "render_memory_bytes": 100,
            "per_seed": [{"seed": 0, "psnr": 20.05}],
        },
    }
    zipnerf = methods.goals(rows, {"eugen": "E", "dense": "D"}, methods.GOAL_SPEEDUP["zipnerf"])
    assert zipnerf["goal_speed_and_quality_met"] is True and zipnerf["render_memory_ratio_vs_dense"] == 0.7
    assert (
        methods.goals(rows, {"eugen": "E", "dense": "D"}, methods.GOAL_SPEEDUP["nerf"])[
            "goal_speed_and_quality_met"
        ]
        is False
    )


def test_a_table_cell_whose_figure_is_null_reads_its_default_or_not_yet_measured(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"speedup": None, "memory": 0.57}))
    spec = {
        "tables": {
            "t": {
                "header": ["speed", "speed and memory", "with a default"],
                "rows": [
                    [
                        {"file": "a.json", "key": "speedup", "fmt": "{:.2f}×"},
                        {"file": "a.json", "key": ["speedup", "memory"], "fmt": "{:.2f}×; {:.2f}×"},
                        {"file": "a.json", "key": "speedup", "fmt": "{:.2f}×", "default": "pending"},
                    ]
                ],
            }
        }
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert Tables(tmp_path / "spec.yaml", tmp_path).render("t").splitlines()[2] == (
        "| not yet measured | not yet measured | pending |"
    )
    # an absent key without a default is still an error: a misspelt key must not read as "not measured"
    spec["tables"]["t"]["rows"][0][0]["key"] = "speedupp"
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError):
        Tables(tmp_path / "spec.yaml", tmp_path).render("t")


def test_a_table_cell_indexes_lists_and_scales_numbers_but_not_flags(tmp_path):
    (tmp_path / "a.json").write_text(
        json.dumps({"results": [{"bytes": 9_501_872_128}, {"bytes": 6_547_713_536}], "met": True})
    )
    spec = {
        "tables": {
            "t": {
                "header": ["memory (GB)", "met"],
                "rows": [
                    [
                        {
                            "file": "a.json",
                            "key": ["results.0.bytes", "results.1.bytes"],
                            "scale": 1e-9,
                            "fmt": "{:.2f} / {:.2f}",
                        },
                        {"file": "a.json", "key": "met", "scale": 1e-9, "map": {True: "yes", False: "no"}},
                    ]
                ],
            }
        }
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert Tables(tmp_path / "spec.yaml", tmp_path).render("t").splitlines()[2] == "| 9.50 / 6.55 | yes |"
    spec["tables"]["t"]["rows"][0][0]["key"] = "results.2.bytes"  # past the list's end: an error, not a blank
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError):
        Tables(tmp_path / "spec.yaml", tmp_path).render("t")


@pytest.mark.slow
def test_step_time_mode_times_each_variant_from_initial_weights_and_keeps_nothing_else(
    tmp_path, monkeypatch, capsys
):
    from eugen_nerf.bench.suites import methods

    out = tmp_path / "nerf.json"
    args = ("--scene", ROOT / "scenes/bunny32", "--families", "nerf", "--step-time", "2", "--repeats", "2")
    args += ("--output-dir", tmp_path / "runs", "--out", out)
    monkeypatch.setattr("sys.argv", ["methods", *map(str, args)])
    methods.main()
    lines = [line.strip() for line in capsys.readouterr().out.splitlines() if " s a step" in line]
    assert [line.split(":")[0] for line in lines] == ["eugen-nerf", "dense-nerf"]
    seconds = [float(re.search(r": ([0-9.]+) s a step", line).group(1)) for line in lines]
    assert all(s > 0 for s in seconds)
    assert "1.00x the dense twin's speed" in lines[1]
    assert not out.exists()  # nothing measured but the steps


def test_dense_run_trains_the_dense_twin_in_the_folder_given_and_refuses_one_of_another_method(
    tmp_path, monkeypatch, capsys
):
    from eugen_nerf.bench.suites import methods

    def run(*extra):
        args = (
            "--scene",
            ROOT / "scenes/bunny32",
            "--families",
            "zipnerf",
            "--output-dir",
            tmp_path / "runs",
        )
        monkeypatch.setattr("sys.argv", ["methods", *map(str, (*args, "--out", tmp_path / "f.json", *extra))])
        methods.main()

    for extra in (
        ("--dense-run", tmp_path / "t/bunny32/dense-zipnerf/cpu"),  # without --plateau
        ("--plateau", "--dense-run", tmp_path / "t/bunny32/dense-nerf/cpu"),  # another method's run
        ("--plateau", "--dense-run", tmp_path / "t/garden200/dense-zipnerf/cpu"),  # another scene's
    ):
        with pytest.raises(SystemExit):
            run(*extra)
        assert "--dense-run" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "f.json").exists()

    places = []

    def train_to_plateau(config, scene, where, rule, name, label):  # records where, trains nothing
        places.append((where, name, config.machine.seed))
        raise KeyboardInterrupt

    monkeypatch.setattr(methods, "train_to_plateau", train_to_plateau)
    with pytest.raises(KeyboardInterrupt):
        run("--plateau", "--dense-run", tmp_path / "t/bunny32/dense-zipnerf/cpu", "--seeds", "42")
    assert places == [(tmp_path / "t", "cpu", 42)]


def test_the_methods_plot_shows_a_tie_on_a_psnr_axis_of_at_least_a_db(tmp_path, monkeypatch):
    """Two runs 0.04 dB apart: the quality panels span a dB around them, not the autoscaled gap."""
    import matplotlib.pyplot as plt

    from eugen_nerf.bench.suites import methods

    closed = []
    monkeypatch.setattr(plt, "close", lambda fig=None: closed.append(fig))
    run = {"fps": 0.05, "parameters": 1_000_000, "rays_per_sec": 800.0}
    report = {
        "scene": "scenes/branches128",
        "steps": 8000,
        "device": "cpu (1 threads)",
        "families": {
            "nerf": {
                "runs": {
                    "eugen-nerf": {**run, "kind": "eugen", "psnr": 26.19, "fps": 0.08},
                    "dense-nerf": {**run, "kind": "dense", "psnr": 26.15},
                }
            }
        },
    }
    methods.plot(report, tmp_path / "nerf.png")
    assert (tmp_path / "nerf.png").stat().st_size > 0
    for axis in closed[0].axes[:2]:
        low, high = axis.get_ylim()
        assert high - low >= 1.0 and low < 26.15 and 26.19 < high
