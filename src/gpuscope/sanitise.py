"""The one sanitiser of text gpuscope prints to a terminal.

Contract: every string that came from outside gpuscope (a kernel or file name, a path, a label,
a GPU's name, an error's reason quoting an input) passes through :func:`printable` (or
:func:`sanitised` for a whole result, :func:`one_line` for a message) before any command prints
it. Control characters (an escape sequence could retitle the terminal, clear the screen, plant a
hyperlink or fake output), C1 controls, bidirectional overrides and line separators become
U+FFFD; text beyond a limit is cut with an ellipsis. Rich markup is never interpreted in such
text: every console is made with ``markup=False`` and styles come from ``Text`` objects, so
``[link=...]`` in a label prints as itself.

Light imports only: the CLI's error path loads it.
"""

from __future__ import annotations

import enum
import operator
import re
from collections.abc import Collection
from typing import Any, TypeVar

import msgspec

T = TypeVar("T")

#: The longest string from a trace shown in a terminal: a kernel name of megabytes would take
#: minutes to lay out and fill the scrollback. JSON and HTML keep names whole.
MAX_SHOWN_CHARS = 400
#: C0 and C1 control characters except line feed and tab (U+009B alone opens an escape sequence
#: on many terminals), DEL, the bidirectional marks, overrides and isolates (which reorder what
#: follows them on the line: a right-to-left override makes "exe.txt" read "txt.exe"), and the
#: line and paragraph separators.
_UNPRINTABLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
)
#: The same, and line feed and tab too: for text that must stay one line.
_NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
#: The longest message (an error line, a path) shown whole.
MAX_LINE_CHARS = 4000
#: Fields of a result that hold gpuscope's own sentences (a headline, a finding's evidence and
#: fix): they are shown whole, wrapped by the terminal, never cut at :data:`MAX_SHOWN_CHARS`;
#: only a name inside them longer than that is shortened, in its middle.
PROSE_FIELDS = frozenset(
    {"summary", "title", "evidence", "fix", "bound_evidence", "price_source", "warnings", "notes"}
)
#: The longest sentence field shown (a bound on a result built by hand, not a length met).
MAX_PROSE_CHARS = 100_000
_LONG_WORD = re.compile(rf"\S{{{MAX_SHOWN_CHARS + 1},}}")


def printable(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` safe to show in a terminal: control characters (an escape sequence in a kernel
    name could retitle the terminal, clear the screen or plant a hyperlink) become U+FFFD, and
    what is beyond ``limit`` characters is cut with an ellipsis."""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _UNPRINTABLE.sub("\ufffd", text)


def middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, its middle replaced by an ellipsis: both ends
    stay (the start of a path and the file, a kernel's namespace and its template arguments)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = width // 2
    tail = width - 1 - head
    return text[:head] + "…" + (text[len(text) - tail :] if tail else "")


def printable_prose(text: str) -> str:
    """A sentence of gpuscope's own, safe to show: as :func:`printable`, but whole; only a word
    (a name from a trace) longer than :data:`MAX_SHOWN_CHARS` is shortened in its middle."""
    if len(text) > MAX_SHOWN_CHARS:
        text = _LONG_WORD.sub(lambda word: middle(word.group(), MAX_SHOWN_CHARS), text)
    return printable(text, MAX_PROSE_CHARS)


class _LastCleaned:
    """The result :func:`sanitised` returned last. A command sanitises its result before it
    hands it to a renderer, and the terminal renderer sanitises what it is given (a library
    caller's result too): the second walk, ~4 ms of a diagnosis of 21k idle gaps, would find
    nothing to change. Results are frozen structs, taken as never changed once made."""

    result: object = None


def sanitised(result: T) -> T:
    """A copy of a result (a msgspec struct) whose strings are all :func:`printable`."""
    if result is _LastCleaned.result:
        return result
    cleaned: T = _clean(result)
    _LastCleaned.result = cleaned
    return cleaned


def _clean(value: Any, prose: bool = False) -> Any:
    """``value`` with its strings printable: the same object where nothing changes (a diagnosis
    of a long trace holds millions of strings and lists, and copying them all took more memory
    than the analysis). ``prose``: the value is (or holds) sentences of a :data:`PROSE_FIELDS`
    field."""
    if type(value) in _SCALARS:  # most fields: answered before the isinstance checks
        return value
    if isinstance(value, enum.Enum):  # a str enum is a str: kept as it is
        return value
    if isinstance(value, str):
        if len(value) <= MAX_SHOWN_CHARS and _UNPRINTABLE.search(value) is None:
            return value
        return printable_prose(value) if prose else printable(value)
    if isinstance(value, msgspec.Struct):
        names = value.__struct_fields__
        old = msgspec.structs.astuple(value)
        new = [  # most fields are numbers: answered here, without a call
            v if type(v) in _SCALARS else _clean(v, f in PROSE_FIELDS)
            for f, v in zip(names, old, strict=True)
        ]
        if all(map(operator.is_, new, old)):
            return value
        return msgspec.structs.replace(value, **dict(zip(names, new, strict=True)))
    if isinstance(value, list):
        if _plain(value):
            return value  # numbers (the drawn timeline, the step table), names already printable
        return _cleaned_items(value, prose)
    if isinstance(value, tuple):
        items = _cleaned_items(list(value))
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, dict):
        if _plain(value.keys()) and _plain(value.values()):
            return value
        pairs = [(_clean(k), _clean(v)) for k, v in value.items()]
        if all(k is k2 and v is v2 for (k, v), (k2, v2) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value


#: The types of items :func:`_plain` checks as a whole (a ``bool`` is an ``int``: kept as is).
_SCALARS = frozenset({int, float, bool, type(None)})
_SCALARS_AND_TEXT = _SCALARS | {str}
_TEXT_OR_NONE = frozenset({str, type(None)})


def _plain(items: Collection[Any]) -> bool:
    """Whether every item is a number, None or a printable string: then nothing in ``items``
    changes. Checked a whole list at a time (a device's idle gaps name a location each, tens of
    thousands of them, mostly None): the strings are joined by line feeds, which
    :data:`_UNPRINTABLE` lets through, and searched once."""
    types = set(map(type, items))
    if types <= _SCALARS:
        return True
    if not types <= _SCALARS_AND_TEXT:
        return False
    if types <= _TEXT_OR_NONE:  # names or None (the gaps' locations): picked out in C
        texts = list(filter(None, items))
    else:
        texts = [v for v in items if type(v) is str]
    longest = max(map(len, texts), default=0)
    return longest <= MAX_SHOWN_CHARS and _UNPRINTABLE.search("\n".join(texts)) is None


def _cleaned_items(items: list[Any], prose: bool = False) -> list[Any]:
    """The items cleaned: ``items`` itself where none changes."""
    for i, item in enumerate(items):
        cleaned = _clean(item, prose)
        if cleaned is not item:
            return [*items[:i], cleaned, *(_clean(rest, prose) for rest in items[i + 1 :])]
    return items


def one_line(message: str) -> str:
    """``message`` as one printable line: its whitespace runs (line feeds included) become one
    space, other controls U+FFFD, and it is cut at :data:`MAX_LINE_CHARS`."""
    text = " ".join(message.split())
    if len(text) > MAX_LINE_CHARS:
        text = text[: MAX_LINE_CHARS - 1] + "…"
    return _NOT_ONE_LINE.sub("\ufffd", text)
