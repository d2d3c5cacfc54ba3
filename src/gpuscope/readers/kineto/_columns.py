"""Decoded events turned into the model: columns built piece by piece (from msgspec's structs or
the C scanner's columns), then one sorted table with its devices, steps and launch links.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpuscope._arrays import among, distinct, first_occurrences
from gpuscope.errors import EmptyTraceError
from gpuscope.model import (
    ID_COLUMNS,
    DeviceInfo,
    Events,
    Extras,
    Kind,
    MemoryAction,
    MemoryEvents,
    Step,
    Trace,
    narrow,
)
from gpuscope.readers._links import join_launches, link_launches
from gpuscope.readers.kineto._counters import counter_series, events_in, inflated
from gpuscope.readers.kineto._shape import (
    CATEGORY,
    DEVICE_KINDS,
    DUR,
    EMPTY_ARGS,
    EVENT_NAME,
    EVENT_PID,
    FLOW_CATEGORIES,
    FLOWS_DECODER,
    KIND_OF_CATEGORY,
    LINKED_KINDS,
    MAYBE_MEMORY_DECODER,
    MEMORY_ARGS_DECODER,
    MEMORY_DOCUMENT_DECODER,
    OCCUPANCY,
    SKIP,
    STEP_NAME,
    TID,
    TS,
    CounterEvent,
    Event,
)
from gpuscope.readers.kineto._values import (
    LONG_NAME,
    MAX_NAME_CHARS,
    NEGATIVE_DURATION,
    NOT_A_STRING,
    arg_column,
    bad_times,
    between_gpus,
    coerce_args,
    count_skipped,
    decode_args,
    dims_product,
    extra_args,
    extras_of,
    id_column,
    int_id,
    joined_columns,
    mark_mtia_dma,
    memcpy_columns,
    num,
    occupancy_percent,
    opt_int,
    raw_string,
    scatter,
    to_ns,
)

# --- building the model --------------------------------------------------------------------------


#: The model's int64 columns that the scanner may hand over as int32.
_INT64_COLUMNS = frozenset(("start_ns", "dur_ns"))


def _ints(block: Any, rows: int) -> np.ndarray:
    """An integer column of the scanner's: int32 where every value fitted, else int64 (its size
    says which; see ``_kscan.c``)."""
    view = memoryview(block)
    values: np.ndarray = np.frombuffer(
        view, dtype=np.int32 if view.nbytes == 4 * rows else np.int64
    )
    return values


class Columns:
    """Events turned into columns piece by piece, then assembled into one sorted table."""

    def __init__(self, *, lenient: bool) -> None:
        self.lenient = lenient
        self.kind_of: dict[Any, int] = {}
        self.index: dict[Any, int] = {}
        self._names: list[str] = []
        self.parts: dict[str, list[np.ndarray]] = {}
        #: Rows with kept arguments (numbered as added, before the sort) and for each the index
        #: of its dict in ``extra_values``: arrays, not a dict of millions of rows.
        self.extra_rows: list[np.ndarray] = []
        self.extra_ids: list[np.ndarray] = []
        self.extra_values: list[dict[str, Any]] = []
        self._value_index: dict[int, int] = {}
        self.rows = 0
        self.events = 0
        self.old_schema = False
        self.float_ts = False
        self.flows: list[Any] = []
        #: The allocator's ``[memory]`` events on a device, as columns per piece.
        self.memory: list[dict[str, np.ndarray]] = []
        #: Counter samples (``"ph": "C"``): hardware counters per GPU (see ``_counters``).
        self.counter_events: list[Any] = []
        #: Complete events skipped, by why (see :func:`bad_times`): reported, never zeroed.
        self.skipped: dict[str, int] = {}
        #: The memory the columns, extras and flows take so far (checked against the budget).
        self.nbytes = 0
        #: One dict per distinct set of recorded arguments: the same shapes recur at every step,
        #: and a dict of lists per row would take a kilobyte or more each.
        self._shared_extras: dict[bytes, dict[str, Any]] = {}

    def _shared(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The one dict kept for arguments equal to ``extra``."""
        key = msgspec.msgpack.encode(extra)  # exact: 1 and 1.0, inf and null differ
        shared = self._shared_extras.setdefault(key, extra)
        if shared is extra:
            self.nbytes += len(key) * 8  # lists and strings as Python objects
        return shared

    def _value_id(self, shared: dict[str, Any]) -> int:
        """The index of a shared dict in ``extra_values``."""
        index = self._value_index.setdefault(id(shared), len(self.extra_values))
        if index == len(self.extra_values):
            self.extra_values.append(shared)
        return index

    def add(
        self, raw_events: list[Any], flows: Callable[[], list[Any]], *, lenient: bool | None = None
    ) -> None:
        """Add a piece of the document's events; ``flows`` decodes the same piece's flow events,
        called only when device work in it lacks correlation ids. ``lenient``: the piece was
        decoded with the lenient structs (default: as the whole document was)."""
        lenient = self.lenient if lenient is None else lenient
        self.events += len(raw_events)
        if not lenient:
            self.counter_events += [e for e in raw_events if type(e) is CounterEvent]
        if lenient:
            complete = [e for e in raw_events if e.ph == "X"]
        else:
            complete = [e for e in raw_events if type(e) is Event]
        categories = list(map(CATEGORY, complete))
        if lenient:  # a category that is not a string (a list, an object) is no kind
            categories = [c if isinstance(c, str) else None for c in categories]
        for cat in set(categories) - self.kind_of.keys():
            self._kind_code(cat)
        codes = np.fromiter(
            map(self.kind_of.__getitem__, categories), dtype=np.uint8, count=len(categories)
        )
        keep = codes != SKIP
        rows = list(compress(complete, keep.tolist()))
        if not rows:
            return
        kinds = codes[keep]
        bad = bad_times(
            [e.ts for e in rows], [e.dur for e in rows], self.skipped, typed=not lenient
        )
        if bad is not None:
            rows = list(compress(rows, (~bad).tolist()))
            kinds = kinds[~bad]
            if not rows:
                return
        if "mtia_ccp_events" in self.kind_of:
            mark_mtia_dma(rows, kinds)
        columns = self._columns(rows, kinds, lenient)
        for name, values in columns.items():
            self.parts.setdefault(name, []).append(values)
            self.nbytes += values.nbytes
        on_device = (columns["device"] >= 0) & (kinds != Kind.GPU_ANNOTATION)
        if np.any(columns["correlation"][on_device] < 0):
            piece_flows = flows()
            self.flows.extend(piece_flows)
            self.nbytes += 200 * len(piece_flows)
        self.rows += len(rows)

    def add_scanned(self, scanned: list[Any]) -> None:
        """Add the events the C scanner read (``Scanned``, as a list this empties: each part is
        freed once used): the same columns :meth:`add` builds from decoded events."""
        self._add_scanned_instants(counters=scanned[8], memory=scanned[9])
        del scanned[8:]
        events, n, raw, raw_cats, raw_names, extra_rows, extras, flows = scanned
        scanned.clear()
        self.events += events
        if n == 0:
            return
        # Every name and category msgspec would decode must be UTF-8, used or not: otherwise
        # UnicodeDecodeError, and the msgspec reader says what is wrong with the document.
        b"".join(raw_names).decode()
        b"".join(raw_cats).decode()
        cats = [raw_string(c) for c in raw_cats]
        codes_of_cat = np.array([self._kind_code(c) for c in cats], dtype=np.uint8)
        cat = np.frombuffer(memoryview(raw.pop("cat")), dtype=np.int32)
        codes = codes_of_cat[cat]
        keep = codes != SKIP
        # The scanner hands over any time that is not a number in range; a negative duration
        # is skipped and counted here as the msgspec reader does (see bad_times).
        negative = keep & (_ints(raw["dur_ns"], n) < 0)
        if negative.any():
            count_skipped(self.skipped, NEGATIVE_DURATION, int(negative.sum()))
            keep &= ~negative
        del negative
        if not keep.any():
            return
        rows = int(np.count_nonzero(keep))
        every_row = rows == n
        # Every row kept (the usual case): the scanner's columns are used as they are, not
        # copied through an index of every row.
        kept: slice | np.ndarray = slice(None) if every_row else np.flatnonzero(keep)
        kinds = codes[kept]
        name_local = np.frombuffer(memoryview(raw.pop("name")), dtype=np.int32)[kept]
        if "mtia_ccp_events" in cats:
            dma = np.array([name.startswith(b"dma") for name in raw_names], dtype=bool)
            is_mtia = np.array([c == "mtia_ccp_events" for c in cats], dtype=bool)[cat[kept]]
            kinds[is_mtia & dma[name_local]] = Kind.MEMCPY
        name_id = self._intern_used(raw_names, name_local)
        # What is no longer needed goes now, before the new columns are made: each of these
        # is a row's worth of bytes (or holds one of the scanner's columns).
        del cat, codes, name_local
        if not self.old_schema:
            del raw["external_id_2021"]

        # Each raw column is read once and dropped: the peak holds the table about once.
        def column(key: str, dtype: type | None = None) -> np.ndarray:
            block = raw.pop(key)
            values = (
                _ints(block, n) if dtype is None else np.frombuffer(memoryview(block), dtype=dtype)
            )
            return values if every_row else values[kept]

        def arg(field: str, chosen: np.ndarray | None) -> np.ndarray:
            values: np.ndarray = _ints(raw.pop(field), n)
            if chosen is None:  # every row
                return values[kept]
            at: np.ndarray = chosen if isinstance(kept, slice) else kept[chosen]
            taken: np.ndarray = values[at]
            return taken

        self.float_ts |= bool(column("float_time", np.uint8).any())
        if extra_rows:
            self._add_scanned_extras(extra_rows, extras, keep)
        del keep
        piece = {
            "kind": kinds,
            "name_id": name_id,
            "start_ns": column("ts_ns"),
            "dur_ns": column("dur_ns"),
            **self._arg_columns(kinds, column("pid"), column("tid"), arg),
            "occupancy_pct": occupancy_percent(column("occupancy", np.float32), self.skipped),
        }
        for name, values in piece.items():
            self.parts.setdefault(name, []).append(values)
            self.nbytes += values.nbytes
        self._add_scanned_flows(piece, flows)
        self.rows += rows

    def _add_scanned_flows(self, piece: dict[str, np.ndarray], flows: Any) -> None:
        """The scanner's flow events, decoded only where device work lacks correlation ids."""
        on_device = (piece["device"] >= 0) & (piece["kind"] != Kind.GPU_ANNOTATION)
        text = memoryview(flows)
        if np.any(piece["correlation"][on_device] < 0) and text:
            self.flows.extend(FLOWS_DECODER.decode(inflated(text)))

    def _add_scanned_instants(self, memory: Any, counters: Any) -> None:
        """The scanner's ``[memory]`` rows and counter events (see ``_kscan.c``)."""
        if memoryview(memory):
            self.add_memory_rows(memory)
        self.counter_events += events_in(counters)

    def _add_scanned_extras(self, extra_rows: bytes, extras: Any, keep: np.ndarray) -> None:
        """The extra arguments of the scanned events ``keep`` keeps. The scanner interns them:
        each distinct text is decoded once (all of them, used or not, as msgspec would decode
        them) and its dict shared."""
        rows_with_args = np.frombuffer(extra_rows, dtype=np.int64)
        ids, texts = extras
        shared = [self._shared(extras_of(decode_args(text))) for text in texts]
        value_id = np.array([self._value_id(s) for s in shared], dtype=np.int32)
        text_ids = np.frombuffer(ids, dtype=np.int32)
        used = keep[rows_with_args] & np.array([bool(s) for s in shared], dtype=bool)[text_ids]
        new_row = np.cumsum(keep) - 1
        self.extra_rows.append(self.rows + new_row[rows_with_args[used]])
        self.extra_ids.append(value_id[text_ids[used]])
        self.nbytes += 12 * int(used.sum())

    def add_memory(self, candidates: list[Any]) -> None:
        """Keep the ``[memory]`` instant events among ``candidates`` (any events, their
        arguments still raw JSON): the pure-Python reader's way."""
        kept = []
        for e in candidates:
            if e.ph != "i" or e.name != "[memory]" or not len(e.args):
                continue
            try:
                a = MEMORY_ARGS_DECODER.decode(e.args)
            except msgspec.DecodeError:
                continue
            numbers = (a.bytes, a.address, a.device, a.device_type, a.allocated, a.reserved)
            # A figure beyond 64 bits (a byte count, an address) is no allocator's: left out.
            if all(_is_int64(x) for x in numbers):
                kept.append((e.tid, e.ts, a))
        self._keep_memory(kept)

    def add_memory_rows(self, rows: Any) -> None:
        """Keep the ``[memory]`` events the C scanner read (a buffer): int64 rows of ts (ns),
        tid, and the arguments (see ``_kscan.c``)."""
        table = np.frombuffer(rows, dtype=np.int64).reshape(-1, 9)
        self._keep_columns(table[:, 0].copy(), table[:, [8, 1, 2, 3, 4, 6, 7]].copy())

    def _keep_memory(self, events: list[tuple[Any, Any, Any]]) -> None:
        """Columns of the events on a device (``Device Type`` other than 0, the CPU)."""
        rows = [
            (
                a.order if _is_int64(a.order) else -1,
                tid if _is_int64(tid) else -1,
                a.bytes,
                a.address,
                a.device,
                a.allocated,
                a.reserved,
            )
            for tid, _, a in events
            if a.device_type != 0 and a.device >= 0
        ]
        times = [
            t if isinstance(t, int | float) else 0
            for _, t, a in events
            if a.device_type != 0 and a.device >= 0
        ]
        self._keep_columns(to_ns(times), np.array(rows, dtype=np.int64).reshape(-1, 7))

    def _keep_columns(self, time_ns: np.ndarray, table: np.ndarray) -> None:
        if not len(table):
            return
        names = ("order", "tid", "signed", "address", "device", "allocated_bytes", "reserved_bytes")
        part = {name: table[:, i] for i, name in enumerate(names)}
        part["time_ns"] = time_ns
        self.memory.append(part)

    def memory_events(self) -> MemoryEvents | None:
        """The kept ``[memory]`` events in time order (ties by the profiler's ``Ev Idx``)."""
        if not self.memory:
            return None
        joined = {k: np.concatenate([part[k] for part in self.memory]) for k in self.memory[0]}
        order = np.lexsort((joined["order"], joined["time_ns"]))
        columns = {k: v[order] for k, v in joined.items()}
        signed = columns.pop("signed")
        columns["action"] = np.where(signed >= 0, MemoryAction.ALLOC, MemoryAction.FREE_COMPLETED)
        columns["size_bytes"] = np.abs(signed)
        return MemoryEvents.from_columns(len(order), columns)

    def _intern_used(self, raw_names: list[bytes], local: np.ndarray) -> np.ndarray:
        """Global ids for local name ids (into the scanner's raw names), decoding and interning
        only the names used, in order of use."""
        used, first = first_occurrences(local, len(raw_names))
        used = used[np.argsort(first, kind="stable")]
        global_ids = np.zeros(len(raw_names), dtype=np.int32)
        global_ids[used] = self._intern([raw_string(raw_names[i]) for i in used.tolist()])
        mapped: np.ndarray = global_ids[local]
        return mapped

    def _kind_code(self, cat: Any) -> int:
        """The kind code of an event category (``SKIP``: not one the model keeps)."""
        if cat not in self.kind_of:
            kind = KIND_OF_CATEGORY.get(cat.lower()) if isinstance(cat, str) else None
            self.kind_of[cat] = SKIP if kind is None else int(kind)
            self.old_schema |= cat in ("Kernel", "Runtime", "Operator")
        return self.kind_of[cat]

    def _columns(self, rows: list[Any], kinds: np.ndarray, lenient: bool) -> dict[str, np.ndarray]:
        args = [e.args or EMPTY_ARGS for e in rows]
        if lenient:
            args = [coerce_args(a) for a in args]
            ts = [num(e.ts) for e in rows]
            dur = [num(e.dur) for e in rows]
            self.float_ts |= any(isinstance(e.ts, float) for e in rows)
        else:
            ts = list(map(TS, rows))
            dur = list(map(DUR, rows))
        ts_us = np.array(ts)
        self.float_ts |= not lenient and ts_us.dtype.kind == "f"
        n = len(rows)
        kept_args = extra_args(args)
        if kept_args:
            self.extra_rows.append(self.rows + np.fromiter(kept_args, np.int64, len(kept_args)))
            ids = [self._value_id(self._shared(v)) for v in kept_args.values()]
            self.extra_ids.append(np.array(ids, dtype=np.int32))
            self.nbytes += 100 * len(ids)

        def arg(field: str, chosen: np.ndarray | None) -> np.ndarray:
            if field in ("grid", "block") and chosen is not None:
                return np.array([dims_product(getattr(args[r], field)) for r in chosen], np.int64)
            return arg_column(args, field, chosen)

        return {
            "kind": kinds,
            "name_id": self._intern(list(map(EVENT_NAME, rows))),
            "start_ns": to_ns(ts_us),
            "dur_ns": to_ns(dur),
            **self._arg_columns(
                kinds, id_column(list(map(EVENT_PID, rows))), id_column(list(map(TID, rows))), arg
            ),
            "occupancy_pct": occupancy_percent(
                np.fromiter(map(OCCUPANCY, args), dtype=np.float64, count=n), self.skipped
            ),
        }

    def _arg_columns(
        self,
        kinds: np.ndarray,
        pid: np.ndarray,
        tid: np.ndarray,
        arg: Callable[[str, np.ndarray | None], np.ndarray],
    ) -> dict[str, np.ndarray]:
        """The columns taken from ``args``, each read (``arg(field, rows)``; rows None: every
        row) only for the kinds it concerns; -1 elsewhere. Both readers' columns come from
        here."""
        n = len(kinds)
        every = None
        on_device = np.flatnonzero(among(kinds, DEVICE_KINDS))
        linked = np.flatnonzero(among(kinds, LINKED_KINDS))
        copies = np.flatnonzero((kinds == Kind.MEMCPY) | (kinds == Kind.MEMSET))
        python = np.flatnonzero(kinds == Kind.PYTHON)
        kernels = np.flatnonzero(kinds == Kind.KERNEL)
        arg_device, arg_stream = arg("device", on_device), arg("stream", on_device)
        external_id = arg("external_id", every)
        if self.old_schema:
            external_id = np.where(external_id >= 0, external_id, arg("external_id_2021", every))
        return {
            "pid": pid,
            "tid": tid,
            "device": scatter(n, on_device, np.where(arg_device >= 0, arg_device, pid[on_device])),
            "stream": scatter(n, on_device, np.where(arg_stream >= 0, arg_stream, tid[on_device])),
            "correlation": scatter(n, linked, arg("correlation", linked)),
            "external_id": narrow(external_id),
            "bytes": scatter(n, copies, np.maximum(arg("bytes", copies), arg("size", copies))),
            "python_id": scatter(n, python, arg("python_id", python)),
            "python_parent_id": scatter(n, python, arg("python_parent_id", python)),
            "grid_blocks": scatter(n, kernels, arg("grid", kernels)),
            "block_threads": scatter(n, kernels, arg("block", kernels)),
        }

    def _intern(self, raw_names: list[Any]) -> np.ndarray:
        if not all(type(n) is str for n in raw_names):  # the lenient reader's odd names
            raw_names = [self._odd_name(n) for n in raw_names]
        index = self.index
        for name in dict.fromkeys(raw_names):
            if name not in index:
                text = name
                if len(text) > MAX_NAME_CHARS:
                    text = text[:MAX_NAME_CHARS] + "…"
                    count_skipped(self.skipped, LONG_NAME, 1)
                index[name] = index.setdefault(text, len(self.names))
                if index[name] == len(self.names):
                    self.names.append(text)
        return np.fromiter(map(index.__getitem__, raw_names), dtype=np.int32, count=len(raw_names))

    def _odd_name(self, name: Any) -> str:
        """A name that is not a JSON string (a number, a list, an object) reads as ``?``."""
        if isinstance(name, str):
            return name
        count_skipped(self.skipped, NOT_A_STRING, 1)
        return "?"

    @property
    def names(self) -> list[str]:
        return self._names

    def finish(self, path: Path, doc: Any, *, lost_tail: bool) -> Trace:
        if self.events == 0:
            raise EmptyTraceError(path, "the trace holds no events")
        if self.rows == 0:
            raise EmptyTraceError(path, "no profiler events (no CPU ops, kernels or runtime calls)")
        names = list(self.names)
        # Sorted by start one column at a time, each piece freed as soon as it is copied: the
        # peak stays near one copy of the table rather than three.
        order = np.argsort(joined_columns(self.parts["start_ns"]), kind="stable")
        columns: dict[str, np.ndarray] = {}
        for name in list(self.parts):
            joined = joined_columns(self.parts.pop(name))
            # Pieces of different widths join wide: narrowed again before the sorted copy.
            column = (narrow(joined) if name in ID_COLUMNS else joined)[order]
            del joined
            # The scanner's times come int32 when they fit; the model's are int64.
            columns[name] = column.astype(np.int64) if name in _INT64_COLUMNS else column
        direction, pageable = memcpy_columns(names, columns["name_id"], columns["kind"])
        columns["copy_direction"] = direction
        columns["pageable"] = pageable
        extra_rows = np.empty(0, np.int64)
        if self.extra_rows:  # where each row with arguments went: 32 bits below 2^31 rows
            index = np.int32 if self.rows <= np.iinfo(np.int32).max else np.int64
            new_row = np.empty(self.rows, dtype=index)
            new_row[order] = np.arange(self.rows, dtype=index)
            extra_rows = new_row[joined_columns(self.extra_rows)]
            del new_row
        del order
        extra = Extras.unsorted(
            extra_rows,
            joined_columns(self.extra_ids) if self.extra_ids else np.empty(0, np.int32),
            self.extra_values,
        )
        between_gpus(columns, extra)
        table = Events.from_columns(self.rows, columns, extra)
        link_launches(table)
        if self.flows:
            _link_by_flows(table, self.flows)
        dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
        old = self.old_schema or doc.computeProperties is not None
        schema = "kineto-2021" if old else ("kineto-float-us" if self.float_ts else "kineto-int-us")
        trace = Trace(
            source=str(path),
            format="kineto",
            schema=schema,
            rank=opt_int(dist.get("rank")),
            world_size=opt_int(dist.get("world_size")),
            devices=_devices(doc, table, mtia="mtia_ccp_events" in self.kind_of),
            names=names,
            events=table,
            steps=_steps(table, names),
            metadata={"base_time_ns": opt_int(doc.baseTimeNanoseconds), "distributed": dist},
            memory=self.memory_events(),
            counters=counter_series(self.counter_events) if self.counter_events else [],
        )
        if "cuda_profiler_range" in self.kind_of:
            trace.warnings.append(
                f"{path}: kernels were recorded by CUPTI range profiling (replayed for counters):"
                " their durations are not real-time, so busy and idle figures are not either"
            )
        for reason, count in self.skipped.items():
            trace.warnings.append(f"{path}: {count:,} {reason}")
        if lost_tail:
            trace.warnings.append(
                f"{path}: the file ends mid-write (the profiler did not finish it); read "
                f"{self.rows:,} whole events covering {_span_ms(trace):.1f} ms, the rest is lost"
            )
        return trace


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_int64(value: Any) -> bool:
    """An integer a signed 64-bit column holds."""
    return _is_int(value) and -(1 << 63) <= value < (1 << 63)


