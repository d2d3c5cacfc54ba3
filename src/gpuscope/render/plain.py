"""The terminal report as plain text, laid out as rich lays it out, without rich.

Contract: :class:`PlainConsole` takes what the terminal renderers print (the ``Text``,
``Table``, ``Panel`` and ``Group`` of :mod:`gpuscope.render.layout`) and makes the text a rich
``Console`` without colours would print for them, byte for byte: word wrapping, the widths a
table gives its columns when it must shrink, ellipses, folded names, boxes, padding. Output to a
pipe or a file has no colours, and rich's general machinery (its import, a segment per style
change, a measurement and a render per cell, options copied at each level) took ~40 ms of a
~300 ms ``gpuscope diagnose``; plain strings take a few.

Only the subset the renderers use is laid out here; anything else (a renderable or an option
outside it, a tab, a character that is not one terminal cell wide) raises :class:`UnsupportedError`,
and the caller prints the report through rich instead. ``tests/test_render_plain.py`` holds
this twin to rich on the corpus's reports at many widths and on generated tables.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from typing import Any, Protocol

from gpuscope.render.layout import Column, Group, Panel, Table, Text

__all__ = ["PlainConsole", "Printer", "UnsupportedError"]


class Printer(Protocol):
    """What the terminal renderers print to: a rich ``Console`` or a :class:`PlainConsole`."""

    @property
    def width(self) -> int: ...

    def print(self, renderable: Any, /) -> None: ...


class UnsupportedError(Exception):
    """A renderable, an option or a character outside what :class:`PlainConsole` lays out."""


#: Characters one terminal cell wide for certain: rich's own list (``rich.cells``) and the
#: ellipsis the renderers cut names with. Text with any other character goes through rich.
_ONE_CELL = frozenset(
    chr(c)
    for start, end in ((0x20, 0x7E), (0xA0, 0xAC), (0xAE, 0x2FF), (0x370, 0x482), (0x2500, 0x25FC))
    for c in range(start, end + 1)
) | {"…"}
_WORD = re.compile(r"\s*\S+\s*")
_TRAILING_SPACE = re.compile(r"\s+$")
_OVERFLOWS = frozenset({"fold", "crop", "ellipsis"})


class PlainConsole:
    """Prints as a rich ``Console(width=width, color_system=None, markup=False, emoji=False)``
    would print the rich objects the renderables stand for, into a string (:meth:`text`)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._out: list[str] = []

    def print(self, renderable: Any) -> None:
        if isinstance(renderable, Text):
            # A printed Text is joined into a new one: its own wrapping options do not apply.
            stream = "\n".join(_wrap(renderable.plain, self.width, "default", "fold", False))
            stream += "\n"
        elif isinstance(renderable, (Table, Panel)):
            stream = _stream(renderable, self.width, _Options())
        else:
            raise UnsupportedError(type(renderable).__name__)
        self._out.extend(line[: self.width] + "\n" for line in _split(stream))

    def text(self) -> str:
        return "".join(self._out)


class _Options:
    """What rich's ``ConsoleOptions`` carry down to a text: how to justify, overflow, wrap."""

    __slots__ = ("justify", "no_wrap", "overflow")

    def __init__(
        self, justify: str | None = None, overflow: str | None = None, no_wrap: bool | None = None
    ) -> None:
        self.justify = justify
        self.overflow = overflow
        self.no_wrap = no_wrap


def _stream(renderable: Any, width: int, options: _Options) -> str:
    """The text rich's ``Console.render`` yields for ``renderable`` in ``width`` cells."""
    if width < 1:
        raise UnsupportedError("no room")
    if isinstance(renderable, str):
        renderable = Text(renderable)
    if isinstance(renderable, Text):
        justify = renderable.justify or options.justify or "default"
        overflow = renderable.overflow or options.overflow or "fold"
        no_wrap = renderable.no_wrap
        if no_wrap is None:
            no_wrap = bool(options.no_wrap)
        lines = _wrap(renderable.plain, width, justify, overflow, no_wrap)
        return "\n".join(lines) + renderable.end
    if isinstance(renderable, Group):
        return "".join(_stream(r, width, options) for r in renderable.renderables)
    if isinstance(renderable, Table):
        return _table(renderable, width)
    if isinstance(renderable, Panel):
        return _panel(renderable, width, options)
    raise UnsupportedError(type(renderable).__name__)


