"""End to end: train a tiny stock nerfacto run, evaluate it with ``eugen-eval``, and reject bad input."""

import json
import shutil
import statistics
from dataclasses import fields
from pathlib import Path

import imageio.v3 as iio
import jsonschema
import numpy as np
import pytest
import torch
import yaml

from eugen_nerf.eval import install_offline_lpips
from eugen_nerf.eval.cli import entrypoint
from eugen_nerf.eval.field_speed import NoFieldError, find_field, time_field
from eugen_nerf.eval.lpips_weights import setup_lpips_weights
from eugen_nerf.eval.report import SCHEMA
from eugen_nerf.eval.runs import EvalInputError, load_run
from eugen_nerf.inputs.errors import InputError

SIZE = 32  # LPIPS needs at least 31x31


def look_at(position: np.ndarray) -> list:
    """OpenGL camera-to-world looking at the origin (nerfstudio convention: the camera looks along -z)."""
    z = position / np.linalg.norm(position)
    x = np.cross([0.0, 0.0, 1.0], z)
    x /= np.linalg.norm(x)
    c2w = np.eye(4)
    c2w[:3, :3] = np.stack([x, np.cross(z, x), z], axis=1)
    c2w[:3, 3] = position
    return c2w.tolist()


def write_scene(root: Path, num_train: int = 8, num_test: int = 2, test_size: int = SIZE) -> Path:
    """A nerfstudio-format scene: colour-gradient views from a ring of cameras at radius 4."""
    (root / "images").mkdir(parents=True)
    frames, splits = [], {"train_filenames": [], "val_filenames": [], "test_filenames": []}
    ramp = np.linspace(0, 1, SIZE)
    for i in range(num_train + num_test):
        split = "train" if i < num_train else "test"
        angle = 2 * np.pi * i / (num_train + num_test)
        colour = np.stack(
            [
                ramp[:, None] * np.ones(SIZE),
                np.full((SIZE, SIZE), i / 10),
                ramp[None, :] * np.ones((SIZE, 1)),
            ],
            -1,
        )
        name = f"images/{split}_{i:03d}.png"
        size = SIZE if split == "train" else test_size
        iio.imwrite(root / name, (colour[:size, :size] * 255).astype(np.uint8))
        frames.append(
            {
                "file_path": name,
                "transform_matrix": look_at(4 * np.array([np.cos(angle), np.sin(angle), 0.5])),
            }
        )
        splits[f"{split}_filenames"].append(name)
    splits["val_filenames"] = splits["test_filenames"]
    meta = {
        "camera_model": "OPENCV",
        "fl_x": 40.0,
        "fl_y": 40.0,
        "cx": SIZE / 2,
        "cy": SIZE / 2,
        "w": SIZE,
        "h": SIZE,
    }
    (root / "transforms.json").write_text(json.dumps({**meta, "frames": frames, **splits}))
    return root


def train_tiny_nerfacto(data: Path, output_dir: Path, iterations: int = 10) -> Path:
    """Stock nerfacto, shrunk, trained on CPU in this process; returns its config.yml."""
    from nerfstudio.configs.method_configs import method_configs
    from nerfstudio.data.datamanagers.base_datamanager import VanillaDataManagerConfig
    from nerfstudio.data.dataparsers.nerfstudio_dataparser import NerfstudioDataParserConfig
    from nerfstudio.scripts.train import main

    install_offline_lpips()
    config = method_configs["nerfacto"]
    config.output_dir, config.timestamp, config.vis = output_dir, "tiny", "tensorboard"
    config.max_num_iterations = config.steps_per_save = iterations
    config.steps_per_eval_batch = config.steps_per_eval_image = config.steps_per_eval_all_images = 10**6
    config.machine.device_type = "cpu"
    # a data-loading subprocess is slow to start: use the plain manager
    parallel = config.pipeline.datamanager
    config.pipeline.datamanager = VanillaDataManagerConfig(
        **{f.name: getattr(parallel, f.name) for f in fields(VanillaDataManagerConfig) if f.name != "_target"}
    )
    config.pipeline.datamanager.data = data
    config.pipeline.datamanager.train_num_rays_per_batch = 256
    config.pipeline.datamanager.dataparser = NerfstudioDataParserConfig(
        orientation_method="none", center_method="none", auto_scale_poses=False
    )
    model = config.pipeline.model
    model.num_nerf_samples_per_ray, model.num_proposal_samples_per_ray = 8, (8, 8)
    model.hidden_dim = model.hidden_dim_color = 16
    model.num_levels, model.log2_hashmap_size, model.max_res = 4, 12, 64
    model.proposal_net_args_list = [
        {"hidden_dim": 16, "log2_hashmap_size": 10, "num_levels": 4, "max_res": 32, "use_linear": False}
    ] * 2
    main(config)
    return config.get_base_dir() / "config.yml"


