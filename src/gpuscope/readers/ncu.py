"""Reader for Nsight Compute CSV (``ncu --csv``): measured counters per kernel, no timeline.

Handles the two layouts ``ncu --csv`` writes:

* *long* (the details page, the default): one row per kernel launch and metric, with the columns
  ``ID, Kernel Name, Block Size, Grid Size, Device, ..., Section Name, Metric Name, Metric Unit,
  Metric Value`` and, from Nsight Compute 2023 on, the rule columns ``Rule Name, Rule Type, Rule
  Description, Estimated Speedup Type, Estimated Speedup`` (rows without a rule stop early);
* *raw* (``--page raw``): one row per kernel launch and one column per metric
  (``gpu__time_duration.sum``, ``sm__throughput.avg.pct_of_peak_sustained_elapsed``, ...), the
  row after the header giving the units.

Contract: :func:`looks_like_ncu` sniffs the first bytes; :func:`read` returns one
:class:`~gpuscope.model.KernelCounters` or raises :class:`~gpuscope.errors.InputError` naming the
file: no CSV header (:class:`UnknownFormatError`), a row cut short or with more fields than the
header (:class:`CorruptInputError`, a truncated file), no kernel (:class:`EmptyTraceError`).
``==PROF==`` lines and whatever the profiled program printed before the header are skipped.
Numbers may be locale-formatted ("1,234.5", "1.234,5", "1 234,5"): the file's decimal mark is
decided once from the values that are unambiguous, then applied to all. Durations are converted
to integer nanoseconds; a metric the report lacks is ``None``, never 0.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable
from pathlib import Path

import msgspec

from gpuscope.errors import CorruptInputError, EmptyTraceError, UnknownFormatError
from gpuscope.model import CounterKernel, CounterRule, KernelCounters
from gpuscope.readers._io import read_bytes

_TOOL_LINE = re.compile(r"^==(PROF|WARNING|ERROR|WARN)==")
#: Columns that identify a launch rather than measure it (both layouts).
_IDENTITY = (
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Kernel Time",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
)
_LONG_REQUIRED = ("ID", "Kernel Name", "Metric Name", "Metric Value")
_RULE_COLUMNS = ("Rule Name", "Rule Type", "Rule Description")

# Metric names per field: the details page's names across Nsight Compute versions, then the
# raw page's metric. The first one present wins.
_DURATION = ("Duration", "gpu__time_duration.sum", "gpu__time_duration")
_SM = (
    "Compute (SM) Throughput",
    "Compute (SM) [%]",
    "SM [%]",
    "SOL SM",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)
_MEMORY = (
    "Memory Throughput",
    "Memory [%]",
    "SOL Memory",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
)
_DRAM = (
    "DRAM Throughput",
    "SOL DRAM",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
)
_ACHIEVED = ("Achieved Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active")
_THEORETICAL = ("Theoretical Occupancy", "sm__maximum_warps_per_active_cycle_pct")
_WAVES = ("Waves Per SM", "launch__waves_per_multiprocessor")
_GRID = ("Grid Size", "launch__grid_size")
_BLOCK = ("Block Size", "launch__block_size")
_SMS = ("# SMs", "device__attribute_multiprocessor_count", "launch__sm_count")
_DEVICE_NAME = ("device__attribute_display_name", "Device Name")
#: Metrics that are percentages: a details-page row of another unit with the same name (the
#: Memory Workload Analysis "Memory Throughput" in byte/s) must not be read as one.
_PCT_FIELDS = frozenset(_SM + _MEMORY + _DRAM + _ACHIEVED + _THEORETICAL)
_NS_PER_UNIT = {
    "ns": 1.0,
    "nsecond": 1.0,
    "nanosecond": 1.0,
    "us": 1e3,
    "usecond": 1e3,
    "µs": 1e3,
    "microsecond": 1e3,
    "ms": 1e6,
    "msecond": 1e6,
    "millisecond": 1e6,
    "s": 1e9,
    "second": 1e9,
}


def looks_like_ncu(head: bytes) -> bool:
    """An ``ncu --csv`` log: a quoted header naming ``ID`` and ``Kernel Name``, or ncu's own
    ``==PROF==`` lines at the top."""
    head = head.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
    if head.lstrip()[:1] in (b"{", b"[") or head.startswith(b"SQLite format 3"):
        return False
    if head.lstrip().startswith((b"==PROF==", b"==WARNING==", b"==ERROR==")):
        return True
    return any(line.startswith(b'"ID",') and b'"Kernel Name"' in line for line in head.splitlines())


def read(path: Path) -> KernelCounters:
    """Decode one ``ncu --csv`` log into :class:`KernelCounters`."""
    text = read_bytes(path).data.decode("utf-8", errors="replace").lstrip("\ufeff")
    lines = [line for line in text.splitlines() if not _TOOL_LINE.match(line)]
    start = _header_line(lines)
    if start is None:
        if text.lstrip().startswith("==") and "No kernels were profiled" in text:
            raise EmptyTraceError(path, "Nsight Compute profiled no kernels")
        raise UnknownFormatError(path, "an ncu log without a CSV header (run ncu with --csv)")
    rows = _rows(path, lines[start:], first_line=start)
    header, body = rows[0], rows[1:]
    if "Metric Name" in header:
        return _read_long(path, header, body)
    return _read_raw(path, header, body)


def _header_line(lines: list[str]) -> int | None:
    for i, line in enumerate(lines):
        if line.startswith('"ID",') and '"Kernel Name"' in line:
            return i
    return None


def _rows(path: Path, lines: list[str], first_line: int) -> list[list[str]]:
    try:
        rows = [row for row in csv.reader(lines, strict=True) if row]
    except csv.Error as error:
        raise CorruptInputError(path, f"malformed CSV ({error}): the file is cut off?") from None
    width = len(rows[0])
    for number, row in enumerate(rows[1:], start=2):
        if len(row) > width:
            raise CorruptInputError(
                path, f"CSV row {number} has {len(row)} fields, the header {width}"
            )
    return rows


# --- numbers ------------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_GROUPED_DOT = re.compile(r"^[-+]?\d{1,3}(,\d{3})+(\.\d+)?$")  # 1,234,567.8
_GROUPED_COMMA = re.compile(r"^[-+]?\d{1,3}(\.\d{3})+(,\d+)?$")  # 1.234.567,8
_COMMA_DECIMAL = re.compile(r"^[-+]?\d+,\d+$")  # 23,59 or 1,234 (ambiguous when 3 digits)
_SPACES = re.compile(r"[\s\u00a0\u202f\u2009']")


def decimal_mark(values: Iterable[str]) -> str:
    """The decimal mark of a file's numbers: "," when more values can only be read that way
    (``23,59``, ``1.234,5``) than only the other way, else "." (ncu's default, ``en_US``)."""
    comma = dot = 0
    for raw in values:
        text = _SPACES.sub("", raw)
        comma += _only_comma_decimal(text)
        dot += _only_dot_decimal(text)
    return "," if comma > dot else "."


def _only_comma_decimal(text: str) -> bool:
    if _GROUPED_COMMA.match(text):
        return "," in text or text.count(".") > 1
    return bool(_COMMA_DECIMAL.match(text)) and len(text.rsplit(",", 1)[1]) != 3


def _only_dot_decimal(text: str) -> bool:
    if _GROUPED_DOT.match(text):
        return "." in text or text.count(",") > 1
    return bool(_PLAIN.match(text)) and "." in text and len(text.rsplit(".", 1)[1]) != 3


def parse_number(raw: str, mark: str = ".") -> float | None:
    """A locale-formatted number, or None when ``raw`` is not one ("n/a", "", "PolicySpread")."""
    text = _SPACES.sub("", raw.strip())
    if not text:
        return None
    if mark == ",":
        if _GROUPED_COMMA.match(text) or _COMMA_DECIMAL.match(text):
            text = text.replace(".", "").replace(",", ".")
    elif _GROUPED_DOT.match(text):
        text = text.replace(",", "")
    if not _PLAIN.match(text):
        return None
    value = float(text)
    return value if math.isfinite(value) else None


# --- long layout --------------------------------------------------------------------------------


# Mutable: builder state, filled row by row as the CSV is read.
class _Launch(msgspec.Struct):
    """Everything read for one kernel launch before it becomes a :class:`CounterKernel`."""

    identity: dict[str, str]
    values: dict[str, tuple[str, str]] = msgspec.field(default_factory=dict)  # metric: (unit, raw)
    rules: list[CounterRule] = msgspec.field(default_factory=list)


def _read_long(path: Path, header: list[str], body: list[list[str]]) -> KernelCounters:
    missing = [c for c in _LONG_REQUIRED if c not in header]
    if missing:
        raise CorruptInputError(path, f"not an ncu CSV: no column {', '.join(missing)}")
    col = {name: i for i, name in enumerate(header)}
    core = max(col[c] for c in _LONG_REQUIRED) + 1
    launches: dict[str, _Launch] = {}
    for number, row in enumerate(body, start=2):
        if len(row) < core:
            raise CorruptInputError(
                path, f"CSV row {number} has {len(row)} fields, at least {core} expected (cut off?)"
            )
        cell = dict(zip(header, row, strict=False))  # rows without a rule stop early
        launch = launches.get(cell["ID"])
        if launch is None:
            identity = {k: cell.get(k, "") for k in _IDENTITY}
            launch = launches[cell["ID"]] = _Launch(identity)
        _add_long_row(launch, cell)
    has_rules = all(c in header for c in _RULE_COLUMNS)
    schema = "ncu-long-rules" if has_rules else "ncu-long"
    return _counters(path, "ncu-csv", schema, list(launches.values()))


def _add_long_row(launch: _Launch, cell: dict[str, str]) -> None:
    name = cell["Metric Name"]
    if name:
        unit = cell.get("Metric Unit", "")
        key = name
        if key in launch.values and launch.values[key][0] != unit:
            key = f"{cell.get('Section Name', '')}: {name}"
        launch.values.setdefault(key, (unit, cell["Metric Value"]))
    rule = cell.get("Rule Name", "")
    if rule:
        launch.rules.append(
            CounterRule(
                name=rule,
                type=cell.get("Rule Type", ""),
                text=cell.get("Rule Description", ""),
                speedup_type=cell.get("Estimated Speedup Type") or None,
                speedup_pct=_speedup_pct(cell.get("Estimated Speedup", "")),
            )
        )


def _speedup_pct(raw: str) -> float | None:
    # A percentage of at most 100: "81,25" can only be a decimal comma.
    value = parse_number(raw)
    value = value if value is not None else parse_number(raw, ",")
    return value if value is not None and 0.0 <= value <= 100.0 else None  # else garbled


# --- raw layout ---------------------------------------------------------------------------------


def _read_raw(path: Path, header: list[str], body: list[list[str]]) -> KernelCounters:
    metrics = [h for h in header if h not in _IDENTITY]
    if not any(m in header for m in _DURATION + _SM + _MEMORY):
        raise CorruptInputError(
            path, "an ncu CSV with no metric gpuscope knows (neither details nor raw page)"
        )
    units: dict[str, str] = {}
    if body and not body[0][0].strip():  # the units row: no ID
        units = dict(zip(header, body[0], strict=False))
        body = body[1:]
    launches: list[_Launch] = []
    for number, row in enumerate(body, start=3 if units else 2):
        if len(row) != len(header):
            raise CorruptInputError(
                path, f"CSV row {number} has {len(row)} fields, the header {len(header)} (cut off?)"
            )
        cell = dict(zip(header, row, strict=True))
        launch = _Launch({k: cell.get(k, "") for k in _IDENTITY})
        launch.values = {m: (units.get(m, ""), cell[m]) for m in metrics}
        launches.append(launch)
    return _counters(path, "ncu-csv-raw", "ncu-raw", launches)


# --- both ---------------------------------------------------------------------------------------


def _counters(path: Path, fmt: str, schema: str, launches: list[_Launch]) -> KernelCounters:
    if not launches:
        raise EmptyTraceError(path, "the ncu CSV has a header but no kernel")
    mark = decimal_mark(raw for launch in launches for _, raw in launch.values.values())
    kernels = [_kernel(i, launch, mark) for i, launch in enumerate(launches)]
    names = {
        launch.values[n][1].strip()
        for launch in launches
        for n in _DEVICE_NAME
        if n in launch.values and launch.values[n][1].strip()
    }
    warnings = []
    if not any(k.sm_throughput_pct is not None for k in kernels):
        warnings.append(
            f"{path}: no Speed Of Light throughput in the ncu report: kernels cannot be"
            " classified (profile with --section SpeedOfLight or --set basic)"
        )
    return KernelCounters(
        source=str(path),
        format=fmt,
        device_name=sorted(names)[0] if names else None,
        kernels=kernels,
        warnings=warnings,
        schema=schema,
    )


def _kernel(index: int, launch: _Launch, mark: str) -> CounterKernel:
    numbers: dict[str, float] = {}
    for name, (_, raw) in launch.values.items():
        value = parse_number(raw, mark)
        if value is not None:
            numbers[name] = value

    def first(names: tuple[str, ...]) -> float | None:
        for name in names:
            if name in numbers and (name not in _PCT_FIELDS or _is_pct(launch, name)):
                value = numbers[name]
                # A percentage of peak or an occupancy beyond 0-100, or a negative count, is
                # a garbled row: unknown, not a figure that would price a finding at 1e20 %.
                limit = 100.0 if name in _PCT_FIELDS else math.inf
                return value if 0.0 <= value <= limit else None
        return None

    ident = launch.identity
    grid = first(_GRID)
    block = first(_BLOCK)
    sms = first(_SMS)
    return CounterKernel(
        id=_int(ident["ID"], index),
        name=ident["Kernel Name"],
        device=_optional_int(ident["Device"]),
        duration_ns=_duration_ns(launch, numbers),
        sm_throughput_pct=first(_SM),
        memory_throughput_pct=first(_MEMORY),
        dram_throughput_pct=first(_DRAM),
        achieved_occupancy_pct=first(_ACHIEVED),
        theoretical_occupancy_pct=first(_THEORETICAL),
        waves_per_sm=first(_WAVES),
        grid_blocks=_launch_size(grid, ident["Grid Size"]),
        block_threads=_launch_size(block, ident["Block Size"]),
        metrics=numbers,
        rules=launch.rules,
        num_sms=int(sms) if sms is not None else None,
    )


def _is_pct(launch: _Launch, name: str) -> bool:
    unit = launch.values[name][0].strip()
    return unit in ("%", "")


def _duration_ns(launch: _Launch, numbers: dict[str, float]) -> int | None:
    for name in _DURATION:
        if name in numbers:
            unit = launch.values[name][0].strip().lower() or "ns"
            scale = _NS_PER_UNIT.get(unit)
            if scale is not None:
                duration_ns = numbers[name] * scale
                # One kernel replayed under ncu runs for microseconds to seconds; a negative
                # duration or one over a day is a garbled value.
                return round(duration_ns) if 0 <= duration_ns <= _MAX_KERNEL_NS else None
    return None


_MAX_KERNEL_NS = 86_400 * 1_000_000_000


def _int(text: str, default: int) -> int:
    value = _optional_int(text)
    return default if value is None else value


def _optional_int(text: str) -> int | None:
    text = text.strip()
    return int(text) if _INTEGER.fullmatch(text) else None


_INTEGER = re.compile(r"-?[0-9]+")


#: CUDA's largest grid: 2^31 - 1 blocks in x, 65,535 in y and z. More is a garbled value.
_MAX_LAUNCH = (2**31 - 1) * 65_535 * 65_535


def _launch_size(metric: float | None, dims: str) -> int | None:
    """Blocks in the grid (threads in a block) from the metric, else the dimensions; None
    where neither is a size CUDA can launch."""
    size = int(metric) if metric is not None else _dims_product(dims)
    return size if size is not None and 0 <= size <= _MAX_LAUNCH else None


def _dims_product(text: str) -> int | None:
    """``(9, 32, 1)`` -> 288; None when the field is missing or not a tuple of integers."""
    parts = [p.strip() for p in text.strip().strip("()[]").split(",")]
    if not parts or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return math.prod(int(p) for p in parts)
