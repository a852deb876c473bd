"""The Zip-NeRF head through eugen-export and the reference renderer, on tiny untrained models (no training, no
data on disk: hash tables drawn at random so the field has structure): the reference renderer's proposal
sampling gives nerfstudio's picture, its march agrees with it where both sample finely, the file keeps every
grid and MLP, float16 stays close, and what the file cannot describe is refused in one line."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from eugen_nerf.export import format as fmt
from eugen_nerf.export.field import load_export
from eugen_nerf.export.render import Sampling, render_view

SIZE = 12
SIZES = dict(num_levels=4, max_res=64, log2_hashmap_size=10, features_per_level=4, hidden_dim=16)
SIZES.update(bottleneck_width=32, hidden_dim_color=32, num_nerf_samples_per_ray=12)
SIZES.update(num_proposal_samples_per_ray=(16, 12))
SIZES["proposal_net_args_list"] = [
    {"hidden_dim": 16, "log2_hashmap_size": 10, "num_levels": 3, "max_res": 32, "features_per_level": 1},
    {"hidden_dim": 16, "log2_hashmap_size": 10, "num_levels": 4, "max_res": 64, "features_per_level": 1},
]


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(-10 * torch.log10(((a - b) ** 2).mean().clamp_min(1e-20)))


def look_at(position: list[float]) -> torch.Tensor:
    """A camera-to-world ``(3, 4)`` at ``position`` looking at the origin, z up (nerfstudio's convention)."""
    eye = torch.tensor(position)
    back = eye / eye.norm()
    right = torch.linalg.cross(torch.tensor([0.0, 0.0, 1.0]), back)
    right = right / right.norm()
    up = torch.linalg.cross(back, right)
    return torch.cat([torch.stack([right, up, back], 1), eye[:, None]], 1)


def tiny_zipnerf_run(method: str, seed: int = 0, unbounded: bool = False) -> SimpleNamespace:
    """What the exporter reads of a run (model, scene box, test cameras) for a tiny Zip-NeRF on an object scene
    (or, ``unbounded``, an unbounded one: contraction, last-sample background, disparity-spaced samples):
    ``eugen-zipnerf``'s layers or its dense twin's; tables drawn from N(0, 0.5) so densities and colours vary."""
    from nerfstudio.cameras.cameras import Cameras, CameraType
    from nerfstudio.data.scene_box import SceneBox

    from eugen_nerf.models.zipnerf import ZipNeRFEUGenConfig, ZipNeRFModelConfig
    from eugen_nerf.scenes.framing import FRAMING_KEY, OBJECT_DEFAULT, UNBOUNDED_FAR, UNBOUNDED_NEAR, Framing

    torch.manual_seed(seed)
    eugen = ZipNeRFEUGenConfig(num_features=8)
    if method.startswith("dense"):
        eugen = ZipNeRFEUGenConfig(density_layers=(), view_layers=())
    config = ZipNeRFModelConfig(eugen=eugen, implementation="torch", **SIZES)
    aabb = torch.tensor([[-1.5] * 3, [1.5] * 3])
    framing = OBJECT_DEFAULT
    if unbounded:
        framing = Framing("unbounded", UNBOUNDED_NEAR, UNBOUNDED_FAR, "last_sample", True, "a test's")
    model = config.setup(scene_box=SceneBox(aabb), num_train_data=1, metadata={FRAMING_KEY: framing})
    with torch.no_grad():
        for grid in [model.field.grid] + [network.grid for network in model.proposal_networks]:
            grid.encoding.hash_table.normal_(0.0, 0.5)
    model.eval()
    poses = torch.stack([look_at([4.0, 0.5, 1.0]), look_at([-1.0, 3.5, 2.0])])
    if unbounded:  # cameras inside the unit ball, as auto-scaled captures are
        poses = torch.stack([look_at([0.6, 0.1, 0.2]), look_at([-0.2, 0.5, 0.3])])
    cameras = Cameras(
        camera_to_worlds=poses,
        fx=16.0,
        fy=16.0,
        cx=SIZE / 2,
        cy=SIZE / 2,
        width=SIZE,
        height=SIZE,
        camera_type=CameraType.PERSPECTIVE,
    )
    return SimpleNamespace(
        model=model,
        config=SimpleNamespace(method_name=method),
        name=method,
        step=0,
        config_path=method,
        pipeline=SimpleNamespace(
            datamanager=SimpleNamespace(
                eval_dataset=SimpleNamespace(cameras=cameras),
                train_dataparser_outputs=SimpleNamespace(scene_box=SceneBox(aabb)),
            )
        ),
    )


def export_tiny(run: SimpleNamespace, output, dtype: str = "float32"):
    from eugen_nerf.export.exporter import ExportOptions, build_export

    header, buffers = build_export(run, ExportOptions(dtype=dtype, grid_resolution=16))
    output.mkdir(parents=True, exist_ok=True)
    fmt.write(output / fmt.FILE_NAME, header, buffers)
    return output


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, tuple[SimpleNamespace, object]]:
    root = tmp_path_factory.mktemp("zipnerf_exports")
    runs = {method: tiny_zipnerf_run(method) for method in ("dense-zipnerf", "eugen-zipnerf")}
    return {method: (run, export_tiny(run, root / method)) for method, run in runs.items()}