def _split(stream: str) -> list[str]:
    """The lines of a rendered stream (rich drops an empty last one)."""
    lines = stream.split("\n")
    if not lines[-1]:
        lines.pop()
    return lines


def _lines(renderable: Any, width: int, options: _Options) -> list[str]:
    """rich's ``Console.render_lines``: the lines, each cut or padded to ``width``."""
    return [_fit(line, width) for line in _split(_stream(renderable, width, options))]


def _fit(line: str, width: int) -> str:
    return line[:width] if len(line) >= width else line + " " * (width - len(line))


def _checked(text: str) -> str:
    if not _ONE_CELL.issuperset(text):
        raise UnsupportedError("a character rich measures itself")
    return text


# --- text ----------------------------------------------------------------------------------------


def _wrap(plain: str, width: int, justify: str, overflow: str, no_wrap: bool) -> list[str]:
    """rich's ``Text.wrap``."""
    if overflow not in _OVERFLOWS:
        raise UnsupportedError(overflow)
    lines: list[str] = []
    for line in plain.split("\n"):
        _checked(line)
        if no_wrap:
            pieces = [line]
        else:
            pieces = _divide(line, _breaks(line, width, overflow == "fold"))
            pieces = [_rstrip_end(piece, width) for piece in pieces]
        pieces = _justify(pieces, width, justify, overflow)
        lines.extend(_truncate(piece, width, overflow) for piece in pieces)
    return lines


def _breaks(text: str, width: int, fold: bool) -> list[int]:
    """rich's ``divide_line``: where a line breaks to fit ``width`` (one cell per character)."""
    breaks: list[int] = []
    if len(text) <= width:  # every word fits where it is
        return breaks
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group()
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            if fold:
                chunks = [word[i : i + width] for i in range(0, len(word), width)]
                for chunk in chunks[:-1]:
                    if start:
                        breaks.append(start)
                    start += len(chunk)
                if start:
                    breaks.append(start)
                offset = len(chunks[-1])
            else:
                if start:
                    breaks.append(start)
                offset = len(word)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    return breaks


def _divide(text: str, offsets: list[int]) -> list[str]:
    if not offsets:
        return [text]
    edges = [0, *offsets, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(edges)]


def _rstrip_end(text: str, width: int) -> str:
    """Trailing whitespace beyond ``width`` removed."""
    if len(text) > width:
        space = _TRAILING_SPACE.search(text)
        if space is not None:
            return text[: len(text) - min(len(space.group()), len(text) - width)]
    return text


def _truncate(text: str, width: int, overflow: str, pad: bool = False) -> str:
    if len(text) > width:
        return text[: width - 1] + "…" if overflow == "ellipsis" else text[:width]
    if pad and len(text) < width:
        return text + " " * (width - len(text))
    return text


