"""Renderers: the diagnosis as a terminal report, JSON, HTML and an annotated trace.

:func:`console` is the terminal every command prints to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


def console(*, stderr: bool = False) -> Console:
    """A rich console that prints text as it is: kernel and function names are never emoji
    codes (``:fire:``), and rich then need not load its emoji table."""
    from rich.console import Console  # noqa: PLC0415 - the renderers that need rich import it

    return Console(stderr=stderr, emoji=False)
