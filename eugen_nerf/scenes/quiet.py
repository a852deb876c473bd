"""A scoped silence for the one warning nerfstudio 1.1.5 raises on every ray bundle under torch >= 2.9.

nerfstudio indexes camera tensors with a list (``cameras.py``: ``self.fx[true_indices]``), which torch
reports as a deprecated "non-tuple sequence" index. It is benign for nerfstudio's one-element lists and
drowns every command's output, so our datamanagers and models silence exactly that message around their own
ray generation, and nowhere else: ``warnings.catch_warnings`` restores the process's filters on exit, so stock
methods (and any other code) still see every warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

INDEXING_WARNING = "Using a non-tuple sequence for multidimensional indexing"


@contextmanager
def quiet_camera_indexing() -> Iterator[None]:
    """Ignore torch's non-tuple-index warning inside the block; the filters are restored afterwards."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=INDEXING_WARNING)
        yield
