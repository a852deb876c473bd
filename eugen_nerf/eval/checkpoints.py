"""Let ``torch.load(weights_only=True)`` read nerfstudio 1.1.5 checkpoints.

torch >= 2.6 loads with ``weights_only=True`` by default, and nerfstudio 1.1.5 checkpoints hold numpy
scalars (e.g. in optimizer and scheduler state), so ``ns-eval``/``ns-viewer`` fail with
``Unsupported global: numpy.core.multiarray.scalar``. Allow-listing the numpy reconstruction functions,
``numpy.dtype`` and its per-type classes keeps the weights-only unpickler (no arbitrary code) while
accepting these files.
"""

from __future__ import annotations

import numpy as np
import torch


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
