"""The fast path: a ``.pftrace`` walked by the C extension (``_pfscan.c``) into columns, and the
columns turned into the same rows as :class:`~gpuscope.readers.pftrace._decode.PacketReader`, its
pure-Python twin, makes packet by packet with protobuf.

Contract: :func:`read_columns` returns the :class:`Decoded` trace, or None when the extension is
not built (or stale) or does not follow the file (a wire-format feature it leaves to protobuf,
a malformed packet, interned data or tracks after the first event): the caller then decodes with
protobuf, so the result never depends on which path ran (``tests/test_pftrace.py`` holds them
equal). Only the packets the walker leaves alone (clock, tracks, interned data, counters, a few
per file) are decoded by protobuf; each slice's annotations are decoded once per distinct set
(the same shapes recur at every step), everything else is numpy over the columns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gpuscope._native import current
from gpuscope.errors import EmptyTraceError
from gpuscope.readers.kineto._columns import Columns
from gpuscope.readers.kineto._shape import SKIP
from gpuscope.readers.pftrace import schema as pb
from gpuscope.readers.pftrace._decode import (
    EXTRA_KEYS,
    ID_NAMES,
    NO_PROFILER_EVENTS,
    STAGE_CATEGORY,
    STREAM_NAME,
    WANTED_KEYS,
    Decoded,
    PacketReader,
    annotation_values,
    as_int,
    as_text,
    extras_key,
    guess,
    table,
    where,
)

#: The walker source this module follows (``PFSCAN_VERSION`` in ``_pfscan.c``).
PFSCAN_VERSION = 1

try:  # the C walker (setup.py builds it where a compiler is found)
    from gpuscope.readers.pftrace import _pfscan

    if not current(_pfscan, PFSCAN_VERSION, ".pftrace walker (readers/pftrace/_pfscan.c)"):
        raise ImportError("the .pftrace walker was built from older source")
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _pfscan = None  # type: ignore[assignment]

# The walker's columns (the E_* and S_* enums of _pfscan.c).
(E_SEQ, E_TIME, E_TYPE, E_UUID, E_NAME_IID, E_NAME_AT, E_NAME_LEN, E_FLAGS, E_CAT_IID, E_CAT_AT,
 E_CAT_LEN, E_FLOW, E_LAUNCHED_AT, E_LAUNCHED, E_KEY, E_ID_MASK, E_ID0) = range(17)  # fmt: skip
F_CAT_IID, F_CAT_TEXT, F_LAUNCH, F_FLOW = 1, 2, 4, 8
(S_SEQ, S_TIME, S_EVENT_ID, S_DURATION, S_GPU, S_QUEUE_IID, S_STAGE_IID, S_KERNEL_IID, S_NAME_IID,
 S_NAME_AT, S_NAME_LEN, S_HAS_LAUNCH, S_GX, S_GY, S_GZ, S_BX, S_BY, S_BZ, S_BYTES_AT,
 S_BYTES_LEN) = range(20)  # fmt: skip

_WANTED_BYTES = tuple(sorted(name.encode() for name in WANTED_KEYS))
_ID_BYTES = tuple(name.encode() for name in ID_NAMES)
_ID = {name: i for i, name in enumerate(ID_NAMES)}
#: The annotations read from each slice (as ``PacketReader`` reads them from its args).
_ARG_NAMES = ("correlation", "External id", "bytes", "Python id", "Python parent id", "cbid",
              "device", "stream")  # fmt: skip


class _Arg:
    """One annotation across the slices: present, an integer (``as_int``), its value."""

    def __init__(self, n: int) -> None:
        self.present = np.zeros(n, dtype=bool)
        self.valid = np.zeros(n, dtype=bool)
        self.value = np.full(n, -1, dtype=np.int64)


def read_columns(path: Path, data: bytes, *, lost_tail: bool) -> Decoded | None:
    if _pfscan is None:
        return None
    try:
        scanned = _pfscan.scan(data, _WANTED_BYTES, _ID_BYTES)
    except ValueError:
        return None
    marks_raw, slices_raw, stages_raw, others_raw, launched_raw, keys = scanned
    marks = np.frombuffer(marks_raw, dtype=np.int64).reshape(-1, 4)
    slices = np.frombuffer(slices_raw, dtype=np.int64).reshape(-1, _pfscan.EVENT_COLUMNS)
    stages = np.frombuffer(stages_raw, dtype=np.int64).reshape(-1, _pfscan.STAGE_COLUMNS)
    others = np.frombuffer(others_raw, dtype=np.int64).reshape(-1, 3)
    reader = PacketReader(path)
    if not _other_packets(reader, data, others, marks, stages):
        return None
    builder = _Builder(reader, data, keys)
    builder.slices(marks, slices, np.frombuffer(launched_raw, dtype=np.int64))
    builder.stages(stages)
    trace = builder.finish(lost_tail)
    return Decoded(trace, len(marks) + len(stages) + len(others), lost_tail)


def _other_packets(
    reader: PacketReader, data: bytes, others: np.ndarray, events: np.ndarray, stages: np.ndarray
) -> bool:
    """Decode the packets the walker left alone, in order; False (declined) for one protobuf
    does not read, or for interned data or a track after the first event (the packet-by-packet
    reader then looks names up as they stood at each event)."""
    from google.protobuf.message import DecodeError  # noqa: PLC0415 - protobuf loads on use

    firsts = [int(a[0, 0]) for a in (events, stages) if len(a)]
    first_event = min(firsts, default=len(others) + 1)
    for seq, at, length in others.tolist():
        try:
            packet = pb.TracePacket.FromString(data[at : at + length])
        except DecodeError:
            return False
        which = packet.WhichOneof("data")
        if which == "gpu_counter_event" and seq < first_event:
            first_event = seq
        if seq > first_event and which in ("interned_data", "track_descriptor"):
            return False
        reader.packet(packet)
    return True


class _Builder:
    """The rows of one trace from the walker's columns (the twin of ``PacketReader.track_event``,
    ``render_stage`` and ``finish``, in numpy)."""

    def __init__(self, reader: PacketReader, data: bytes, keys: list[bytes]) -> None:
        self.reader = reader
        self.data = data
        self.key_args = [
            annotation_values(pb.TrackEvent.FromString(k).debug_annotations, reader.nested)
            for k in keys
        ]

    # --- slices ----------------------------------------------------------------------------------

    def slices(self, marks: np.ndarray, begin: np.ndarray, launched: np.ndarray) -> None:
        reader = self.reader
        kinds = marks[:, 2]
        start = begin[:, E_TIME]
        end, unopened, unclosed = _pair(marks[(kinds == pb.SLICE_BEGIN) | (kinds == pb.SLICE_END)])
        reader.unopened += unopened
        reader.unclosed = unclosed
        keys = begin[:, E_KEY]
        args = {name: self._arg(begin, name) for name in _ARG_NAMES}
        uuids = begin[:, E_UUID].view(np.uint64)
        pid, tid, device, stream = self._where(uuids, keys, args)
        correlation = np.where(args["correlation"].present, args["correlation"].value, -1)
        correlation[correlation == 0] = -1  # `as_int(...) or -1`
        flags = begin[:, E_FLAGS]
        launches = np.flatnonzero(((flags & F_LAUNCH) != 0) & (begin[:, E_LAUNCHED] > 0))
        flows = np.flatnonzero(((flags & F_LAUNCH) == 0) & ((flags & F_FLOW) != 0))
        counts = begin[launches, E_LAUNCHED]
        within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
        self.launch_owner = np.repeat(launches, counts)
        self.launch_ids = launched[np.repeat(begin[launches, E_LAUNCHED_AT], counts) + within]
        self.launches, self.flows = launches, flows
        self.flow_ids = begin[flows, E_FLOW].view(np.uint64)
        self.begin = begin
        self.begin_columns = {
            "start": start,
            "end": end,
            "pid": pid,
            "tid": tid,
            "device": device,
            "stream": stream,
            "correlation": correlation,
        }
        self.args = args
        self.categories = self._categories(begin)
        self.names = self._names(begin)

    def _arg(self, begin: np.ndarray, name: str) -> _Arg:
        """One annotation of each slice: from the id columns, or from its key's decoded args."""
        n = len(begin)
        arg = _Arg(n)
        per_key = _Arg(len(self.key_args) + 1)  # the last: no key
        for k, values in enumerate(self.key_args):
            if name in values:
                per_key.present[k] = True
                number = as_int(values[name])
                if number is not None:
                    per_key.valid[k], per_key.value[k] = True, number
        if per_key.present.any():
            keys = begin[:, E_KEY]
            arg.present, arg.valid, arg.value = (
                per_key.present[keys],
                per_key.valid[keys],
                per_key.value[keys],
            )
        if name in _ID:
            bit = 1 << _ID[name]
            column = (begin[:, E_ID_MASK] & bit) != 0
            arg.present |= column
            arg.valid |= column
            arg.value = np.where(column, begin[:, E_ID0 + _ID[name]], arg.value)
        return arg

    def _where(
        self, uuids: np.ndarray, keys: np.ndarray, args: dict[str, _Arg]
    ) -> tuple[np.ndarray, ...]:
        """pid, tid, device and stream of each slice (``PacketReader.where``, once per track and
        distinct annotations)."""
        tracks = self.reader.tracks
        _, track = _factor(uuids)
        pairs = track * (len(self.key_args) + 2) + (keys + 1)
        _, first = np.unique(pairs, return_index=True)
        inverse = np.searchsorted(pairs[first], pairs)
        out = np.empty((first.size, 4), dtype=np.int64)
        for j, at in enumerate(first.tolist()):
            track_of = tracks.get(int(uuids[at]))
            device = int(args["device"].value[at]) if args["device"].valid[at] else None
            lane = int(args["stream"].value[at]) if args["stream"].valid[at] else None
            out[j] = where(tracks, track_of, device, lane)
        rows = out[inverse]
        return rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3]

    def _categories(self, begin: np.ndarray) -> tuple[list[str | None], np.ndarray]:
        """Each slice's first category, interned by iid, else its own string (None: none), as
        (distinct values, each slice's index among them)."""
        flags = begin[:, E_FLAGS]
        by_iid = (flags & F_CAT_IID) != 0
        table, index = _lookup(
            self.reader.categories, begin[:, E_CAT_IID].view(np.uint64), by_iid, None
        )
        for row in np.flatnonzero(~by_iid & ((flags & F_CAT_TEXT) != 0)).tolist():
            at, length = int(begin[row, E_CAT_AT]), int(begin[row, E_CAT_LEN])
            index[row] = len(table)
            table.append(as_text(self.data[at : at + length]))
        return table, index

    def _names(self, begin: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Each slice's name, interned by iid, else its own string ("" when none), as (distinct
        names, each slice's index among them)."""
        iids = begin[:, E_NAME_IID].view(np.uint64)
        table, index = _lookup(self.reader.names, iids, iids != 0, "")
        for row in np.flatnonzero((iids == 0) & (begin[:, E_NAME_AT] >= 0)).tolist():
            at, length = int(begin[row, E_NAME_AT]), int(begin[row, E_NAME_LEN])
            index[row] = len(table)
            table.append(as_text(self.data[at : at + length]))
        return table, index

    # --- render stages --------------------------------------------------------------------------

    def stages(self, stages: np.ndarray) -> None:
        """The GPU work (``PacketReader.render_stage``, a plain loop over integers)."""
        reader, data = self.reader, self.data
        specs, names, kernels = reader.stages, reader.names, reader.kernels
        kept: list[int] = []
        categories: list[str] = []
        row_names: list[str] = []
        streams: list[int] = []
        byte_counts: list[int] = []
        lanes: dict[int, int] = {}
        for i, row in enumerate(stages.view(np.uint64).tolist()):
            stage_name = specs.get(row[S_STAGE_IID], "")
            category = STAGE_CATEGORY.get(stage_name)
            if category is None:
                continue
            queue = row[S_QUEUE_IID]
            stream = lanes.get(queue)
            if stream is None:
                match = STREAM_NAME.search(specs.get(queue, ""))
                stream = lanes[queue] = int(match.group(1)) if match else queue
            if row[S_NAME_IID]:
                name = names.get(row[S_NAME_IID], stage_name)
            elif row[S_KERNEL_IID]:
                name = kernels.get(row[S_KERNEL_IID], stage_name)
            elif row[S_NAME_AT] != 2**64 - 1:
                at = row[S_NAME_AT]
                name = as_text(data[at : at + row[S_NAME_LEN]]) or stage_name
            else:
                name = stage_name
            count = -1
            if category in ("gpu_memcpy", "gpu_memset") and row[S_BYTES_AT] != 2**64 - 1:
                at = row[S_BYTES_AT]
                count = as_int(as_text(data[at : at + row[S_BYTES_LEN]])) or -1
            kept.append(i)
            categories.append(category)
            row_names.append(name)
            streams.append(stream)
            byte_counts.append(count)
        rows = stages[np.array(kept, dtype=np.int64)]
        n = len(kept)
        device = rows[:, S_GPU]
        kernel = np.array([c == "kernel" for c in categories], dtype=bool)
        launch = kernel & (rows[:, S_HAS_LAUNCH] != 0)
        self.stage_rows = rows
        self.stage_categories = categories
        self.stage_names = row_names
        self.stage_columns = {
            "start": rows[:, S_TIME],
            "end": rows[:, S_TIME] + rows[:, S_DURATION],
            "pid": device,
            "tid": np.array(streams, dtype=np.int64),
            "device": device,
            "stream": np.array(streams, dtype=np.int64),
            "correlation": np.full(n, -1, dtype=np.int64),
            "bytes": np.array(byte_counts, dtype=np.int64),
            "grid": np.where(launch, _volume(rows, S_GX), -1),
            "block": np.where(launch, _volume(rows, S_BX), -1),
        }

    # --- the model ------------------------------------------------------------------------------

    def finish(self, lost_tail: bool) -> Any:
        """``PacketReader.finish`` over the columns."""
        reader = self.reader
        name_table, name_index = self.names
        category_table, category_index = self.categories
        nb, ns = name_index.size, len(self.stage_names)
        if nb + ns == 0:
            return reader.finish(lost_tail)  # its error for a trace without events
        begin, stage, args = self.begin_columns, self.stage_columns, self.args
        correlation = np.concatenate([begin["correlation"], stage["correlation"]])
        self._correlate(correlation, nb)
        category_index = self._guess(category_table, category_index, correlation[:nb])
        stage_table = list(dict.fromkeys(self.stage_categories))
        stage_index = {c: len(category_table) + i for i, c in enumerate(stage_table)}
        category_table = [*category_table, *stage_table]
        category_index = np.concatenate(
            [category_index, [stage_index[c] for c in self.stage_categories]]
        ).astype(np.int64)
        seq = np.concatenate([self.begin[:, E_SEQ], self.stage_rows[:, S_SEQ]])
        order = np.argsort(seq, kind="stable")
        columns = Columns(lenient=False)
        columns.events = nb + ns
        code_of = np.array([columns._kind_code(c) for c in category_table], dtype=np.uint8)
        codes = code_of[category_index]
        keep = order[codes[order] != SKIP]
        if keep.size == 0:
            raise EmptyTraceError(reader.path, NO_PROFILER_EVENTS)
        name_table = name_table + self.stage_names
        name_index = np.concatenate([name_index, np.arange(len(name_table) - ns, len(name_table))])
        begin["bytes"] = begin["grid"] = begin["block"] = np.full(nb, -1, dtype=np.int64)
        kept = {
            name: np.concatenate([begin[name], stage[name]])[keep]
            for name in ("start", "end", "pid", "tid", "device", "stream", "bytes", "grid", "block")
        }
        kept["correlation"] = correlation[keep]
        from_args = {
            name: np.concatenate(
                [np.where(args[name].valid, args[name].value, -1), np.full(ns, -1, np.int64)]
            )[keep]
            for name in ("External id", "bytes", "Python id", "Python parent id")
        }
        piece = table(
            columns,
            codes[keep],
            _interned(columns, name_table, name_index[keep]),
            kept,
            from_args,
            reader.base_ns or 0,
        )
        extra_rows, extra_ids = self._extras(columns, keep, nb)
        return reader.model(columns, piece, extra_rows, extra_ids)

    def _guess(
        self, table: list[str | None], index: np.ndarray, correlation: np.ndarray
    ) -> np.ndarray:
        """Slices without a category get ``guess``'s, once per distinct name, device or not,
        runtime signs and Python signs."""
        missing = np.flatnonzero(np.array([c is None for c in table])[index])
        if missing.size == 0:
            return index
        args = self.args
        _, names = self.names
        signs = (
            (self.begin_columns["device"][missing] >= 0) * 1
            + (args["cbid"].present[missing] | (correlation[missing] >= 0)) * 2
            + args["Python id"].present[missing] * 4
        )
        combined = names[missing] * 8 + signs
        distinct, first = np.unique(combined, return_index=True)
        name_table, _ = self.names
        guessed = []
        for at in first.tolist():
            sign = int(signs[at])
            name = name_table[int(names[missing[at]])]
            guessed.append(guess(name, 0 if sign & 1 else -1, bool(sign & 2), bool(sign & 4)))
        start = len(table)
        table += guessed
        index = index.copy()
        index[missing] = start + np.searchsorted(distinct, combined)
        return index

    def _correlate(self, correlation: np.ndarray, nb: int) -> None:
        """``PacketReader._correlate``: a launch and the GPU work it names share its correlation
        argument, or a number of its own; a flow id is the correlation of its slice."""
        launches = self.launches
        argument = self.args["correlation"]
        has = argument.valid[launches]
        keys = np.where(has, argument.value[launches], 0)
        fresh = np.flatnonzero(~has)
        keys[fresh] = -2 - np.arange(fresh.size)
        correlation[launches] = keys
        if self.launch_ids.size and self.stage_rows.size:
            event_ids = self.stage_rows[:, S_EVENT_ID].view(np.uint64)
            # the last stage with an id is the one it names; the last launch naming it wins
            last = event_ids.size - 1 - np.unique(event_ids[::-1], return_index=True)[1]
            known = event_ids[last]
            wanted = self.launch_ids.view(np.uint64)
            at = np.minimum(np.searchsorted(known, wanted), max(known.size - 1, 0))
            found = (known.size > 0) & (known[at] == wanted)
            targets = nb + last[at[found]]
            key_of = np.zeros(launches.size and int(launches.max()) + 1, dtype=np.int64)
            key_of[launches] = keys
            values = key_of[self.launch_owner[found]]
            final = targets.size - 1 - np.unique(targets[::-1], return_index=True)[1]
            correlation[targets[final]] = values[final]
        correlation[self.flows] = (self.flow_ids & np.uint64(0x7FFFFFFF)).astype(np.int64)
        if fresh.size:
            top = int(correlation.max()) + 1
            low = correlation <= -2
            correlation[low] = top - correlation[low]

    def _extras(self, columns: Columns, keep: np.ndarray, nb: int) -> tuple[list[int], list[int]]:
        """``PacketReader._extras``: rows whose arguments hold shapes, collectives or call stacks,
        worked out once per distinct set, in the order each set first appears."""
        with_extras = [k for k, v in enumerate(self.key_args) if not EXTRA_KEYS.isdisjoint(v)]
        if not with_extras:
            return [], []
        row_keys = np.full(keep.size, -1, dtype=np.int64)
        from_begin = keep < nb
        row_keys[from_begin] = self.begin[keep[from_begin], E_KEY]
        has = np.isin(row_keys, with_extras)
        rows = np.flatnonzero(has)
        keys = row_keys[rows]
        done: dict[tuple[Any, ...], int] = {}
        value_of_key: dict[int, int] = {}
        _, first = np.unique(keys, return_index=True)
        for at in np.sort(first).tolist():
            key = int(keys[at])
            values = dict(self.key_args[key])
            begin_row = int(keep[rows[at]])
            for name, i in _ID.items():
                if self.begin[begin_row, E_ID_MASK] & (1 << i):
                    values[name] = int(self.begin[begin_row, E_ID0 + i])
            group = extras_key(values)
            value_id = done.get(group)
            if value_id is None:
                value_id = done[group] = PacketReader._extra_id(columns, values)
            value_of_key[key] = value_id
        ids = np.array([value_of_key[k] for k in keys.tolist()], dtype=np.int64)
        chosen = ids >= 0
        return rows[chosen].tolist(), ids[chosen].tolist()


def _factor(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values, sorted, and each value's index among them (``np.unique`` with
    ``return_inverse`` is several times slower on a few distinct values among many)."""
    unique = np.unique(values)
    inverse: np.ndarray = np.searchsorted(unique, values).astype(np.int64)
    return unique, inverse


def _interned(columns: Columns, table: list[str], index: np.ndarray) -> np.ndarray:
    """``columns._intern`` of ``[table[i] for i in index]``, calling it with each distinct
    index once, in order of first use (the ids it gives follow that order)."""
    used, first = np.unique(index, return_index=True)
    used = used[np.argsort(first, kind="stable")]
    ids = np.zeros(len(table), dtype=np.int64)
    ids[used] = columns._intern([table[i] for i in used.tolist()])
    named: np.ndarray = ids[index]
    return named


def _lookup(
    table: dict[int, Any], iids: np.ndarray, where: np.ndarray, missing: Any
) -> tuple[list[Any], np.ndarray]:
    """``table.get(iid, missing)`` of each row where ``where``, ``missing`` elsewhere, as
    (distinct values, each row's index among them); each distinct iid looked up once."""
    unique, inverse = _factor(np.where(where, iids, 0))
    named = [missing] + [table.get(i, missing) for i in unique.tolist()]
    return named, np.where(where, inverse + 1, 0)


def _volume(rows: np.ndarray, x: int) -> np.ndarray:
    """Threads (or blocks) of a launch dimension: ``x * max(y, 1) * max(z, 1)``, -1 for 0."""
    volume = rows[:, x] * np.maximum(rows[:, x + 1], 1) * np.maximum(rows[:, x + 2], 1)
    return np.where(volume == 0, -1, volume)


def _pair(events: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Each begin's end time, as the packet-by-packet reader pairs them: on each track, an end
    closes the oldest open begin (the exporter writes a group's ends in the order of its
    begins), an end with none open is dropped (counted), a begin never closed ends where it
    began. ``events``: the walker's marks (packet, time, type, track) of the begins and ends.
    Returns the ends (one per begin, in order), the ends dropped and the begins left open."""
    is_begin = events[:, E_TYPE] == pb.SLICE_BEGIN
    times = events[:, E_TIME]
    begin_number = np.cumsum(is_begin) - 1
    closed = times[is_begin]
    if events.size == 0:
        return closed, 0, 0
    uuids = events[:, E_UUID]
    order = np.argsort(uuids, kind="stable")  # by track, in file order within each
    sorted_uuids = uuids[order]
    starts = np.flatnonzero(np.r_[True, sorted_uuids[1:] != sorted_uuids[:-1]])
    sizes = np.diff(np.r_[starts, order.size])
    group = np.repeat(np.arange(starts.size), sizes)
    step = np.where(is_begin[order], 1, -1)
    totals = np.cumsum(step)
    level = totals - np.repeat(totals[starts] - step[starts], sizes)  # open, were none dropped
    # An end is dropped where the running minimum of the level (floored at 0) falls: the walk
    # reflected at 0. The groups are offset so that one running minimum serves them all.
    big = 2 * step.size + 2
    floor = np.minimum.accumulate(np.minimum(level, 0) - group * big) + group * big
    previous = np.r_[0, floor[:-1]]
    previous[starts] = 0
    dropped = (step < 0) & (floor < previous)
    begins = np.flatnonzero(step > 0)
    ends = np.flatnonzero((step < 0) & ~dropped)
    # The k-th end kept on a track closes the k-th begin on it.
    width = int(sizes.max()) + 1
    begin_keys = group[begins] * width + _rank(group[begins])
    end_keys = group[ends] * width + _rank(group[ends])
    closing = begins[np.searchsorted(begin_keys, end_keys)]
    closed[begin_number[order[closing]]] = times[order[ends]]
    return closed, int(dropped.sum()), int(begins.size - ends.size)


def _rank(sorted_keys: np.ndarray) -> np.ndarray:
    """Each element's position among the equal keys before it (keys grouped)."""
    if sorted_keys.size == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    counts = np.diff(np.r_[starts, sorted_keys.size])
    return np.arange(sorted_keys.size) - np.repeat(starts, counts)
