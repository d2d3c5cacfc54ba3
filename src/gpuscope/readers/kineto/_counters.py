"""Hardware counter samples in a Kineto trace: CUPTI PM sampling (pytorch/kineto#1530, PyTorch's
``_build_chrome_counters``), as :class:`~gpuscope.model.CounterSeries`.

The shape: one Chrome counter event per sample, ``{"ph": "C", "name": "DRAM BW (%)", "pid":
"GPU 0 Counters", "ts": 12.5, "args": {"": 91.2}}``; the process ``GPU N Counters`` names the
GPU. An ``args`` key other than ``""`` names its own series (a counter event may carry several);
the empty key takes the event's name. Values that are not finite numbers are gaps (NaN).
Counter events of other processes (CPU counters, memory) are not GPU counters and are left out.

Cost: the C scanner keeps counter events with the flow events (one text, already collected);
:func:`events_in` decodes them only when that text holds a ``"C"`` at all, found by the letter
(:func:`holds_counter`: a text of flows has few capital C's, and quotes everywhere).
"""

from __future__ import annotations

import math
import re
import zlib
from typing import Any, Union

import msgspec
import numpy as np

from gpuscope.model import CounterSeries
from gpuscope.readers.kineto._shape import CounterEvent
from gpuscope.readers.kineto._values import to_ns

_GPU_COUNTERS = re.compile(r"^GPU (\d+) Counters$")


def _skip(phase: str) -> type:
    return msgspec.defstruct(f"_Counted_{phase}", [], tag=phase, tag_field="ph", gc=False)


_FLOW_PHASES = ("s", "f", "t")
_FLOW_OR_COUNTER = Union[(CounterEvent, *(_skip(p) for p in _FLOW_PHASES))]  # type: ignore[valid-type]
_DECODER = msgspec.json.Decoder(list[_FLOW_OR_COUNTER])  # type: ignore[valid-type]


def events_in(flows: bytes) -> list[CounterEvent]:
    """The counter events among the scanner's flow text (plain, or ``Z`` and raw deflate)."""
    if not flows:
        return []
    text = zlib.decompress(flows[1:], -15) if flows[:1] == b"Z" else flows
    if not holds_counter(text):
        return []
    try:
        return [e for e in _DECODER.decode(text) if type(e) is CounterEvent]
    except msgspec.DecodeError:
        return []


#: Capital C's looked at one by one before the plain search takes over.
_LETTERS_LOOKED_AT = 64


def holds_counter(text: bytes) -> bool:
    """``b'"C"' in text``, faster on flows: that search stops at every quote (8 MB of flows of a
    54 MB trace took ~30 M instructions), this one at every capital C (``memchr``)."""
    at = text.find(b"C", 1)
    for _ in range(_LETTERS_LOOKED_AT):
        if at < 0:
            return False
        if text[at - 1 : at + 2] == b'"C"':
            return True
        at = text.find(b"C", at + 1)
    return b'"C"' in text


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