def memory_in(body: bytes) -> list[Any]:
    """The events of a piece of text (a JSON array) that may be ``[memory]`` events; none
    decoded unless the text names one."""
    return list(MAYBE_MEMORY_DECODER.decode(body)) if b'"[memory]"' in body else []


def memory_of(data: bytes) -> list[Any]:
    """The same for a whole document."""
    if b'"[memory]"' not in data:
        return []
    try:
        return MEMORY_DOCUMENT_DECODER.decode(data).traceEvents or []
    except msgspec.DecodeError:  # a repaired, truncated document: its memory events are lost
        return []


def _link_by_flows(table: Events, flows: list[Any]) -> None:
    """Link device work without correlation ids through flow start/finish pairs (MTIA, old ROCm).

    Flow events are decoded only for the pieces of a document that need them.
    """
    flows = [
        e
        for e in flows
        if e.ph in ("s", "f") and isinstance(e.cat, str) and e.cat.lower() in FLOW_CATEGORIES
    ]
    ts_ns = to_ns([num(e.ts) for e in flows]).tolist()
    starts: dict[Any, tuple[int, int, int]] = {}
    finishes: dict[Any, tuple[int, int, int]] = {}
    for e, t_ns in zip(flows, ts_ns, strict=True):
        key = (int_id(e.pid), int_id(e.tid), t_ns)
        (starts if e.ph == "s" else finishes)[e.id] = key
    if not starts or not finishes:
        return
    candidates = np.flatnonzero(
        table.of_kind(Kind.RUNTIME) | ((table.device >= 0) & (table.link < 0))
    )
    keys = zip(
        table.pid[candidates].tolist(),
        table.tid[candidates].tolist(),
        table.start_ns[candidates].tolist(),
        strict=True,
    )
    at = dict(zip(keys, candidates.tolist(), strict=True))
    host_rows: list[int] = []
    dev_rows: list[int] = []
    for flow_id, start_key in starts.items():
        finish_key = finishes.get(flow_id)
        if finish_key is None:
            continue
        h, d = at.get(start_key), at.get(finish_key)
        if (
            h is not None
            and d is not None
            and table.kind[h] == Kind.RUNTIME
            and table.device[d] >= 0
        ):
            host_rows.append(h)
            dev_rows.append(d)
    if host_rows:
        h_arr = np.array(host_rows, dtype=np.int64)
        join_launches(table, h_arr, h_arr, np.array(dev_rows, dtype=np.int64), h_arr)


