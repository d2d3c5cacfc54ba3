"""What every command shares: exit codes and the one-line error for bad input."""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gpuscope.errors import InputError

if TYPE_CHECKING:
    from pathlib import Path

F = TypeVar("F", bound=Callable[..., Any])

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


def input_errors_exit(func: F) -> F:
    """Turn an :class:`InputError` into one line on stderr and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as error:
            click.echo(f"gpuscope: error: {error}", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper  # type: ignore[return-value]


def missing_extra(feature: str, package: str, extra: str) -> None:
    """Say in one line that an optional dependency is missing, and exit 2."""
    click.echo(
        f"gpuscope: error: {feature} needs {package}: pip install 'gpuscope[{extra}]'", err=True
    )
    sys.exit(EXIT_BAD_INPUT)


def write_output(path: Path, data: bytes) -> None:
    """Write an output file; a path that cannot be written is bad input (exit 2), not a crash."""
    try:
        path.write_bytes(data)
    except OSError as error:
        raise InputError(path, f"cannot be written ({error.strerror})") from None


def write_json(json_out: Path, document: bytes) -> bool:
    """Write a JSON document and a line feed to ``json_out``, or to stdout for ``-``. True when
    it went to stdout: it is then the command's only output."""
    if str(json_out) == "-":
        sys.stdout.buffer.write(document + b"\n")
        return True
    write_output(json_out, document + b"\n")
    return False


def prefetched() -> object:
    """The console script's read begun ahead (click's context object), or None: see
    :mod:`gpuscope.readers._early`."""
    context = click.get_current_context(silent=True)
    return context.obj if context is not None else None
