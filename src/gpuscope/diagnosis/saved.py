"""A diagnosis saved as JSON, and read back into the same value.

Contract: :func:`to_builtins` turns a :class:`~gpuscope.diagnosis.Diagnosis` into JSON-ready
builtins (``diagnose --json`` writes them under the document's ``"diagnosis"`` key, beside the
curated fields of ``docs/json.md``); :func:`from_builtins` decodes them back into the typed
value, validated by msgspec against the types. ``from_builtins(to_builtins(d))`` equals ``d``
field by field (NaN stays NaN), so every renderer draws a saved diagnosis exactly as it draws a
fresh one. :func:`is_saved` and :func:`read` let a command take a saved file wherever it takes a
trace; a JSON document without the saved form is bad input (exit 2), never a guess.

Encoding: numpy arrays (idle gaps, per-kernel bounds) become lists and come back as arrays of
the annotated dtype; a float that is not finite (a share the input cannot give) is written as
the string ``"nan"`` / ``"inf"`` / ``"-inf"``, since JSON has no such numbers.

Idle causes are stored by name. Three columns hold idle causes as small codes (a gap's cause, an
idle timeline bar's category, a row of the per-slice state table), positions in
:data:`~gpuscope.analyses.attribution.CAUSES` (the table's order); the saved form names those
positions once, under :data:`CAUSES_KEY`, and reading maps them back to today's positions, so a
row of ``data/causes.csv`` may be added anywhere. A file saved before the names were stored
(gpuscope 0.3 and earlier) used the enum order of then, :data:`LEGACY_IDLE_CAUSES`.
"""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

import gpuscope.diagnosis as _diagnosis
from gpuscope._files import note_input_path
from gpuscope._sniff import DIAGNOSIS_SCHEMA, is_saved_diagnosis
from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.counters import CounterSummary, MeasuredBounds
from gpuscope.analyses.memory_sites import CATEGORIES
from gpuscope.analyses.samples import GpuUtilisation, SampleOptions
from gpuscope.diagnosis import Diagnosis
from gpuscope.errors import CorruptInputError
from gpuscope.readers._io import memory_budget, read_bytes

#: The ``schema`` of the JSON document ``diagnose --json`` writes (``render.json.SCHEMA``).
DOCUMENT_SCHEMA = DIAGNOSIS_SCHEMA
SAVED_KEY = "diagnosis"
#: A decoded saved diagnosis takes about this many times its size in memory (Python objects for
#: each number and string, then the typed structs).
DECODED_FACTOR = 12
#: The key of the saved diagnosis that names the idle-cause codes, in code order.
CAUSES_KEY = "idle_causes"
#: What the codes meant in files saved without :data:`CAUSES_KEY` (frozen: never edit).
LEGACY_IDLE_CAUSES = (
    "host_sync",
    "data_loader",
    "h2d_copy",
    "launch_overhead",
    "allocator",
    "communication_wait",
    "checkpoint",
    "cpu_other",
    "unknown",
    "warmup",
    "page_migration",
)

# The diagnosis module names these types only for type checkers (their modules load when a job
# has counters or samples); decoding resolves the annotations in that module's namespace.
vars(_diagnosis).update(
    CounterSummary=CounterSummary,
    MeasuredBounds=MeasuredBounds,
    GpuUtilisation=GpuUtilisation,
    SampleOptions=SampleOptions,
)


def to_builtins(diagnosis: Diagnosis) -> Any:
    data = _finite(msgspec.to_builtins(diagnosis, enc_hook=_encode))
    data[CAUSES_KEY] = list(CAUSES)
    return data


def from_builtins(data: Any) -> Diagnosis:
    if isinstance(data, dict):
        data = dict(data)
        named = data.pop(CAUSES_KEY, LEGACY_IDLE_CAUSES)
        if tuple(named) != CAUSES:
            data = _recoded(data, list(named))
    # Lax: the strings "nan" / "inf" decode into float fields.
    return msgspec.convert(data, Diagnosis, strict=False, dec_hook=_decode)


