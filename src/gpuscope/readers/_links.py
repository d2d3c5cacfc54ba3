"""Joining host launches and the device work they launched, shared by the timeline readers.

Contract: both functions fill :attr:`gpuscope.model.Events.link` in place, both ways (device row
to its runtime call, runtime call to its first device row), on a table already sorted by start.
"""

from __future__ import annotations

import numpy as np

from gpuscope._arrays import first_occurrences
from gpuscope.model import Events, Kind


def link_launches(table: Events) -> None:
    """Join runtime calls and device work that share a correlation id (first match wins)."""
    device_rows = np.flatnonzero(table.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC))
    runtime_rows = np.flatnonzero(table.of_kind(Kind.RUNTIME))
    device_rows = device_rows[table.correlation[device_rows] >= 0]
    runtime_rows = runtime_rows[table.correlation[runtime_rows] >= 0]
    if device_rows.size == 0 or runtime_rows.size == 0:
        return
    join_launches(
        table,
        runtime_rows,
        table.correlation[runtime_rows],
        device_rows,
        table.correlation[device_rows],
    )


def join_launches(
    table: Events,
    host_rows: np.ndarray,
    host_keys: np.ndarray,
    dev_rows: np.ndarray,
    dev_keys: np.ndarray,
) -> None:
    """Link each device row to the host row with the same key (correlation id or flow id)."""
    order = np.argsort(host_keys, kind="stable")
    sorted_keys = host_keys[order]
    pos = np.searchsorted(sorted_keys, dev_keys)
    pos_ok = np.minimum(pos, sorted_keys.size - 1)
    found = (pos < sorted_keys.size) & (sorted_keys[pos_ok] == dev_keys)
    launcher = host_rows[order[pos_ok[found]]]
    linked_dev = dev_rows[found]
    table.link[linked_dev] = launcher
    # Reverse link: the earliest device event of each launch (rows are in start order).
    first = first_occurrences(launcher, len(table))[1]
    table.link[launcher[first]] = linked_dev[first]
