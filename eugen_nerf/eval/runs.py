"""Load a trained nerfstudio run (``.../<timestamp>/config.yml``, any method) offline: the one run loader.

As nerfstudio's ``eval_setup``, but checkpoints are read from next to ``config.yml`` (not from ``output_dir``
relative to the current directory), numpy-holding checkpoints load under torch >= 2.6, LPIPS needs no
download, the checkpoint must fit the model exactly, the device can be chosen, and bad input fails with an
error naming the file instead of ``sys.exit`` or an assertion deep inside nerfstudio.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
import yaml
from torch import Tensor

from eugen_nerf.eval.checkpoints import (
    _STEP,
    allow_numpy_checkpoints,
    install_checkpoint_checks,
    load_checkpoint,
    load_checkpoint_strict,
)
from eugen_nerf.eval.lpips import install_offline_lpips
from eugen_nerf.inputs.errors import InputError, one_line
from eugen_nerf.inputs.options import resolve_device

if TYPE_CHECKING:  # nerfstudio is imported where used: importing it is slow
    from nerfstudio.engine.trainer import TrainerConfig
    from nerfstudio.pipelines.base_pipeline import Pipeline


class EvalInputError(InputError):
    """A run directory (or its scene) that cannot be used; the message names the offending file."""


@dataclass
class Run:
    """A loaded run: its config, pipeline (eval mode, test split) and checkpoint."""

    config_path: Path
    config: TrainerConfig
    pipeline: Pipeline
    checkpoint: Path
    step: int

    @property
    def model(self):
        return self.pipeline.model

    @property
    def name(self) -> str:
        """``experiment/method/timestamp``, unique per run."""
        return "/".join(self.config_path.absolute().parent.parts[-3:])

    @property
    def method(self) -> str:
        """The method as a reader should see it (:func:`method_label`)."""
        return method_label(self.config)

    @property
    def scene(self) -> Path:
        datamanager = self.config.pipeline.datamanager
        return Path(datamanager.data or datamanager.dataparser.data)


def method_label(config: TrainerConfig) -> str:
    """A run's method name, or ``student of METHOD`` for a distilled student: a student keeps its teacher's
    method name (``ns-eval`` and ``ns-viewer`` look the datamanager up by it) and its model configuration holds
    the teacher's (``teacher``)."""
    from nerfstudio.models.base_model import ModelConfig

    is_student = isinstance(getattr(config.pipeline.model, "teacher", None), ModelConfig)
    return f"student of {config.method_name}" if is_student else config.method_name


def find_config(path: Path) -> Path:
    """``path`` itself when it is a file, else ``path/config.yml``; raise if neither is a run config."""
    path = Path(path)
    config_path = path if path.is_file() else path / "config.yml"
    if not config_path.is_file():
        if path.suffix in (".yml", ".yaml") and not path.exists():
            raise EvalInputError(f"{path}: no such file (name a run's config.yml or its folder)")
        raise EvalInputError(f"{path}: not a nerfstudio run directory (no config.yml)")
    return config_path


def latest_checkpoint(config_path: Path) -> Path:
    """The highest-step ``nerfstudio_models/step-*.ckpt`` next to ``config_path``."""
    directory = config_path.parent / "nerfstudio_models"
    checkpoints = sorted(
        (int(match.group(1)), path)
        for path in directory.glob("step-*.ckpt")
        if (match := _STEP.fullmatch(path.name))
    )
    if not checkpoints:
        raise EvalInputError(f"{config_path}: no checkpoints (no step-*.ckpt in {directory})")
    return checkpoints[-1][1]


def read_config(config_path: Path, check_scene: bool = True) -> TrainerConfig:
    """The ``TrainerConfig`` in ``config_path``, its method registered and (``check_scene``) its scene present."""
    from nerfstudio.configs.method_configs import all_methods
    from nerfstudio.engine.trainer import TrainerConfig

    try:
        config = yaml.load(Path(config_path).read_text(), Loader=yaml.Loader)
    except (yaml.YAMLError, ImportError, AttributeError, TypeError, UnicodeDecodeError) as err:
        raise EvalInputError(f"{config_path}: not a readable nerfstudio config ({one_line(err)})") from None
    if not isinstance(config, TrainerConfig):
        raise EvalInputError(f"{config_path}: not a nerfstudio TrainerConfig")
    if config.method_name not in all_methods:
        raise EvalInputError(
            f"{config_path}: method {config.method_name!r} is not registered with nerfstudio"
        )
    # as eval_setup: generic datamanager targets do not survive YAML, so the method's is used; but only for the
    # method's own datamanager config class: a run trained on another one (stock nerfacto on the plain
    # VanillaDataManager, say) would otherwise get a target that cannot take its config
    registered = all_methods[config.method_name].pipeline.datamanager
    if type(config.pipeline.datamanager) is type(registered):
        config.pipeline.datamanager._target = registered._target
    data = config.pipeline.datamanager.data or config.pipeline.datamanager.dataparser.data
    if check_scene and not Path(data).exists():
        raise EvalInputError(
            f"{config_path}: its scene {data} does not exist (relative paths are resolved against the "
            "current directory: run from where the run was trained)"
        )
    return config


