"""The annotated trace: the original Chrome-trace document plus gpuscope's own tracks.

Contract: :func:`annotate` takes the bytes of one trace document and the diagnosis of the job it
belongs to, and returns the bytes of a new document that Perfetto UI and chrome://tracing load:

* every original event is kept, unchanged and in its place (they decode to equal JSON values);
  every other top-level key is kept too;
* new events go on one new process named ``gpuscope`` (an integer pid no event of the trace
  uses), sorted above the others: per device, a thread of complete events (``"ph": "X"``), one
  per attributed idle segment, named by its cause, with the cause, the code location and the
  idle time in ``args``; and a ``findings`` thread of instant events, one for the verdict and one
  per finding (placed at the longest idle gap of its cause, else at the first device activity);
* a top-level ``"gpuscope"`` block holds the verdict and the findings as in ``--json``.

Times are the trace's own clock in µs, as the profiler wrote them. Nothing is measured here.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpuscope import __version__
from gpuscope.analyses.attribution import CAUSES
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.diagnosis.findings import Finding
from gpuscope.errors import CorruptInputError
from gpuscope.readers.kineto import EventStream, NotStreamableError
from gpuscope.render.json import to_document

PROCESS_NAME = "gpuscope"
CATEGORY = "gpuscope"
_FINDINGS_TID = 0
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
#: A document annotated whole (:func:`annotate`) takes this many times its text at the peak: the
#: text, its decoded objects, the new document's text and the interpreter. Measured: 130 MiB of
#: Kineto events peaked at 1,035 MiB RSS (8x); the factor leaves room for a budget's baseline.
WHOLE_DOCUMENT_FACTOR = 12


def annotate(data: bytes, diagnosis: Diagnosis, source: str, path: Path | None = None) -> bytes:
    """The document in ``data`` (the trace ``source`` of the diagnosed job) with gpuscope's tracks.

    ``path`` only names the file in errors."""
    document, special = _decode(data, path or Path(source))
    events = document.get("traceEvents")
    if not isinstance(events, list):
        raise CorruptInputError(path or source, "no 'traceEvents' list to annotate")
    pid = _new_pid(events)
    events.extend(_new_events(pid, diagnosis, source))
    document["gpuscope"] = _summary_block(pid, diagnosis)
    return _encode(document, special)


def annotate_file(
    path: Path, diagnosis: Diagnosis, source: str, *, compress: bool = False
) -> Iterator[bytes]:
    """The trace at ``path`` with gpuscope's tracks, as :func:`annotate` makes it, in pieces: the
    file is read a piece of events at a time and copied as written, never held whole.

    The new events go at the end of the events array and the ``gpuscope`` block at the end of
    the document, so the new pid (one above every integer pid written) is known by then.
    Raises :class:`NotStreamableError` before the end when the document's layout is not one the
    pieces follow (an events array nested in another key, another ``traceEvents``); the caller
    then annotates the whole document (:func:`annotate`).
    """
    deflate = zlib.compressobj(6, zlib.DEFLATED, 31) if compress else None

    def out(data: bytes) -> bytes:
        return deflate.compress(data) if deflate is not None else data

    stream = EventStream(path)
    highest: int | None = None
    first = True
    for chunk in stream.pieces():
        for match in _PID.finditer(chunk):  # also pids inside args: only ever higher
            pid = int(match.group(1))
            highest = pid if highest is None else max(highest, pid)
        if first:
            yield out(stream.header + b'"traceEvents": [' + chunk)
            first = False
        else:
            yield out(b",\n" + chunk)
    document_tail = stream.tail()
    if first:
        raise NotStreamableError
    pid = max(highest or 0, 0) + 1
    new_events = _new_events(pid, diagnosis, source)
    yield out(b"".join(b",\n" + msgspec.json.encode(e) for e in new_events) + b"]")
    tail = document_tail.rstrip()
    tail = tail[:-1].rstrip() if tail.endswith(b"}") else tail  # cut off mid-write: no end
    block = msgspec.json.encode(_summary_block(pid, diagnosis))
    yield out(tail + b',\n"gpuscope": ' + block + b"\n}\n")
    if deflate is not None:
        yield deflate.flush()


_PID = re.compile(rb'"pid"\s*:\s*(-?[0-9]+)\s*[,}]')


def _new_events(pid: int, diagnosis: Diagnosis, source: str) -> list[dict[str, Any]]:
    devices = [d for d in diagnosis.devices if d.source == source]
    events = _process_metadata(pid, devices)
    for tid, device in enumerate(devices, start=1):
        events.extend(_idle_events(pid, tid, device))
    events.extend(_finding_events(pid, devices, diagnosis))
    return events


def _summary_block(pid: int, diagnosis: Diagnosis) -> dict[str, Any]:
    summary = to_document(diagnosis)
    return {
        "schema": summary["schema"],
        "gpuscope_version": __version__,
        "pid": pid,
        "verdict": summary["verdict"],
        "findings": summary["findings"],
    }


def _decode(data: bytes, path: Path) -> tuple[dict[str, Any], bool]:
    """The document as plain JSON values, and whether it holds NaN or Infinity (which only the
    standard library reads and writes back); a file cut off mid-write loses its partial last
    event."""
    for candidate in (data, _closed(data)):
        if candidate is None:
            continue
        try:
            value, special = msgspec.json.decode(candidate), False
        except msgspec.DecodeError:
            try:
                value, special = json.loads(candidate), True
            except ValueError:
                continue
        if isinstance(value, dict):
            return value, special
    raise CorruptInputError(path, "not a JSON object that can be annotated")


def _closed(data: bytes) -> bytes | None:
    """``data`` cut after its last whole event and closed, or None when that is impossible."""
    start = data.find(b"[", max(data.find(b'"traceEvents"'), 0))
    boundaries = [m.start() for m in _EVENT_BOUNDARY.finditer(data, max(start, 0))]
    return data[: boundaries[-1] + 1] + b"]}" if start >= 0 and boundaries else None


def _encode(document: dict[str, Any], special: bool) -> bytes:
    if special:
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode()
    return msgspec.json.encode(document)


def _new_pid(events: Sequence[Any]) -> int:
    pids = [e.get("pid") for e in events if isinstance(e, dict)]
    numbers = [p for p in pids if isinstance(p, int) and not isinstance(p, bool)]
    return max(numbers, default=0) + 1


def _us(ns: int) -> int | float:
    """Nanoseconds as the µs Chrome traces hold: an integer when whole (exact at any epoch, as
    old Kineto traces write them), else three decimals."""
    return ns // 1000 if ns % 1000 == 0 else round(ns / 1000.0, 3)


def _device_name(d: DeviceReport) -> str:
    rank = "" if d.rank is None else f"rank {d.rank} · "
    return f"{rank}GPU {d.device}"


def _process_metadata(pid: int, devices: Sequence[DeviceReport]) -> list[dict[str, Any]]:
    def meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
        return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}

    events = [
        meta("process_name", 0, {"name": PROCESS_NAME}),
        meta("process_labels", 0, {"labels": "idle time by cause, findings"}),
        meta("process_sort_index", 0, {"sort_index": -1}),
        meta("thread_name", _FINDINGS_TID, {"name": "findings"}),
        meta("thread_sort_index", _FINDINGS_TID, {"sort_index": 0}),
    ]
    for tid, d in enumerate(devices, start=1):
        events.append(meta("thread_name", tid, {"name": f"idle · {_device_name(d)}"}))
        events.append(meta("thread_sort_index", tid, {"sort_index": tid}))
    return events


def _idle_events(pid: int, tid: int, d: DeviceReport) -> list[dict[str, Any]]:
    g = d.idle.gaps
    starts, ends, causes = g.start_ns.tolist(), g.end_ns.tolist(), g.cause.tolist()
    events = []
    for i, (start, end, code) in enumerate(zip(starts, ends, causes, strict=True)):
        cause = CAUSES[code]
        args: dict[str, Any] = {
            "cause": cause,
            "location": g.location[i],
            "idle_us": _us(end - start),
            "device": d.device,
            "rank": d.rank,
        }
        events.append(
            {
                "ph": "X",
                "cat": CATEGORY,
                "name": cause,
                "pid": pid,
                "tid": tid,
                "ts": _us(start),
                "dur": _us(end - start),
                "args": args,
            }
        )
    return events


def _finding_events(
    pid: int, devices: Sequence[DeviceReport], diagnosis: Diagnosis
) -> list[dict[str, Any]]:
    if not devices:
        return []
    first = min(d.span_start_ns for d in devices)
    verdict = diagnosis.verdict
    events = [
        _instant(
            pid, first, "gpuscope verdict", {"summary": verdict.summary, "bound": verdict.bound}
        )
    ]
    for rank, f in enumerate(diagnosis.findings, start=1):
        at = _longest_gap_start(devices, f.cause)
        events.append(
            _instant(pid, first if at is None else at, f"finding {rank}: {f.cause}", _args(f))
        )
    return events


def _instant(pid: int, at_ns: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "ph": "i",
        "s": "t",
        "cat": CATEGORY,
        "name": name,
        "pid": pid,
        "tid": _FINDINGS_TID,
        "ts": _us(at_ns),
        "args": args,
    }


def _args(f: Finding) -> dict[str, Any]:
    return {
        "title": f.title,
        "pattern": f.pattern,
        "share_pct": round(f.share_pct, 3),
        "lost_ms": round(f.lost_ns / 1e6, 3),
        "cost_usd_per_gpu_hour": f.cost_usd_per_gpu_hour,
        "evidence": list(f.evidence),
        "locations": [loc.location for loc in f.locations],
        "fix": f.fix,
    }


def _longest_gap_start(devices: Sequence[DeviceReport], cause: str) -> int | None:
    """Where the longest idle gap of ``cause`` starts on these devices, or None."""
    codes = [i for i, c in enumerate(CAUSES) if c == cause]
    best: tuple[int, int] | None = None
    for d in devices:
        g = d.idle.gaps
        mine = np.flatnonzero(g.cause == codes[0]) if codes else np.zeros(0, dtype=np.int64)
        if mine.size == 0:
            continue
        longest = mine[int(np.argmax(g.end_ns[mine] - g.start_ns[mine]))]
        length = int(g.end_ns[longest] - g.start_ns[longest])
        if best is None or length > best[0]:
            best = (length, int(g.start_ns[longest]))
    return None if best is None else best[1]
