"""What every command prints and writes, and the one-line error for bad input: the part of
:mod:`gpuscope.commands._common` that needs no command-line library, so that a command run
without click (``gpuscope diagnose FILE``, :mod:`gpuscope.commands._run`) says, shows and fails
exactly as the click commands do."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

from gpuscope.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from gpuscope.render.base import Renderer

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


@contextmanager
def one_command() -> Iterator[None]:
    """What every command runs inside, with click or without.

    A command starts afresh (one process may run several: tests, an embedding program): it
    protects the files it reads (:mod:`gpuscope._files`), under its own ``--max-memory``. A
    reader that took what it wanted and left (``gpuscope diagnose X | head -1``) makes it a
    success: later writes and the final flush go to /dev/null instead of failing."""
    from gpuscope._files import forget_inputs
    from gpuscope.readers._io import set_memory_budget

    forget_inputs()
    set_memory_budget(None)
    try:
        yield
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)


def say(message: str, *, err: bool = True) -> None:
    """Print one line a command has to say (stderr by default), through the one sanitiser:
    a path or a name in it cannot carry an escape sequence to the terminal
    (:mod:`gpuscope.sanitise`)."""
    from gpuscope.sanitise import one_line

    stream = sys.stderr if err else sys.stdout
    if stream is not None:  # as click.echo: no stream (pythonw), nothing said
        stream.write(one_line(message) + "\n")
        stream.flush()


def input_errors_exit(func: F) -> F:
    """Turn an :class:`InputError` into one line on stderr and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as error:
            # One line, whatever the reason holds (an SQLite error quotes a schema's lines).
            say(f"gpuscope: error: {error}")
            sys.exit(EXIT_BAD_INPUT)
        except (KeyError, IndexError, TypeError, ValueError) as error:
            source = _saved_source()
            if source is None:
                raise  # a bug: its traceback
            # A saved diagnosis is checked as it is read (gpuscope.diagnosis.saved), but its
            # parts must also agree with each other (a row per cause, equal columns): one that
            # breaks the renderers is a hand-edited file, not a bug.
            say(
                f"gpuscope: error: {source}: the saved diagnosis does not hold together"
                f" ({type(error).__name__}: {error}): not one gpuscope wrote"
            )
            sys.exit(EXIT_BAD_INPUT)

    return wrapper  # type: ignore[return-value]


def _saved_source() -> str | None:
    """The saved diagnosis this command read last, if it read one."""
    saved = sys.modules.get("gpuscope.diagnosis.saved")
    return None if saved is None else saved.last_read()


def missing_extra(feature: str, package: str, extra: str) -> None:
    """Say in one line that an optional dependency is missing, and exit 2."""
    from gpuscope._install import install_line

    say(f"gpuscope: error: {feature} needs {package}: {install_line(extra)}")
    sys.exit(EXIT_BAD_INPUT)


def write_output(
    path: Path, data: bytes | Iterable[bytes], *, inputs: tuple[Path, ...] = ()
) -> None:
    """Write an output file (atomically; a device or FIFO written through), never over a file
    the command read (nor ``inputs``); a path that cannot be written is bad input (exit 2), not
    a crash (see ``gpuscope._files``)."""
    from gpuscope._files import write_output as write

    write(path, data, extra_inputs=inputs)


def write_json(json_out: Path, document: bytes, *, inputs: tuple[Path, ...] = ()) -> bool:
    """Write a JSON document and a line feed to ``json_out``, or to stdout for ``-``. True when
    it went to stdout: it is then the command's only output."""
    if str(json_out) == "-":
        sys.stdout.buffer.write(document + b"\n")
        return True
    write_output(json_out, document + b"\n", inputs=inputs)
    return False


def write_rendered(output: Path | None, renderer: Renderer[S], subject: S) -> bool:
    """Write what ``renderer`` makes of ``subject`` to ``output``, or to stdout for ``-`` (and
    None). True when it went to stdout: it is then the command's only output."""
    data = rendered(renderer, subject)
    if output is None or str(output) == "-":
        sys.stdout.buffer.write(data if data.endswith(b"\n") else data + b"\n")
        sys.stdout.flush()
        return True
    write_output(output, data if data.endswith(b"\n") else data + b"\n")
    return False


def show(renderer: Renderer[S], subject: S, *, all_devices: bool = False) -> None:
    """Print what a text renderer makes of ``subject`` on stdout: the one way a command shows a
    result. The options carry the terminal's width and colours (those of the console every
    command prints to, :func:`gpuscope.render.console`), so the text is what the renderer would
    have printed to it; a reader that leaves early (``| head -1``) is a success, as there."""
    from gpuscope.render import console, left_early, plain_width
    from gpuscope.render.base import RenderOptions
    from gpuscope.sanitise import sanitised

    subject = sanitised(subject)  # names, paths and labels from outside: no escape sequences
    width = plain_width()
    if width is None:  # a terminal, or a notebook: rich says how wide, and in which colours
        out = console()
        options = RenderOptions(
            width=out.width,
            all_devices=all_devices,
            color_system=out.color_system,
            terminal=out.is_terminal,
        )
        file = out.file
    else:  # a pipe or a file (rich not imported, if the renderer need not)
        options = RenderOptions(width=width, all_devices=all_devices)
        file = sys.stdout
    text = renderer.render(subject, options)
    try:
        file.write(text if isinstance(text, str) else text.decode())
        file.flush()
    except BrokenPipeError:
        left_early()


def rendered(renderer: Renderer[S], subject: S) -> bytes:
    """What a file renderer (JSON, HTML) makes of ``subject``, as bytes to write."""
    from gpuscope.render.base import RenderOptions

    output = renderer.render(subject, RenderOptions())
    return output.encode() if isinstance(output, str) else output
