"""Everything a run writes: resumable state, and the student run directory, all written atomically.

* ``DIR/.distill_state/rank-R-of-W.pt``: progress and normal equations, replaced after every batch.
  A rerun with the same options resumes from it; it is deleted once the run directory is complete.
* ``DIR/config.yml``, ``DIR/nerfstudio_models/step-N.ckpt``, ``DIR/distill_report.json``: each goes
  through a temporary file and a rename, and the checkpoint is renamed last, so a crash never leaves
  a directory that looks like a complete run.
* ``--overwrite`` of a complete run works in the staging directory ``.DIR.partial`` beside it (state
  included) and swaps it into place only when the new run is complete: until then the old run stays,
  byte-identical, whatever interrupts the new one (Ctrl-C, SIGTERM, a crash); rerunning resumes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import torch
import yaml

from eugen_nerf.distill.options import DistillError
from eugen_nerf.inputs.outputs import atomic_write, staging_path, swap_into_place

STATE_DIR = ".distill_state"


def holds_run(run_dir: Path) -> bool:
    """A complete run: its checkpoint is written last (a ``config.yml`` alone is a run stopped while written)."""
    return any((run_dir / "nerfstudio_models").glob("step-*.ckpt"))


def check_output_dir(run_dir: Path, overwrite: bool, teacher: Path | None = None) -> None:
    """Refuse to write over a complete run unless ``overwrite``; into a folder holding anything but an earlier
    run of this command (a student, or one stopped with its resumable state), which ``--overwrite`` would
    delete; and into, above or inside the ``teacher``'s run folder, whatever ``overwrite`` says (nothing is
    written here)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise DistillError(f"--output-dir {run_dir} exists and is not a directory")
    if teacher is not None:
        teacher_dir = (teacher.parent if teacher.is_file() else teacher).resolve()
        if teacher_dir == run_dir.resolve() or run_dir.resolve() in teacher_dir.parents:
            raise DistillError(
                f"--output-dir {run_dir} holds the teacher's run {teacher_dir}; choose another folder"
            )
        # the teacher's run folder stays as it was trained (a folder that is no run is reported as such later)
        if (teacher_dir / "config.yml").is_file() and teacher_dir in run_dir.resolve().parents:
            raise DistillError(
                f"--output-dir {run_dir} is inside the teacher's run {teacher_dir}; choose a folder beside it"
            )
    ours = holds_run(run_dir) or (run_dir / STATE_DIR).is_dir() or (run_dir / "distill_report.json").is_file()
    if run_dir.is_dir() and any(run_dir.iterdir()) and not ours:
        raise DistillError(
            f"--output-dir {run_dir} holds files that are not an eugen-distill run; choose an empty or new folder"
        )
    if holds_run(run_dir) and not overwrite:
        raise DistillError(f"--output-dir {run_dir} already holds a run; pass --overwrite to replace it")


def work_dir(run_dir: Path) -> Path:
    """Where the run writes: ``run_dir`` itself, or its staging directory when ``run_dir`` holds a complete
    run that ``--overwrite`` replaces (see the module docstring)."""
    return staging_path(run_dir) if holds_run(run_dir) else run_dir


def publish_run(work: Path, run_dir: Path) -> None:
    """Swap a complete staged run into place (a no-op when the run was written in place)."""
    if work != run_dir:
        swap_into_place(work, run_dir)


def _save_atomic(obj, path: Path) -> None:
    atomic_write(path, lambda partial: torch.save(obj, partial))


class StateStore:
    """This process's resumable state, valid only for the options it was made with."""

    def __init__(self, run_dir: Path, rank: int, world_size: int, fingerprint: dict) -> None:
        self.path = run_dir / STATE_DIR / f"rank-{rank}-of-{world_size}.pt"
        self.digest = hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()

    def load(self, discard_other: bool = False) -> dict | None:
        """The saved state, ``None`` when there is none; if it was made with other options, raise (or, with
        ``discard_other``, i.e. ``--overwrite``, remove it and start over)."""
        if not self.path.exists():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as err:  # noqa: BLE001 - replaced atomically: outside damage
            if not discard_other:
                raise DistillError(
                    f"{self.path}: unreadable resumable state ({err}); pass --overwrite to start over"
                ) from None
            state = {}
        if state.get("fingerprint") != self.digest and discard_other:
            self.remove()
            return None
        if state.get("fingerprint") != self.digest:
            raise DistillError(
                f"{self.path.parent} holds the state of a run with different options or teacher: rerun with "
                "the same options to resume it, or pass --overwrite to start over"
            )
        return state

    def save(self, state: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _save_atomic({**state, "fingerprint": self.digest}, self.path)

    def remove(self) -> None:
        shutil.rmtree(self.path.parent, ignore_errors=True)


def write_yaml_atomic(config, path: Path) -> None:
    atomic_write(path, lambda partial: partial.write_text(yaml.dump(config), "utf8"))


def stage_checkpoint(run_dir: Path, pipeline_state: dict, step: int) -> Path:
    """Write the checkpoint under a temporary name (see :func:`publish_checkpoint`); return that path."""
    directory = run_dir / "nerfstudio_models"
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".step-{step:09d}.ckpt.partial"
    torch.save({"step": step, "pipeline": pipeline_state, "optimizers": {}, "scalers": {}}, partial)
    return partial


def publish_checkpoint(partial: Path) -> Path:
    """Give the staged checkpoint its final name: from now on the directory is a complete run."""
    final = partial.with_name(partial.name.removeprefix(".").removesuffix(".partial"))
    partial.replace(final)
    return final