@pytest.fixture(scope="module")
def scene(tmp_path_factory) -> Path:
    return write_scene(tmp_path_factory.mktemp("scene"))


@pytest.fixture(scope="module")
def run_config(scene, tmp_path_factory) -> Path:
    setup_lpips_weights()
    return train_tiny_nerfacto(scene, tmp_path_factory.mktemp("outputs"))


def rerun_on(config_path: Path, data: Path, run_dir: Path) -> Path:
    """A copy of the run whose config points at another scene (checkpoints shared)."""
    config = yaml.load(config_path.read_text(), Loader=yaml.Loader)
    config.pipeline.datamanager.data = data
    run_dir.mkdir(parents=True)
    (run_dir / "nerfstudio_models").symlink_to(config_path.parent / "nerfstudio_models")
    (run_dir / "config.yml").write_text(yaml.dump(config))
    return run_dir / "config.yml"


def test_cli_evaluates_a_stock_nerfacto_run(run_config, tmp_path):
    out, plots = tmp_path / "report.json", tmp_path / "plots"
    args = ["--load-config", str(run_config), "--output", str(out), "--plots", str(plots)]
    entrypoint([*args, "--repeats", "2", "--field-points", "4096"])
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    (run,) = report["runs"]
    assert run["method"] == "nerfacto" and run["step"] == 9 and len(run["views"]) == 2
    metrics, speed, size = run["metrics"], run["speed"], run["size"]
    assert len(metrics["psnr"]["per_view"]) == 2 and 0 < metrics["psnr"]["mean"] < 100
    assert metrics["lpips"] is not None and metrics["lpips_reason"] is None
    assert (
        speed["render_fps"] > 0 and speed["field_module"] == "field" and speed["resolution"] == [SIZE, SIZE]
    )
    # both rates come from these timings (no second clock to disagree)
    per_view = speed["render_seconds_per_view"]
    assert speed["render_fps"] == pytest.approx(1.0 / statistics.median(per_view))
    assert speed["rays_per_second"] == pytest.approx(statistics.median(SIZE * SIZE / t for t in per_view))
    assert size["checkpoint_bytes"] == Path(run["checkpoint"]).stat().st_size
    assert 0 < size["parameters"] < 10**6 and size["render_memory_kind"] == "rss_delta_fresh_process"
    assert 0 < size["render_memory_bytes"] < 2**31  # one 2-view scene's render in a fresh process
    assert (
        speed["render_speedup"] is None and speed["render_fps_side_by_side"] is None
    )  # nothing to time against
    assert (plots / "psnr_vs_fps.png").exists() and (plots / "per_view_psnr.png").exists()
    errors = sorted((plots / "errors").rglob("*.png"))
    assert [p.name for p in errors] == ["test_008.png", "test_009.png"]
    assert iio.imread(errors[0]).shape == (SIZE, 3 * SIZE, 3)  # prediction | ground truth | error


