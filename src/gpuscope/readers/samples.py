"""Readers for sampled GPU metrics: utilisation, SM/DRAM activity, memory, power over time.

Handles four recordings, each sniffed from content:

* ``nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used,memory.total
  --format=csv[,nounits] -l 1``: header names like ``utilization.gpu [%]``, units in values
  ("45 %", "1024 MiB") or not, ``[N/A]`` / ``[Not Supported]`` for missing values; and CSVs of
  the same figures written by other loggers (an NVML script's ``Time,GPU_ID,Utilization``):
  header synonyms (time / timestamp, gpu / index / GPU_ID, util / utilization / utilization.gpu,
  mem_used / memory.used, ...), ``,``, ``;`` or tab separators, memory in MiB unless a unit says
  otherwise (or the values are too large for MiB: NVML's bytes);
* NVML JSON-lines monitors (SuperBench's ``monitor.jsonl``): one object per sample, a ``time``
  and keys ``<metric>:<gpu>`` (``gpu_usage:0``, ``gpu_mem_used:0`` in bytes, ...);
* ``dcgmi dmon -e 203,1002,1005,252`` text: a ``#Entity ... GPUTL SMACT DRAMA FBUSD`` header
  and ``GPU 0  45  0.123  0.456  1024`` rows (SMACT and DRAMA are ratios, FBUSD MiB);
* a dcgm-exporter Prometheus scrape (``DCGM_FI_DEV_GPU_UTIL{gpu="0",modelName=...} 45``), one
  scrape or several appended to one file.

dcgm-exporter's counter list (``dcp-metrics-included.csv``: field, type, help text) names metrics
but records none: :func:`reject_counter_list` says so in one line, and a folder skips it.

Text files are read as UTF-8, UTF-8 with a byte-order mark, or UTF-16 (what Windows
PowerShell writes for ``nvidia-smi ... > log.csv``), with or without a mark.

Contract: each ``read_*`` returns one :class:`~gpuscope.model.SampleSet` (one
:class:`~gpuscope.model.GpuSamples` per GPU, times in integer ns, percentages 0-100, memory in
bytes, NaN for a missing value) or raises :class:`~gpuscope.errors.InputError` naming the file:
a row cut short or malformed (:class:`CorruptInputError`), no column gpuscope knows
(:class:`CorruptInputError`), no sample (:class:`EmptyTraceError`). Recordings without times
(``dcgmi dmon``, a Prometheus scrape without timestamps) get evenly spaced times at the tool's
default period, with a warning saying so.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import msgspec
import numpy as np

from gpuscope.errors import CorruptInputError, EmptyTraceError, UnknownFormatError
from gpuscope.model import GpuSamples, SampleSet
from gpuscope.readers._io import read_bytes

MIB = 2**20
#: ``dcgmi dmon``'s default ``-d`` (ms between samples), the usual ``nvidia-smi -l 1``, and
#: dcgm-exporter's default collection interval (``-c 30000``): the period assumed when a
#: recording carries no times.
DCGMI_DEFAULT_PERIOD_NS = 1_000_000_000
SMI_DEFAULT_PERIOD_NS = 1_000_000_000
EXPORTER_DEFAULT_PERIOD_NS = 30_000_000_000

#: The fields a sample can carry, as :class:`GpuSamples` stores them.
UTIL, SM_ACTIVE, DRAM_ACTIVE, MEM_USED, MEM_TOTAL, POWER = (
    "utilization_pct",
    "sm_active_pct",
    "dram_active_pct",
    "memory_used_bytes",
    "memory_total_bytes",
    "power_w",
)
_MEASURES = frozenset({UTIL, SM_ACTIVE, DRAM_ACTIVE, MEM_USED})


# --- building a SampleSet -----------------------------------------------------------------------


# Mutable: builder state, one per GPU, filled sample by sample as the file is read.
class _Gpu(msgspec.Struct):
    name: str | None = None
    uuid: str | None = None
    times_ns: list[int] = msgspec.field(default_factory=list)
    rows: list[dict[str, float]] = msgspec.field(default_factory=list)

    def add(self, time_ns: int, values: dict[str, float]) -> None:
        self.times_ns.append(time_ns)
        self.rows.append(values)


#: The farthest a sample's time may lie from the recording's median time: a sampler runs for
#: hours or days; a row decades away is a corrupt clock or a garbled line.
MAX_DISTANCE_NS = 31 * 86_400 * 1_000_000_000
_PERCENTAGES = (UTIL, SM_ACTIVE, DRAM_ACTIVE)


def _drop_implausible(path: Path, gpus: dict[int, _Gpu], warnings: list[str]) -> None:
    """Samples whose time is far from the rest (a 54-year "gap" from one corrupt timestamp)
    are dropped, and values no GPU reports (a percentage beyond 0-100, negative or infinite
    memory or power, from a garbled scrape) become missing; each counted in a warning, never
    kept as they are nor turned into 0."""
    times = [t for g in gpus.values() for t in g.times_ns if abs(t) < 2**63]
    if not times:
        return
    middle = int(np.median(np.asarray(times, dtype=np.int64)))
    far = 0
    for gpu in gpus.values():
        kept = [abs(t - middle) <= MAX_DISTANCE_NS for t in gpu.times_ns]
        if not all(kept):
            far += kept.count(False)
            gpu.times_ns = [t for t, k in zip(gpu.times_ns, kept, strict=True) if k]
            gpu.rows = [r for r, k in zip(gpu.rows, kept, strict=True) if k]
    if far:
        warnings.append(
            f"{path}: dropped {far} sample(s) timed more than 31 days from the rest of the"
            " recording (a corrupt timestamp)"
        )
    bad = 0
    for gpu in gpus.values():
        for row in gpu.rows:
            for key, value in row.items():
                if math.isnan(value):
                    continue
                limit = 100.0 if key in _PERCENTAGES else math.inf
                if not (0.0 <= value <= limit) or not math.isfinite(value):
                    row[key] = math.nan
                    bad += 1
    if bad:
        warnings.append(
            f"{path}: ignored {bad} value(s) out of range (a percentage outside 0-100, or a"
            " negative or infinite amount)"
        )


def _sample_set(path: Path, fmt: str, gpus: dict[int, _Gpu], warnings: list[str]) -> SampleSet:
    _drop_implausible(path, gpus, warnings)
    if not any(g.times_ns for g in gpus.values()):
        raise EmptyTraceError(path, "no GPU samples in the file")
    moments = {t for g in gpus.values() for t in g.times_ns}
    if len(moments) == 1:
        # Idle time and its cost are measured over the time sampled: one instant is none.
        count = sum(len(g.times_ns) for g in gpus.values())
        raise EmptyTraceError(
            path,
            f"all {count} sample(s) carry one time: no time span to measure idle time over"
            " (samples at two times at least are needed)",
        )
    seen = {k for g in gpus.values() for row in g.rows for k, v in row.items() if not math.isnan(v)}
    if not seen & _MEASURES:
        raise CorruptInputError(
            path, "no utilisation, SM activity or memory values (which columns were queried?)"
        )
    return SampleSet(
        source=str(path),
        format=fmt,
        gpus=[_gpu_samples(index, gpus[index]) for index in sorted(gpus) if gpus[index].rows],
        warnings=warnings,
    )


def _gpu_samples(index: int, gpu: _Gpu) -> GpuSamples:
    order = np.argsort(np.asarray(gpu.times_ns, dtype=np.int64), kind="stable")

    def column(name: str) -> np.ndarray[Any, np.dtype[np.float64]]:
        values = np.array([row.get(name, math.nan) for row in gpu.rows], dtype=np.float64)
        return values[order]

    def optional(name: str) -> np.ndarray[Any, np.dtype[np.float64]] | None:
        values = column(name)
        return None if np.isnan(values).all() else values

    totals = column(MEM_TOTAL)
    return GpuSamples(
        gpu=index,
        name=gpu.name,
        time_ns=np.asarray(gpu.times_ns, dtype=np.int64)[order],
        utilization_pct=column(UTIL),
        sm_active_pct=optional(SM_ACTIVE),
        dram_active_pct=optional(DRAM_ACTIVE),
        memory_used_bytes=optional(MEM_USED),
        memory_total_bytes=None if np.isnan(totals).all() else int(np.nanmax(totals)),
        power_w=optional(POWER),
        uuid=gpu.uuid,
    )


def _encoding(head: bytes) -> str | None:
    """The text encoding of a file from its first bytes; None for a binary file (SQLite, gzip of
    something else). UTF-16 is what Windows PowerShell writes for ``nvidia-smi ... > log.csv``
    (with a byte-order mark); a UTF-16 file without one shows NUL in every other byte."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"  # the mark says which byte order, and is dropped
    if head.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    window = head[:4096]
    if head.startswith(b"SQLite format 3"):
        return None
    if b"\x00" not in window:
        return "utf-8"
    even, odd = window[0::2], window[1::2]
    if len(window) >= 4 and odd.count(0) >= 0.9 * len(odd) and even.count(0) == 0:
        return "utf-16-le"
    if len(window) >= 4 and even.count(0) >= 0.9 * len(even) and odd.count(0) == 0:
        return "utf-16-be"
    return None


