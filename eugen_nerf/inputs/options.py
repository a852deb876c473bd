"""Option values, checked one way by every command: the message names the option as typed on the command line.

Commands call :func:`check_options` on their (nested) option dataclasses; each dataclass lists its
constraints in a ``CONSTRAINTS`` class attribute ``{field: rule}`` with the rules below, so a rule is written
once and the flag name comes from where the dataclass sits in the command (``--train.frame-stride``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
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

    import tyro

    from eugen_nerf.inputs.errors import one_line_errors

    args = sys.argv[1:] if args is None else list(args)
    if default is not None and args and args[0] not in subcommands and args[0] not in ("-h", "--help"):
        args = [default, *args]
    tyro.extras.set_accent_color("bright_yellow")
    command = tyro.cli(commands, args=args, description=description)
    with one_line_errors(prog, code=code, also=also):
        command.main()
