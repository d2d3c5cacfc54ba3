"""What the terminal renderers build: styled text, tables, panels and groups, without rich.

Contract: these classes are the part of rich's ``Text``, ``Table``, ``Panel`` and ``Group`` that
the renderers use, with rich's names, arguments and defaults, and nothing more. A rich console
prints any of them as the rich object it stands for (``__rich__`` builds that object, importing
rich then); :mod:`gpuscope.render.plain` lays them out as plain text without importing rich at
all, which a report without colours (a pipe, a file) needs: rich's import and layout were a
tenth of a whole ``gpuscope diagnose``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Group as RichGroup
    from rich.panel import Panel as RichPanel
    from rich.table import Table as RichTable
    from rich.text import Text as RichText

__all__ = ["Column", "Group", "Panel", "Table", "Text", "rich_of"]


class Text:
    """rich's ``Text``: a string, a base style, and styles over spans of it."""

    def __init__(
        self,
        text: str = "",
        style: str = "",
        *,
        justify: str | None = None,
        overflow: str | None = None,
        no_wrap: bool | None = None,
        end: str = "\n",
    ) -> None:
        self.plain = text
        self.style = style
        self.justify = justify
        self.overflow = overflow
        self.no_wrap = no_wrap
        self.end = end
        self.spans: list[tuple[int, int, str]] = []

    def __len__(self) -> int:
        return len(self.plain)

    def append(self, text: str | Text, style: str | None = None) -> Text:
        """``text`` added at the end: a string in ``style``, or a Text with its styles."""
        if not text:
            return self
        if isinstance(text, Text):
            self._extend(text)
            return self
        if style:
            self.spans.append((len(self.plain), len(self.plain) + len(text), style))
        self.plain += text
        return self

    @classmethod
    def assemble(cls, *parts: str | Text, end: str = "\n") -> Text:
        text = cls(end=end)
        for part in parts:
            text.append(part)
        return text

    def join(self, lines: list[Text]) -> Text:
        """The lines with this text between each two, as a new text with this one's options."""
        joined = Text(
            style=self.style,
            justify=self.justify,
            overflow=self.overflow,
            no_wrap=self.no_wrap,
            end=self.end,
        )
        for i, line in enumerate(lines):
            if i and self.plain:
                joined._extend(self)
            joined._extend(line)
        return joined

    def _extend(self, text: Text) -> None:
        """``text`` and its styles added, as rich joins texts: an empty one's style too."""
        offset = len(self.plain)
        if text.style:
            self.spans.append((offset, offset + len(text), text.style))
        self.spans.extend((offset + a, offset + b, s) for a, b, s in text.spans)
        self.plain += text.plain

    def __rich__(self) -> RichText:
        from rich.text import Span  # noqa: PLC0415
        from rich.text import Text as Rich  # noqa: PLC0415

        return Rich(
            self.plain,
            self.style,
            justify=self.justify,  # type: ignore[arg-type]
            overflow=self.overflow,  # type: ignore[arg-type]
            no_wrap=self.no_wrap,
            end=self.end,
            spans=[Span(a, b, s) for a, b, s in self.spans],
        )


Cell = str | Text


class Column:
    """rich's table ``Column``: its header, how its cells are laid out, and the cells."""

    def __init__(
        self,
        header: str,
        *,
        justify: str = "left",
        overflow: str = "ellipsis",
        no_wrap: bool = False,
        min_width: int | None = None,
        max_width: int | None = None,
    ) -> None:
        self.header = header
        self.justify = justify
        self.overflow = overflow
        self.no_wrap = no_wrap
        self.min_width = min_width
        self.max_width = max_width
        self.cells: list[Cell] = []


class Table:
    """rich's ``Table`` as the renderers make it: a heavy head, edges, a title on the left."""

    def __init__(self, title: str = "", title_justify: str = "center") -> None:
        self.title = title
        self.title_justify = title_justify
        self.columns: list[Column] = []
        self.row_styles: list[str | None] = []  # a row's own style (the colours only)

    def add_column(self, header: str = "", **options: Any) -> None:
        self.columns.append(Column(header, **options))

    def add_row(self, *cells: Cell, style: str | None = None) -> None:
        if len(cells) > len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        for i, column in enumerate(self.columns):  # missing cells are empty, as in rich
            column.cells.append(cells[i] if i < len(cells) else "")
        self.row_styles.append(style)

    def __rich__(self) -> RichTable:
        from rich.table import Table as Rich  # noqa: PLC0415

        table = Rich(title=self.title or None, title_justify=self.title_justify)  # type: ignore[arg-type]
        for c in self.columns:
            table.add_column(
                c.header,
                justify=c.justify,  # type: ignore[arg-type]
                overflow=c.overflow,  # type: ignore[arg-type]
                no_wrap=c.no_wrap,
                min_width=c.min_width,
                max_width=c.max_width,
            )
        rows = zip(*(c.cells for c in self.columns), strict=True)
        for row, style in zip(rows, self.row_styles, strict=True):
            table.add_row(*(rich_of(cell) for cell in row), style=style)
        return table


class Group:
    """rich's ``Group``: renderables one under the other."""

    def __init__(self, *renderables: Text | Table) -> None:
        self.renderables = list(renderables)

    def __rich__(self) -> RichGroup:
        from rich.console import Group as Rich  # noqa: PLC0415

        return Rich(*(rich_of(r) for r in self.renderables))


class Panel:
    """rich's ``Panel`` as the renderers make it: rounded, as wide as the terminal, titled."""

    def __init__(self, renderable: Group | Text | Table, *, title: Text, title_align: str) -> None:
        self.renderable = renderable
        self.title = title
        self.title_align = title_align

    def __rich__(self) -> RichPanel:
        from rich.panel import Panel as Rich  # noqa: PLC0415

        return Rich(
            rich_of(self.renderable),
            title=self.title.__rich__(),
            title_align=self.title_align,  # type: ignore[arg-type]
        )


def rich_of(renderable: Any) -> Any:
    """The rich object a renderable of this module stands for (a string stays one)."""
    return renderable if isinstance(renderable, str) else renderable.__rich__()
