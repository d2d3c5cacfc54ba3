"""Values from a Kineto document turned into the model's columns: times to integer nanoseconds,
ids, arguments of odd types, and the counts of what was skipped and why.

Every value of the wrong type or out of range is counted into a reason (``skipped``) that the
trace reports as a warning, never turned into 0.
"""

from __future__ import annotations

import math
import re
from operator import attrgetter
from typing import Any

import msgspec
import numpy as np

from gpuscope._arrays import distinct
from gpuscope.model import CopyDirection, Extras, Kind, narrow
from gpuscope.readers.kineto._shape import (
    EMPTY_ARGS,
    MEMCPY_DIRECTION,
    Args,
    LenientArgs,
)


def joined_columns(parts: list[np.ndarray]) -> np.ndarray:
    """The pieces of a column as one array; the scanner's single piece as it is (no copy)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def mark_mtia_dma(rows: list[Any], kinds: np.ndarray) -> None:
    """MTIA device events named ``dma_*`` move memory; the rest of ``mtia_ccp_events`` compute."""
    dma = [
        e.cat == "mtia_ccp_events" and isinstance(e.name, str) and e.name.startswith("dma")
        for e in rows
    ]
    kinds[np.array(dma, dtype=bool)] = Kind.MEMCPY


def scatter(n: int, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """An id column of ``n`` rows holding ``values`` at ``rows``, -1 elsewhere; as narrow as
    the values allow (``model.narrow``)."""
    values = narrow(values)
    column = np.full(n, -1, dtype=values.dtype)
    column[rows] = values
    return column


def arg_column(args: list[Any], field: str, rows: np.ndarray | None = None) -> np.ndarray:
    """One integer argument as a column (``-1`` when absent), for all rows or only ``rows``."""
    chosen = args if rows is None else [args[r] for r in rows.tolist()]
    values = list(map(attrgetter(field), chosen))
    try:
        column = np.array(values, dtype=np.int64)
        if column.ndim == 1:
            return column
    except (TypeError, ValueError, OverflowError):  # a null among the ints, one beyond 64 bits
        pass
    return np.array([v if _in_int64(v) else -1 for v in values], dtype=np.int64)


def _in_int64(value: Any) -> bool:
    return isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX


def id_column(values: list[Any]) -> np.ndarray:
    """pid/tid columns: plain ints, except in traces that write them as strings."""
    try:
        column = np.array(values, dtype=np.int64)
        if column.ndim == 1:  # not ``"pid": [1, 2]`` everywhere (a column of lists)
            return column
    except (TypeError, ValueError, OverflowError):
        pass
    return np.array([int_id(v) for v in values], dtype=np.int64)


def to_ns(values_us: list[Any] | np.ndarray) -> np.ndarray:
    """Microseconds as written (ints, or floats with a fraction) to exact integer nanoseconds.

    Integers are scaled exactly; floats are split into whole and fractional microseconds first,
    so that the scaling does not lose the nanoseconds a float of ~1e15 cannot hold after ``* 1000``.
    """
    us = np.asarray(values_us)
    if us.dtype.kind in "iu":
        exact: np.ndarray = us.astype(np.int64) * 1000
        return exact
    us = us.astype(np.float64)
    whole = np.floor(us)
    fraction_ns = np.rint((us - whole) * 1000.0).astype(np.int64)
    split: np.ndarray = whole.astype(np.int64) * 1000 + fraction_ns
    return split


def dims_product(dims: list[int] | None) -> int:
    if not dims:
        return -1
    total = 1
    for d in dims:
        total *= d
    return total


def int_id(value: Any) -> int:
    """Process and thread ids: ints, or strings such as ``"24572"`` / ``"stream 7"`` (2021)."""
    if isinstance(value, str) and _ID_DIGITS.fullmatch(digits := value.rsplit(" ", 1)[-1]):
        value = int(digits)
    return value if _in_int64(value) and not isinstance(value, bool) else -1


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_ID_DIGITS = re.compile(r"-?[0-9]+")
#: The largest time in microseconds whose nanoseconds fit in 64 bits (as the scanner checks).
_MAX_TIME_US = 9.0e15
_BAD_TIME = "events with a ts or dur that is not a number in range were skipped"
#: Kernel names of C++ templates run to a few thousand characters; a name of megabytes is a
#: corrupt or hostile file, and matching patterns over it would take minutes.
MAX_NAME_CHARS = 1 << 16
NEGATIVE_DURATION = "events with a negative duration were skipped"
LONG_NAME = f"names longer than {MAX_NAME_CHARS:,} characters were cut there"
NOT_A_STRING = "events with a name that is not a string are named '?'"


def count_skipped(skipped: dict[str, int], reason: str, n: int) -> None:
    skipped[reason] = skipped.get(reason, 0) + n


def bad_times(
    ts: list[Any], dur: list[Any], skipped: dict[str, int], *, typed: bool
) -> np.ndarray | None:
    """Rows whose time cannot be used, counted into ``skipped`` by reason; None when all can.

    A timestamp that is not a number (a string, null, a list), out of range (``1e400``, beyond
    64-bit nanoseconds) or a negative duration is a writer's bug or a corrupt file: taking it as
    0 would move the event to the clock's origin and stretch the timeline by decades, so the
    event is skipped and the count reported instead. ``typed``: the values are msgspec's ints
    and floats (no bools, strings or nulls), so numpy converts them in one pass.
    """
    try:  # ints beyond a double (a 400-digit ts) take the slow path
        t = np.array(ts, dtype=np.float64) if typed else None
        d = np.array(dur, dtype=np.float64) if typed else None
    except OverflowError:
        t = d = None
    if t is None or d is None:
        t = np.array([_time_or_nan(v) for v in ts], dtype=np.float64)
        d = np.array([_time_or_nan(v) for v in dur], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        unusable = ~(np.abs(t) <= _MAX_TIME_US) | ~(np.abs(d) <= _MAX_TIME_US)
        negative = ~unusable & (d < 0)
    if not unusable.any() and not negative.any():
        return None
    if unusable.any():
        count_skipped(skipped, _BAD_TIME, int(unusable.sum()))
    if negative.any():
        count_skipped(skipped, NEGATIVE_DURATION, int(negative.sum()))
    bad: np.ndarray = unusable | negative
    return bad


_BAD_OCCUPANCY = "occupancy figures outside 0-100% were read as unknown"


def occupancy_percent(percent: np.ndarray, skipped: dict[str, int]) -> np.ndarray:
    """Achieved occupancy in percent as float32; a figure outside 0-100 (a corrupt value, or one
    beyond a float32) is unknown (NaN) and counted, not kept."""
    with np.errstate(invalid="ignore"):
        bad = (percent < 0) | (percent > 100)
    if bad.any():
        count_skipped(skipped, _BAD_OCCUPANCY, int(bad.sum()))
        percent = np.where(bad, np.nan, percent)
    column: np.ndarray = percent.astype(np.float32)
    return column


def _time_or_nan(value: Any) -> float:
    if type(value) not in (int, float):
        return float("nan")
    try:
        return float(value)
    except OverflowError:
        return float("nan")


def num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def opt_int(value: Any) -> int | None:
    try:
        number = None if value is None else int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        return None
    return number if number is None or _INT64_MIN <= number <= _INT64_MAX else None


def coerce_args(a: Any) -> Any:
    """Turn lenient args into the typed shape, dropping values of the wrong type."""
    typed = Args()
    for field_name in Args.__struct_fields__:
        value = getattr(a, field_name)
        if field_name in {"grid", "block"}:
            value = (
                value
                if isinstance(value, list) and all(isinstance(v, int) for v in value)
                else None
            )
        elif field_name in {"input_dims", "input_type", "concrete_inputs", "pg_ranks"}:
            pass
        elif field_name in {"collective_name", "dtype", "pg_name", "call_stack"}:
            value = value if isinstance(value, str) else None
        elif field_name == "occupancy_pct":  # beyond a double, or not a number: unknown
            value = _time_or_nan(value) if not isinstance(value, bool) else float("nan")
            value = value if math.isfinite(value) else float("nan")
        else:  # ints: what int() makes of the value, else the field's own default
            number = opt_int(value)
            value = getattr(EMPTY_ARGS, field_name) if number is None else number
        setattr(typed, field_name, value)
    return typed


def memcpy_columns(
    names: list[str], name_ids: np.ndarray, kinds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Direction and pageable host memory, decided once per distinct memcpy name."""
    direction_of_name = np.zeros(len(names), dtype=np.uint8)
    pageable_of_name = np.zeros(len(names), dtype=np.bool_)
    for name_id in distinct(name_ids[kinds == Kind.MEMCPY]):
        name = names[int(name_id)]
        words = name.lower().split()
        code = words[1] if len(words) > 1 and words[0] == "memcpy" else ""
        direction_of_name[name_id] = MEMCPY_DIRECTION.get(code, CopyDirection.OTHER)
        pageable_of_name[name_id] = "pageable" in name.lower()
    is_copy = kinds == Kind.MEMCPY
    return (
        np.where(is_copy, direction_of_name[name_ids], 0).astype(np.uint8),
        is_copy & pageable_of_name[name_ids],
    )


