"""Renderers: the diagnosis as a terminal report, JSON, HTML and an annotated trace.

:func:`console` is the terminal every command prints to; :func:`sanitised` is what a terminal
renderer does to a result before it prints any of its strings.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from gpuscope.sanitise import MAX_SHOWN_CHARS, printable, sanitised

__all__ = ["MAX_SHOWN_CHARS", "console", "printable", "sanitised"]

if TYPE_CHECKING:
    from rich.console import Console


def console(*, stderr: bool = False) -> Console:
    """A rich console that prints text as it is: kernel and function names are never emoji
    codes (``:fire:``) nor markup (``[link=...]`` in a GPU name would become a hyperlink), and
    rich then need not load its emoji table. Styles come from the renderers' own ``Text``."""
    from rich.console import Console  # noqa: PLC0415 - the renderers that need rich import it

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # A reader that took what it wanted and left (`gpuscope diagnose X | head -1`) is a
            # success: rich would exit 1. What is left to print goes to /dev/null.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(0)

    return _Console(stderr=stderr, emoji=False, markup=False)
