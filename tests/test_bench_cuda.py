"""``python -m eugen_nerf.bench.cuda``: runs with torch alone (the training stack blocked), refuses a machine
without CUDA and missing exports with one line, and its heads are the models' defaults."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from eugen_nerf.bench import cuda

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = (
    "nerfstudio",
    "tyro",
    "yaml",
    "rich",
    "PIL",
    "imageio",
    "scipy",
    "matplotlib",
    "tinycudann",
    "torchmetrics",
)
"""What the lent GPU machine lacks (it has torch, numpy and safetensors)."""
WRAPPER = f"""
import runpy, sys
BLOCKED = {BLOCKED!r}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"blocked on the GPU machine: {{name}}")
        return None
sys.meta_path.insert(0, Block())
sys.argv = ["eugen_nerf.bench.cuda", *sys.argv[1:]]
runpy.run_module("eugen_nerf.bench.cuda", run_name="__main__", alter_sys=True)
"""


def run_blocked(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WRAPPER, *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error" in line]


def check_tiny_result(out: Path, done: subprocess.CompletedProcess, compiled: bool) -> dict:
    result = json.loads((out / "cuda.json").read_text())
    assert done.returncode == (1 if result["errors"] else 0), done.stderr[-3000:]
    assert result["finite"] is True
    assert result["machine"]["torch"] == torch.__version__
    assert result["tiny"] is True
    assert set(result["mlps"]) == {head.name for head in cuda.HEADS}
    for name, entry in result["mlps"].items():
        rows = entry["results"]
        # every variant, precision and compile mode is there (compiled: dense and fused)
        keys = {(r["variant"], r["precision"], r["compile"]) for r in rows}
        expected = {(v, p, False) for v in ("dense", "eugen-unfused", "eugen-fused") for p in cuda.PRECISIONS}
        expected |= {(v, p, True) for v in ("dense", "eugen-fused") for p in cuda.PRECISIONS}
        assert keys == expected, name
        for row in rows:
            if row["compile"] and not compiled:
                assert row["skipped"] == "not requested (--no-compile)", (name, row)
            elif "error" in row:  # a failure is recorded on one line, and listed
                assert "\n" not in row["error"] and row["error"] in result["errors"], (name, row)
            else:
                assert row["finite"] is True, (name, row)
                assert math.isfinite(row["points_per_s"]) and row["points_per_s"] > 0, (name, row)
        measured = [r for r in rows if "points_per_s" in r]
        assert {(r["variant"], r["precision"]) for r in measured} >= {
            ("dense", "fp32"),
            ("eugen-unfused", "fp32"),
            ("eugen-fused", "fp32"),
            ("dense", "bf16"),
        }, name
        assert entry["parameters"]["eugen"] < entry["parameters"]["dense"], name
    renders = result["renders"]
    for name in cuda.FIELDS:
        rows = renders[name]["results"]
        assert {(r["resolution"], r["precision"]) for r in rows} == {
            (res, p) for res in (8, 12, 24) for p in cuda.PRECISIONS
        }
        for row in rows:
            assert row["finite"] is True and row["fps"] > 0, (name, row)
            assert row["extrapolated"] == (row["resolution"] == 24)
            assert row["render_memory_bytes"] is None  # CPU: no allocator peak to read
            if not row["extrapolated"]:  # where a whole frame's time goes: the field MLPs and the rest
                split = row["time_split"]
                assert 0 < split["field_mlps_s"] <= split["frame_s"], (name, row)
                assert split["rest_s"] == pytest.approx(split["frame_s"] - split["field_mlps_s"])
    assert set(renders["student_over_teacher"]) == {
        f"{r}px-{p}" for r in (8, 12, 24) for p in cuda.PRECISIONS
    }
    assert all(v["render_speedup"] > 0 for v in renders["student_over_teacher"].values())
    assert all(
        (v["field_mlps_speedup"] is None) == v["extrapolated"]
        for v in renders["student_over_teacher"].values()
    )
    training = result["training"]
    assert set(training) == {head.name for head in cuda.HEADS}
    for name, entry in training.items():
        assert entry["eikonal"] == (name == "isdf")
        rows = {(r["variant"], r["precision"], r["compile"]): r for r in entry["results"]}
        assert set(rows) == {
            (v, p, c) for v in ("dense", "eugen") for p in cuda.TRAINING_PRECISIONS for c in (False, True)
        }
        for (variant, precision, compile_), row in rows.items():
            if compile_ and entry["eikonal"]:
                assert "double backward" in row["skipped"], (name, row)
            elif compile_ and not compiled:
                assert row["skipped"] == "not requested (--no-compile)", (name, row)
            elif "error" not in row:
                assert row["finite"] is True and row["median_s"] > 0, (name, row)
        assert entry["eugen_speedup_over_dense"]["fp32"] > 0, name
    return result


def test_a_training_step_computes_gradients_and_leaves_none_behind():
    """The timed step runs backward through every parameter (the eikonal step through the input gradient
    too) and clears the gradients, so repeated steps time the same work."""
    head = next(h for h in cuda.HEADS if h.name == "isdf")
    mlp = head.mlp(eugen=True).train()
    points = torch.rand(16, head.in_dim) * 2 - 1
    seen = []
    for p in mlp.parameters():
        p.register_hook(lambda grad, seen=seen: seen.append(bool(torch.isfinite(grad).all())) or grad)
    loss = cuda.training_step(mlp, points, "fp32", eikonal=True)()
    assert torch.isfinite(loss) and loss.ndim == 0
    trainable = [p for p in mlp.parameters() if p.requires_grad]
    assert len(seen) >= len(trainable) and all(seen)
    assert all(p.grad is None for p in mlp.parameters())


def test_tiny_cpu_run_with_the_training_stack_blocked(tmp_path):
    out = tmp_path / "out"
    done = run_blocked("--device", "cpu", "--tiny", "--no-compile", "--out", str(out), "--commit", "0123abc")
    result = check_tiny_result(out, done, compiled=False)
    assert set(result["renders"]["not_rendered"]) == set(cuda.OPTIONAL_FIELDS)  # none in a clone
    # the code that ran is named even where .git is stale: the commit given, and a hash of the sources
    assert result["commit"] == "0123abc"
    assert result["source_sha256"] == cuda.source_sha256() and len(result["source_sha256"]) == 64


def test_zipnerf_pair_is_rendered_when_its_exports_are_present(tmp_path):
    """With the optional Zip-NeRF exports beside the shipped pair (here tiny unbounded ones), the renders hold
    both comparisons; without them, cuda.json names the commands that make them."""
    from test_export_zipnerf import export_tiny, tiny_zipnerf_run

    fields = tmp_path / "fields"
    for name in cuda.FIELDS:
        (fields / name).mkdir(parents=True)
        (fields / name / "field.eugen").symlink_to(
            ROOT / "benchmarks" / "cuda" / "fields" / name / "field.eugen"
        )
    for name, method in (("dense-zipnerf", "dense-zipnerf"), ("eugen-distill-zipnerf", "eugen-zipnerf")):
        export_tiny(tiny_zipnerf_run(method, unbounded=True), fields / name)
    out = tmp_path / "out"
    done = run_blocked(
        "--device", "cpu", "--tiny", "--no-compile", "--out", str(out), "--fields", str(fields)
    )
    assert done.returncode == 0, done.stderr[-2000:]
    renders = json.loads((out / "cuda.json").read_text())["renders"]
    assert "not_rendered" not in renders
    assert renders["dense-zipnerf"]["head"] == "zipnerf"
    for key in ("student_over_teacher", "zipnerf_student_over_teacher"):
        assert set(renders[key]) == {f"{r}px-{p}" for r in (8, 12, 24) for p in cuda.PRECISIONS}
        assert all(
            math.isfinite(v["render_speedup"]) and v["render_speedup"] > 0 for v in renders[key].values()
        )
    split = renders["eugen-distill-zipnerf"]["results"][0]["time_split"]
    assert 0 < split["field_mlps_s"] <= split["frame_s"]  # the view and density MLPs were timed


@pytest.mark.slow
def test_tiny_cpu_run_compiled(tmp_path):
    out = tmp_path / "out"
    done = run_blocked("--device", "cpu", "--tiny", "--out", str(out))
    result = check_tiny_result(out, done, compiled=True)
    compiled = [
        r for e in result["mlps"].values() for r in e["results"] if r["compile"] and "points_per_s" in r
    ]
    assert len(compiled) >= 4


def test_fused_mlp_with_a_skip_runs_under_bf16_autocast():
    """The skip step adds in place, which autocast does not cast: it must match the bf16 rows itself."""
    head = next(h for h in cuda.HEADS if h.name == "nerf-trunk")
    mlp = head.mlp(eugen=True).eval()
    points = torch.rand(64, head.in_dim)
    with torch.no_grad():
        exact = mlp(points)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = mlp(points).float()
    assert torch.isfinite(out).all()
    assert (out - exact).norm() <= 0.05 * exact.norm()  # bf16 keeps about 3 significant digits per step


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal needs one without")
def test_no_cuda_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    done = run_blocked("--out", str(out))
    assert done.returncode == 2
    assert error_lines(done.stderr) == [f"{cuda.PROG}: error: {cuda.NO_CUDA}"]
    assert not out.exists()


def test_missing_export_is_one_line_naming_file_and_command(tmp_path):
    out, fields = tmp_path / "out", tmp_path / "fields"
    done = run_blocked("--device", "cpu", "--tiny", "--out", str(out), "--fields", str(fields))
    assert done.returncode == 2
    [line] = error_lines(done.stderr)
    assert str(fields / "dense-nerf" / "field.eugen") in line and "eugen-export" in line
    assert not out.exists()


def test_cpu_without_tiny_and_an_unknown_device_are_refused(tmp_path, capsys):
    assert cuda.main(["--device", "cpu", "--out", str(tmp_path / "out")]) == 2
    assert cuda.main(["--device", "gpu", "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and "--tiny" in lines[0] and "'gpu' is not a torch device" in lines[1]
    assert not (tmp_path / "out").exists()


def test_heads_are_the_models_defaults():
    """The bench restates each head's sizes and EUGen defaults (the models import nerfstudio); they agree."""
    from eugen_nerf.fields import isdf, nerfacto, zipnerf
    from eugen_nerf.fields.nerf import EUGenNeRFField
    from eugen_nerf.models.nerf import NeRFEUGenConfig
    from eugen_nerf.models.nerfacto import NerfactoEUGenConfig
    from eugen_nerf.models.zipnerf import ZipNeRFEUGenConfig

    heads = {head.name: head for head in cuda.HEADS}
    nerf = NeRFEUGenConfig()
    trunk = EUGenNeRFField(nerf, trunk_layers=nerf.trunk_layers).trunk
    isdf_field = isdf.ISDFField(isdf.ISDFFieldConfig())
    configs = {
        "nerf-trunk": (nerf, nerf.trunk_layers, trunk),
        "zipnerf-view": (ZipNeRFEUGenConfig(), ZipNeRFEUGenConfig().view_layers, None),
        "nerfacto-color": (NerfactoEUGenConfig(), NerfactoEUGenConfig().color_layers, None),
        "isdf": (isdf.ISDFEUGenConfig(), isdf.ISDFEUGenConfig().layers, isdf_field.mlp),
    }
    for name, (config, layers, mlp) in configs.items():
        head = heads[name]
        assert head.eugen_layers == tuple(layers), name
        for knob in ("num_features", "degree", "feature_map", "use_norm", "scaling"):
            assert getattr(head.spec, knob) == getattr(config, knob), (name, knob)
        if mlp is not None:
            built = head.mlp(eugen=True)
            assert (built.in_dim, built.num_layers, built.layer_width, built.out_dim) == (
                mlp.in_dim,
                mlp.num_layers,
                mlp.layer_width,
                mlp.out_dim,
            ), name
            assert built.skip_connections == mlp.skip_connections and built.layer_types == mlp.layer_types, (
                name
            )
    assert heads["zipnerf-view"].in_dim == 256 + 3 * (1 + 2 * zipnerf.DIRECTION_FREQUENCIES)
    assert heads["zipnerf-view"].num_layers == zipnerf.VIEW_LAYERS
    assert heads["nerfacto-color"].num_layers == nerfacto.COLOR_LAYERS