def _decoded(data: bytes, encoding: str) -> str:
    if encoding.startswith("utf-16") and len(data) % 2:
        data = data[:-1]  # a head cut mid-character
    return data.decode(encoding, errors="replace").lstrip("\ufeff")


def _head_text(head: bytes) -> str | None:
    """The first bytes of a file as text, whatever its encoding; None when it is not text."""
    encoding = _encoding(head)
    return None if encoding is None else _decoded(head, encoding)


def _is_text(head: bytes) -> bool:
    """Not a binary file (SQLite, gzip of something else): the sniffers read text only."""
    return _encoding(head) is not None


def _lines(path: Path) -> list[str]:
    data = read_bytes(path).data
    return _decoded(data, _encoding(data[:4096]) or "utf-8").splitlines()


# --- times and values ---------------------------------------------------------------------------

_NUMBER = re.compile(r"^\d+(?:\.\d*)?$")
_TIME_FORMATS = ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time_ns(value: Any) -> int | None:
    """Epoch seconds / ms / ns, ISO 8601, or nvidia-smi's ``2024/01/15 10:23:45.123``, as ns.
    A time without a zone is read as UTC: only differences between samples matter."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return _epoch_ns(float(value))
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if _NUMBER.match(text):  # epoch or relative seconds written as text (a CSV cell)
        return _epoch_ns(float(text))
    stamp: datetime | None = None
    for fmt in _TIME_FORMATS:
        try:
            stamp = datetime.strptime(text, fmt)
            break
        except ValueError:
            continue
    if stamp is None:
        try:
            stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    delta = stamp - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _epoch_ns(value: float) -> int | None:
    if not math.isfinite(value) or value < 0 or value > 9e18:  # beyond 64-bit nanoseconds
        return None
    if value < 1e11:  # seconds
        return round(value * 1e9)
    if value < 1e14:  # milliseconds
        return round(value * 1e6)
    return round(value)


_VALUE = re.compile(r"^([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)$")
_BYTES_PER_UNIT = {"b": 1, "kib": 2**10, "mib": MIB, "gib": 2**30, "kb": 1e3, "mb": 1e6, "gb": 1e9}


def parse_value(text: str, header_unit: str = "") -> tuple[float, str]:
    """``"45 %"`` -> (45.0, "%"); ``"1024"`` with header unit ``MiB`` -> (1024.0, "MiB");
    ``[N/A]``, ``N/A``, ``[Not Supported]``, empty -> (NaN, "")."""
    match = _VALUE.match(text.strip())
    if match is None:
        return math.nan, ""
    return float(match.group(1)), match.group(2) or header_unit


def _to_bytes(value: float, unit: str) -> float:
    scale = _BYTES_PER_UNIT.get(unit.lower())
    return math.nan if scale is None else value * scale


# --- nvidia-smi --query-gpu ---------------------------------------------------------------------

_SMI_FIELDS = ("utilization.gpu", "memory.used", "memory.total", "power.draw", "timestamp")
#: A column name and its unit: ``utilization.gpu [%]``, ``Memory Used (MiB)``, ``Time``.
_SMI_COLUMN = re.compile(r"^\s*([^\[\]()]*?)\s*(?:[\[(]([^\])]*)[\])])?\s*$")
#: Names other loggers give the columns (NVML scripts, exporters, spreadsheets), compared
#: without case, with spaces, dashes and underscores alike: -> nvidia-smi's own field name.
_SMI_SYNONYMS = {
    "time": "timestamp",
    "ts": "timestamp",
    "date_time": "timestamp",
    "datetime": "timestamp",
    "gpu": "index",
    "gpu_id": "index",
    "gpu_index": "index",
    "device": "index",
    "device_id": "index",
    "utilization": "utilization.gpu",
    "util": "utilization.gpu",
    "gpu_util": "utilization.gpu",
    "gpu_utilization": "utilization.gpu",
    "utilization_gpu": "utilization.gpu",
    "gpu_usage": "utilization.gpu",
    "memory_used": "memory.used",
    "mem_used": "memory.used",
    "used_memory": "memory.used",
    "memory_total": "memory.total",
    "mem_total": "memory.total",
    "total_memory": "memory.total",
    "power": "power.draw",
    "power_draw": "power.draw",
    "gpu_name": "name",
    "gpu_uuid": "uuid",
}
#: Separators a CSV may use: Excel in many locales writes ``;``, some loggers tabs.
_DELIMITERS = (",", ";", "\t")
_GPU_NUMBER = re.compile(r"^(?:gpu[\s_:#-]*)?(\d+)$", re.IGNORECASE)
#: A memory value this large with no unit written anywhere is in bytes (NVML's own unit): in MiB
#: it would be over 9 TiB.
_BYTES_NOT_MIB = 1e7


def looks_like_nvidia_smi(head: bytes) -> bool:
    """A CSV whose first line names ``nvidia-smi --query-gpu`` fields (or their synonyms)."""
    first = _first_line(head)
    if first is None or first.startswith(("{", "[", "#")):
        return False
    delimiter = _delimiter(first)
    if delimiter is None:
        return False
    names = {_smi_name(c)[0] for c in _csv_row(first, delimiter)}
    return any(f in names for f in _SMI_FIELDS[:4])


def _first_line(head: bytes) -> str | None:
    text = _head_text(head) or ""
    return next((line.strip() for line in text.splitlines() if line.strip()), None)


def _delimiter(header: str) -> str | None:
    """The separator the header line uses most (None: a single column, not a table)."""
    counts = {d: header.count(d) for d in _DELIMITERS}
    best = max(_DELIMITERS, key=lambda d: counts[d])
    return best if counts[best] else None


def _csv_row(line: str, delimiter: str) -> list[str]:
    return next(csv.reader([line], delimiter=delimiter, skipinitialspace=True), [])


def _smi_name(column: str) -> tuple[str, str]:
    """nvidia-smi's field name for a column (synonyms mapped) and the unit its header gives."""
    match = _SMI_COLUMN.match(column)
    name, unit = (match.group(1), match.group(2) or "") if match else (column.strip(), "")
    key = re.sub(r"[\s_-]+", "_", name.strip().lower())
    return _SMI_SYNONYMS.get(key, key), unit.strip()


