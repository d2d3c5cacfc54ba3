"""Plausible times: events no profiler could have recorded are set aside before any analysis.

Contract: :func:`set_aside` takes a trace from any reader and returns it without the events
whose times are impossible, with a warning that counts them and names the commonest; a trace left
without any event is :class:`~gpuscope.errors.EmptyTraceError`. Impossible means:

* **a start before 0**: every reader's clock counts up from an epoch or a session start; a
  negative time is a corrupt or negated one.
* **a duration over** :data:`MAX_DURATION_NS` (31 days): no kernel, copy or call lasts that long
  in a profile of seconds to hours (a "ten-year kernel" is a garbage end time).
* **a start further than** :data:`MAX_DISTANCE_NS` (31 days) **from the median start**: an event
  133 years late is a corrupt timestamp, not a gap.
* **a start isolated from the bulk of the trace**: the bulk is where all but
  :data:`BULK_SHARE` of the events start (on each side); an event starting more than
  :data:`ISOLATED_FACTOR` times the bulk's span, and at least :data:`ISOLATED_MIN_NS` (60 s),
  before or after it is an outlier (one ``cpu_op`` at ``ts=0`` beside a trace recorded 70 minutes
  into the machine's uptime would otherwise stretch the window 16,000-fold and flip the verdict).

Steps (``ProfilerStep#N``) are kept where they lie within the same bounds. The reader's own
checks (nsys drops events ending before they start) come first; these are the same for every
format. Cost: one pass over two columns, and quantiles of at most :data:`QUANTILE_SAMPLE` starts.
"""

from __future__ import annotations

from collections import Counter

import msgspec
import numpy as np

from gpuscope.errors import EmptyTraceError
from gpuscope.model import Trace

DAY_NS = 86_400 * 1_000_000_000
MAX_DURATION_NS = 31 * DAY_NS
MAX_DISTANCE_NS = 31 * DAY_NS
BULK_SHARE = 0.001
ISOLATED_FACTOR = 10
ISOLATED_MIN_NS = 60 * 1_000_000_000
QUANTILE_SAMPLE = 1 << 20
#: Event names a warning lists at most.
NAMED = 3


def set_aside(trace: Trace) -> Trace:
    """``trace`` without its events of impossible times (see the module docstring)."""
    events = trace.events
    if not len(events):
        return trace
    start, dur = events.start_ns, events.dur_ns
    reasons = {
        "starting before 0": start < 0,
        "lasting over 31 days": dur > MAX_DURATION_NS,
    }
    bad = reasons["starting before 0"] | reasons["lasting over 31 days"]
    if bad.all():
        raise EmptyTraceError(trace.source, _all_gone(reasons))
    kept = start[~bad] if bad.any() else start
    if not bad.any() and int(kept.max()) - int(kept.min()) <= ISOLATED_MIN_NS:
        return trace  # every start within the bounds, whatever the quantiles (see _bounds)
    low, high = _bounds(kept)
    reasons["far from the rest of the trace"] = ~bad & ((start < low) | (start > high))
    bad |= reasons["far from the rest of the trace"]
    if not bad.any():
        return trace
    if bad.all():
        raise EmptyTraceError(trace.source, _all_gone(reasons))
    names = Counter(trace.names[int(i)] for i in events.name_id[bad][: 1 << 16])
    named = ", ".join(f"{n} ({c:,})" if c > 1 else n for n, c in names.most_common(NAMED))
    why = "; ".join(f"{int(m.sum()):,} {reason}" for reason, m in reasons.items() if m.any())
    warning = (
        f"{trace.source}: set aside {int(bad.sum()):,} event(s) with impossible times ({why}):"
        f" {named}"
    )
    floor, ceiling = max(low, 0), high + MAX_DURATION_NS
    steps = [s for s in trace.steps if floor <= s.start_ns <= s.end_ns <= ceiling]
    return msgspec.structs.replace(
        trace,
        events=events.take(np.flatnonzero(~bad)),
        steps=steps,
        warnings=[*trace.warnings, warning],
    )


def _bounds(start: np.ndarray) -> tuple[int, int]:
    """The earliest and latest plausible start, from the bulk of the starts.

    Starts that all lie within :data:`ISOLATED_MIN_NS` of each other are all within these
    bounds: the bulk lies between the first and the last start, and the margin is at least
    that wide (so :func:`set_aside` skips the quantiles, whose ``np.unique`` imports
    ``numpy.ma``, ~10 ms)."""
    sample = start[:: max(1, len(start) // QUANTILE_SAMPLE)]
    low, middle, high = (int(v) for v in np.quantile(sample, [BULK_SHARE, 0.5, 1 - BULK_SHARE]))
    margin = max(ISOLATED_FACTOR * (high - low), ISOLATED_MIN_NS)
    return max(low - margin, middle - MAX_DISTANCE_NS), min(high + margin, middle + MAX_DISTANCE_NS)


def _all_gone(reasons: dict[str, np.ndarray]) -> str:
    why = ", ".join(reason for reason, m in reasons.items() if m.any())
    return f"no event has a plausible time (every one {why or 'impossible'})"