def between_gpus(columns: dict[str, np.ndarray], extra: Extras) -> None:
    """A copy whose recorded source and destination GPUs differ crosses the interconnect
    (NVLink, or PCIe through the host), whatever its name: CUPTI records peer copies with both
    devices, and Kineto names them ``Memcpy DtoD (Device -> Device)`` as often as ``Memcpy PtoP``.
    A device-to-device copy within one GPU (no such record, or the same device twice) stays in
    that GPU's memory: it is not an interconnect transfer."""
    direction, kinds = columns["copy_direction"], columns["kind"]
    copies = extra.rows[kinds[extra.rows] == Kind.MEMCPY]
    for row, values in zip(copies.tolist(), extra.lookup(copies), strict=True):
        assert values is not None  # a row of extra.rows
        source, destination = values.get("from_device"), values.get("to_device")
        if source is None or destination is None:
            continue
        if source != destination:
            direction[row] = CopyDirection.P2P
        elif direction[row] == CopyDirection.P2P:
            direction[row] = CopyDirection.D2D


_EXTRA_FIELDS = (
    ("input_dims", "input_dims"),
    ("input_type", "input_types"),
    ("concrete_inputs", "concrete_inputs"),
    ("collective_name", "collective_name"),
    ("in_msg_nelems", "in_msg_nelems"),
    ("out_msg_nelems", "out_msg_nelems"),
    ("group_size", "group_size"),
    ("dtype", "dtype"),
    ("pg_name", "process_group"),
    ("pg_ranks", "process_group_ranks"),
    ("call_stack", "call_stack"),
    ("from_device", "from_device"),
    ("to_device", "to_device"),
)