def test_two_runs_are_timed_side_by_side_and_pictured(run_config, tmp_path):
    """The same run twice: the first is the reference (speed-up 1), the second is timed beside it, and the
    picture holds both renders, the ground truth and a black difference, enlarged to be seen."""
    out, picture = tmp_path / "report.json", tmp_path / "side.png"
    args = [
        "--load-config",
        str(run_config),
        str(run_config),
        "--output",
        str(out),
        "--side-by-side",
        str(picture),
    ]
    entrypoint([*args, "--repeats", "1", "--field-points", "1024", "--no-render-memory", "--no-lpips"])
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    first, second = (run["speed"]["render_speedup"] for run in report["runs"])
    assert first == 1.0 and 0 < second < float("inf")
    fps = [run["speed"]["render_fps_side_by_side"] for run in report["runs"]]
    assert fps[1] / fps[0] == pytest.approx(second)  # the table's FPS and speed-up come from one timing
    assert all(run["size"]["render_memory_bytes"] is None for run in report["runs"])
    image = iio.imread(picture)
    scale = -(-384 // SIZE)
    assert image.shape == (SIZE * scale, 4 * SIZE * scale, 3)
    renders = [image[:, i * SIZE * scale : (i + 1) * SIZE * scale] for i in range(4)]
    body = slice(40, None)  # below the labels
    assert np.array_equal(renders[0][body], renders[1][body])
    assert renders[3][body].max() == 0 and renders[2][body].std() > 0


def test_side_by_side_needs_two_runs(run_config, tmp_path, capsys):
    args = ["--load-config", str(run_config), "--output", str(tmp_path / "r.json")]
    with pytest.raises(SystemExit):
        entrypoint([*args, "--side-by-side", str(tmp_path / "side.png"), "--no-render-memory"])
    assert "--side-by-side needs two or more image runs" in capsys.readouterr().err
    assert not (tmp_path / "side.png").exists()


def test_missing_lpips_weights_are_reported_as_null(run_config, tmp_path, monkeypatch):
    from eugen_nerf.eval.lpips import shared_lpips

    monkeypatch.setenv("EUGEN_NERF_CACHE", str(tmp_path / "empty-cache"))
    shared_lpips.cache_clear()
    out = tmp_path / "report.json"
    entrypoint(["--load-config", str(run_config), "--output", str(out), "--max-views", "1", "--repeats", "1"])
    shared_lpips.cache_clear()
    report = json.loads(out.read_text())
    jsonschema.validate(report, SCHEMA)
    metrics = report["runs"][0]["metrics"]
    assert metrics["lpips"] is None and "eugen-eval setup-lpips" in metrics["lpips_reason"]
    assert len(metrics["psnr"]["per_view"]) == 1


def test_run_loads_from_any_directory(run_config, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # checkpoints are found next to config.yml, not via output_dir
    run = load_run(run_config)
    assert run.checkpoint.parent == run_config.parent / "nerfstudio_models"
    assert run.name == "/".join(run_config.parent.parts[-3:])
    name, timing = time_field(run.pipeline.model, 512, run.pipeline.device, warmup=1, repeats=2)
    assert name == "field" and len(timing.seconds) == 2


def test_run_without_checkpoints(run_config, tmp_path):
    config = tmp_path / "run" / "config.yml"
    config.parent.mkdir()
    shutil.copy(run_config, config)
    with pytest.raises(EvalInputError, match=f"{config}: no checkpoints"):
        load_run(config)
    with pytest.raises(SystemExit):
        entrypoint(["--load-config", str(config), "--output", str(tmp_path / "r.json")])


def test_scene_with_empty_test_split(run_config, tmp_path):
    data = write_scene(tmp_path / "scene", num_test=0)
    with pytest.raises(EvalInputError, match="test split is empty"):
        load_run(rerun_on(run_config, data, tmp_path / "run"))


def test_images_of_another_size(run_config, tmp_path, capsys):
    data = write_scene(tmp_path / "scene", test_size=24)
    with pytest.raises(SystemExit):
        entrypoint(
            [
                "--load-config",
                str(rerun_on(run_config, data, tmp_path / "run")),
                "--output",
                str(tmp_path / "r.json"),
            ]
        )
    message = (
        f"{data / 'images' / 'test_008.png'}: image is 24x24 but the model renders 32x32 for this test camera"
    )
    assert message in capsys.readouterr().err


def test_field_speed_for_vanilla_nerf():
    from nerfstudio.data.scene_box import SceneBox
    from nerfstudio.models.vanilla_nerf import VanillaModelConfig

    install_offline_lpips()
    model = VanillaModelConfig().setup(
        scene_box=SceneBox(aabb=torch.tensor([[-1.0] * 3, [1.0] * 3])), num_train_data=1
    )
    assert find_field(model)[0] == "field_fine"
    with pytest.raises(NoFieldError):
        find_field(torch.nn.Linear(2, 2))
    name, timing = time_field(model, 256, torch.device("cpu"), warmup=0, repeats=1)
    assert name == "field_fine" and timing.median > 0


def test_a_checkpoint_of_another_model_size_is_one_clear_error(run_config, tmp_path):
    """Same method and keys, other widths: the model's own load reports the sizes, as one line naming the file."""
    config = yaml.load(run_config.read_text(), Loader=yaml.Loader)
    config.pipeline.model.hidden_dim_color = 8  # the checkpoint's colour MLP is 16 wide
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "nerfstudio_models").symlink_to(run_config.parent / "nerfstudio_models")
    (run_dir / "config.yml").write_text(yaml.dump(config))
    with pytest.raises(InputError, match="does not fit the model of .*size mismatch") as info:
        load_run(run_dir / "config.yml")
    assert "\n" not in str(info.value)


def test_a_run_keeps_its_own_datamanager_when_it_is_not_its_methods(tmp_path):
    """nerfstudio's loaders put the method's datamanager target back (generic targets do not survive YAML); a
    run trained on another datamanager config class (stock nerfacto on the plain VanillaDataManager, as our
    benchmarks train it) must keep its own, or its pipeline cannot be built."""
    import copy

    from nerfstudio.configs.method_configs import all_methods

    from eugen_nerf.eval.runs import read_config
    from eugen_nerf.scenes.datamanager import FramingDataManager, FramingDataManagerConfig

    registered = all_methods["nerfacto"].pipeline.datamanager
    assert not isinstance(registered, FramingDataManagerConfig)
    config = copy.deepcopy(all_methods["nerfacto"])
    config.pipeline.datamanager = FramingDataManagerConfig(data=tmp_path)
    path = tmp_path / "config.yml"
    path.write_text(yaml.dump(config))
    assert read_config(path).pipeline.datamanager._target is FramingDataManager
    config = copy.deepcopy(all_methods["nerfacto"])  # its own class: the method's target, as eval_setup does
    config.pipeline.datamanager.data = tmp_path
    config.pipeline.datamanager._target = object
    path.write_text(yaml.dump(config))
    assert read_config(path).pipeline.datamanager._target is registered._target


def test_a_distilled_student_is_labelled_as_the_student_of_its_teachers_method():
    from eugen_nerf.eval.runs import method_label, read_config

    teacher = Path(__file__).resolve().parents[1] / "teachers" / "shiny128" / "dense-nerf" / "paper"
    student = teacher.with_name("paper-student")
    assert method_label(read_config(teacher / "config.yml")) == "dense-nerf"
    # the student's config keeps the teacher's method name, which nerfstudio looks its datamanager up by
    assert read_config(student / "config.yml").method_name == "dense-nerf"
    assert method_label(read_config(student / "config.yml")) == "student of dense-nerf"


def test_runs_of_other_test_views_are_not_compared(run_config, scene, tmp_path, capsys):
    """Two runs whose test views have the same sizes but other images, or other cameras (another scene, or a
    dataparser placing the poses otherwise), are neither timed against each other nor pictured side by side."""
    altered = shutil.copytree(scene, tmp_path / "altered")
    test_image = altered / "images" / "test_008.png"
    iio.imwrite(test_image, 255 - iio.imread(test_image))
    moved = shutil.copytree(scene, tmp_path / "moved")
    meta = json.loads((moved / "transforms.json").read_text())
    meta["frames"][-1]["transform_matrix"][0][3] += 0.5
    (moved / "transforms.json").write_text(json.dumps(meta))
    for name, data, says in (
        ("altered", altered, "test view 0's image differs between run 1 and run 2"),
        ("moved", moved, "the test cameras of run 1 and run 2 differ (camera_to_worlds)"),
    ):
        other = rerun_on(run_config, data, tmp_path / f"run_{name}")
        args = ["--load-config", str(run_config), str(other), "--output", str(tmp_path / f"{name}.json")]
        quick = ["--repeats", "1", "--field-points", "1024", "--no-render-memory", "--no-lpips"]
        with pytest.raises(SystemExit):
            entrypoint([*args, "--side-by-side", str(tmp_path / f"{name}.png"), *quick])
        assert says in " ".join(capsys.readouterr().err.split())
        assert not (tmp_path / f"{name}.png").exists()
        entrypoint([*args, *quick])
        assert says in " ".join(capsys.readouterr().out.split())
        report = json.loads((tmp_path / f"{name}.json").read_text())
        assert [run["speed"]["render_speedup"] for run in report["runs"]] == [None, None]


@pytest.mark.parametrize(
    "option, says",
    [
        (["--max-views", "0"], "--max-views must be an integer >= 1, got 0"),
        (["--max-views", "-1"], "--max-views must be an integer >= 1, got -1"),
        (["--repeats", "0"], "--repeats must be an integer >= 1, got 0"),
        (["--speed-views", "0"], "--speed-views must be an integer >= 1, got 0"),
        (["--side-by-side", "picture"], "--side-by-side picture: name a .png or .jpg or .jpeg file"),
    ],
)
def test_measuring_options_are_checked_before_any_work(run_config, tmp_path, capsys, option, says):
    with pytest.raises(SystemExit):
        entrypoint(
            ["--load-config", str(run_config), str(run_config), "--output", str(tmp_path / "r.json"), *option]
        )
    assert says in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_lpips_of_images_too_small_is_one_line(tmp_path, capsys):
    for name in ("a.png", "b.png"):
        iio.imwrite(tmp_path / name, np.zeros((16, 16, 3), np.uint8))
    with pytest.raises(SystemExit):
        entrypoint(["lpips", str(tmp_path / "a.png"), str(tmp_path / "b.png")])
    out = capsys.readouterr().err
    assert "LPIPS needs images of at least 31x31" in out and "Traceback" not in out


def test_splatfacto_ground_truth_is_composited_over_its_render_background():
    """splatfacto has no RGB renderer: with its default ``random`` background it renders test views over the
    viewer's grey-blue, and its own metrics composite the ground truth the same way, not over white."""
    from types import SimpleNamespace

    from nerfstudio.models.splatfacto import SplatfactoModel

    from eugen_nerf.eval.runs import ground_truth_image

    class Model(torch.nn.Module):  # splatfacto's background logic, without its Gaussians
        _get_background_color = SplatfactoModel._get_background_color
        composite_with_background = SplatfactoModel.composite_with_background
        device = torch.device("cpu")
        config = SimpleNamespace(background_color="random")
        background_color = torch.tensor([0.1490, 0.1647, 0.2157])

    model = Model().train()  # as a freshly loaded pipeline may be: training draws a random background
    rgba = torch.zeros(2, 2, 4)
    rgba[0, 0] = torch.tensor([1.0, 0.0, 0.0, 1.0])
    dataset = SimpleNamespace(get_image_float32=lambda i: rgba)
    image = ground_truth_image(SimpleNamespace(model=model, device=torch.device("cpu")), dataset, 0)
    assert torch.equal(image[0, 0], torch.tensor([1.0, 0.0, 0.0]))
    assert torch.allclose(image[1, 1], Model.background_color) and model.training