def _devices(doc: Any, table: Events, *, mtia: bool) -> dict[int, DeviceInfo]:
    props = doc.deviceProperties if doc.deviceProperties is not None else doc.computeProperties
    props = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    used = sorted({int(d) for d in distinct(table.device) if d >= 0})
    rocm = doc.roctracer_version is not None or doc.hip_runtime_version is not None
    by_id = {opt_int(p.get("id")): p for p in props}
    devices: dict[int, DeviceInfo] = {}
    for position, device_id in enumerate(used):
        prop = by_id.get(device_id)
        if prop is None and len(props) == len(used):
            prop = sorted(props, key=lambda p: opt_int(p.get("id")) or 0)[position]
        devices[device_id] = _device_info(device_id, prop, rocm, mtia)
    return devices


def _device_info(device_id: int, prop: dict[str, Any] | None, rocm: bool, mtia: bool) -> DeviceInfo:
    if prop is None:
        return DeviceInfo(
            device_id, None, "mtia" if mtia else ("amd" if rocm else None), None, None, None
        )
    name = prop.get("name") or None
    major = prop.get("computeMajor", prop.get("major"))
    minor = prop.get("computeMinor", prop.get("minor"))
    is_amd = rocm or (isinstance(name, str) and name.upper().startswith("AMD"))
    return DeviceInfo(
        index=device_id,
        name=name if isinstance(name, str) else None,
        vendor="mtia" if mtia else ("amd" if is_amd else "nvidia"),
        num_sms=opt_int(prop.get("numSms", prop.get("multiProcessorCount"))),
        total_memory_bytes=opt_int(prop.get("totalGlobalMem")),
        compute_capability=None if major is None else f"{major}.{minor}",
    )