def _justify(lines: list[str], width: int, justify: str, overflow: str) -> list[str]:
    """rich's ``Lines.justify``."""
    if justify == "default":
        return lines
    if justify == "left":
        return [_truncate(line, width, overflow, pad=True) for line in lines]
    if justify == "right":
        cut = [_truncate(line.rstrip(), width, overflow) for line in lines]
        return [" " * (width - len(line)) + line for line in cut]
    if justify == "center":
        cut = [_truncate(line.rstrip(), width, overflow) for line in lines]
        return [
            (" " * ((width - len(line)) // 2) + line).ljust(width) if len(line) < width else line
            for line in cut
        ]
    raise UnsupportedError(justify)


def _measure(renderable: Any) -> tuple[int, int]:
    """rich's ``Text.__rich_measure__``: the longest word and the longest line."""
    plain = renderable if isinstance(renderable, str) else renderable.plain
    _checked(plain.replace("\n", ""))
    longest = max((len(line) for line in plain.splitlines()), default=0)
    return max((len(word) for word in plain.split()), default=longest), longest


# --- tables --------------------------------------------------------------------------------------

_PAD = 1  # a cell's padding each side: rich's default (0, 1)


#: rich's ``box.HEAVY_HEAD`` (the default of its tables) and ``box.ROUNDED`` (of its panels).
_HEAD = ("┏", "━", "┳", "┓", "┃", "┃", "┃", "┡", "━", "╇", "┩")
_BODY = ("│", "│", "│", "└", "─", "┴", "┘")
_ROUND = ("╭", "─", "╮", "│", "│", "╰", "─", "╯")


def _table(table: Table, width: int) -> str:
    """rich's ``Table.__rich_console__`` for a table with a heavy head, edges and a header."""
    columns = table.columns
    if not columns:
        raise UnsupportedError("a table without columns")
    widths = _column_widths(columns, width - (len(columns) + 1))  # less the edges and dividers
    out: list[str] = []
    if table.title:
        title = Text(table.title)
        out.append(_stream(title, sum(widths) + len(columns) + 1, _Options(table.title_justify)))
    top_left, top, top_divider, top_right, head_left, head_divider, head_right = _HEAD[:7]
    rule_left, rule, rule_divider, rule_right = _HEAD[7:]
    left, divider, right, bottom_left, bottom, bottom_divider, bottom_right = _BODY
    out.append(top_left + top_divider.join(top * w for w in widths) + top_right + "\n")
    rows = [[c.header for c in columns], *zip(*(c.cells for c in columns), strict=True)]
    for index, row in enumerate(rows):
        cells = [_cell(cell, w, c) for cell, w, c in zip(row, widths, columns, strict=True)]
        if index == 0:  # the header: its cells sit at the bottom of the row, others at the top
            for line in zip(*_even(cells, widths, bottom=True), strict=True):
                out.append(head_left + head_divider.join(line) + head_right + "\n")
            out.append(rule_left + rule_divider.join(rule * w for w in widths) + rule_right + "\n")
        else:
            for line in zip(*_even(cells, widths, bottom=False), strict=True):
                out.append(left + divider.join(line) + right + "\n")
    out.append(bottom_left + bottom_divider.join(bottom * w for w in widths) + bottom_right + "\n")
    return "".join(out)


def _column_widths(columns: list[Column], max_width: int) -> list[int]:
    """rich's ``Table._calculate_column_widths``, for a table that does not expand."""
    # Each cell's narrowest and widest, whatever the width: measured once.
    sizes = [[_measure(_text_of(c)) for c in (column.header, *column.cells)] for column in columns]
    widths = [_measure_column(c, s, max_width)[1] or 1 for c, s in zip(columns, sizes, strict=True)]
    if sum(widths) > max_width:
        wrapable = [not column.no_wrap for column in columns]
        widths = _collapse(widths, wrapable, max_width)
        if sum(widths) > max_width:
            excess = sum(widths) - max_width
            widths = _ratio_reduce(excess, [1] * len(widths), widths, widths)
        widths = [
            _measure_column(column, size, width)[1] or 0
            for width, column, size in zip(widths, columns, sizes, strict=True)
        ]
    return widths


def _measure_column(
    column: Column, sizes: list[tuple[int, int]], max_width: int
) -> tuple[int, int]:
    """rich's ``Table._measure_column``: the narrowest and widest the column's cells (header
    included, padding included) can be, from each cell's (:func:`_measure`)."""
    if max_width < 1:
        return 0, 0
    padding = 2 * _PAD
    lows: list[int] = []
    highs: list[int] = []
    for narrowest, widest in sizes:
        # Padding.__rich_measure__ then Measurement.get's normalising.
        if max_width - padding < 1:
            low = high = max_width
        else:
            low = min(max(0, narrowest), widest)
            high = max(0, low, widest)
            low, high = min(low, max_width), min(high, max_width)
            if high < 1:
                low = high = 0
            low, high = min(low + padding, max_width), min(high + padding, max_width)
        lows.append(low)
        highs.append(high)
    low, high = min(max(lows), max_width), min(max(highs), max_width)
    if column.min_width is not None:
        floor = max(0, column.min_width + padding)
        low, high = max(low, floor), max(high, floor)
    if column.max_width is not None:
        low, high = min(low, column.max_width + padding), min(high, column.max_width + padding)
    return low, high


def _text_of(cell: Any) -> str | Text:
    if isinstance(cell, (str, Text)):
        return cell
    raise UnsupportedError(type(cell).__name__)


def _collapse(widths: list[int], wrapable: list[bool], max_width: int) -> list[int]:
    """rich's ``Table._collapse_widths``: the widest wrapable columns narrowed first."""
    total = sum(widths)
    excess = total - max_width
    if any(wrapable):
        while total and excess > 0:
            widest = max(w for w, wrap in zip(widths, wrapable, strict=True) if wrap)
            second = max(
                w if wrap and w != widest else 0 for w, wrap in zip(widths, wrapable, strict=True)
            )
            difference = widest - second
            ratios = [int(w == widest and wrap) for w, wrap in zip(widths, wrapable, strict=True)]
            if not any(ratios) or not difference:
                break
            widths = _ratio_reduce(excess, ratios, [min(excess, difference)] * len(widths), widths)
            total = sum(widths)
            excess = total - max_width
    return widths


def _ratio_reduce(
    total: int, ratios: list[int], maximums: list[int], values: list[int]
) -> list[int]:
    """rich's ``ratio_reduce``."""
    ratios = [ratio if top else 0 for ratio, top in zip(ratios, maximums, strict=True)]
    total_ratio = sum(ratios)
    if not total_ratio:
        return values[:]
    remaining = total
    result: list[int] = []
    for ratio, top, value in zip(ratios, maximums, values, strict=True):
        if ratio and total_ratio > 0:
            given = min(top, round(ratio * remaining / total_ratio))
            result.append(value - given)
            remaining -= given
            total_ratio -= ratio
        else:
            result.append(value)
    return result


def _cell(cell: str | Text, width: int, column: Column) -> list[str]:
    """A cell's lines: its text laid out in ``width`` less the padding, padded each side."""
    if width - 2 * _PAD < 1:
        raise UnsupportedError("no room")
    options = _Options(column.justify, column.overflow, column.no_wrap)
    pad = " " * _PAD
    return [pad + line + pad for line in _lines(_text_of(cell), width - 2 * _PAD, options)]


def _even(cells: list[list[str]], widths: list[int], bottom: bool) -> list[list[str]]:
    height = max(len(cell) for cell in cells)
    evened = []
    for cell, width in zip(cells, widths, strict=True):
        blank = [" " * width] * (height - len(cell))
        evened.append(blank + cell if bottom else cell + blank)
    return evened


# --- panels --------------------------------------------------------------------------------------


def _panel(panel: Panel, width: int, options: _Options) -> str:
    """rich's ``Panel.__rich_console__`` for a panel as wide as it may be, titled on the left."""
    if panel.title_align != "left" or width < 5:
        raise UnsupportedError("a panel option")
    top_left, top, top_right, left, right, bottom_left, bottom, bottom_right = _ROUND
    label = _checked(" " + panel.title.plain.replace("\n", " ") + " ")[: width - 4]
    lines = [top_left + top + label + top * (width - 3 - len(label)) + top_right]
    lines += [
        left + " " + line + " " + right for line in _lines(panel.renderable, width - 4, options)
    ]
    lines.append(bottom_left + bottom * (width - 2) + bottom_right)
    return "\n".join(lines) + "\n"


def lines_of(renderables: Iterable[Any], width: int) -> str:
    """What printing each of ``renderables`` to a plain console of ``width`` prints."""
    console = PlainConsole(width)
    for renderable in renderables:
        console.print(renderable)
    return console.text()