def test_a_smoke_or_failed_run_never_replaces_the_published_figures(tmp_path, monkeypatch):
    """``--tiny`` writes under outputs/ by default; a run with a non-finite figure or a failed measurement
    writes ``cuda.failed.json`` and leaves ``cuda.json`` as it was."""
    assert cuda.parse(["--tiny"]).out is None  # resolved in main: outputs/cuda-tiny
    good = {"finite": True, "errors": []}
    assert cuda.result_path(tmp_path, good) == tmp_path / "cuda.json"
    assert cuda.result_path(tmp_path, {**good, "finite": False}).name == "cuda.failed.json"
    assert cuda.result_path(tmp_path, {**good, "errors": ["RuntimeError: x"]}).name == "cuda.failed.json"
    assert cuda.count_skipped({"a": [{"skipped": "time"}, {"x": 1.0}], "b": {"skipped": "budget"}}) == 2

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cuda, "load_fields", lambda folder, device: {})
    monkeypatch.setattr(cuda, "bench_mlps", lambda settings: {"head": {"results": [{"finite": False}]}})
    monkeypatch.setattr(cuda, "bench_renders", lambda fields, settings: {})
    monkeypatch.setattr(cuda, "bench_training", lambda settings: {})
    assert cuda.main(["--device", "cpu", "--tiny", "--no-compile"]) == 1
    assert sorted(p.name for p in (tmp_path / "outputs" / "cuda-tiny").iterdir()) == ["cuda.failed.json"]
    assert not (tmp_path / "benchmarks").exists()