def read_nvidia_smi(path: Path) -> SampleSet:
    rows = _smi_rows(path)
    header = [_smi_name(c) for c in rows[0]]
    names = [name for name, _ in header]
    if not set(_smi_fields(names).values()) & {UTIL, MEM_USED}:
        raise CorruptInputError(
            path, f"nvidia-smi CSV without utilization.gpu or memory.used (columns: {rows[0]})"
        )
    gpus: dict[int, _Gpu] = {}
    ids: dict[str, int] = {}
    warnings: list[str] = []
    timed = "timestamp" in names
    for number, row in enumerate(rows[1:], start=2):
        if row == rows[0]:
            continue  # a header repeated by a restarted logger
        if len(row) != len(header):
            raise CorruptInputError(
                path, f"CSV row {number} has {len(row)} fields, the header {len(header)} (cut off?)"
            )
        cells: dict[str, str] = {}
        for name, cell in zip(names, row, strict=True):
            cells.setdefault(name, cell.strip())  # two synonyms of one field: the first counts
        gpu = gpus.setdefault(_smi_gpu(cells, ids), _Gpu())
        gpu.name = cells.get("name") or gpu.name
        gpu.uuid = cells.get("uuid") or gpu.uuid
        time_ns = parse_time_ns(cells["timestamp"]) if timed else None
        if time_ns is None:
            time_ns = len(gpu.times_ns) * SMI_DEFAULT_PERIOD_NS
        gpu.add(time_ns, _smi_values(header, row))
    if not timed:
        warnings.append(f"{path}: no timestamp column: samples assumed 1 s apart (nvidia-smi -l 1)")
    return _sample_set(path, "nvidia-smi-csv", gpus, warnings)


