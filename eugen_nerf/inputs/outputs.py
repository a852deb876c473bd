"""Output directories written so that bad input, a crash, Ctrl-C or SIGTERM never lose an earlier result.

A command that writes a directory of results works in a hidden staging directory beside it and swaps it
into place only when it is complete (:func:`staged_directory`); an existing result is refused unless the
user asks to overwrite it (:func:`refuse_existing`), and even then stays on disk, byte-identical, until the
new one is complete. Files are written through a temporary name and renamed (:func:`atomic_write_bytes`).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from eugen_nerf.inputs.errors import InputError

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def refuse_existing(
    target: Path,
    overwrite: bool,
    option: str = "--output",
    what: str = "a result",
    marker: str | tuple[str, ...] | None = None,
) -> None:
    """:class:`InputError` when ``target`` exists (as ``what``) and ``overwrite`` is not set, or when it holds
    files that are not ``what`` (none of the ``marker`` files in it): ``--overwrite`` replaces an earlier result,
    never a folder of something else. Also refused: a ``target`` whose nearest existing folder cannot be written."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise InputError(f"{option} {target} exists and is not a directory")
    if target.exists() and any(target.iterdir()):
        markers = (marker,) if isinstance(marker, str) else marker
        if markers and not any((target / name).is_file() for name in markers):
            raise InputError(
                f"{option} {target} holds files that are not {what} (no {' or '.join(markers)}); choose an empty "
                "or new folder"
            )
        if not overwrite:
            raise InputError(f"{option} {target} already holds {what}; pass --overwrite to replace it")
    refuse_unwritable(target, option, folder=True)


def refuse_unwritable(target: Path, option: str = "--output", folder: bool = False) -> None:
    """:class:`InputError` when ``target`` (a file, or a ``folder``) cannot be written: it exists as the other
    kind, or its nearest existing parent is not a folder this process can write into. Checked before the work
    whose result it holds, so a bad path is one line at once, not a traceback at the end."""
    target = Path(target)
    if target.exists() and target.is_dir() != folder:
        raise InputError(f"{option} {target} is {'not a folder' if folder else 'a folder; name a file'}")
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {target}: cannot write into {parent}")


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return result == 0


def swap_into_place(staging: Path, target: Path) -> None:
    """Make the complete ``staging`` directory ``target``; a previous ``target`` is removed only afterwards.

    Where the OS swaps two directories in one step, ``target`` is never absent; elsewhere it is renamed
    aside first, so at every moment either the old or the new complete directory exists.
    """
    if not target.exists():
        staging.rename(target)
        return
    if not _exchange(staging, target):
        trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        target.rename(trash / target.name)
        staging.rename(target)
        staging = trash
    shutil.rmtree(staging)


def staging_path(target: Path) -> Path:
    """The fixed staging directory of ``target`` (fixed so that an interrupted run can resume from it)."""
    return target.parent / f".{target.name}.partial"


@contextmanager
def staged_directory(target: Path, keep_on_error: bool = False) -> Iterator[Path]:
    """Yield a staging directory that becomes ``target`` only when the block completes.

    On an error (or Ctrl-C/SIGTERM) the staging directory is removed, unless ``keep_on_error`` (it then
    holds resumable state); ``target`` is untouched either way. Without ``keep_on_error`` a staging directory
    found at the start was left by a process killed outright, and is removed.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = staging_path(target)
    if staging.exists() and not keep_on_error:  # left by a run killed outright (SIGKILL, out of memory)
        shutil.rmtree(staging)
    staging.mkdir(exist_ok=keep_on_error)
    try:
        yield staging
        swap_into_place(staging, target)
    finally:
        if staging.exists() and not keep_on_error:
            shutil.rmtree(staging)


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """``write(partial)`` writes the file under a temporary name beside ``path``, which then replaces ``path`` in
    one rename: a reader sees the old file or the new one, never half of one (a failed write leaves no partial)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        write(partial)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda partial: partial.write_bytes(data))


def file_stem(label: str) -> str:
    """``label`` (a variant's name) as a file stem: runs of anything but letters and digits become ``_``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", label).strip("_")