def _recoded(data: dict[str, Any], named: list[str]) -> dict[str, Any]:
    """``data`` with idle-cause codes that index ``named`` turned into today's codes (a copy:
    the caller's builtins stay as they are)."""
    unknown = [n for n in named if n not in CAUSES]
    if unknown:
        raise msgspec.ValidationError(f"idle causes this gpuscope does not know: {unknown}")
    code = [CAUSES.index(n) for n in named]

    def recode(values: list[int]) -> list[int]:
        return [code[v] for v in values]

    devices = []
    for read in data.get("devices", []):
        device = {**read, "idle": {**read["idle"]}}
        device["idle"]["gaps"] = {
            **device["idle"]["gaps"],
            "cause": recode(device["idle"]["gaps"]["cause"]),
        }
        series = {**device["series"]}
        states = series["states_ns"]  # busy, then a row per cause
        width = len(states[0]) if states else 0
        rows = [states[0]] + [[0] * width for _ in CAUSES] if states else []
        for old, new in enumerate(code):
            rows[new + 1] = states[old + 1]
        series["states_ns"] = rows
        device["series"] = series
        devices.append(device)
    data["devices"] = devices
    drawn = data.get("drawn")
    if drawn is not None:
        lanes = [
            lane
            if lane["stream"] is not None
            else {
                **lane,
                "category": recode(lane["category"]),
                "run_category": recode(lane["run_category"]),
            }
            for lane in drawn["timeline"]["lanes"]
        ]
        data["drawn"] = {**drawn, "timeline": {**drawn["timeline"], "lanes": lanes}}
    return data


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise NotImplementedError(f"cannot save {type(value).__name__}")


def _decode(kind: type, value: Any) -> Any:
    if typing.get_origin(kind) is np.ndarray:
        dtype = typing.get_args(typing.get_args(kind)[1])[0]
        try:
            return np.asarray(value, dtype=dtype)
        except (OverflowError, TypeError, ValueError) as error:
            raise ValueError(f"not an array of {np.dtype(dtype).name} ({error})") from None
    raise NotImplementedError(f"cannot read {kind}")


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float written as a string."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        # A column of integers, names or None (an array's list): nothing to rewrite, the common
        # case, told by the items' types (found in C); floats, by checking them all in C.
        kinds = set(map(type, value))
        if kinds <= _NO_FLOATS:
            return value
        if kinds <= _NUMBERS:  # numbers and None (0 and None are finite enough: filtered out)
            if all(map(math.isfinite, filter(None, value))):
                return value
            return [v if v is None or math.isfinite(v) else str(v) for v in value]
        return [_finite(v) for v in value]
    return value


#: The item types of a list :func:`_finite` keeps whole, and of one whose floats it checks.
_NO_FLOATS = frozenset({int, bool, str, type(None)})
_NUMBERS = frozenset({int, bool, float, type(None)})


def is_saved(path: str | Path) -> bool:
    """Whether ``path`` is a JSON document that ``gpuscope diagnose --json`` wrote (from its
    first bytes: :func:`gpuscope._sniff.is_saved_diagnosis`)."""
    return is_saved_diagnosis(path)


#: How deep a saved diagnosis nests (its deepest is under 10 levels): a deeper one is not one
#: gpuscope wrote, and decoding it would exhaust the stack.
MAX_DEPTH = 32
#: The largest magnitude of an integer in a saved diagnosis: 2^62 ns is 146 years; anything
#: beyond is a tampered or corrupt file whose arithmetic would overflow a 64-bit column.
MAX_INT = 2**62


#: The saved diagnosis read last (see :func:`last_read`).
_last: list[str] = []


def last_read() -> str | None:
    """The path of the saved diagnosis read last by this command, or None (the CLI names it when
    its parts turn out not to agree while rendered)."""
    from gpuscope._files import input_role  # noqa: PLC0415

    return _last[-1] if _last and input_role(_last[-1]) is not None else None