def _steps(table: Events, names: list[str]) -> list[Step]:
    """``ProfilerStep#N`` ranges on the host, whatever their category: ``user_annotation`` since
    2022, ``Operator`` (a CPU op) in 2021 traces. The device-side copies (``gpu_user_annotation``)
    are not steps: they are where a step's kernels ran, used per device by the step breakdown."""
    is_step = np.array(
        [n.startswith("ProfilerStep#") and STEP_NAME.match(n) is not None for n in names],
        dtype=np.bool_,
    )
    if not is_step.any():
        return []
    # By name first (one lookup per row), then by kind: no Python loop over every op.
    rows = np.flatnonzero(is_step[table.name_id])
    rows = rows[among(table.kind[rows], (Kind.ANNOTATION, Kind.CPU_OP))]
    steps: list[Step] = []
    for name_id, start, dur in zip(
        table.name_id[rows].tolist(),
        table.start_ns[rows].tolist(),
        table.dur_ns[rows].tolist(),
        strict=True,
    ):
        name = names[name_id]
        match = STEP_NAME.match(name)
        assert match is not None  # chosen by it above
        steps.append(Step(name, int(match.group(1)), start, start + dur))
    return steps


def _span_ms(trace: Trace) -> float:
    ev = trace.events
    if len(ev) == 0:
        return 0.0
    return float(ev.end_ns.max() - ev.start_ns.min()) / 1e6
