"""eugen-export and the reference renderer: an exported tiny run renders as nerfstudio renders it, the format
round-trips and refuses what it cannot read, the renderer works with nerfstudio blocked, bad runs are refused
in one line with nothing written."""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _tiny import small_method_config

from eugen_nerf.export import format as fmt
from eugen_nerf.export.field import load_export
from eugen_nerf.export.render import Sampling, render_view

REPO = Path(__file__).resolve().parents[1]
SCENE = REPO / "scenes" / "bunny32"
STEPS = 30
GRID = 16
"""A coarse occupancy grid keeps the tiny exports fast (the grid's baking is most of an export)."""


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(-10 * torch.log10(((a - b) ** 2).mean().clamp_min(1e-20)))


def export_run(config_path: Path, output: Path, dtype: str = "float32") -> Path:
    from eugen_nerf.eval.runs import load_run
    from eugen_nerf.export.exporter import ExportOptions, build_export

    run = load_run(config_path, device="cpu")
    header, buffers = build_export(run, ExportOptions(dtype=dtype, grid_resolution=GRID))
    output.mkdir(parents=True, exist_ok=True)
    fmt.write(output / fmt.FILE_NAME, header, buffers)
    return output


def train_tiny_runs(root: Path) -> dict[str, Path]:
    """``config.yml`` of a tiny dense NeRF and a tiny EUGen NeRF (norm rows, degree 2, linear scaling)."""
    from eugen_nerf.bench.training import train_in_process

    runs = {}
    for method in ("dense-nerf", "eugen-nerf"):
        config = small_method_config(method)
        if method == "eugen-nerf":  # the norm-row path; test_default_eugen_trunk_* covers the default
            config.pipeline.model.eugen.scaling = "linear"
            config.pipeline.model.eugen.use_norm = True
        runs[method] = train_in_process(config, SCENE, STEPS, root, timestamp=method)[0]
    return runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory, one_thread) -> dict[str, Path]:
    return train_tiny_runs(tmp_path_factory.mktemp("export_runs"))