def assert_renders_as_nerfstudio(run: SimpleNamespace, path) -> None:
    """Every test view of the export through the reference renderer's proposal sampling is nerfstudio's render
    of the run (above 60 dB), and the tiny field is not flat."""
    from eugen_nerf.eval.runs import final_rgb

    exported = load_export(path, device="cpu")
    cameras = run.pipeline.datamanager.eval_dataset.cameras
    for view in range(len(cameras)):
        with torch.no_grad():
            expected = final_rgb(run.model.get_outputs_for_camera(cameras[view : view + 1])).clamp(0, 1)
        got = render_view(exported, view, Sampling(kind="nerfstudio"))
        assert expected.std() > 0.02, "the tiny field renders flat: the comparison would show nothing"
        assert psnr(got, expected) > 60, f"view {view}: {psnr(got, expected):.1f} dB"


@pytest.mark.parametrize("method", ["dense-zipnerf", "eugen-zipnerf"])
def test_reference_proposal_sampling_equals_nerfstudio(tiny, method):
    run, path = tiny[method]
    assert_renders_as_nerfstudio(run, path)


@pytest.fixture(scope="module")
def unbounded(tmp_path_factory) -> tuple[SimpleNamespace, object]:
    run = tiny_zipnerf_run("eugen-zipnerf", unbounded=True)
    return run, export_tiny(run, tmp_path_factory.mktemp("zipnerf_unbounded") / "eugen-zipnerf")


def test_unbounded_scene_renders_as_nerfstudio_does(unbounded):
    """Contracted multisamples, disparity-spaced initial samples and the last sample's colour as background:
    the reference renderer gives nerfstudio's picture from the file."""
    run, path = unbounded
    header = fmt.read(path).header
    assert header["scene"]["contraction"] is True and header["scene"]["background"] == "last_sample"
    assert header["scene"]["bounds"] == [[-2.0] * 3, [2.0] * 3]
    assert header["sampling"]["nerfstudio"]["initial_sampler"] == "uniform_lin_disp_piecewise"
    assert all(spec["contraction"] for spec in header["fields"].values())
    assert_renders_as_nerfstudio(run, path)


def test_unbounded_march_approaches_nerfstudios_picture_as_samples_grow(unbounded):
    """The page's march on an unbounded scene (disparity-spaced intervals, contracted occupancy, the last
    interval's colour as background) converges to the proposal sampling's picture."""
    exported = load_export(unbounded[1], device="cpu")
    reference = render_view(exported, 0, Sampling(kind="nerfstudio"))
    errors = [
        psnr(
            render_view(exported, 0, Sampling(samples=n, occupancy=False, early_termination=False)), reference
        )
        for n in (32, 512)
    ]
    assert errors[1] > errors[0] and errors[1] > 25, errors
    occupied = render_view(exported, 0, Sampling(samples=512))
    assert psnr(occupied, reference) > 25  # the grid over the contracted box keeps what the field holds


@pytest.mark.slow
def test_shipped_unbounded_teacher_exports_to_nerfstudios_picture(tmp_path):
    """The garden200 teacher (trained on the unbounded scene) in float16: its first test view through the
    reference renderer is nerfstudio's render of the run."""
    from pathlib import Path

    from eugen_nerf.eval.memory import view_at_size
    from eugen_nerf.eval.runs import final_rgb, load_run
    from eugen_nerf.export.exporter import ExportOptions, build_export

    run = load_run(Path(__file__).resolve().parents[1] / "teachers/garden200/dense-zipnerf/cpu", device="cpu")
    header, buffers = build_export(run, ExportOptions(dtype="float16", grid_resolution=16))
    fmt.write(tmp_path / fmt.FILE_NAME, header, buffers)
    camera = view_at_size(run.pipeline.datamanager.eval_dataset.cameras, 0, 32)
    with torch.no_grad():
        expected = final_rgb(run.model.get_outputs_for_camera(camera)).clamp(0, 1)
    got = render_view(
        load_export(tmp_path, device="cpu"), 0, Sampling(kind="nerfstudio"), width=32, height=32
    )
    assert expected.std() > 0.05
    assert psnr(got, expected) > 60, f"{psnr(got, expected):.1f} dB"


