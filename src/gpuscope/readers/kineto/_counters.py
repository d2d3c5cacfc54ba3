"""Hardware counter samples in a Kineto trace: CUPTI PM sampling (pytorch/kineto#1530, PyTorch's
``_build_chrome_counters``), as :class:`~gpuscope.model.CounterSeries`.

The shape: one Chrome counter event per sample, ``{"ph": "C", "name": "DRAM BW (%)", "pid":
"GPU 0 Counters", "ts": 12.5, "args": {"": 91.2}}``; the process ``GPU N Counters`` names the
GPU. An ``args`` key other than ``""`` names its own series (a counter event may carry several);
the empty key takes the event's name. Values that are not finite numbers are gaps (NaN).
Counter events of other processes (CPU counters, memory) are not GPU counters and are left out.

Cost: the C scanner keeps the counter events as one text of their own, which :func:`events_in`
decodes; a trace without them costs nothing.
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Any

import msgspec
import numpy as np

from gpuscope.model import CounterSeries
from gpuscope.readers.kineto._shape import CounterEvent
from gpuscope.readers.kineto._values import to_ns

_GPU_COUNTERS = re.compile(r"^GPU (\d+) Counters$")


_DECODER = msgspec.json.Decoder(list[CounterEvent])


def events_in(counters: Any) -> list[CounterEvent]:
    """The counter events the scanner kept (its ``counters`` text)."""
    text = memoryview(counters)
    if not text:
        return []
    try:
        return _DECODER.decode(inflated(text))
    except msgspec.DecodeError:
        return []


def inflated(text: memoryview) -> bytes | memoryview:
    """A text of the scanner's: plain, or ``Z`` and raw deflate (see ``_kscan.c``)."""
    return zlib.decompress(text[1:], -15) if bytes(text[:1]) == b"Z" else text


def counter_series(events: list[CounterEvent], source: str = "kineto") -> list[CounterSeries]:
    """One series per (GPU, counter), samples in time order."""
    samples: dict[tuple[int, str], tuple[list[Any], list[float]]] = {}
    for event in events:
        match = _GPU_COUNTERS.match(event.pid) if isinstance(event.pid, str) else None
        if match is None or not isinstance(event.args, dict):
            continue
        if isinstance(event.ts, bool) or not isinstance(event.ts, (int, float)):
            continue
        gpu = int(match.group(1))
        for key, value in event.args.items():
            name = str(key) if key else str(event.name)
            number = _number(value)
            times, values = samples.setdefault((gpu, name), ([], []))
            times.append(event.ts)
            values.append(number)
    series = []
    for (gpu, name), (times, values) in sorted(samples.items()):
        time_ns = to_ns(times).astype(np.int64)
        order = np.argsort(time_ns, kind="stable")
        series.append(
            CounterSeries(
                device=gpu,
                name=name,
                time_ns=time_ns[order],
                value=np.asarray(values, dtype=np.float64)[order],
                source=source,
            )
        )
    return series


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    number = float(value)
    return number if math.isfinite(number) else math.nan
