"""Renderers: the diagnosis as a terminal report, JSON, HTML and an annotated trace.

:func:`console` is the terminal every command prints to; :func:`sanitised` is what a terminal
renderer does to a result before it prints any of its strings.
"""

from __future__ import annotations

import enum
import os
import re
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

if TYPE_CHECKING:
    from rich.console import Console

T = TypeVar("T")

#: The longest string from a trace shown in a terminal: a kernel name of megabytes would take
#: minutes to lay out and fill the scrollback. JSON and HTML keep names whole.
MAX_SHOWN_CHARS = 400
#: C0 and C1 control characters except line feed and tab, DEL, and the bidirectional overrides
#: and isolates (which reorder what follows them on the line).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


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


def printable(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` safe to show in a terminal: control characters (an escape sequence in a kernel
    name could retitle the terminal, clear the screen or plant a hyperlink) become U+FFFD, and
    what is beyond ``limit`` characters is cut with an ellipsis."""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _UNPRINTABLE.sub("\ufffd", text)


def sanitised(result: T) -> T:
    """A copy of a result (a msgspec struct) whose strings are all :func:`printable`."""
    cleaned: T = _clean(result)
    return cleaned


def _clean(value: Any) -> Any:
    """``value`` with its strings printable: the same object where nothing changes (a diagnosis
    of a long trace holds millions of strings and lists, and copying them all took more memory
    than the analysis)."""
    if isinstance(value, enum.Enum):  # a str enum is a str: kept as it is
        return value
    if isinstance(value, str):
        if len(value) <= MAX_SHOWN_CHARS and _UNPRINTABLE.search(value) is None:
            return value
        return printable(value)
    if isinstance(value, msgspec.Struct):
        names = value.__struct_fields__
        old = [getattr(value, f) for f in names]
        new = _cleaned_items(old)
        if new is old:
            return value
        return msgspec.structs.replace(value, **dict(zip(names, new, strict=True)))
    if isinstance(value, list):
        if all(type(v) is int or type(v) is float for v in value):
            return value  # a series of numbers (the drawn timeline, the step table): no text
        return _cleaned_items(value)
    if isinstance(value, tuple):
        items = _cleaned_items(list(value))
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        pairs = [(_clean(k), _clean(v)) for k, v in value.items()]
        if all(k is k2 and v is v2 for (k, v), (k2, v2) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value


def _cleaned_items(items: list[Any]) -> list[Any]:
    """The items cleaned: ``items`` itself where none changes."""
    for i, item in enumerate(items):
        cleaned = _clean(item)
        if cleaned is not item:
            return [*items[:i], cleaned, *(_clean(rest) for rest in items[i + 1 :])]
    return items