def _smi_rows(path: Path) -> list[list[str]]:
    lines = _lines(path)
    header = next((line for line in lines if line.strip()), "")
    delimiter = _delimiter(header) or ","
    try:
        rows = [
            r
            for r in csv.reader(lines, delimiter=delimiter, skipinitialspace=True, strict=True)
            if r
        ]
    except csv.Error as error:
        raise CorruptInputError(path, f"malformed CSV ({error})") from None
    if not rows:
        raise EmptyTraceError(path, "the file is empty")
    return rows


def _smi_fields(names: list[str]) -> dict[str, str]:
    mapping = {
        "utilization.gpu": UTIL,
        "memory.used": MEM_USED,
        "memory.total": MEM_TOTAL,
        "power.draw": POWER,
        "power.draw.average": POWER,
        "power.draw.instant": POWER,
    }
    return {n: mapping[n] for n in names if n in mapping}


def _smi_gpu(cells: dict[str, str], ids: dict[str, int]) -> int:
    """The GPU's index column (``0``, ``GPU 0``), else a number per index text, UUID or PCI bus
    id in order of appearance."""
    index = cells.get("index", "")
    number = _GPU_NUMBER.match(index)
    if number:
        return int(number.group(1))
    key = index or cells.get("uuid") or cells.get("pci.bus_id") or ""
    return ids.setdefault(key, len(ids))