def read(path: str | Path) -> Diagnosis:
    """The diagnosis saved in ``path`` (see :func:`is_saved`). A document gpuscope could not
    have written is refused in one line (:class:`CorruptInputError`): nested deeper than
    :data:`MAX_DEPTH`, an integer beyond :data:`MAX_INT` (or below -1, the "none" of an index,
    except a clock offset), an infinite figure, a negative price, time or size, a percentage
    outside 0-100, a key missing or of
    another type. Reading it counts against ``--max-memory`` (a decoded document takes about
    ten times its size)."""
    note_input_path(path)  # no output of the command may overwrite it
    _last.append(str(path))
    del _last[:-1]
    try:
        data = read_bytes(Path(path), limit=memory_budget() // DECODED_FACTOR).data
        document = msgspec.json.decode(data)
    except (OSError, msgspec.DecodeError) as error:
        raise CorruptInputError(path, f"not a readable gpuscope JSON document ({error})") from None
    except RecursionError:
        raise CorruptInputError(
            path, f"nested deeper than a saved diagnosis ({MAX_DEPTH})"
        ) from None
    saved = document.get(SAVED_KEY) if isinstance(document, dict) else None
    if saved is None:
        raise CorruptInputError(
            path,
            "a gpuscope JSON document without the saved diagnosis (written before gpuscope"
            " saved it): run `gpuscope diagnose TRACE --json FILE` again",
        )
    problem = _implausible(saved)
    if problem is not None:
        raise CorruptInputError(path, f"the saved diagnosis is not one gpuscope wrote: {problem}")
    try:
        return _consistent(from_builtins(saved))
    except (msgspec.ValidationError, RecursionError) as error:
        raise CorruptInputError(path, f"the saved diagnosis does not decode: {error}") from None
    except (KeyError, IndexError, TypeError, ValueError) as error:  # recoding a tampered file
        raise CorruptInputError(
            path, f"the saved diagnosis does not decode: {type(error).__name__} {error}"
        ) from None


def _consistent(diagnosis: Diagnosis) -> Diagnosis:
    """``diagnosis`` when its per-step series agree: every column as long as the others
    (``analyses.drawn.StepCauses``); else ValueError. A cause without a row (a file saved
    before the cause existed) lost no time: its row is zeros; likewise a memory category (they
    are appended to ``CATEGORIES``, so a shorter list is the older categories, in order)."""
    for report in diagnosis.memory:
        for category in CATEGORIES:
            report.categories.setdefault(category, 0)
        for point in report.timeline:
            if len(point.by_category) > len(CATEGORIES):
                raise ValueError("a memory point lists more categories than there are")
            point.by_category.extend([0] * (len(CATEGORIES) - len(point.by_category)))
    for device in diagnosis.devices:
        series = getattr(device, "series", None)
        table = getattr(series, "step_causes", None)
        if table is None:
            continue
        steps = len(table.compute_ns)
        for cause in CAUSES:
            table.lost_ns.setdefault(cause, [0] * steps)
        columns = [table.compute_ns, table.exposed_communication_ns, table.memcpy_memset_ns]
        columns += [*table.lost_ns.values(), table.outside_ns]
        if len({len(c) for c in columns}) > 1:
            raise ValueError("its step table's columns differ in length")
    return diagnosis


def _implausible(value: Any, key: str = "", depth: int = 0) -> str | None:
    """The first value of a decoded document that no diagnosis holds, said in a few words; None
    when there is none. Walks the document once (lists of integers, the bulk, at C speed)."""
    if depth > MAX_DEPTH:
        return f"nested deeper than {MAX_DEPTH} levels"
    if isinstance(value, dict):
        for k, v in value.items():
            problem = _implausible(v, str(k), depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, list):
        if value and all(type(v) is int for v in value):
            return _bad_int(key, min(value)) or _bad_int(key, max(value))
        for v in value:
            problem = _implausible(v, key, depth + 1)
            if problem is not None:
                return problem
        return None
    if type(value) is int:
        return _bad_int(key, value)
    if isinstance(value, float) or value in ("inf", "-inf", "Infinity", "-Infinity"):
        number = float(value)
        if math.isinf(number):
            return f"{key} is infinite"
        if key.endswith(("_usd", "_ns", "_bytes")) and number < 0.0:  # a price, time or size
            return f"{key} is {number:g}, below zero"
        if key.endswith("_pct") and not math.isnan(number) and not 0.0 <= number <= 100.0:
            return f"{key} is {number:g}%, outside 0-100"
    return None


def _bad_int(key: str, value: int) -> str | None:
    if abs(value) > MAX_INT:
        return f"{key} is {value}, beyond 64 bits"
    if value < -1 and not key.endswith("offset_ns"):
        return f"{key} is {value}, below zero"
    return None
