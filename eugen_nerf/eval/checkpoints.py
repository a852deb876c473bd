"""Let ``torch.load(weights_only=True)`` read nerfstudio 1.1.5 checkpoints.

torch >= 2.6 loads with ``weights_only=True`` by default, and nerfstudio 1.1.5 checkpoints hold numpy
scalars (e.g. in optimizer and scheduler state), so ``ns-eval``/``ns-viewer`` fail with
``Unsupported global: numpy.core.multiarray.scalar``. Allow-listing the numpy reconstruction functions,
``numpy.dtype`` and its per-type classes keeps the weights-only unpickler (no arbitrary code) while
accepting these files.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from eugen_nerf.inputs.errors import InputError, one_line

_STEP = re.compile(r"step-(\d+)\.ckpt")


def numpy_safe_globals() -> list:
    """The numpy globals that pickled numpy scalars and arrays refer to, under both numpy 1 and 2 names."""
    scalar = np.float64(0).__reduce__()[0]  # multiarray.scalar
    reconstruct = np.zeros(0).__reduce__()[0]  # multiarray._reconstruct
    dtype_classes = {type(np.dtype(code)) for code in np.typecodes["All"]}
    named = [
        (fn, f"numpy.{core}.multiarray.{fn.__name__}")
        for fn in (scalar, reconstruct)
        for core in ("core", "_core")
    ]
    return [*named, np.ndarray, np.dtype, *sorted(dtype_classes, key=lambda cls: cls.__name__)]


def allow_numpy_checkpoints() -> None:
    """Allow-list numpy scalars, arrays and dtypes for ``torch.load(weights_only=True)``. Idempotent."""
    torch.serialization.add_safe_globals(numpy_safe_globals())


class CheckpointError(InputError):
    """A checkpoint file that cannot be used (truncated, not a torch file, not a nerfstudio checkpoint)."""


def load_checkpoint(path: Path) -> dict:
    """The contents of a nerfstudio checkpoint on the CPU; :class:`CheckpointError` naming the file otherwise.

    The one checkpoint reader of every command: ``eugen-eval``, ``eugen-distill``, ``eugen-viewer`` and, through
    :func:`install_checkpoint_checks`, stock ``ns-eval``/``ns-render``/``ns-viewer``.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint file is missing")
    allow_numpy_checkpoints()
    try:
        loaded = torch.load(path, map_location="cpu")
    except Exception as err:  # noqa: BLE001 - truncated zip, foreign pickle, ...: torch raises many kinds
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise CheckpointError(f"{path}: not a readable checkpoint, truncated or corrupt ({reason})") from None
    if not isinstance(loaded, dict) or not isinstance(loaded.get("pipeline"), dict):
        raise CheckpointError(f"{path}: not a nerfstudio checkpoint (no 'pipeline' state)")
    return loaded


def install_checkpoint_checks() -> None:
    """Make nerfstudio's ``eval_load_checkpoint`` (behind ``ns-eval``, ``ns-render``, ``ns-viewer`` and
    ``eval_setup``) read through :func:`load_checkpoint`, so a truncated file is one clear error. Idempotent."""
    from nerfstudio.utils import eval_utils

    if getattr(eval_utils.eval_load_checkpoint, "_eugen_nerf", False):
        return

    def eval_load_checkpoint(config, pipeline) -> tuple[Path, int]:
        load_dir = Path(config.load_dir)
        if config.load_step is None:
            steps = sorted(
                int(match.group(1))
                for path in (load_dir.glob("step-*.ckpt") if load_dir.is_dir() else [])
                if (match := _STEP.fullmatch(path.name))
            )
            if not steps:
                raise CheckpointError(f"{load_dir}: no checkpoints (no step-*.ckpt)")
            load_step = steps[-1]
        else:
            load_step = config.load_step
        load_path = load_dir / f"step-{load_step:09d}.ckpt"
        loaded = load_checkpoint(load_path)
        pipeline.load_pipeline(loaded["pipeline"], loaded.get("step", load_step))
        return load_path, load_step

    eval_load_checkpoint._eugen_nerf = True  # type: ignore[attr-defined]
    eval_utils.eval_load_checkpoint = eval_load_checkpoint


def load_checkpoint_strict(
    pipeline, checkpoint: Path, config_path: Path, method: str, loaded: dict | None = None
) -> int:
    """Load ``checkpoint`` (already read: ``loaded``) into ``pipeline``'s model, every key present and every
    tensor loaded, and return its step. A checkpoint of another method or model configuration is one clear
    error (a non-strict load would silently leave half the model random). Shapes are the model's own
    ``load_state_dict``'s to check: some models (Gaussian splatting) resize their parameters to the checkpoint."""
    loaded = loaded if loaded is not None else load_checkpoint(checkpoint)
    state = {key.removeprefix("module."): value for key, value in loaded["pipeline"].items()}
    model_state = {key[len("_model.") :]: value for key, value in state.items() if key.startswith("_model.")}
    expected = pipeline.model.state_dict()
    missing = sorted(set(expected) - set(model_state))
    unexpected = sorted(set(model_state) - set(expected))

    def misfit(details: str) -> CheckpointError:
        return CheckpointError(
            f"{checkpoint} does not fit the model of {config_path} (method {method!r}): "
            f"it was saved by a different method or model configuration [{details}]"
        )

    if missing or unexpected:
        raise misfit(
            "; ".join(
                f"{label} {len(keys)} (e.g. {keys[0]})"
                for label, keys in (("missing", missing), ("unexpected", unexpected))
                if keys
            )
        )
    step = int(loaded.get("step", 0))
    pipeline.model.update_to_step(step)
    try:
        pipeline.model.load_state_dict(model_state, strict=True)
    except RuntimeError as error:  # torch's size-mismatch report, several lines long
        raise misfit(one_line(error)) from None
    return step