def _smi_values(header: list[tuple[str, str]], row: list[str]) -> dict[str, float]:
    fields = _smi_fields([name for name, _ in header])
    values: dict[str, float] = {}
    for (name, unit), text in zip(header, row, strict=True):
        target = fields.get(name)
        if target is None:
            continue
        value, value_unit = parse_value(text, unit)
        if target in (MEM_USED, MEM_TOTAL):
            guess = "B" if value >= _BYTES_NOT_MIB else "MiB"  # nvidia-smi's unit, or NVML's
            value = _to_bytes(value, value_unit or guess)
        values[target] = value
    return values


# --- NVML JSON lines (SuperBench monitor) -------------------------------------------------------

_JSON_KEY = re.compile(r"^(gpu_[a-z_]+):([0-9]{1,6})$")
_JSON_FIELDS = {
    "gpu_usage": UTIL,
    "gpu_util": UTIL,
    "gpu_utilization": UTIL,
    "gpu_sm_active": SM_ACTIVE,
    "gpu_mem_used": MEM_USED,
    "gpu_mem_total": MEM_TOTAL,
    "gpu_power": POWER,
}
_TIME_KEYS = ("time", "timestamp", "ts")


def looks_like_nvml_jsonl(head: bytes) -> bool:
    """JSON lines whose first object has per-GPU keys ``gpu_<metric>:<index>``."""
    first = _first_line(head) if _is_text(head) else None
    if first is None or not first.startswith("{"):
        return False
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and any(_JSON_KEY.match(str(k)) for k in obj)


def read_nvml_jsonl(path: Path) -> SampleSet:
    gpus: dict[int, _Gpu] = {}
    untimed = 0
    for number, obj in _json_objects(path):
        time_ns = next((parse_time_ns(obj[k]) for k in _TIME_KEYS if k in obj), None)
        if time_ns is None:
            untimed += 1
            time_ns = number * SMI_DEFAULT_PERIOD_NS
        for index, values in _json_values(obj).items():
            gpus.setdefault(index, _Gpu()).add(time_ns, values)
    warnings = [f"{path}: {untimed} samples without a time"] if untimed else []
    return _sample_set(path, "nvml-jsonl", gpus, warnings)


