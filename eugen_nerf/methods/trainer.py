"""nerfstudio's ``Trainer`` with what a user who presses Ctrl-C or hits a NaN needs.

* A non-finite loss stops training before the optimiser step with one line naming the step and the loss
  (``--on-non-finite skip`` skips that step instead; the parameters are never updated from a NaN).
* Checkpoints are written under a temporary name and renamed, so an interrupted save (SIGINT, SIGTERM, a
  full disk) never leaves a ``step-*.ckpt`` that looks complete and is not; the previous one stays. The
  temporary file lies beside ``nerfstudio_models``, not in it: nerfstudio takes every name there for a
  checkpoint (``--load-dir`` would fail on a leftover of a SIGKILL).
* Ctrl-C or SIGTERM lets the step in progress finish, saves it as a checkpoint and ends training with one
  line naming it and exit status 130, so no finished step is lost (stock nerfstudio prints a traceback and
  exits 0 on Ctrl-C, keeping only its last periodic checkpoint, and SIGTERM killed it mid-save). A second
  signal during the step stops at once, keeping the last checkpoint on disk; signals during the stop's own
  save are ignored. Only the main process saves (as nerfstudio's trainer).
* On the CPU, denormal floats are flushed to zero while training (:func:`cpu_denormals_flushed`): the tiny
  gradients of a trained field otherwise make its steps severalfold slower than a fresh field's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import NoReturn

import torch
from nerfstudio.engine.callbacks import TrainingCallback, TrainingCallbackLocation
from nerfstudio.engine.trainer import Trainer
from nerfstudio.utils.decorators import check_main_thread
from nerfstudio.utils.rich_utils import CONSOLE

from eugen_nerf.eval.timing import cpu_denormals_flushed
from eugen_nerf.inputs.errors import TrainingStopped
from eugen_nerf.inputs.numerics import check_losses, non_finite_loss


@dataclasses.dataclass
class _Stop:
    """Where training stands when a signal arrives: inside a step (which is left to finish), and the last
    step it finished (the one a stop saves)."""

    in_step: bool = False
    finished: int | None = None
    requested: str | None = None  # the signal's name, once one arrived during a step
    forced: bool = False  # a second signal arrived during a step: that step is not saved
    saving: bool = False

    def begin_step(self, step: int) -> None:
        self.in_step = True

    def end_step(self, step: int) -> None:
        self.in_step, self.finished = False, step
        if self.requested:
            raise KeyboardInterrupt(self.requested)

    def handle(self, signum: int, frame: object) -> None:  # a signal handler's signature (frame unused)
        name = signal.Signals(signum).name
        if self.saving:
            return  # the stop's own save takes a moment; SIGKILL remains for a hung one
        if self.in_step and not self.requested:
            self.requested = name
            print(f"{name}: stopping after this step and saving it ({name} again stops at once)", flush=True)
            return
        self.forced = self.in_step
        raise KeyboardInterrupt(name)


@contextlib.contextmanager
def _signals_to(stop: _Stop) -> Iterator[None]:
    """Within the block SIGINT and SIGTERM go to ``stop.handle`` (in the main thread; elsewhere Python
    delivers no signals and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, stop.handle) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _command_name() -> str:
    """The running command as a user typed it: ``ns-train``, ``eugen-bench``, or ``python -m MODULE``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return f"python -m {spec.name}"
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "ns-train"


class SceneTrainer(Trainer):
    """``Trainer`` with non-finite-loss checks and atomic checkpoints (see the module docstring)."""

    resume_hint: str | None = None
    """What the stop line tells the user to do to continue; None: ``ns-train``'s ``--load-dir`` with the
    checkpoint folder (a benchmark that continues its runs itself says to rerun its command)."""

    def train(self) -> None:
        """nerfstudio's training loop, stopped by Ctrl-C or SIGTERM with the last finished step saved (see the
        module docstring): one line, exit status 130 (:class:`TrainingStopped`). After training has completed
        (the viewer kept open with ``--viewer.quit-on-train-completion False``), Ctrl-C just ends the command."""
        stop = _Stop()
        before = TrainingCallback([TrainingCallbackLocation.BEFORE_TRAIN_ITERATION], stop.begin_step)
        after = TrainingCallback([TrainingCallbackLocation.AFTER_TRAIN_ITERATION], stop.end_step)
        callbacks = self.callbacks
        self.callbacks = [before, *callbacks, after]  # the step's own callbacks run inside it
        try:
            # the stop's save runs with the handlers still installed, which ignore signals while it writes
            with _signals_to(stop), cpu_denormals_flushed(self.device):
                try:
                    super().train()
                except KeyboardInterrupt as error:
                    final = self.checkpoint_dir / f"step-{self.step:09d}.ckpt"
                    if self.training_state == "completed" and final.is_file():
                        return  # every step trained and saved: the viewer's wait was ended
                    self._stop(stop, str(error) or "SIGINT")
        finally:
            self.callbacks = callbacks

    def _stop(self, stop: _Stop, signal_name: str) -> NoReturn:
        """Save the last finished step (unless a second signal cut its step short), say so, and end training."""
        saved = None
        if stop.finished is not None and not stop.forced:
            stop.saving = True
            self.save_checkpoint(stop.finished)
            saved = stop.finished
        steps = sorted(self.checkpoint_dir.glob("step-*.ckpt"))
        hint = self.resume_hint or f"resume with --load-dir {self.checkpoint_dir}"
        if saved is not None:
            kept = f"saved step {saved} as {steps[-1]} ({hint})"
        elif steps:
            kept = f"the last complete checkpoint is {steps[-1]} ({hint})"
        else:
            kept = "no checkpoint was written"
        at = stop.finished if stop.finished is not None else self.step
        print(
            f"{_command_name()}: interrupted ({signal_name}) at step {at}; {kept}",
            file=sys.stderr,
            flush=True,
        )
        raise TrainingStopped(saved) from None

    def train_iteration(self, step: int):
        """nerfstudio 1.1.5's ``train_iteration``, with the loss checked before the backward pass and step."""
        groups = self.optimizers.parameters.keys()
        self.optimizers.zero_grad_some([g for g in groups if step % self.gradient_accumulation_steps[g] == 0])
        device_type = self.device.split(":")[0]
        device_type = "cpu" if device_type == "mps" else device_type
        with torch.autocast(device_type=device_type, enabled=self.mixed_precision):
            _, loss_dict, metrics_dict = self.pipeline.get_train_loss_dict(step=step)
            loss = functools.reduce(torch.add, loss_dict.values())
        bad = check_losses(loss_dict, step)
        if bad is not None:
            if getattr(self.config, "on_non_finite", "abort") != "skip":
                raise non_finite_loss(bad, loss_dict[bad], step)
            CONSOLE.print(f"step {step}: loss '{bad}' is non-finite; step skipped (--on-non-finite skip)")
            self.optimizers.zero_grad_all()
            return loss.detach().nan_to_num(), {}, {}
        self.grad_scaler.scale(loss).backward()  # type: ignore[union-attr]
        needs_step = [
            g
            for g in groups
            if step % self.gradient_accumulation_steps[g] == self.gradient_accumulation_steps[g] - 1
        ]
        self.optimizers.optimizer_scaler_step_some(self.grad_scaler, needs_step)
        if self.config.log_gradients:
            total = 0
            for tag, value in self.pipeline.model.named_parameters():
                if value.grad is not None:
                    grad = value.grad.norm()
                    metrics_dict[f"Gradients/{tag}"] = grad
                    total += grad
            metrics_dict["Gradients/Total"] = total
        scale = self.grad_scaler.get_scale()
        self.grad_scaler.update()
        if scale <= self.grad_scaler.get_scale():
            self.optimizers.scheduler_step_all(step)
        return loss, loss_dict, metrics_dict

    @check_main_thread
    def save_checkpoint(self, step: int) -> None:
        """nerfstudio's checkpoint, written under a temporary name and renamed into place (by the main process
        only, as nerfstudio's)."""
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        path = self.checkpoint_dir / f"step-{step:09d}.ckpt"
        partial = self.checkpoint_dir.parent / f".{path.name}.{os.getpid()}.partial"  # same file system
        pipeline = self.pipeline.module if hasattr(self.pipeline, "module") else self.pipeline
        try:
            torch.save(
                {
                    "step": step,
                    "pipeline": pipeline.state_dict(),
                    "optimizers": {k: v.state_dict() for k, v in self.optimizers.optimizers.items()},
                    "schedulers": {k: v.state_dict() for k, v in self.optimizers.schedulers.items()},
                    "scalers": self.grad_scaler.state_dict(),
                },
                partial,
            )
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
        if self.config.save_only_latest_checkpoint:
            for other in self.checkpoint_dir.glob("*.ckpt"):
                if other != path:
                    other.unlink()
