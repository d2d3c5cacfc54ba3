"""Renderers: the diagnosis as a terminal report, JSON, HTML and an annotated trace.

:func:`console` is the terminal every command prints to (:func:`plain_width` says, without rich,
when it would print no colours, and at which width); :func:`sanitised` is what a terminal
renderer does to a result before it prints any of its strings.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from gpuscope.sanitise import MAX_SHOWN_CHARS, printable, sanitised

__all__ = ["MAX_SHOWN_CHARS", "console", "left_early", "plain_width", "printable", "sanitised"]

if TYPE_CHECKING:
    from rich.console import Console


def console(*, stderr: bool = False) -> Console:
    """A rich console that prints text as it is: kernel and function names are never emoji
    codes (``:fire:``) nor markup (``[link=...]`` in a GPU name would become a hyperlink), and
    rich then need not load its emoji table. Styles come from the renderers' own ``Text``."""
    from rich.console import Console  # noqa: PLC0415 - the renderers that need rich import it

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            left_early()

    return _Console(stderr=stderr, emoji=False, markup=False)


def left_early() -> None:
    """A reader that took what it wanted and left (`gpuscope diagnose X | head -1`) is a
    success: rich would exit 1. What is left to print goes to /dev/null."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(0)


def plain_width() -> int | None:
    """The width :func:`console` has when it is sure to print no colours, found without
    importing rich: stdout is not a terminal, nothing in the environment makes it one, and this
    is no notebook. None otherwise: rich decides then.

    rich's own rules (``Console.is_terminal``, ``Console.size``): ``TTY_COMPATIBLE=0`` or an
    empty ``FORCE_COLOR`` mean no terminal, ``TTY_COMPATIBLE=1`` or any other ``FORCE_COLOR``
    one, else stdout's ``isatty()``; the width is ``COLUMNS``, else the size of the first of
    stdin, stdout and stderr that is a terminal, else 80."""
    import builtins  # noqa: PLC0415

    environ = os.environ
    if os.name != "posix" or hasattr(builtins, "get_ipython") or "idlelib" in sys.modules:
        return None
    compatible, force = environ.get("TTY_COMPATIBLE", ""), environ.get("FORCE_COLOR")
    if compatible == "1" or (compatible != "0" and force):  # rich takes it for a terminal
        return None
    if compatible != "0" and force is None and _is_a_terminal(sys.stdout):
        return None
    columns = environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        width = int(columns)
    else:
        width = 0
        for fd in (0, 1, 2):
            try:
                width = os.get_terminal_size(fd).columns
                break
            except (AttributeError, ValueError, OSError):  # not a terminal
                pass
        width = width or 80
    return width if width > 0 else None


def _is_a_terminal(stdout: object) -> bool:
    """Whether rich would take ``stdout`` for a terminal (or may: a stream it wraps itself)."""
    if stdout is None or hasattr(stdout, "rich_proxied_file"):
        return True
    isatty = getattr(stdout, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # closed: rich takes it for no terminal
        return False
