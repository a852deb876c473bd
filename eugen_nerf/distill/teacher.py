"""The teacher of a distillation: any trained nerfstudio run, loaded by the one run loader.

:func:`~eugen_nerf.eval.runs.load_run` checks the run directory and the checkpoint before the slow setup and
loads the checkpoint strictly (nerfstudio's ``eval_setup`` would take another method's checkpoint as a
half-random model); the teacher also needs its training cameras, whose rays the distillation casts.
"""

from __future__ import annotations

from pathlib import Path

from eugen_nerf.eval.runs import Run, load_run


def load_teacher(path: Path, device: str | None = None) -> Run:
    """The run at ``path`` (``config.yml`` or its directory) in eval mode, offline, with its training cameras."""
    return load_run(path, test_mode="test", device=device)