def test_file_holds_every_grid_and_the_merged_view_chain(tiny):
    header = fmt.read(tiny["eugen-zipnerf"][1]).header
    assert header["head"] == "zipnerf" and header["occupancy"]["field"] == "nerf"
    assert header["occupancy"]["alpha_threshold"] == 0.01  # the head's default
    assert set(header["fields"]) == {"nerf", "proposal_0", "proposal_1"}
    sampling = header["sampling"]["nerfstudio"]
    assert sampling["proposal_fields"] == ["proposal_0", "proposal_1"]
    assert sampling["proposal_samples"] == [16, 12] and sampling["nerf_samples"] == 12
    nerf = header["fields"]["nerf"]
    assert nerf["grid"]["resolutions"][0] == 16 and len(nerf["grid"]["resolutions"]) == 4
    assert header["buffers"][nerf["grid"]["table"]]["shape"] == [4 * 2**10, 4]
    assert [step["kind"] for step in nerf["view"]["steps"]] == ["eugen", "eugen", "dense"]
    assert "view" not in header["fields"]["proposal_0"]
    dense = fmt.read(tiny["dense-zipnerf"][1]).header["fields"]["nerf"]
    assert [step["kind"] for step in dense["view"]["steps"]] == ["dense"] * 3


@pytest.mark.parametrize("method", ["dense-zipnerf", "eugen-zipnerf"])
def test_exported_field_computes_the_field(tiny, method):
    """The exported NeRF field at points (what the page's march reads) is nerfstudio's field at frustums shrunk
    to those points: the same density, bottleneck and colour."""
    from nerfstudio.cameras.rays import Frustums, RaySamples
    from nerfstudio.field_components.field_heads import FieldHeadNames

    run, path = tiny[method]
    field = load_export(path, device="cpu").fields["nerf"]
    torch.manual_seed(1)
    points = torch.rand(500, 3) * 2.8 - 1.4
    directions = torch.nn.functional.normalize(torch.randn(500, 3), dim=-1)
    frustums = Frustums(
        origins=points[:, None] - directions[:, None],
        directions=directions[:, None],
        starts=torch.ones(500, 1, 1),
        ends=torch.ones(500, 1, 1) + 1e-7,
        pixel_area=torch.zeros(500, 1, 1),
    )
    with torch.no_grad():
        expected = run.model.field(RaySamples(frustums), compute_normals=False)
        density, features = field.density_and_features(points)
        rgb = field.color_of(directions, features)
    want_density = expected[FieldHeadNames.DENSITY].view(500, 1)
    assert want_density.std() > 0.01, "the tiny field's density is flat: the comparison would show nothing"
    assert torch.allclose(density, want_density, rtol=1e-4, atol=1e-5)
    assert torch.allclose(rgb, expected[FieldHeadNames.RGB].view(500, 3), atol=1e-5)


def test_hash_grid_lookup_does_not_depend_on_its_chunks(tiny):
    """The grid writes each chunk of points into its slice of one output: any chunk size, one that leaves a
    remainder included, gives the same features as one pass."""
    grid = load_export(tiny["dense-zipnerf"][1], device="cpu").fields["nerf"].grid
    unit = torch.rand(1000, 3, generator=torch.Generator().manual_seed(3))
    whole = grid(unit, chunk=1000)
    assert whole.shape == (1000, grid.num_levels, grid.table.shape[1]) and whole.abs().max() > 0
    for chunk in (1, 7, 333, None):
        assert torch.equal(grid(unit, chunk=chunk), whole), chunk


def test_float16_export_renders_close_to_float32(tiny, tmp_path):
    run, path = tiny["eugen-zipnerf"]
    half = export_tiny(run, tmp_path / "half", dtype="float16")
    assert (half / fmt.FILE_NAME).stat().st_size < (path / fmt.FILE_NAME).stat().st_size
    full, half = load_export(path, device="cpu"), load_export(half, device="cpu")
    assert psnr(render_view(half, 1, Sampling(samples=64)), render_view(full, 1, Sampling(samples=64))) > 40


def test_what_the_file_cannot_describe_is_refused(tiny):
    from nerfstudio.model_components.ray_samplers import UniformSampler

    from eugen_nerf.export.exporter import ExportError, check_model

    model = tiny_zipnerf_run("dense-zipnerf").model
    model.proposal_networks[1].grid.encoding.tcnn_encoding = object()
    with pytest.raises(ExportError, match="proposal network 1's hash grid is tiny-cuda-nn's") as error:
        check_model(model, "dense-zipnerf")
    assert "\n" not in str(error.value)
    model = tiny_zipnerf_run("dense-zipnerf").model
    model.proposal_sampler.initial_sampler = UniformSampler()
    model.proposal_sampler.initial_sampler.__class__ = type("OtherSampler", (UniformSampler,), {})
    with pytest.raises(ExportError, match="uniform initial sampler"):
        check_model(model, "dense-zipnerf")
    model = tiny_zipnerf_run("dense-zipnerf").model
    model.framing = dataclasses.replace(model.framing, contraction=True, background="random")
    with pytest.raises(ExportError, match="background 'random'"):
        check_model(model, "dense-zipnerf")


def test_reference_renderer_reads_zipnerf_with_nerfstudio_blocked(tiny):
    """The hash grid, multisamples and proposal sampling need torch alone."""
    from test_export import render_with_nerfstudio_blocked

    more = "render_view(field, 1, Sampling(kind='nerfstudio'), width=6, height=5)\n"
    render_with_nerfstudio_blocked(tiny["eugen-zipnerf"][1], more)