@pytest.fixture(scope="module")
def exports(runs, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("exports")
    return {method: export_run(path, root / method) for method, path in runs.items()}


def assert_renders_as_nerfstudio(config_path: Path, export: Path, views: int | None = None) -> None:
    """The export's reference render of each eval view (the first ``views``) is nerfstudio's to > 60 dB."""
    from eugen_nerf.eval.runs import final_rgb, load_run

    run = load_run(config_path, device="cpu")
    exported = load_export(export, device="cpu")
    cameras = run.pipeline.datamanager.eval_dataset.cameras
    assert len(exported.cameras) == len(cameras)
    for view in range(len(cameras))[:views]:
        with torch.no_grad():
            expected = final_rgb(run.model.get_outputs_for_camera(cameras[view : view + 1])).clamp(0, 1)
        got = render_view(exported, view, Sampling(kind="nerfstudio"))
        assert got.shape == expected.shape
        assert psnr(got, expected) > 60, f"view {view}: {psnr(got, expected):.1f} dB"


@pytest.mark.parametrize("method", ["dense-nerf", "eugen-nerf"])
def test_reference_render_equals_nerfstudio(runs, exports, method):
    assert_renders_as_nerfstudio(runs[method], exports[method])


def test_default_eugen_trunk_exports_and_renders_as_nerfstudio(tmp_path, one_thread):
    """eugen-nerf as configured by default (projected scaling, no norm entry, the trunk trained merged: its
    parameters are the merged matrices, written as they are): no norm rows in the export, the scaling written
    per step, and the reference render equal to nerfstudio's."""
    from eugen_nerf.bench.training import train_in_process
    from eugen_nerf.eval.runs import load_run
    from eugen_nerf.layers import MergedMLP

    config = small_method_config("eugen-nerf")
    spec = config.pipeline.model.eugen
    assert spec.scaling == "projected" and not spec.use_norm
    run = train_in_process(config, SCENE, STEPS, tmp_path / "runs", timestamp="default")[0]
    assert isinstance(load_run(run, device="cpu").model.field_fine.trunk, MergedMLP)
    export = export_run(run, tmp_path / "export")
    steps = fmt.read(export).header["fields"]["fine"]["trunk"]["steps"]
    eugen_steps = [step for step in steps if step["kind"] == "eugen"]
    assert len(eugen_steps) == len(spec.trunk_layers)
    assert all(step["scaling"] == "projected" and not step["norm_rows"] for step in eugen_steps)
    assert_renders_as_nerfstudio(run, export, views=1)


def test_a_trunk_trained_layer_by_layer_exports_and_renders_as_nerfstudio(tmp_path, one_thread):
    """eugen-nerf with --pipeline.model.eugen.train-merged False: each layer's A and G, merged at export, and
    the reference render equal to nerfstudio's."""
    from eugen_nerf.bench.training import train_in_process
    from eugen_nerf.eval.runs import load_run
    from eugen_nerf.layers import EUGenMLP

    config = small_method_config("eugen-nerf")
    config.pipeline.model.eugen.train_merged = False
    run = train_in_process(config, SCENE, STEPS, tmp_path / "runs", timestamp="apart")[0]
    assert isinstance(load_run(run, device="cpu").model.field_fine.trunk, EUGenMLP)
    export = export_run(run, tmp_path / "export")
    steps = fmt.read(export).header["fields"]["fine"]["trunk"]["steps"]
    assert sum(step["kind"] == "eugen" for step in steps) == len(config.pipeline.model.eugen.trunk_layers)
    assert_renders_as_nerfstudio(run, export, views=1)


def test_a_distorted_camera_renders_as_nerfstudio(runs, tmp_path):
    """Test cameras with OpenCV lens distortion (a COLMAP capture's) keep it in the export, and the reference
    renderer's rays are nerfstudio's, undistorted the same way."""
    from eugen_nerf.eval.runs import final_rgb, load_run
    from eugen_nerf.export.exporter import ExportOptions, build_export

    run = load_run(runs["dense-nerf"], device="cpu")
    cameras = run.pipeline.datamanager.eval_dataset.cameras
    lens = torch.tensor([-0.08, 0.02, 0.0, 0.0, 0.004, -0.003])
    cameras.distortion_params = lens.expand(len(cameras), 6).clone()
    header, buffers = build_export(run, ExportOptions(grid_resolution=GRID))
    assert header["cameras"][0]["distortion"] == pytest.approx(lens.tolist())
    fmt.write(tmp_path / fmt.FILE_NAME, header, buffers)
    exported = load_export(tmp_path, device="cpu")
    with torch.no_grad():
        expected = final_rgb(run.model.get_outputs_for_camera(cameras[0:1])).clamp(0, 1)
    got = render_view(exported, 0, Sampling(kind="nerfstudio"))
    assert psnr(got, expected) > 60, f"{psnr(got, expected):.1f} dB"
    # the rays themselves: nerfstudio's directions (the export's frame differs by a shift and a scale only)
    from eugen_nerf.export.render import camera_rays

    theirs = cameras[0:1].generate_rays(camera_indices=0).directions.reshape(-1, 3)
    ours = camera_rays(exported.cameras[0])[1]
    assert (ours - theirs).abs().max() < 1e-5
    pinhole = camera_rays(dataclasses.replace(exported.cameras[0], distortion=(0.0,) * 6))[1]
    assert (pinhole - theirs).abs().max() > 1e-3, "the lens changes nothing here: the test would show nothing"


def test_eugen_export_holds_the_merged_chain(exports):
    """The EUGen trunk is written feature to feature: its EUGen steps (but the last) carry no output matrix."""
    header = fmt.read(exports["eugen-nerf"]).header
    steps = header["fields"]["fine"]["trunk"]["steps"]
    kinds = [step["kind"] for step in steps]
    assert kinds == ["dense", "eugen", "eugen", "eugen", "dense", "eugen", "eugen", "eugen"]
    assert all(step.get("out_weight") is None for step in steps)
    assert any(step["norm_rows"] for step in steps if step["kind"] == "eugen")  # ||h|| from the features


def test_float16_export_renders_close_to_float32(runs, exports, tmp_path):
    half = load_export(export_run(runs["eugen-nerf"], tmp_path / "half", dtype="float16"), device="cpu")
    full = load_export(exports["eugen-nerf"], device="cpu")
    assert fmt.read(tmp_path / "half").header["dtype"] == "float16"
    assert (tmp_path / "half" / fmt.FILE_NAME).stat().st_size < (
        exports["eugen-nerf"] / fmt.FILE_NAME
    ).stat().st_size
    assert psnr(render_view(half, 0, Sampling(samples=64)), render_view(full, 0, Sampling(samples=64))) > 40


def test_march_options_keep_the_picture(exports):
    """Occupancy skipping over a grid that covers every sample changes nothing; early termination changes a
    pixel by at most the transmittance it stops at."""
    exported = load_export(exports["dense-nerf"], device="cpu")
    plain = render_view(
        exported, 0, Sampling(samples=48, occupancy=False, early_termination=False, min_weight=0)
    )
    everywhere = dataclasses.replace(
        exported,
        occupancy=torch.ones_like(exported.occupancy),
        bounds=torch.tensor([[-7.0] * 3, [7.0] * 3]),  # far 6 from a camera 4 away: every sample inside
    )
    skipped = render_view(everywhere, 0, Sampling(samples=48, early_termination=False, min_weight=0))
    assert torch.allclose(skipped, plain, atol=1e-6)
    stopped = render_view(everywhere, 0, Sampling(samples=48, termination=0.05, min_weight=0))
    assert (stopped - plain).abs().max() <= 0.05 + 1e-6


CHAINS = {
    "identity, linear scaling, norm": {"feature_map": "identity"},
    "relu, unit scaling, no norm": {"feature_map": "relu", "scaling": "unit", "use_norm": False},
    "identity, projected scaling, no norm": {
        "feature_map": "identity",
        "scaling": "projected",
        "use_norm": False,
    },
    "softplus, projected scaling, norm": {"feature_map": "softplus", "scaling": "projected"},
    "sin, degree 3": {"feature_map": "sin", "degree": 3, "num_features": 6},
    "softplus, polynomial": {"feature_map": "softplus", "scaling": "polynomial"},
    "teacher's units (one projection for all orders)": {
        "feature_map": "relu",
        "scaling": "polynomial",
        "use_norm": False,
    },
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_exported_mlp_computes_the_layers(name):
    """An exported MLP (merged steps) computes what the EUGen layers compute, one by one: every step kind,
    feature map and scaling, norm rows from the features, a skip connection and a materialised last layer."""
    from eugen_nerf.export.exporter import _Writer, export_mlp
    from eugen_nerf.export.field import mlp_from_header
    from eugen_nerf.layers import EUGenMLP, EUGenSpec
    from eugen_nerf.layers.fused import FusedMLP

    torch.manual_seed(0)
    spec = EUGenSpec(
        num_features=CHAINS[name].pop("num_features", 8), trainable_projections=True, **CHAINS[name]
    )
    mlp = EUGenMLP(
        7,
        6,
        16,
        5,
        skip_connections=(3,),
        layer_types=["dense", "eugen", "eugen", "dense", "eugen", "eugen"],
        eugen=spec,
    )
    if name.startswith(
        "teacher"
    ):  # order 2's rows are order 1's, permuted (what --projections teacher makes)
        for layer in mlp.layers:
            if hasattr(layer, "projections") and layer.degree > 1:
                m = layer.num_features
                layer.projections.data[m : 2 * m] = layer.projections.data[:m][torch.randperm(m)]
        assert any(step.factors is not None for step in FusedMLP.from_mlp(mlp).steps)
    writer = _Writer("float32")
    exported = mlp_from_header(
        export_mlp(mlp, "mlp", writer), writer.buffers, torch.device("cpu"), torch.float32
    )
    x = torch.randn(300, 7)
    with torch.no_grad():
        expected = mlp.forward_unfused(x)
    assert torch.allclose(exported(x), expected, atol=1e-4 * (1 + expected.abs().max())), name


def test_format_round_trip_and_refusals(tmp_path):
    buffers = {
        "a": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.array([0.5, -2.0, 65504.0], dtype=np.float16),
        "c": np.array([[[0, 1], [1, 0]]], dtype=np.uint8),
    }
    path = tmp_path / fmt.FILE_NAME
    size = fmt.write(path, {"head": "nerf", "note": "x"}, buffers)
    assert size == path.stat().st_size
    parsed = fmt.read(tmp_path)
    assert parsed.header["version"] == fmt.FORMAT_VERSION and parsed.header["note"] == "x"
    for name, array in buffers.items():
        assert parsed.buffers[name].dtype == array.dtype
        np.testing.assert_array_equal(parsed.buffers[name], array)

    data = path.read_bytes()
    with pytest.raises(fmt.ExportFormatError, match="truncated"):
        fmt.decode(data[:-14], "cut.eugen")  # into the last buffer (its padding alone is no loss)
    with pytest.raises(fmt.ExportFormatError, match="truncated"):
        fmt.decode(data[:40], "cut.eugen")
    with pytest.raises(fmt.ExportFormatError, match="not an exported field"):
        fmt.decode(b"PK\x03\x04" + data[4:], "zip.eugen")
    length = struct.unpack("<I", data[8:12])[0]
    header = json.loads(data[16 : 16 + length])
    header["version"] = fmt.FORMAT_VERSION + 1
    text = json.dumps(header).encode().ljust(length)
    with pytest.raises(fmt.ExportFormatError, match=f"version {fmt.FORMAT_VERSION + 1}") as error:
        fmt.decode(data[:16] + text + data[16 + length :], "future.eugen")
    assert "\n" not in str(error.value)
    with pytest.raises(fmt.ExportFormatError, match="no exported field"):
        fmt.read(tmp_path / "missing")


BLOCKED = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('nerfstudio', 'imageio', 'yaml', 'tyro', 'rich'):
            raise ImportError(f'blocked: {name}')
sys.meta_path.insert(0, Block())
from eugen_nerf.export import Sampling, load_export, render_view
field = load_export(sys.argv[1], device='cpu')
image = render_view(field, 0, Sampling(samples=32), width=12, height=10)
assert image.shape == (10, 12, 3) and 0 <= float(image.min()) <= float(image.max()) <= 1
assert not any(name.split('.')[0] == 'nerfstudio' for name in sys.modules)
print('rendered', tuple(image.shape))
"""


def render_with_nerfstudio_blocked(export: Path, more: str = "") -> None:
    """Load and render ``export`` in a fresh interpreter where importing nerfstudio (and the training stack's
    other packages) fails; ``more``: further lines of that script."""
    done = subprocess.run(
        [sys.executable, "-c", BLOCKED + more, str(export)],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rendered (10, 12, 3)" in done.stdout


def test_reference_renderer_needs_no_nerfstudio(exports):
    render_with_nerfstudio_blocked(exports["eugen-nerf"])


def test_unsupported_runs_are_refused(runs):
    from eugen_nerf.eval.runs import load_run
    from eugen_nerf.export.exporter import ExportError, check_model, export_mlp
    from eugen_nerf.layers import EUGenMLP, EUGenSpec

    with pytest.raises(ExportError, match="supports the NeRF head"):
        check_model(torch.nn.Linear(2, 2), "dense-nerfacto")
    model = load_run(runs["dense-nerf"], device="cpu").model
    model.framing = dataclasses.replace(model.framing, contraction=True)
    with pytest.raises(ExportError, match="contraction"):
        check_model(model, "dense-nerf")
    model.framing = dataclasses.replace(model.framing, contraction=False, background="random")
    with pytest.raises(ExportError, match="background 'random'"):
        check_model(model, "dense-nerf")
    literal = EUGenMLP(4, 2, 8, 3, layer_types="eugen", eugen=EUGenSpec(shared_projections=False, degree=2))
    with pytest.raises(ExportError, match="per-order projections"):
        export_mlp(literal, "mlp", None)


def test_cli_exports_once_and_refuses_bad_input(runs, tmp_path):
    exe = Path(sys.executable).parent / "eugen-export"
    output = tmp_path / "out"
    args = [str(exe), str(runs["eugen-nerf"]), "--output", str(output), "--grid-resolution", "8"]
    done = subprocess.run(args, check=False, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "wrote" in done.stdout and (output / fmt.FILE_NAME).is_file()
    assert fmt.read(output).header["occupancy"]["resolution"] == [8, 8, 8]

    again = subprocess.run(args, check=False, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines()[-1].startswith("eugen-export: error: --output")
    assert "--overwrite" in again.stderr

    # --overwrite replaces an earlier export, never a folder of other files (here: the run itself)
    run_folder = runs["eugen-nerf"].parent
    before = sorted(p.name for p in run_folder.iterdir())
    into_run = subprocess.run(
        [str(exe), str(runs["eugen-nerf"]), "--output", str(run_folder), "--overwrite"],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert into_run.returncode == 2 and "holds files that are not an export" in into_run.stderr, (
        into_run.stderr
    )
    assert sorted(p.name for p in run_folder.iterdir()) == before

    # a staging folder left by an export killed outright does not stop the next one
    (tmp_path / ".fresh.partial").mkdir()
    (tmp_path / ".fresh.partial" / "junk").write_text("left behind")
    fresh = subprocess.run(
        [*args[:3], str(tmp_path / "fresh"), *args[4:]],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert fresh.returncode == 0, fresh.stdout[-2000:] + fresh.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == [fmt.FILE_NAME]
    assert not (tmp_path / ".fresh.partial").exists()

    nowhere = tmp_path / "nowhere"
    bad = subprocess.run(
        [str(exe), str(tmp_path), "--output", str(nowhere)],
        check=False,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stdout + bad.stderr
    # the one line on stderr (after any library warnings), nothing on stdout
    assert not bad.stdout.strip() and "config.yml" in bad.stderr.strip().splitlines()[-1]
    assert not nowhere.exists()

    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / fmt.FILE_NAME).write_bytes((output / fmt.FILE_NAME).read_bytes()[:1000])
    serve = subprocess.run(
        [str(exe), "serve", str(cut), "--port", "0"], check=False, capture_output=True, text=True, timeout=120
    )
    assert (
        serve.returncode == 2
        and "truncated" in serve.stderr.strip().splitlines()[-1]
        and not serve.stdout.strip()
    )
    port = subprocess.run(
        [str(exe), "serve", str(output), "--port", "70000"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        port.returncode == 2
        and "--port must be in 0..65535" in port.stderr
        and "Traceback" not in port.stderr
    )


def test_serving_exports_of_different_scenes_is_refused(exports, tmp_path):
    from eugen_nerf.export.serve import make_server

    parsed = fmt.read(exports["dense-nerf"])
    moved = json.loads(json.dumps(parsed.header))
    moved["cameras"][0]["camera_to_world"][0][3] += 0.5
    fmt.write(tmp_path / fmt.FILE_NAME, moved, parsed.buffers)
    with pytest.raises(fmt.ExportFormatError, match="different test cameras"):
        make_server([exports["eugen-nerf"], tmp_path], 0)
    make_server([exports["eugen-nerf"], exports["dense-nerf"]], 0).server_close()  # one scene: served


def test_a_malformed_buffer_table_is_one_line(tmp_path):
    buffers = {"a": np.arange(6, dtype=np.float32)}
    path = tmp_path / fmt.FILE_NAME
    fmt.write(path, {"head": "nerf"}, buffers)
    data = path.read_bytes()
    length = struct.unpack("<I", data[8:12])[0]
    for change, message in (
        ({"dtype": "int32"}, "not an offset, a size, a shape and one of the types"),
        ({"offset": None}, "not an offset"),
        ({"nbytes": 5}, "not whole values"),
    ):
        header = json.loads(data[16 : 16 + length])
        header["buffers"]["a"].update(change)
        text = json.dumps(header).encode().ljust(length)
        with pytest.raises(fmt.ExportFormatError, match=message) as error:
            fmt.decode(data[:16] + text + data[16 + length :], "bad.eugen")
        assert "\n" not in str(error.value) and "bad.eugen" in str(error.value)
    header = json.loads(data[16 : 16 + length])
    header["buffers"] = None
    with pytest.raises(fmt.ExportFormatError, match="buffer table"):
        fmt.decode(data[:16] + json.dumps(header).encode().ljust(length) + data[16 + length :], "bad.eugen")


def test_a_float16_export_refuses_weights_out_of_its_range():
    from eugen_nerf.export.exporter import ExportError, _Writer

    with pytest.raises(ExportError, match="exceeds float16's range.*--dtype float32"):
        _Writer("float16").add("trunk.0.weight", torch.tensor([1.0, 7e4]))
    assert _Writer("float32").add("w", torch.tensor([1.0, 7e4])) == "w"


def test_reference_renderer_refuses_an_unknown_sampling_and_camera(exports):
    exported = load_export(exports["dense-nerf"], device="cpu")
    with pytest.raises(ValueError, match="'march' or 'nerfstudio'"):
        Sampling(kind="marching")
    count = len(exported.cameras)
    for camera in (count, -1):
        with pytest.raises(IndexError, match=f"export with {count}"):
            render_view(exported, camera, Sampling(samples=8))


def test_serve_names_each_export_by_its_folder(exports, tmp_path):
    from eugen_nerf.export.serve import describe

    folder = Path(exports["eugen-nerf"])
    name = describe(folder / fmt.FILE_NAME)["name"]  # a field.eugen given as a file: named by its folder
    assert name == describe(folder)["name"] == f"{folder.name} (eugen-nerf, EUGen, 6 layers)", name
    copy = tmp_path / "another"
    copy.mkdir()
    shutil.copy(folder / fmt.FILE_NAME, copy / fmt.FILE_NAME)
    assert describe(copy / fmt.FILE_NAME)["name"] != name  # two exports of one run read apart


def test_serve_stops_on_ctrl_c_without_an_error(exports, monkeypatch, capsys):
    from eugen_nerf.export import cli, serve

    class Interrupted:
        server_address = ("127.0.0.1", 1234)
        closed = False

        def serve_forever(self):
            raise KeyboardInterrupt

        def server_close(self):
            Interrupted.closed = True

    monkeypatch.setattr(serve, "make_server", lambda exports, port: Interrupted())
    cli.entrypoint(["serve", str(exports["eugen-nerf"])])  # returns: no SystemExit, no "interrupted"
    assert Interrupted.closed and "stopped" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_info:  # the export to serve is required
        cli.entrypoint(["serve"])
    assert exit_info.value.code == 2


def test_export_that_cannot_be_written_is_one_line(runs, tmp_path, monkeypatch, capsys):
    from eugen_nerf.export import cli

    def disk_full(path, header, buffers):
        Path(path).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(fmt, "write", disk_full)
    output = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        cli.entrypoint([str(runs["dense-nerf"]), "--output", str(output), "--grid-resolution", "8"])
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line == f"eugen-export: error: --output {output}: cannot write it (No space left on device)", line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no export, no staging folder left
