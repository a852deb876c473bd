"""Option values, checked one way by every command: the message names the option as typed on the command line.

Commands call :func:`check_options` on their (nested) option dataclasses; each dataclass lists its
constraints in a ``CONSTRAINTS`` class attribute ``{field: rule}`` with the rules below, so a rule is written
once and the flag name comes from where the dataclass sits in the command (``--train.frame-stride``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eugen_nerf.inputs.errors import InputError

Rule = Callable[[str, Any], None]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{flag(name)} must be a finite number, got {value!r}")
    return float(value)


def integer_at_least(low: int) -> Rule:
    def rule(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(f"{flag(name)} must be an integer >= {low}, got {value!r}")

    return rule


def positive(name: str, value: Any) -> None:
    if _number(name, value) <= 0:
        raise InputError(f"{flag(name)} must be > 0, got {value!r}")


def non_negative(name: str, value: Any) -> None:
    if _number(name, value) < 0:
        raise InputError(f"{flag(name)} must be >= 0, got {value!r}")


def fraction(name: str, value: Any) -> None:
    """In (0, 1]."""
    if not 0 < _number(name, value) <= 1:
        raise InputError(f"{flag(name)} must be in (0, 1], got {value!r}")


def open_fraction(name: str, value: Any) -> None:
    """In [0, 1)."""
    if not 0 <= _number(name, value) < 1:
        raise InputError(f"{flag(name)} must be in [0, 1), got {value!r}")


def finite(name: str, value: Any) -> None:
    values = value if isinstance(value, (tuple, list)) else (value,)
    for item in values:
        _number(name, item)


def tcp_port(name: str, value: Any) -> None:
    """A TCP port, 0 (any free one) to 65535."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise InputError(f"{flag(name)} must be in 0..65535, got {value!r}")


POSITIVE_INT = integer_at_least(1)
NON_NEGATIVE_INT = integer_at_least(0)


def check_options(options: Any, rules: dict[str, Rule] | None = None, prefix: str = "") -> None:
    """Apply every ``CONSTRAINTS`` rule of ``options`` and of the dataclasses nested in it, and ``rules``
    (dotted field paths, for dataclasses defined in layers that know nothing of commands)."""
    rules = rules or {}
    own: dict[str, Rule] = getattr(type(options), "CONSTRAINTS", {})
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        name = f"{prefix}{field.name}"
        for rule in (own.get(field.name), rules.get(name)):
            if rule is not None:
                rule(name, value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_options(value, rules, prefix=f"{name}.")


def run_command(
    prog: str,
    commands: Any,
    description: str | None,
    args: list[str] | None = None,
    default: str | None = None,
    subcommands: tuple[str, ...] = (),
    code: int = 2,
    also: tuple[type[BaseException], ...] = (),
) -> None:
    """A console entry point: parse ``args`` (default ``sys.argv[1:]``) into ``commands`` with tyro and run the
    parsed command's ``main()``, every expected error as one line (:func:`one_line_errors`). With ``default``,
    arguments that do not start with one of ``subcommands`` (or ``--help``) run that subcommand, so
    ``eugen-export RUN`` means ``eugen-export export RUN``."""
    import sys

    from eugen_nerf.inputs.errors import one_line_errors, usage_error

    args = sys.argv[1:] if args is None else list(args)
    if default is not None and args and args[0] not in subcommands and args[0] not in ("-h", "--help"):
        first = args[0]
        # an option or a path runs the default subcommand; a bare word is a mistyped subcommand's name
        if not (first.startswith("-") or "/" in first or "." in first or Path(first).exists()):
            usage_error(
                prog, f"{first!r} is neither a subcommand ({', '.join(subcommands)}) nor an existing path"
            )
        args = [default, *args]
    command = parse_command_line(commands, prog, args, description)
    with one_line_errors(prog, code=code, also=also):
        command.main()


def parse_command_line(
    commands: Any, prog: str, args: list[str] | None = None, description: str | None = None
):
    """``tyro.cli`` as every eugen-* command calls it: the command's name in its usage line, and option help
    that reads as the docstrings' paragraphs (see :func:`_join_docstring_lines`)."""
    import tyro

    _join_docstring_lines()
    tyro.extras.set_accent_color("bright_yellow")
    return tyro.cli(commands, args=args, description=description, prog=prog)


_LIST_ITEM = re.compile(r"^([-*•]|\d+[.)])\s")


_LITERAL = re.compile(r"``([^`]+)``")


def join_wrapped_lines(text: str) -> str:
    """``text`` (a docstring) with its wrapped lines joined into paragraphs, after its own indentation is
    removed (``inspect.cleandoc``). A list item (``-``, ``*``, ``•``, ``1.``) starts a line and takes its
    indented wrapped lines; a line indented past the text (an example command) stays as it is; a blank line
    ends a paragraph. reST literals (````x````) lose their backquotes: a terminal shows them as typed."""
    import inspect

    text = _LITERAL.sub(r"\1", text)
    lines: list[str] = []
    previous = "blank"  # what the last line kept is: blank, text, item (a list item) or code (indented)
    for line in inspect.cleandoc(text).split("\n"):
        indented = line[:1].isspace()
        if not line.strip():
            kind = "blank"
        elif _LIST_ITEM.match(line):
            kind = "item"
        elif indented and previous == "item":  # an item's wrapped line
            kind = "item-continued"
        else:
            kind = "code" if indented else "text"
        if kind == "item-continued" or (kind == "text" and previous == "text"):
            lines[-1] = f"{lines[-1]} {line.strip()}"
        else:
            if kind == "item" and lines and not lines[-1]:
                lines.pop()  # tyro puts a list on its own lines already: a blank line too would show as two
            lines.append(line.rstrip())
            previous = kind
    return "\n".join(lines)


def _join_docstring_lines() -> None:
    """Make tyro show option help as paragraphs. tyro keeps a line break before every line that does not
    start with a letter (meant for lists), and the continuation lines of an attribute's docstring start with
    its indentation, so help broke wherever the source wraps. :func:`join_wrapped_lines` runs first. Only for
    our commands: stock ``ns-*`` help stays as nerfstudio prints it. Idempotent; without tyro's private hook,
    a no-op."""
    from tyro import _strings

    join = getattr(_strings, "remove_single_line_breaks", None)
    if join is None or getattr(join, "_joins_paragraphs", False):
        return

    def paragraphs(helptext: str) -> str:
        return join(join_wrapped_lines(helptext))

    paragraphs._joins_paragraphs = True  # type: ignore[attr-defined]
    _strings.remove_single_line_breaks = paragraphs


def resolve_device(name: object = None, option: str = "--device"):
    """The torch device a ``--device`` value names: ``None`` or ``"auto"`` is CUDA where available, else the CPU.
    Anything but the CPU and a CUDA device this machine has is an :class:`InputError` (one line, where torch
    would raise from deep inside the first tensor moved there): the commands run on those two kinds only."""
    import torch

    name = None if name is None else str(name)  # a torch.device too
    if name is None or name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise InputError(f"{option} {name!r} is not a torch device (cpu, cuda, cuda:1, ...)") from None
    if device.type not in ("cpu", "cuda"):
        raise InputError(f"{option} {name}: the commands run on the CPU or CUDA (cpu, cuda, cuda:1, ...)")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise InputError(f"{option} {name}: no CUDA device is available here (use {option} cpu)")
        if device.index is not None and device.index >= count:
            raise InputError(
                f"{option} {name}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}"
            )
    return device
