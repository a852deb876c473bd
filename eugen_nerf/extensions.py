"""Model extensions found at run time, so that lower layers never import higher ones.

A model (``models/``) or a distilled student (``distill/``) calls :func:`extend_model` at the end of its
setup; what it receives comes from the ``eugen_nerf.model_extensions`` entry points (today: the viewer's
controls, ``eugen_nerf.viewer.controls:add_eugen_viewer_controls``). The dependency runs from the viewer
to the models through ``pyproject.toml``, never from the models' code to the viewer's. An extension that
fails to import is reported once and skipped: a missing viewer must not stop training or evaluation.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points

GROUP = "eugen_nerf.model_extensions"


@cache
def model_extensions() -> tuple[Callable, ...]:
    """The registered extensions, loaded once, in name order."""
    loaded = []
    for entry in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            loaded.append(entry.load())
        except Exception as err:  # noqa: BLE001 - an optional extension must never break a model
            warnings.warn(f"eugen-nerf: model extension {entry.name!r} ({entry.value}) did not load: {err}")
    return tuple(loaded)


def extend_model(model) -> None:
    """Apply every registered extension to ``model`` (after its modules exist)."""
    for extension in model_extensions():
        extension(model)
