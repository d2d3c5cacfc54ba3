"""Whether two readers read one file alike: the first thing two traces differ in.

For the tests and fuzzers that hold a fast reader (the C Kineto scanner, the ``.pftrace``
walker) to its pure-Python twin: every event column bit for bit and of one dtype, then the
names, the events' extras, steps, devices, rank, schema, metadata, warnings and counters.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpuscope.model import Trace


def trace_difference(a: Trace, b: Trace) -> str | None:
    """What differs between ``a`` and ``b`` (a column's or a field's name), None when nothing."""
    theirs = msgspec.structs.asdict(b.events)
    for name, x in msgspec.structs.asdict(a.events).items():
        if not isinstance(x, np.ndarray):
            continue
        y = theirs[name]
        if x.dtype != y.dtype or x.tobytes() != y.tobytes():
            return f"column {name}"
    if a.events.extra != b.events.extra:
        return "extra"
    fields = ("names", "steps", "devices", "rank", "world_size", "schema", "metadata", "warnings")
    for what in fields:
        if getattr(a, what) != getattr(b, what):
            return what
    series = [
        [(s.device, s.name, s.time_ns.tobytes(), s.value.tobytes()) for s in t.counters]
        for t in (a, b)
    ]
    return None if series[0] == series[1] else "counters"
