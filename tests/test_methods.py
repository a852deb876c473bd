"""The method specifications: registration, twins, CPU/CUDA choice, object defaults, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import tyro
from nerfstudio.configs.method_configs import method_configs as stock_methods
from nerfstudio.plugins.registry import discover_methods

from eugen_nerf.methods.nerf import dense_nerf, eugen_nerf
from eugen_nerf.methods.nerfacto import dense_nerfacto, eugen_nerfacto
from eugen_nerf.methods.zipnerf import dense_zipnerf, eugen_zipnerf
from eugen_nerf.scenes.dataparser import SceneDataParserConfig

SPECS = {
    "eugen-nerf": eugen_nerf,
    "dense-nerf": dense_nerf,
    "eugen-nerfacto": eugen_nerfacto,
    "dense-nerfacto": dense_nerfacto,
    "eugen-zipnerf": eugen_zipnerf,
    "dense-zipnerf": dense_zipnerf,
}
REPO = Path(__file__).resolve().parents[1]


def test_methods_are_registered_under_unique_names():
    methods, _ = discover_methods()
    for name, spec in SPECS.items():
        assert spec.config.method_name == name
        assert name not in stock_methods
        assert methods[name] is spec.config


def test_every_eugen_method_has_a_dense_twin_with_no_eugen_layer():
    assert eugen_nerf.config.pipeline.model.eugen.trunk_layers
    assert (
        dense_nerf.config.pipeline.model.eugen.trunk_layers
        == dense_nerf.config.pipeline.model.eugen.head_layers
        == ()
    )
    assert eugen_nerfacto.config.pipeline.model.eugen.color_layers
    dense = dense_nerfacto.config.pipeline.model.eugen
    assert dense.density_layers == dense.color_layers == ()
    assert eugen_zipnerf.config.pipeline.model.eugen.view_layers
    zip_dense = dense_zipnerf.config.pipeline.model.eugen
    assert zip_dense.density_layers == zip_dense.view_layers == ()
    for eugen, twin in [
        (eugen_nerf, dense_nerf),
        (eugen_nerfacto, dense_nerfacto),
        (eugen_zipnerf, dense_zipnerf),
    ]:
        assert type(eugen.config.pipeline.model) is type(twin.config.pipeline.model)


@pytest.mark.parametrize("name", SPECS)
def test_methods_pick_their_device_and_object_scene_defaults(name):
    config = SPECS[name].config
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert config.machine.device_type == expected
    assert config.mixed_precision == (expected == "cuda")
    assert isinstance(config.pipeline.datamanager.dataparser, SceneDataParserConfig)
    assert config.pipeline.model.background_color == "auto"  # chosen from the data (white for our scenes)
    assert (config.pipeline.model.near_plane, config.pipeline.model.far_plane) == (None, None)
    assert config.viewer.websocket_host == "127.0.0.1"


def parse(args):
    from nerfstudio.configs.method_configs import AnnotatedBaseConfigUnion

    return tyro.cli(AnnotatedBaseConfigUnion, args=args)


@pytest.mark.parametrize(
    "args, message",
    [
        (["eugen-nerf", "--data", "/nonexistent/scene"], "scene does not exist"),
        (["eugen-nerf", "--data", str(REPO)], "missing (a scene needs a transforms.json)"),
        (
            ["eugen-nerf", "--pipeline.model.eugen.trunk-layers", "1", "9"],
            "eugen.trunk-layers: layer index 9 does not exist",
        ),
        (
            ["eugen-nerfacto", "--pipeline.model.eugen.num-features", "0"],
            "eugen.num-features must be an integer in 1..4096, got 0",
        ),
        (
            ["dense-nerf", "--pipeline.model.eugen.num-features", "-3"],
            "eugen.num-features must be an integer in 1..4096, got -3",
        ),
        (["eugen-zipnerf", "--pipeline.model.bottleneck-width", "32"], "wider than the bottleneck"),
        (
            ["eugen-zipnerf", "--pipeline.model.eugen.view-layers", "5"],
            "eugen.view-layers: layer index 5 does not exist",
        ),
        (
            ["eugen-nerf", "--pipeline.model.enable-temporal-distortion", "True"],
            "enable-temporal-distortion is not supported",
        ),
        (
            ["eugen-nerf", "--pipeline.model.eugen.fused-inference", "False"],
            "need the EUGen layers trained apart",
        ),
        (
            ["eugen-siren", "--pipeline.model.hidden-layers", "0"],
            "hidden-layers must be an integer >= 1, got 0",
        ),
        (
            ["eugen-zipnerf", "--pipeline.model.collider-params", "near_plane", "0.5", "far_plane", "3"],
            "collider-params is not read by this model",
        ),
        (
            ["eugen-nerf", "--pipeline.model.enable-collider", "False"],
            "enable-collider False is not supported",
        ),
        (
            ["eugen-siren", "--pipeline.model.siren.projection-lr-scale", "10"],
            "set --optimizers.projections.optimizer.lr instead",
        ),
        (
            ["eugen-siren", "--pipeline.model.eugen.num-features", "32"],
            "eugen.num-features: the SIREN trunk's layers take --pipeline.model.siren.*",
        ),
    ],
)
def test_bad_input_fails_on_the_command_line_with_one_clear_line(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(args)
    assert exit_info.value.code != 0
    err = " ".join(capsys.readouterr().err.split())
    assert message in err


def test_good_command_line_parses_to_our_config():
    config = parse(
        [
            "eugen-nerf",
            "--pipeline.model.eugen.num-features",
            "16",
            "--pipeline.model.eugen.feature-map",
            "softplus",
            "--pipeline.model.eugen.trainable-projections",
            "True",
            "--pipeline.model.eugen.fused-inference",
            "False",
            "--pipeline.model.eugen.train-merged",
            "False",
        ]
    )
    eugen = config.pipeline.model.eugen
    assert (eugen.num_features, eugen.feature_map, eugen.trainable_projections, eugen.fused_inference) == (
        16,
        "softplus",
        True,
        False,
    )


def test_dataparser_subcommands_validate_their_data_before_anything_is_written(tmp_path, capsys):
    import json
    import shutil

    scene = shutil.copytree(REPO / "scenes" / "bunny32", tmp_path / "copy")
    meta = json.loads((scene / "transforms.json").read_text())
    for frame in meta["frames"]:
        frame["transform_matrix"] = [[1, 0, 0, 0.5], [0, 1, 0, 0.5], [0, 0, 1, 0.5], [0, 0, 0, 1]]
    (scene / "transforms.json").write_text(json.dumps(meta))
    cases = [
        (["eugen-nerf", "nerfstudio-data", "--data", str(scene)], "all 28 cameras are at one point"),
        (["eugen-nerfacto", "--data", str(scene)], "all 28 cameras are at one point"),
        (["dense-nerf", "blender-data", "--data", str(tmp_path / "none")], "dataset folder does not exist"),
        (["eugen-nerf", "bogus-data", "--data", str(scene)], "Unrecognized options: bogus-data"),
    ]
    for args, message in cases:
        with pytest.raises(SystemExit) as exit_info:
            parse(args)
        assert exit_info.value.code != 0
        assert message in " ".join(capsys.readouterr().err.split()), args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy"]  # nothing written


def test_stock_dataparser_subcommands_parse_for_our_methods():
    from nerfstudio.data.dataparsers.blender_dataparser import BlenderDataParserConfig

    scene = REPO / "scenes" / "bunny32"
    config = parse(["dense-nerfacto", "blender-data", "--data", str(scene)])
    assert isinstance(config.pipeline.datamanager.dataparser, BlenderDataParserConfig)
    config = parse(["eugen-siren", "nerfstudio-data", "--data", str(scene), "--orientation-method", "pca"])
    assert config.pipeline.datamanager.dataparser.resolved().orientation_method == "pca"


def test_cpu_training_flushes_denormals_and_restores_the_default_afterwards(monkeypatch):
    from nerfstudio.engine.trainer import Trainer

    from eugen_nerf.eval.timing import cpu_denormals_flushed
    from eugen_nerf.methods.trainer import SceneTrainer

    denormal = torch.tensor([1e-40])  # below float32's smallest normal number
    assert (denormal * 1.0).item() != 0.0
    with cpu_denormals_flushed("cuda"):  # not the CPU: left alone
        assert (denormal * 1.0).item() != 0.0
    seen = []
    monkeypatch.setattr(Trainer, "train", lambda self: seen.append((denormal * 1.0).item()))
    trainer = SceneTrainer.__new__(SceneTrainer)
    trainer.device, trainer.callbacks = "cpu", []
    trainer.train()
    assert seen == [0.0]
    assert (denormal * 1.0).item() != 0.0


def test_ctrl_c_once_training_has_completed_ends_the_command_without_a_stop(tmp_path, monkeypatch, capsys):
    """With the viewer kept open after training (``--viewer.quit-on-train-completion False``), nerfstudio waits
    for Ctrl-C after saving the last step: that Ctrl-C ends the command, it is not a stop to save and report."""
    from nerfstudio.engine.trainer import Trainer

    from eugen_nerf.methods.trainer import SceneTrainer

    def completed_then_waiting(self) -> None:
        self.training_state, self.step = "completed", 7  # as _after_train leaves it, before the viewer's wait
        (self.checkpoint_dir / "step-000000007.ckpt").write_bytes(b"the final save")
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "train", completed_then_waiting)
    monkeypatch.setattr(SceneTrainer, "save_checkpoint", lambda self, step: pytest.fail("saved again"))
    trainer = SceneTrainer.__new__(SceneTrainer)
    trainer.device, trainer.callbacks, trainer.checkpoint_dir = "cpu", [], tmp_path
    trainer.train()  # returns
    captured = capsys.readouterr()
    assert "interrupted" not in captured.out + captured.err