def _json_objects(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(_lines(path), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            raise CorruptInputError(path, f"line {number} is not JSON (cut off?)") from None
        except RecursionError:
            raise CorruptInputError(path, f"line {number} is JSON nested too deep") from None
        if not isinstance(obj, dict):
            raise CorruptInputError(path, f"line {number} is not a JSON object")
        yield number, obj


def _json_values(obj: dict[str, Any]) -> dict[int, dict[str, float]]:
    per_gpu: dict[int, dict[str, float]] = {}
    for key, value in obj.items():
        match = _JSON_KEY.match(key)
        target = _JSON_FIELDS.get(match.group(1)) if match else None
        if match is None or target is None:
            continue
        number = float(value) if isinstance(value, (int, float)) else math.nan
        per_gpu.setdefault(int(match.group(2)), {})[target] = number
    return per_gpu


# --- dcgmi dmon ---------------------------------------------------------------------------------

#: dmon column -> (field, scale to gpuscope's unit). SMACT and DRAMA are ratios; FB* are MiB.
_DMON_COLUMNS: dict[str, tuple[str, float]] = {
    "GPUTL": (UTIL, 1.0),
    "SMACT": (SM_ACTIVE, 100.0),
    "DRAMA": (DRAM_ACTIVE, 100.0),
    "FBUSD": (MEM_USED, float(MIB)),
    "FBTTL": (MEM_TOTAL, float(MIB)),
    "POWER": (POWER, 1.0),
}
_DMON_HEADER = re.compile(r"^#\s*Entity\b", re.IGNORECASE)


def looks_like_dcgmi_dmon(head: bytes) -> bool:
    """``dcgmi dmon`` text: a ``#Entity`` header line near the top."""
    text = _head_text(head)
    if text is None:
        return False
    return any(_DMON_HEADER.match(line.strip()) for line in text.splitlines()[:20])


def read_dcgmi_dmon(path: Path) -> SampleSet:
    lines = _lines(path)
    columns = _dmon_columns(path, lines)
    gpus: dict[int, _Gpu] = {}
    skipped: set[str] = set()
    for number, line in enumerate(lines, start=1):
        tokens = line.split()
        if not tokens or tokens[0].startswith("#") or tokens[0].lower() == "id":
            continue
        if len(tokens) != len(columns) + 2 or not tokens[1].isdigit():
            raise CorruptInputError(
                path, f"line {number}: expected an entity, its id and {len(columns)} values"
            )
        if tokens[0] != "GPU":
            skipped.add(tokens[0])
            continue
        gpu = gpus.setdefault(int(tokens[1]), _Gpu())
        gpu.add(len(gpu.times_ns) * DCGMI_DEFAULT_PERIOD_NS, _dmon_values(columns, tokens[2:]))
    warnings = [f"{path}: dcgmi dmon prints no times: samples assumed 1 s apart (its default -d)"]
    if skipped:
        warnings.append(f"{path}: skipped entities other than whole GPUs: {sorted(skipped)}")
    return _sample_set(path, "dcgmi-dmon", gpus, warnings)


def _dmon_columns(path: Path, lines: list[str]) -> list[str]:
    header = next((line for line in lines if _DMON_HEADER.match(line.strip())), None)
    if header is None:
        raise CorruptInputError(path, "dcgmi dmon output without its #Entity header")
    names = header.strip().lstrip("#").split()[1:]
    columns = [n for n in names if n.upper() != "ID"]
    if not any(c in _DMON_COLUMNS for c in columns):
        raise CorruptInputError(
            path, f"dcgmi dmon columns {columns}: none of {sorted(_DMON_COLUMNS)}"
        )
    return columns


def _dmon_values(columns: list[str], tokens: list[str]) -> dict[str, float]:
    values: dict[str, float] = {}
    for name, text in zip(columns, tokens, strict=True):
        if name in _DMON_COLUMNS:
            target, scale = _DMON_COLUMNS[name]
            values[target] = parse_value(text)[0] * scale
    return values


# --- dcgm-exporter (Prometheus text) ------------------------------------------------------------

_PROM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": (UTIL, 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": (SM_ACTIVE, 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": (DRAM_ACTIVE, 100.0),
    "DCGM_FI_DEV_FB_USED": (MEM_USED, float(MIB)),
    "DCGM_FI_DEV_FB_TOTAL": (MEM_TOTAL, float(MIB)),
    "DCGM_FI_DEV_POWER_USAGE": (POWER, 1.0),
    "DCGM_FI_DEV_FB_FREE": ("free", float(MIB)),
    "DCGM_FI_DEV_FB_RESERVED": ("reserved", float(MIB)),
}
_PROM_LINE = re.compile(
    r"^(DCGM_FI_\w+)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?[0-9]+))?\s*$",
)
_PROM_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_COUNTER_LIST_LINE = re.compile(r"^#?\s*DCGM_FI_\w+\s*,\s*(gauge|counter|label)\s*,", re.I)


def looks_like_prometheus(head: bytes) -> bool:
    """Prometheus text exposition with DCGM metrics (``DCGM_FI_...{gpu="0",...} 45``)."""
    text = _head_text(head)
    if text is None:
        return False
    return any(
        _PROM_LINE.match(line) or line.startswith(("# TYPE DCGM_FI_", "# HELP DCGM_FI_"))
        for line in text.splitlines()[:200]
    )


def looks_like_counter_list(head: bytes) -> bool:
    """dcgm-exporter's counter list: ``DCGM_FI_..., gauge, help text`` lines."""
    text = _head_text(head)
    if text is None:
        return False
    return any(_COUNTER_LIST_LINE.match(line.strip()) for line in text.splitlines()[:200])


def reject_counter_list(path: Path) -> NoReturn:
    raise UnknownFormatError(
        path,
        "a dcgm-exporter counter list (which DCGM fields to export), not a recording:"
        " give gpuscope a scrape of the exporter's /metrics endpoint instead",
    )


# Mutable: builder state, filled metric line by metric line within one scrape.
class _Scrape(msgspec.Struct):
    time_ns: int | None
    values: dict[int, dict[str, float]] = msgspec.field(default_factory=dict)


def read_prometheus(path: Path) -> SampleSet:
    gpus: dict[int, _Gpu] = {}
    scrapes = _scrapes(path, gpus)
    timed = all(s.time_ns is not None for s in scrapes)
    for number, scrape in enumerate(scrapes):
        time_ns = scrape.time_ns if timed and scrape.time_ns is not None else None
        if time_ns is None:
            time_ns = number * EXPORTER_DEFAULT_PERIOD_NS
        for index, values in scrape.values.items():
            gpus[index].add(time_ns, _with_total(values))
    warnings = []
    if not timed and len(scrapes) > 1:
        warnings.append(
            f"{path}: scrapes carry no timestamps: assumed 30 s apart (dcgm-exporter's default)"
        )
    return _sample_set(path, "prometheus", gpus, warnings)


def _scrapes(path: Path, gpus: dict[int, _Gpu]) -> list[_Scrape]:
    """Group metric lines into scrapes: by timestamp when given, else a new scrape starts when a
    (metric, GPU) pair comes again."""
    scrapes: list[_Scrape] = []
    seen: set[tuple[str, int]] = set()
    for number, line in enumerate(_lines(path), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _PROM_LINE.match(line)
        if match is None:
            if line.startswith("DCGM_FI_"):
                raise CorruptInputError(path, f"line {number} is not a Prometheus sample")
            continue
        metric, labels_text, value_text, stamp = match.groups()
        labels = dict(_PROM_LABEL.findall(labels_text or ""))
        if metric not in _PROM_FIELDS or _GPU_INDEX.match(labels.get("gpu", "")) is None:
            continue
        index = int(labels["gpu"])
        time_ns = _prometheus_time_ns(stamp) if stamp is not None else None
        if stamp is not None and time_ns is None:
            raise CorruptInputError(
                path, f"line {number}: the timestamp {stamp[:24]} is not milliseconds since 1970"
            )
        if not scrapes or (metric, index) in seen or time_ns != scrapes[-1].time_ns:
            scrapes.append(_Scrape(time_ns))
            seen = set()
        seen.add((metric, index))
        gpu = gpus.setdefault(index, _Gpu())
        gpu.name = labels.get("modelName") or gpu.name
        gpu.uuid = labels.get("UUID") or gpu.uuid
        target, scale = _PROM_FIELDS[metric]
        scrapes[-1].values.setdefault(index, {})[target] = parse_value(value_text)[0] * scale
    return scrapes


#: A GPU index as a label holds it: ASCII digits, a plausible count (``"²".isdigit()`` is true).
_GPU_INDEX = re.compile(r"^[0-9]{1,6}$")


def _prometheus_time_ns(stamp: str) -> int | None:
    """A sample's timestamp (milliseconds since 1970) in ns; None beyond 64-bit nanoseconds or
    before 1970 (a corrupt line: Python would compute it, numpy could not hold it)."""
    if len(stamp) > 19:
        return None
    milliseconds = int(stamp)
    return milliseconds * 1_000_000 if 0 <= milliseconds <= 9_000_000_000_000 else None


def _with_total(values: dict[str, float]) -> dict[str, float]:
    """FB total = used + free (+ reserved) when the scrape has no FB_TOTAL."""
    out = {k: v for k, v in values.items() if k not in ("free", "reserved")}
    if MEM_TOTAL not in out and MEM_USED in out and "free" in values:
        out[MEM_TOTAL] = out[MEM_USED] + values["free"] + values.get("reserved", 0.0)
    return out