def load_run(
    path: Path,
    eval_num_rays_per_chunk: int | None = None,
    *,
    test_mode: Literal["test", "val", "inference"] = "inference",
    device: str | torch.device | None = None,
) -> Run:
    """The one run loader (``eugen-eval``, ``eugen-distill``, the viewers, the benchmarks): the run at ``path``
    (``config.yml`` or its directory) in eval mode, offline.

    Checked before the slow pipeline setup: the config, its method and scene, and the newest checkpoint (a
    truncated file is one clear error); the checkpoint is then loaded strictly (another method's checkpoint is
    an error, never a half-random model). ``test_mode``: ``inference`` builds the test split only, ``test``
    also the training cameras (a distillation casts their rays). ``device``: default CUDA when available.
    """
    config_path = find_config(Path(path))
    config = read_config(config_path)
    allow_numpy_checkpoints()
    install_offline_lpips()
    install_checkpoint_checks()  # stock nerfstudio loaders used later in this process get the same checks
    checkpoint = latest_checkpoint(config_path)
    loaded = load_checkpoint(checkpoint)
    if eval_num_rays_per_chunk:
        config.pipeline.model.eval_num_rays_per_chunk = eval_num_rays_per_chunk
    device = resolve_device(device)
    config.machine.device_type = device.type
    pipeline = config.pipeline.setup(device=device, test_mode=test_mode)
    pipeline.eval()
    step = load_checkpoint_strict(pipeline, checkpoint, config_path, config.method_name, loaded)
    run = Run(config_path, config, pipeline, checkpoint, step)
    if len(pipeline.datamanager.eval_dataset) == 0:
        raise EvalInputError(f"{run.scene}: the test split is empty (run {config_path})")
    return run


RGB_KEYS = ("rgb", "rgb_fine")
"""Where a model's final colour is: ``rgb`` for most models, ``rgb_fine`` for stock vanilla NeRF."""


def final_rgb(outputs: dict[str, Tensor]) -> Tensor:
    """The final colour among a model's outputs."""
    for key in RGB_KEYS:
        if key in outputs:
            return outputs[key]
    raise KeyError(f"the model outputs none of {RGB_KEYS} (outputs: {sorted(outputs)})")


def ground_truth_image(pipeline: Pipeline, dataset, index: int) -> Tensor:
    """Image ``index`` of ``dataset`` as float RGB ``(H, W, 3)`` on the pipeline's device, alpha
    composited the way the model renders."""
    image = dataset.get_image_float32(index).to(pipeline.device)
    if image.shape[-1] == 4:
        model = pipeline.model
        renderer = getattr(model, "renderer_rgb", None)
        if renderer is not None:
            return renderer.blend_background(image)
        if hasattr(model, "composite_with_background") and hasattr(model, "_get_background_color"):
            # splatfacto: no RGB renderer; it renders test views over its eval background (with the default
            # "random" background, the viewer's grey-blue) and composites its ground truth the same way
            training = model.training
            model.eval()
            try:
                background = model._get_background_color()
            finally:
                model.train(training)
            return model.composite_with_background(image, background.to(image))
        return image[..., :3] * image[..., 3:] + (1.0 - image[..., 3:])  # white background
    return image


def mismatched_test_views(pipelines: list[Pipeline], labels: list[str] | None = None) -> str | None:
    """Why the pipelines' test views are not one scene's, as nerfstudio places it (None when they are): their
    number, sizes, cameras (intrinsics and poses: a dataparser that orients, centres or scales the poses
    otherwise renders other views) and images. Runs compared side by side must pass it. ``labels`` name the
    runs in the message (default ``run 1``, ``run 2``, ...)."""
    labels = labels or [f"run {k}" for k in range(1, len(pipelines) + 1)]
    first = pipelines[0].datamanager.eval_dataset
    for pipeline, label in zip(pipelines[1:], labels[1:]):
        other = pipeline.datamanager.eval_dataset
        pair = f"{labels[0]} and {label}"
        if len(other) != len(first):
            return f"{pair} have {len(first)} and {len(other)} test views"
        a, b = first.cameras, other.cameras
        for name in ("width", "height", "fx", "fy", "cx", "cy", "camera_to_worlds"):
            mine, theirs = getattr(a, name).double().cpu(), getattr(b, name).double().cpu()
            if mine.shape != theirs.shape or not torch.allclose(mine, theirs, rtol=1e-4, atol=1e-4):
                return (
                    f"the test cameras of {pair} differ ({name}): another scene, or a dataparser that orients, "
                    "centres or scales the poses otherwise"
                )
        for i in range(len(first)):
            mine, theirs = first.get_image_float32(i), other.get_image_float32(i)
            if mine.shape != theirs.shape or (mine - theirs).abs().max() > 1.5 / 255:
                return f"test view {i}'s image differs between {pair}: runs of different scenes"
    return None


def ground_truth(run: Run, index: int) -> Tensor:
    """Test image ``index`` of ``run`` (see :func:`ground_truth_image`)."""
    return ground_truth_image(run.pipeline, run.pipeline.datamanager.eval_dataset, index)
