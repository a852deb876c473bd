"""The error kinds every command shares, and the one way a command reports them: one line, no traceback.

* :class:`InputError`: bad input (a scene, run directory, checkpoint, image or option value); the message
  names the file, frame or option, and it is raised before anything is written.
* :class:`NumericalError`: a non-finite loss, render or fitted matrix; the message names the layer or step.
* Ctrl-C (SIGINT) and SIGTERM end a command with one line too; outputs are staged
  (:mod:`eugen_nerf.inputs.outputs`), so what was there before stays, or the state is resumable. Training
  stops at the end of its step, saves it and raises :class:`TrainingStopped`.

Every console script runs its body under :func:`one_line_errors`; stock nerfstudio commands (``ns-train``,
``ns-eval``, ...) get the same treatment for these error kinds through :func:`install_excepthook`, which
the method plugin installs at import.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

INTERRUPTED_EXIT = 130


class InputError(ValueError):
    """Input a command must not use; the message names the file, frame or option at fault."""


class NumericalError(RuntimeError):
    """A non-finite loss, render or fitted matrix; the message names the layer or step."""


class TrainingStopped(SystemExit):
    """Training ended by Ctrl-C or SIGTERM (exit status 130). ``step``: the step of the checkpoint saved on the
    way out, the last one training finished (``None`` when none was saved: stopped before its first step, or
    by a second signal in the middle of one). ``wall`` and ``cpu``: the seconds training ran before the stop,
    filled in by whoever timed it."""

    def __init__(self, step: int | None) -> None:
        super().__init__(INTERRUPTED_EXIT)
        self.step = step
        self.wall: float | None = None
        self.cpu: float | None = None


def one_line(message: object) -> str:
    """``message`` on one line (causes quoted from libraries often span several)."""
    return " ".join(str(message).splitlines()).strip()


def report(prog: str, error: BaseException | str) -> None:
    """The one line of a failed command, on stderr (where a pipe or a redirected stdout does not hide it)."""
    print(f"{prog}: error: {one_line(error)}", file=sys.stderr, flush=True)


def usage_error(prog: str, message: str) -> NoReturn:
    """A command-line value the parser accepted but the command cannot use: one line on stderr, exit status 2
    (argparse's convention), before anything is written."""
    print(f"{prog}: error: {one_line(message)}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _raise_interrupt(signum, frame) -> None:  # a signal handler's signature (frame unused)
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM unwinds like Ctrl-C (``finally`` clauses run, staged output is removed)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def one_line_errors(prog: str, code: int = 2, also: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Run a command body: input and numerical errors (and ``also``) exit with ``code`` and one line;
    Ctrl-C or SIGTERM exits 130 with one line."""
    try:
        with sigterm_as_interrupt():
            yield
    except (InputError, NumericalError, *also) as error:
        report(prog, error)
        raise SystemExit(code) from None
    except KeyboardInterrupt as error:
        signal_name = str(error) or "SIGINT"
        print(
            f"{prog}: interrupted ({signal_name}); earlier output is untouched, rerun to start again or resume",
            file=sys.stderr,
            flush=True,
        )
        raise SystemExit(INTERRUPTED_EXIT) from None


def install_excepthook() -> None:
    """Uncaught :class:`InputError`/:class:`NumericalError` in any process that imported our plugin (stock
    ``ns-*`` commands) print one line and exit 1 instead of a traceback. Idempotent."""
    if getattr(sys.excepthook, "_eugen_nerf", False):
        return
    previous = sys.excepthook

    def hook(kind, value, traceback) -> None:
        if issubclass(kind, (InputError, NumericalError)):
            prog = sys.argv[0].rsplit("/", 1)[-1] if sys.argv and sys.argv[0] else "error"
            report(prog, value)
            return
        previous(kind, value, traceback)

    hook._eugen_nerf = True  # type: ignore[attr-defined]
    sys.excepthook = hook
