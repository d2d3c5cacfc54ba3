"""What the speed benchmarks share: the start-up floor, the time budget a target leaves, tables.

The start-up floor is a process that only starts the interpreter and imports the libraries
``gpuscope diagnose`` imports. A gpuscope that did no work at all would take that long, so a
speed-up target over a peer leaves ``peer / target - floor`` seconds for reading, analysis and
output: :func:`budget_note` says so under each run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

FLOOR_LABEL = "start-up floor (imports only)"
#: A report to a pipe or a file imports no rich (``gpuscope.render.plain``), and that is how the
#: speed benchmarks run gpuscope.
_LIBRARIES = ("numpy", "msgspec", "click")


def floor_command(*readers: str) -> list[str]:
    """The floor process; ``readers`` are the modules the format's reader adds (zlib_ng...)."""
    return [sys.executable, "-c", "import " + ", ".join((*_LIBRARIES, *readers))]


def user_environment(tmp: Path) -> dict[str, str]:
    """The environment a user runs both tools in: bytecode cached after the first run.

    Some shells (this project's sandbox among them) set ``PYTHONDONTWRITEBYTECODE``, which makes
    every run of an editable install recompile its sources; an installed package has its
    bytecode. Both tools get a bytecode cache in ``tmp``, warmed by one untimed run each."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


def budget_note(peer: str, peer_s: float, floor_s: float, ours_s: float, target: float) -> str:
    """What ``target`` x over ``peer`` leaves for work once the process has started."""
    allowed = peer_s / target
    return (
        f"\nBudget: {target:.0f}x allows {allowed:.3f} s; start-up and imports alone take"
        f" {floor_s:.3f} s ({peer} / start-up = {peer_s / floor_s:.1f}x), leaving"
        f" {allowed - floor_s:.3f} s for reading, analysis and output; gpuscope spends"
        f" {ours_s - floor_s:.3f} s on them."
    )


def table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)
