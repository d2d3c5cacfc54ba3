"""Tables that fit the terminal without hiding a number.

Contract: a terminal table gives way in its names, never in its figures. :func:`name_room` says
how wide the one name column of a table may be once every other column has the width of its
longest cell; :func:`middle` shortens a name to that width keeping both ends (a kernel's
namespace and its template arguments, a job's folder and its run number); :func:`distinct_tails`
turns paths into the shortest tails that still tell them apart (job basenames). When even the
narrowest name would not fit, a renderer stacks the row instead (the name on a line of its own,
its figures under it): :func:`name_room` returns None then. Number columns are made with
:func:`number_column`: never cut with an ellipsis, at worst folded onto a second line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuscope.sanitise import middle

if TYPE_CHECKING:
    from rich.table import Table as RichTable

    from gpuscope.render.layout import Table

__all__ = ["MIN_NAME", "distinct_tails", "middle", "name_room", "number_column"]

#: The narrowest name column worth drawing; narrower, the rows stack.
MIN_NAME = 14


def name_room(width: int, other_columns: Sequence[Sequence[str]]) -> int | None:
    """The width left for a table's name column in ``width`` characters, when each other column
    (its header and cells, each possibly of several lines) takes its longest line: a rich table
    with edges spends 3 characters a column and 1 more (a border and a space each side). None
    when less than :data:`MIN_NAME` is left."""
    columns = len(other_columns) + 1
    taken = sum(
        max((len(line) for c in cells for line in c.split("\n")), default=0)
        for cells in other_columns
    )
    room = width - taken - (3 * columns + 1)
    return room if room >= MIN_NAME else None


def number_column(
    table: Table | RichTable, header: str, *, justify: str = "right", max_width: int | None = None
) -> None:
    """A column of figures: folded rather than cut if the terminal is narrower than any layout
    (and than ``max_width``)."""
    table.add_column(header, justify=justify, overflow="fold", max_width=max_width)  # type: ignore[arg-type]


def distinct_tails(paths: Sequence[str]) -> list[str]:
    """Each path's last components, as few as tell all the paths apart (a job's folder name,
    or ``run3/rank0.json`` where every job has a ``rank0.json``)."""
    parts = [[p for p in path.rstrip("/").split("/") if p] or [path] for path in paths]
    for depth in range(1, max((len(p) for p in parts), default=1) + 1):
        tails = ["/".join(p[-depth:]) for p in parts]
        if len(set(tails)) == len(set(paths)):
            return tails
    return list(paths)