def extra_args(args: list[Any]) -> dict[int, dict[str, Any]]:
    has_shapes = [x is not None for x in map(attrgetter("input_dims"), args)]
    has_comms = [x is not None for x in map(attrgetter("collective_name"), args)]
    has_stack = [x is not None for x in map(attrgetter("call_stack"), args)]
    # Either device recorded makes the row's extras, as the scanner's triggers do.
    has_peer = [a.to_device is not None or a.from_device is not None for a in args]
    rows = np.flatnonzero(
        np.array(has_shapes, dtype=bool)
        | np.array(has_comms, dtype=bool)
        | np.array(has_stack, dtype=bool)
        | np.array(has_peer, dtype=bool)
    )
    return {row: extras_of(args[row]) for row in rows.tolist()}


_EXTRA_VALUES = attrgetter(*(f for f, _ in _EXTRA_FIELDS))
_EXTRA_KEYS = tuple(key for _, key in _EXTRA_FIELDS)


def extras_of(a: Any) -> dict[str, Any]:
    """The arguments kept per event (shapes, collective sizes, 2021 call stacks, a copy's source
    and destination GPUs), by their model names."""
    if (
        a.input_dims is None
        and a.collective_name is None
        and a.call_stack is None
        and a.to_device is None
        and a.from_device is None
    ):
        return {}
    values = _EXTRA_VALUES(a)
    return {k: v for k, v in zip(_EXTRA_KEYS, values, strict=True) if v is not None}


_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
_ARGS_DECODER = msgspec.json.Decoder(Args)
_LENIENT_ARGS_DECODER = msgspec.json.Decoder(LenientArgs, float_hook=float)


def decode_args(text: Any) -> Any:
    """One args object, typed; odd value types coerced as the lenient reader does."""
    try:
        return _ARGS_DECODER.decode(text)
    except msgspec.ValidationError:
        return coerce_args(_LENIENT_ARGS_DECODER.decode(text))


def raw_string(raw: bytes) -> str:
    """A JSON string's content as the scanner found it: escapes are rare, decode them if any."""
    if b"\\" not in raw:
        return raw.decode()
    decoded: str = msgspec.json.decode(b'"' + raw + b'"')
    return decoded
