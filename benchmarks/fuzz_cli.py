"""Fuzz the command line with hostile, broken and odd inputs: every run must end in a result or
in one line and exit 2, and the C scanner and the msgspec reader must agree on every Kineto input.

Usage::

    python benchmarks/fuzz_cli.py --runs 5000 --seed 1       # a campaign (minutes)
    python benchmarks/fuzz_cli.py --runs 300 --only kineto   # one family
    python benchmarks/fuzz_cli.py --replay 1:1234            # one case again, with its files kept

Each case is built from ``(seed, index)`` alone (``random.Random(f"{seed}:{index}")``), so a
failure is reproduced by its two numbers. A case is a mutated input (one of the categories in
``CATEGORIES``: Kineto values of the wrong type or out of range, escaped and duplicated keys,
nested ``traceEvents``, truncation, byte flips, gzip damage, control characters and rich markup in
names; Nsight Systems exports with kernels ending before they start or in the far future, NULLs,
dropped tables and cut files; nvidia-smi / NVML / dcgmi / Prometheus / ncu text with corrupt
numbers; file-system oddities; hostile option values) and one command run on it in process.
The family ``hostile`` (issue #30, built in ``fuzz_hostile.py``) adds tampered saved diagnoses,
outputs onto special files (a FIFO with and without a reader, a private null device, a socket,
a folder, links, the input itself), MCP sessions, extreme timestamps, meaning-preserving
rewrites, escapes and markup in every command's names, concurrent fleet and history writers and
``kill -9`` mid-write, and environment variables naming odd files.

What counts as a failure (a "finding"):

- ``traceback``: any exception escaping the command (click turns usage errors into exit 2).
- ``hang``: a run over ``--timeout`` seconds (default 60; ``SIGALRM`` interrupts it).
- ``exit``: an exit status other than 0, 2, or ``check``'s 1 and 3.
- ``error-line``: exit 2 with stderr that is not one line starting ``gpuscope: error:`` or
  ``Error:`` (click's usage errors) or ``Usage:`` lines.
- ``implausible``: exit 0 whose JSON holds NaN or infinity, a negative ``_ns``, ``_s`` or ``_usd``
  figure, a ``_pct`` outside [0, 100] (shares) or a span over ten years.
- ``terminal``: terminal output holding a control character (escape, bell, carriage return...):
  the output is captured, so rich writes no codes of its own and any there came from the input.
- ``disagree``: for a Kineto input, the C scanner's trace (or error) differs from the msgspec
  reader's.
- ``misread``: a meaning-preserving rewrite (or an outlier to be set aside) changes the verdict's
  bound or its idle share by over half a point; concurrent writers lose a job or a run.
- ``overwritten``: an input file's bytes changed; ``replaced-special``: a special file (FIFO,
  device, socket, folder, link) is no longer the same kind and inode; ``leftover``: a hidden
  ``.tmp`` temporary is left beside an output.

The campaign ends with a command x outcome table (``answered``: exit 0, or ``check``'s 1 and 3;
``refused``: one line and exit 2; else the run's first finding).

The test suite runs a few hundred cases (``tests/test_fuzz.py``); CI thus keeps them at zero.
"""

# ruff: noqa: E501 - mutation tables and SQL read better on one line each

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("GPUSCOPE_CORPUS", ROOT.parent / "shared" / "corpus"))

#: Ten years in nanoseconds: no profile spans that long; a figure beyond it is a garbage value kept.
MAX_SPAN_NS = 10 * 365 * 86400 * 10**9

# --- seeds -------------------------------------------------------------------------------------


def kineto_seed() -> bytes:
    """A small generated training trace (two steps, one layer): every event kind, real layout."""
    from gpuscope.testing.generator import GeneratorConfig, HostSync, generate

    config = GeneratorConfig(seed=3, steps=2, layers=1, inject=(HostSync(),))
    return generate(config).to_bytes()


def smi_seed() -> bytes:
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"]
    for i in range(12):
        stamp = f"2024/01/15 10:00:{i:02d}.000"
        lines.append(f"{stamp}, 0, NVIDIA H100 80GB HBM3, {40 + i} %, 2048 MiB, 81559 MiB")
        lines.append(f"{stamp}, 1, NVIDIA H100 80GB HBM3, {90 - i} %, 7000 MiB, 81559 MiB")
    return ("\n".join(lines) + "\n").encode()


def nvml_seed() -> bytes:
    rows = []
    for i in range(10):
        rows.append(
            {
                "time": f"2024-01-15 10:00:{i:02d}",
                "gpu_usage": [50 + i, 30],
                "gpu_mem_used": [1000.0, 2000.0],
                "gpu_mem_total": [81559.0, 81559.0],
                "gpu_power": [300.0, 200.0],
            }
        )
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def dmon_seed() -> bytes:
    head = "#Entity   GPUTL  SMACT  DRAMA  FBUSD\nID        %      ratio  ratio  MiB\n"
    rows = []
    for i in range(10):
        rows.append(f"GPU 0     {90 - i:<6} 0.300  0.100  10240")
        rows.append("GPU 1     N/A    0.900  0.500  20480")
    return (head + "\n".join(rows) + "\n").encode()


def prometheus_seed() -> bytes:
    labels = 'gpu="0",UUID="GPU-1a2b",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"'
    text = ""
    for i, (util, sm) in enumerate([(20, 0.15), (30, 0.25), (25, 0.2)]):
        stamp = f" {1705312800000 + 1000 * i}"
        text += (
            "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
            f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}{stamp}\n"
            f"DCGM_FI_DEV_FB_USED{{{labels}}} 70000{stamp}\n"
            f"DCGM_FI_DEV_FB_FREE{{{labels}}} 11000{stamp}\n"
            f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}} {sm}{stamp}\n"
        )
    return text.encode()


@dataclass
class Seeds:
    kineto: bytes
    text: dict[str, bytes]  # samples/ncu formats by name
    nsys: list[Path]  # exports, read-only originals
    _extra: Any = None

    @property
    def extra(self) -> Any:
        """The seed trace's saved diagnosis, verdict and fleet row (``fuzz_hostile.Extra``)."""
        if self._extra is None:
            import fuzz_hostile

            self._extra = fuzz_hostile.build_extra(self.kineto)
        return self._extra

    @classmethod
    def build(cls) -> Seeds:
        text = {
            "smi.csv": smi_seed(),
            "nvml.jsonl": nvml_seed(),
            "dmon.txt": dmon_seed(),
            "metrics.prom": prometheus_seed(),
        }
        ncu = CORPUS / "ncu" / "b200_cublaslt_fp8_gemm.ncu.csv.log"
        if ncu.exists():
            text["ncu.csv"] = ncu.read_bytes()
        nvml = CORPUS / "metrics" / "superbench_nvml_8gpu.jsonl"
        if nvml.exists():
            text["nvml8.jsonl"] = nvml.read_bytes()
        nsys = [
            p
            for p in (
                CORPUS / "wild" / "nsys_t4_uvm_softmax.sqlite",
                CORPUS / "nsys" / "pipit" / "a100_saxpy_mpi_rank0_schema2.9.sqlite",
                CORPUS / "nsys" / "weatherbench2" / "rtx4060_no_kernel_table.sqlite",
            )
            if p.exists()
        ]
        return cls(kineto_seed(), text, nsys)


# --- Kineto mutations ---------------------------------------------------------------------------

#: Values of the wrong type or out of any plausible range, as JSON text.
HOSTILE_VALUES = [
    "[1]",
    "[1, 2]",
    "{}",
    '{"a": 1}',
    "null",
    "true",
    "false",
    '"not-a-number"',
    '"--5"',
    '""',
    '"-9223372036854775809"',
    "-9223372036854775808",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "12345678901234567890123",
    "1" + "0" * 400,
    "1e400",
    "-1e400",
    "1e308",
    "-1",
    "-1000000",
    "0",
    "0.5",
    "-0.0",
    "4611686018427387904",
    '"1e3"',
    '"NaN"',
    '"Infinity"',
]
FIELDS = ["ts", "dur", "pid", "tid", "cat", "name", "ph", "args"]
ARG_FIELDS = [
    "correlation",
    "stream",
    "device",
    "External id",
    "bytes",
    "grid",
    "block",
    "est. achieved occupancy %",
    "Python id",
    "Input Dims",
    "Collective name",
]
NASTY_NAMES = [
    "\\u001b]0;pwned\\u0007",  # set the terminal title
    "\\u001b[2J\\u001b[H",  # clear the screen
    "\\u001b]8;;http://evil.example/\\u001b\\\\click\\u001b]8;;\\u001b\\\\",  # hyperlink
    "[link=http://evil.example/]click[/link]",
    "[bold red]alarm[/]",
    "a\\rb\\bc\\u0000d\\u009be",
    "\\ud800",  # a lone surrogate
    "\\u202eevil",  # right-to-left override
]


def _sub_nth(
    rng: random.Random, data: bytes, pattern: bytes, repl: Callable[[bytes], bytes]
) -> bytes:
    """Replace one randomly chosen match of ``pattern`` (a regex) with ``repl(match)``."""
    matches = list(re.finditer(pattern, data))
    if not matches:
        return data
    m = rng.choice(matches)
    return data[: m.start()] + repl(m.group(0)) + data[m.end() :]


def _value_pattern(key: str) -> bytes:
    escaped = re.escape(json.dumps(key).encode())
    return escaped + rb'\s*:\s*("(?:[^"\\]|\\.)*"|-?[0-9.eE+-]+|\[[^\]]*\]|true|false|null)'


def m_wrong_value(rng: random.Random, data: bytes) -> bytes:
    """One field of one or many events gets a hostile value."""
    key = rng.choice(FIELDS + ARG_FIELDS)
    value = rng.choice(HOSTILE_VALUES).encode()
    pattern = _value_pattern(key)
    head = json.dumps(key).encode() + b": " + value
    if rng.random() < 0.3:  # every occurrence
        return re.sub(pattern, lambda _m: head, data)
    return _sub_nth(rng, data, pattern, lambda _m: head)


def m_deep_nesting(rng: random.Random, data: bytes) -> bytes:
    depth = rng.choice([200, 5000, 100_000])
    deep = b"[" * depth + b"]" * depth
    key = rng.choice(["args", "name", "ts", *ARG_FIELDS])
    return _sub_nth(
        rng, data, _value_pattern(key), lambda _m: json.dumps(key).encode() + b": " + deep
    )


def m_escaped_keys(rng: random.Random, data: bytes) -> bytes:
    """Keys written with JSON escapes: valid JSON for the same keys."""
    key = rng.choice(["ts", "dur", "ph", "cat", "name", "pid", "args", "correlation", "device"])
    escaped = "".join(f"\\u{ord(c):04x}" if rng.random() < 0.5 else c for c in key)
    if escaped == key:
        escaped = f"\\u{ord(key[0]):04x}" + key[1:]
    target = json.dumps(key).encode() + b":"
    repl = b'"' + escaped.encode() + b'":'
    return data.replace(target, repl) if rng.random() < 0.7 else data.replace(target, repl, 3)


def m_nested_trace_events(rng: random.Random, data: bytes) -> bytes:
    """A ``traceEvents`` key nested in a metadata object, before or after the real one."""
    fake = (
        b'"meta": {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "fake", "pid": 0,'
        b' "tid": 7, "ts": 1, "dur": 1, "args": {"device": 0, "stream": 7}}]}, '
    )
    if rng.random() < 0.5:
        return data.replace(b"{", b"{" + fake, 1)
    end = data.rstrip().rfind(b"}")
    return data[:end] + b", " + fake.rstrip(b", ") + data[end:]


def m_duplicate_keys(rng: random.Random, data: bytes) -> bytes:
    key = rng.choice(["ts", "dur", "cat", "name", "ph", "pid", "device", "correlation"])
    value = rng.choice(['"kernel"', '"X"', "5", "-3", '"zz"', "0", "12345678"]).encode()
    first = rng.random() < 0.5

    def dup(m: bytes) -> bytes:
        extra = json.dumps(key).encode() + b": " + value
        return extra + b", " + m if first else m + b", " + extra

    pattern = _value_pattern(key)
    if rng.random() < 0.5:
        return re.sub(pattern, lambda m: dup(m.group(0)), data)
    return _sub_nth(rng, data, pattern, dup)


def m_duplicate_trace_events(rng: random.Random, data: bytes) -> bytes:
    """The document's ``traceEvents`` key twice (last wins, as JSON parsers do)."""
    extra = b'"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "only", "pid": 1, "tid": 1, "ts": 5, "dur": 1}], '
    if rng.random() < 0.5:
        return data.replace(b"{", b"{" + extra, 1)
    end = data.rstrip().rfind(b"}")
    return data[:end] + b", " + extra.rstrip(b", ") + data[end:]


def m_truncate(rng: random.Random, data: bytes) -> bytes:
    cut = rng.choice([rng.randrange(1, len(data)), len(data) - rng.randrange(1, 200)])
    return data[: max(1, cut)]


def m_byte_flip(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.choice([1, 2, 8, 64])):
        buf[rng.randrange(len(buf))] = rng.randrange(256)
    return bytes(buf)


def m_splice(rng: random.Random, data: bytes) -> bytes:
    a, b = sorted(rng.randrange(len(data)) for _ in range(2))
    c = rng.randrange(len(data))
    return data[:c] + data[a:b] + data[c:]


def m_unknown_phase(rng: random.Random, data: bytes) -> bytes:
    value = rng.choice(['"Q"', '"XX"', "5", '""', "null", '"x"']).encode()
    return _sub_nth(rng, data, _value_pattern("ph"), lambda _m: b'"ph": ' + value)


def m_nasty_name(rng: random.Random, data: bytes) -> bytes:
    nasty = rng.choice(NASTY_NAMES).encode()
    target = rng.choice(["name", "cat"]) if rng.random() < 0.2 else "name"
    pattern = _value_pattern(target)
    if rng.random() < 0.3:
        return re.sub(pattern, lambda _m: json.dumps(target).encode() + b': "' + nasty + b'"', data)
    return _sub_nth(rng, data, pattern, lambda m: m[:-1] + nasty + b'"' if m.endswith(b'"') else m)


#: Quick mode (the test suite's): inputs of at most a few megabytes, so that a few hundred
#: cases run in well under a minute. The campaign inflates names to tens of megabytes.
QUICK = False


def m_huge_name(rng: random.Random, data: bytes) -> bytes:
    size = rng.choice([1 << 16, 1 << 20] if QUICK else [1 << 16, 1 << 20, 8 << 20])
    big = b"gemm_" + b"a" * size
    return _sub_nth(rng, data, _value_pattern("name"), lambda _m: b'"name": "' + big + b'"')


def m_device_props(rng: random.Random, data: bytes) -> bytes:
    value = rng.choice(
        [
            "1",
            "true",
            "null",
            '"x"',
            "[1, 2]",
            '[{"id": "x", "name": 5}]',
            '[{"id": 0, "name": "[link=http://evil.example/]H100[/link] \\u001b[31m"}]',
            '[{"id": 0, "totalGlobalMem": 1e400, "numSms": -5, "computeMajor": [1]}]',
        ]
    ).encode()
    return _sub_nth(
        rng,
        data,
        rb'"deviceProperties"\s*:\s*\[(?:[^\[\]]|\[[^\]]*\])*\]',
        lambda _m: b'"deviceProperties": ' + value,
    )


def m_distributed(rng: random.Random, data: bytes) -> bytes:
    value = rng.choice(['{"rank": "x"}', "1", '{"rank": 1e400, "world_size": -3}', "[]"]).encode()
    end = data.rstrip().rfind(b"}")
    return data[:end] + b', "distributedInfo": ' + value + data[end:]


KINETO: dict[str, Callable[[random.Random, bytes], bytes]] = {
    "kineto-wrong-value": m_wrong_value,
    "kineto-deep-nesting": m_deep_nesting,
    "kineto-escaped-keys": m_escaped_keys,
    "kineto-nested-traceEvents": m_nested_trace_events,
    "kineto-duplicate-keys": m_duplicate_keys,
    "kineto-duplicate-traceEvents": m_duplicate_trace_events,
    "kineto-truncate": m_truncate,
    "kineto-byte-flip": m_byte_flip,
    "kineto-splice": m_splice,
    "kineto-unknown-phase": m_unknown_phase,
    "kineto-nasty-name": m_nasty_name,
    "kineto-huge-name": m_huge_name,
    "kineto-device-props": m_device_props,
    "kineto-distributed": m_distributed,
}

# --- other formats ------------------------------------------------------------------------------


def m_text(rng: random.Random, data: bytes) -> bytes:
    """Corrupt numbers, timestamps and lines of a text format."""
    lines = data.split(b"\n")
    choice = rng.randrange(7)
    if choice == 0:  # a number replaced by garbage
        junk = rng.choice(
            [b"1e400", b"nan", b"-5", b"70512", b"inf", b"x", b"", b"99999999999999999999", b"-0"]
        )
        return re.sub(rb"\d+(\.\d+)?", lambda m: junk if rng.random() < 0.15 else m.group(0), data)
    if choice == 1:  # a corrupt timestamp
        stamp = rng.choice(
            [
                b"1970/01/01 00:00:00.000",
                b"2099/12/31 23:59:59.000",
                b"9999/99/99 99:99:99",
                b"garbage",
            ]
        )
        return re.sub(
            rb"20\d\d[/-]\d\d[/-]\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?",
            stamp,
            data,
            count=rng.randrange(1, 3),
        )
    if choice == 2:  # a line dropped or repeated
        i = rng.randrange(len(lines))
        return b"\n".join(lines[:i] + ([lines[i]] * rng.choice([0, 2, 50])) + lines[i + 1 :])
    if choice == 3:
        return m_truncate(rng, data)
    if choice == 4:
        return m_byte_flip(rng, data)
    if choice == 5:  # percentages over 100 and negative values
        return re.sub(
            rb"\b(\d{1,2})( ?%)",
            lambda m: (b"170512" if rng.random() < 0.5 else b"-40") + m.group(2),
            data,
        )
    nasty = rng.choice(
        [b"\x1b]0;pwned\x07", b"[link=http://evil.example/]x[/link]", b"\x00", b"\xff\xfe"]
    )
    return data.replace(b"NVIDIA", nasty + b"NVIDIA", 1)


NSYS_SQL = [
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1000 WHERE rowid % 3 = 0",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 4611686018427387904 WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -5 WHERE rowid = 1",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid = 1",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 1",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = NULL",
    "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET shortName = 999999999",
    "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET end = start - 1",
    "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = -1",
    "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = 9223372036854775807 WHERE rowid = 1",
    "UPDATE StringIds SET value = char(27) || ']0;pwned' || char(7) || value",
    "UPDATE StringIds SET value = '[link=http://evil.example/]x[/link]' || value",
    "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL",
    "DROP TABLE StringIds",
    "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME",
    "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN correlationId",
    "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "UPDATE TARGET_INFO_GPU SET name = NULL",
    "UPDATE TARGET_INFO_GPU SET totalMemory = -1",
]


def mutate_nsys(rng: random.Random, source: Path, target: Path) -> str:
    shutil.copyfile(source, target)
    if rng.random() < 0.15:  # a cut file (a re-export caught half-way)
        size = target.stat().st_size
        with target.open("r+b") as f:
            f.truncate(rng.randrange(100, size))
        return "truncated"
    if rng.random() < 0.1:
        data = bytearray(target.read_bytes())
        for _ in range(rng.choice([1, 16, 256])):
            data[rng.randrange(100, len(data))] = rng.randrange(256)
        target.write_bytes(bytes(data))
        return "byte-flip"
    statement = rng.choice(NSYS_SQL)
    db = sqlite3.connect(target)
    try:
        db.execute(statement)
        db.commit()
    except sqlite3.Error:
        pass
    finally:
        db.close()
    return statement


# --- cases --------------------------------------------------------------------------------------


@dataclass
class Case:
    seed: int
    index: int
    category: str
    detail: str
    argv: list[str]
    kineto: Path | None = None  # compare the two Kineto readers on it
    needs_timeout: bool = False
    inputs: list[Path] = field(default_factory=list)  # their bytes must not change
    specials: list[Path] = field(default_factory=list)  # their kind and identity must not change
    bound: str | None = None  # the verdict a meaning-preserving rewrite must keep
    idle_pct: float | None = None  # ... and its idle share (to 0.5 points)
    env: dict[str, str] = field(default_factory=dict)
    custom: Callable[[], list[tuple[str, str]]] | None = None  # work that is not one command
    exit_code: int | None = None  # set by run_case


@dataclass
class Finding:
    case: str
    category: str
    kind: str
    detail: str


@dataclass
class Tally:
    runs: int = 0
    compared: int = 0
    by_category: Counter[str] = field(default_factory=Counter)
    exits: Counter[int] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    #: (command, outcome) -> runs: "result" (exit 0, or check's 1 and 3), "refused" (one line,
    #: exit 2), or the kind of the run's first finding.
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)


FAMILIES = {
    "kineto": list(KINETO),
    "gzip": ["gzip-truncate", "gzip-corrupt", "gzip-bomb", "gzip-members"],
    "nsys": ["nsys"],
    "text": ["text"],
    "fs": ["fs"],
    "options": ["options"],
    # Issue #30: tampered saved JSON, special files, MCP, extreme timestamps, meaning-preserving
    # rewrites, injection into every command, concurrent writers, odd environment variables.
    "hostile": [
        "saved",
        "special-out",
        "env",
        "timestamps",
        "preserving",
        "inject",
        "mcp",
        "concurrent",
    ],
}


def categories(only: str | None) -> list[str]:
    families = [only] if only else list(FAMILIES)
    return [c for f in families for c in FAMILIES[f]]


def command_for(rng: random.Random, path: Path, work: Path, terminal_ok: bool = True) -> list[str]:
    r = rng.random()
    if r < 0.45 or not terminal_ok:
        return ["diagnose", str(path), "--json", "-"]
    if r < 0.8:
        return ["diagnose", str(path), "--all-devices", "--top", "3"]
    if r < 0.9:
        return ["check", str(path), "--max-idle-pct", "50"]
    return ["diagnose", str(path), "--json", str(work / "out.json")]


def build_case(seeds: Seeds, seed: int, index: int, cats: list[str], work: Path) -> Case:
    rng = random.Random(f"{seed}:{index}")
    category = cats[index % len(cats)]
    if category in FAMILIES["hostile"]:
        import fuzz_hostile

        case: Case = fuzz_hostile.BUILDERS[category](sys.modules[__name__], rng, seeds, work)
        case.seed, case.index = seed, index
        return case
    if category in KINETO:
        data = seeds.kineto
        for _ in range(1 if rng.random() < 0.8 else 2):
            data = KINETO[category](rng, data)
        name = "trace.json.gz" if rng.random() < 0.3 else "trace.json"
        path = work / name
        path.write_bytes(gzip.compress(data, 1, mtime=0) if name.endswith(".gz") else data)
        return Case(seed, index, category, name, command_for(rng, path, work), kineto=path)
    if category.startswith("gzip-"):
        return _gzip_case(rng, seeds, seed, index, category, work)
    if category == "nsys":
        if not seeds.nsys:
            return _text_case(rng, seeds, seed, index, "text", work)
        source = rng.choice(seeds.nsys)
        path = work / "export.sqlite"
        detail = mutate_nsys(rng, source, path)
        return Case(seed, index, category, f"{source.name}: {detail}", command_for(rng, path, work))
    if category == "text":
        return _text_case(rng, seeds, seed, index, category, work)
    if category == "fs":
        return _fs_case(rng, seeds, seed, index, work)
    return _options_case(rng, seeds, seed, index, work)


def _text_case(
    rng: random.Random, seeds: Seeds, seed: int, index: int, category: str, work: Path
) -> Case:
    name = rng.choice(sorted(seeds.text))
    data = seeds.text[name]
    for _ in range(rng.choice([1, 1, 2, 3])):
        data = m_text(rng, data)
    path = work / name
    path.write_bytes(data)
    return Case(seed, index, category, name, command_for(rng, path, work))


def _gzip_case(
    rng: random.Random, seeds: Seeds, seed: int, index: int, category: str, work: Path
) -> Case:
    packed = gzip.compress(seeds.kineto, 6, mtime=0)
    path = work / "trace.json.gz"
    if category == "gzip-truncate":
        packed = packed[: rng.randrange(5, len(packed))]
    elif category == "gzip-corrupt":
        packed = (
            m_byte_flip(rng, packed[:10]) + m_byte_flip(rng, packed[10:])
            if rng.random() < 0.3
            else packed[:10] + m_byte_flip(rng, packed[10:])
        )
    elif category == "gzip-bomb":  # a small file that inflates to a lot of one name
        size = rng.choice([1 << 20] if QUICK else [1 << 20, 4 << 20, 16 << 20])
        body = seeds.kineto.replace(b'"name": "', b'"name": "' + b"a" * size, 1)
        packed = gzip.compress(body, 1, mtime=0)
    else:
        half = len(seeds.kineto) // 2
        packed = gzip.compress(seeds.kineto[:half], 1, mtime=0) + gzip.compress(
            seeds.kineto[half:], 1, mtime=0
        )
        if rng.random() < 0.5:
            packed += b"\x1f\x8b garbage after the members"
    path.write_bytes(packed)
    return Case(seed, index, category, category, command_for(rng, path, work), kineto=path)


def _fs_case(rng: random.Random, seeds: Seeds, seed: int, index: int, work: Path) -> Case:
    good = work / "good.json"
    good.write_bytes(seeds.kineto)
    kind = rng.choice(
        [
            "fifo",
            "dir",
            "empty",
            "missing",
            "long-name",
            "unreadable",
            "dir-unreadable",
            "loop",
            "devnull",
            "self-output",
            "self-output-link",
            "out-dir",
            "out-missing-dir",
        ]
    )
    if kind == "fifo":
        path = work / "pipe.json"
        os.mkfifo(path)
        return Case(seed, index, "fs", kind, ["diagnose", str(path)], needs_timeout=True)
    if kind == "dir":
        (work / "d").mkdir()
        return Case(seed, index, "fs", kind, ["diagnose", str(work / "d")])
    if kind == "empty":
        (work / "e.json").write_bytes(b"")
        return Case(seed, index, "fs", kind, ["diagnose", str(work / "e.json")])
    if kind == "missing":
        return Case(seed, index, "fs", kind, ["diagnose", str(work / "nope.json")])
    if kind == "long-name":
        return Case(seed, index, "fs", kind, ["diagnose", str(work / ("x" * 300 + ".json"))])
    if kind == "unreadable":
        path = work / "locked.json"
        path.write_bytes(seeds.kineto)
        path.chmod(0)
        return Case(seed, index, "fs", kind, ["diagnose", str(path)])
    if kind == "dir-unreadable":
        folder = work / "locked"
        folder.mkdir()
        (folder / "t.json").write_bytes(seeds.kineto)
        folder.chmod(0)
        return Case(seed, index, "fs", kind, ["diagnose", str(folder / "t.json")])
    if kind == "loop":
        (work / "a").symlink_to(work / "b")
        (work / "b").symlink_to(work / "a")
        return Case(seed, index, "fs", kind, ["diagnose", str(work / "a")])
    if kind == "devnull":  # a private device: the campaign never names the machine's own
        import fuzz_hostile

        return Case(seed, index, "fs", kind, ["diagnose", str(fuzz_hostile.private_null(work))])
    if kind == "self-output":
        return Case(seed, index, "fs", kind, ["diagnose", str(good), "--json", str(good)])
    if kind == "self-output-link":
        os.link(good, work / "hard.json")
        return Case(
            seed, index, "fs", kind, ["diagnose", str(good), "--json", str(work / "hard.json")]
        )
    if kind == "out-dir":
        return Case(seed, index, "fs", kind, ["diagnose", str(good), "--json", str(work)])
    return Case(
        seed,
        index,
        "fs",
        kind,
        ["diagnose", str(good), "--json", str(work / "no" / "such" / "o.json")],
    )


def _options_case(rng: random.Random, seeds: Seeds, seed: int, index: int, work: Path) -> Case:
    good = work / "good.json"
    good.write_bytes(seeds.kineto)
    bad = rng.choice(["nan", "inf", "-inf", "-5", "NaN", "1e400", "-0", "x", ""])
    argv = rng.choice(
        [
            ["diagnose", str(good), "--gpu-hour-usd", bad],
            ["diagnose", str(good), "--top", rng.choice(["-5", "0", "-1", "99999999999999999999"])],
            ["check", str(good), "--max-idle-pct", bad],
            ["check", str(good), "--max-cost-usd-per-gpu-hour", bad],
            ["check", str(good), "--max-idle-pct", "50", "--gpu-hour-usd", bad],
            ["check", str(good), "--baseline", str(good), "--max-regression-pct", bad],
            ["diff", str(good), str(good), "--gpu-hour-usd", bad],
            ["diagnose", str(good), "--json", "-", "--gpu-hour-usd", bad],
        ]
    )
    return Case(seed, index, "options", " ".join(argv[2:]), argv)


# --- running ------------------------------------------------------------------------------------


class _Hang(BaseException):
    pass


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def ring(signum: int, frame: Any) -> None:
        raise _Hang

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def run_case(case: Case, timeout_s: float, history_dir: Path) -> list[Finding]:
    """Run one case's command in process and judge its outcome."""
    from click.testing import CliRunner

    from gpuscope.cli import main

    label = f"{case.seed}:{case.index}"
    findings: list[Finding] = []

    def found(kind: str, detail: str) -> None:
        findings.append(
            Finding(
                label,
                case.category,
                kind,
                f"{case.detail} | {' '.join(case.argv)[:200]} | {detail}"[:600],
            )
        )

    before = _identities(case)
    env = {"GPUSCOPE_HISTORY": str(history_dir / "history.sqlite"), "COLUMNS": "100", **case.env}
    if case.custom is not None:
        try:
            with _alarm(timeout_s), _environment(env):
                for kind, detail in case.custom():
                    found(kind, detail)
        except _Hang:
            found("hang", f"over {timeout_s:.0f} s")
        except Exception as error:
            import traceback

            tb = "".join(traceback.format_exception(error)).strip().splitlines()
            found("traceback", " / ".join(tb[-3:]))
        _judge_files(case, before, found)
        return findings
    runner = CliRunner()
    try:
        with _alarm(timeout_s):
            result = runner.invoke(main, case.argv, env=env, catch_exceptions=True)
    except _Hang:
        found("hang", f"over {timeout_s:.0f} s")
        return findings
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        if isinstance(result.exception, _Hang):
            found("hang", f"over {timeout_s:.0f} s")
            return findings
        import traceback

        tb = "".join(traceback.format_exception(result.exception)).strip().splitlines()
        found("traceback", " / ".join(tb[-3:]))
        return findings
    code = case.exit_code = result.exit_code
    stdout, stderr = result.stdout, result.stderr
    allowed = {0, 1, 2, 3} if case.argv[0] == "check" else {0, 2}  # check: 3 = too few steps
    if code not in allowed:
        found("exit", f"exit {code}: {stderr[-200:]!r}")
    if code == 2:
        lines = [line for line in stderr.splitlines() if line.strip()]
        ok = lines and (
            (len(lines) == 1 and lines[0].startswith("gpuscope: error:"))
            or any(line.startswith("Error:") for line in lines)
        )
        if not ok:
            found("error-line", repr(stderr[-300:]))
    document = None
    if code == 0 and stdout.lstrip().startswith("{"):
        try:
            document = json.loads(stdout)
        except ValueError as error:
            found("implausible", f"stdout is not JSON: {error}")
        else:
            problems = implausible(document)
            if problems:
                found("implausible", "; ".join(problems[:4]))
    if case.bound is not None:
        _judge_meaning(case, code, document, found)
    text = stdout if not stdout.lstrip().startswith("{") else ""
    bad = _CONTROL.search(text + stderr)
    if bad is not None:
        found("terminal", repr((text + stderr)[max(0, bad.start() - 40) : bad.end() + 40]))
    _judge_files(case, before, found)
    return findings


def _judge_meaning(case: Case, code: int, document: Any, found: Callable[[str, str], None]) -> None:
    """A meaning-preserving rewrite (or an outlier set aside) gives the intact verdict."""
    if code != 0 or not isinstance(document, dict):
        found("misread", f"exit {code} where the intact trace reads")
        return
    verdict = document.get("verdict", {})
    if verdict.get("bound") != case.bound:
        found("misread", f"bound {verdict.get('bound')!r}, intact {case.bound!r}")
    elif (
        case.idle_pct is not None and abs(float(verdict.get("idle_pct", -1)) - case.idle_pct) > 0.5
    ):
        found("misread", f"idle {verdict.get('idle_pct')}%, intact {case.idle_pct}%")


def _identity(path: Path) -> tuple[Any, ...]:
    """What must not change about a path: for a regular file its bytes, for anything else (a
    device, a FIFO, a socket, a folder, a link) its kind and inode."""
    import hashlib
    import stat as st

    try:
        status = path.lstat()
    except OSError:
        return ("missing",)
    if st.S_ISREG(status.st_mode):
        return ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return (st.S_IFMT(status.st_mode), status.st_ino, status.st_rdev)


def _identities(case: Case) -> dict[Path, tuple[Any, ...]]:
    return {p: _identity(p) for p in [*case.inputs, *case.specials]}


def _judge_files(
    case: Case, before: dict[Path, tuple[Any, ...]], found: Callable[[str, str], None]
) -> None:
    for path, identity in before.items():
        now = _identity(path)
        if now == identity:
            continue
        kind = "overwritten" if path in case.inputs else "replaced-special"
        found(kind, f"{path.name}: {identity[0]} became {now[0]}")
    folders = {p.parent for p in [*case.inputs, *case.specials] if p.parent.exists()}
    for folder in folders:
        with contextlib.suppress(OSError):
            left = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
            if left:
                found("leftover", f"temporaries left: {left[:3]}")


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def outcome_of(case: Case, found: list[Finding]) -> str:
    """A run's column: its first finding's kind, else "refused" (one line, exit 2) or
    "answered"."""
    if found:
        return found[0].kind
    return "refused" if case.exit_code == 2 else "answered"


def command_of(case: Case) -> str:
    """The row of the campaign's table a case counts in."""
    if case.category == "mcp":
        return "mcp"
    if case.category == "concurrent":
        return f"concurrent {case.argv[0]}"
    return case.argv[0] if case.argv else "?"


def implausible(document: Any, path: str = "") -> list[str]:
    """Figures no real profile has: NaN/inf, negative times or money, shares beyond 100%."""
    problems: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            problems += _judge(f"{path}.{key}", str(key), value)
            problems += implausible(value, f"{path}.{key}")
    elif isinstance(document, list):
        for i, value in enumerate(document):
            problems += implausible(value, f"{path}[{i}]")
    return problems


def _judge(where: str, key: str, value: Any) -> list[str]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return []
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{where} = {value}"]
    timestamp = "start" in key or "end" in key  # a position on the trace's clock, not a length
    if (
        key.endswith(("_ns", "_s", "_usd", "_bytes"))
        and value < 0
        and not timestamp
        and "delta" not in key
        and "change" not in key
    ):
        return [f"{where} = {value} (negative)"]
    if key.endswith("_ns") and value > MAX_SPAN_NS and "base_time" not in key and not timestamp:
        return [f"{where} = {value} (over ten years)"]
    if (
        key.endswith("_pct")
        and ("share" in key or "idle" in key or "busy" in key or "util" in key)
        and not -1e-6 <= value <= 100.000001
    ):
        return [f"{where} = {value} (a share outside 0-100%)"]
    return []


def compare_readers(path: Path) -> str | None:
    """The C scanner's outcome against the msgspec reader's, on one Kineto file; None when equal."""
    import numpy as np

    from gpuscope.errors import InputError
    from gpuscope.model import _COLUMNS
    from gpuscope.readers import _scan, kineto

    def outcome(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except InputError as error:
            return ("error", type(error).__name__, error.reason)

    def without_scanner() -> Any:
        kscan, _scan._kscan = _scan._kscan, None
        try:
            return kineto.read_file(path)
        finally:
            _scan._kscan = kscan

    if not _scan.scanner_built():
        return None
    try:
        scanned = outcome(lambda: kineto.read_file(path, _scan.Scan(path)))
    except Exception as error:
        return f"scanner path raised {type(error).__name__}: {error}"[:300]
    try:
        reference = outcome(without_scanner)
    except Exception as error:
        return f"msgspec path raised {type(error).__name__}: {error}"[:300]
    if isinstance(scanned, tuple) or isinstance(reference, tuple):
        if not (isinstance(scanned, tuple) and isinstance(reference, tuple)):
            return f"scanner {_brief(scanned)} vs msgspec {_brief(reference)}"
        if scanned[1] != reference[1]:
            return f"scanner {scanned} vs msgspec {reference}"
        return None
    for name in _COLUMNS:
        x, y = getattr(scanned.events, name), getattr(reference.events, name)
        if x.shape != y.shape or not np.array_equal(x, y, equal_nan=x.dtype.kind == "f"):
            return f"column {name} differs ({len(x)} vs {len(y)} rows)"
    if scanned.names != reference.names:
        return "names differ"
    if scanned.warnings != reference.warnings:
        return f"warnings differ: {scanned.warnings} vs {reference.warnings}"[:300]
    if (scanned.devices, scanned.rank, scanned.world_size, scanned.schema) != (
        reference.devices,
        reference.rank,
        reference.world_size,
        reference.schema,
    ):
        return "devices, rank or schema differ"
    return None


def _brief(outcome: Any) -> str:
    return (
        str(outcome) if isinstance(outcome, tuple) else f"a trace of {len(outcome.events)} events"
    )


def campaign(
    runs: int,
    seed: int = 1,
    *,
    only: str | None = None,
    timeout_s: float = 60.0,
    start: int = 0,
    keep: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> Tally:
    """Run ``runs`` cases from ``start``; returns the tally and every finding."""
    seeds = Seeds.build()
    cats = categories(only)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="gpuscope-fuzz-") as scratch:
        history = Path(scratch) / "history"
        history.mkdir()
        for index in range(start, start + runs):
            work = keep if keep is not None else Path(scratch) / f"case{index}"
            work.mkdir(parents=True, exist_ok=True)
            case = build_case(seeds, seed, index, cats, work)
            found = run_case(case, timeout_s, history)
            if case.kineto is not None:
                tally.compared += 1
                with contextlib.suppress(_Hang), _alarm(timeout_s):
                    disagreement = compare_readers(case.kineto)
                    if disagreement:
                        found.append(
                            Finding(
                                f"{seed}:{index}",
                                case.category,
                                "disagree",
                                f"{case.detail}: {disagreement}",
                            )
                        )
            tally.runs += 1
            tally.by_category[case.category] += 1
            tally.findings += found
            tally.outcomes[(command_of(case), outcome_of(case, found))] += 1
            if log is not None:
                for f in found:
                    log(f"{f.case} {f.category} {f.kind}: {f.detail}")
            if case.category in FAMILIES["hostile"]:
                import fuzz_hostile

                fuzz_hostile.close_sockets()
            if keep is None:
                _remove(work)
    return tally


#: The columns of the campaign's table: every finding kind, each of which must stay at 0.
FINDING_KINDS = [
    "traceback",
    "exit",
    "hang",
    "implausible",
    "misread",
    "terminal",
    "overwritten",
    "replaced-special",
    "leftover",
    "error-line",
    "disagree",
]


def table(tally: Tally) -> str:
    """The campaign as a Markdown table: a row per command, a column per outcome."""
    commands = sorted({c for c, _ in tally.outcomes})
    head = ["command", "runs", "answered", "refused", *FINDING_KINDS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for command in [*commands, "all"]:
        counts = {
            k: sum(n for (c, o), n in tally.outcomes.items() if o == k and command in (c, "all"))
            for k in ["answered", "refused", *FINDING_KINDS]
        }
        runs = sum(n for (c, _), n in tally.outcomes.items() if command in (c, "all"))
        row = [f"**{command}**" if command == "all" else f"`{command}`", f"{runs:,}"]
        lines.append("| " + " | ".join(row + [f"{counts[k]:,}" for k in counts]) + " |")
    return "\n".join(lines)


def _remove(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        with contextlib.suppress(OSError):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o700)
    shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--only", choices=sorted(FAMILIES))
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument(
        "--replay", help="SEED:INDEX: run that one case, keeping its files in ./fuzz-case"
    )
    args = parser.parse_args()
    if args.replay:
        seed, index = (int(x) for x in args.replay.split(":"))
        keep = Path("fuzz-case")
        shutil.rmtree(keep, ignore_errors=True)
        tally = campaign(
            1, seed, only=args.only, timeout_s=args.timeout, start=index, keep=keep, log=print
        )
    else:
        began = time.perf_counter()
        tally = campaign(
            args.runs,
            args.seed,
            only=args.only,
            timeout_s=args.timeout,
            start=args.start,
            log=print,
        )
        elapsed = time.perf_counter() - began
        print(
            f"\n{tally.runs} CLI runs ({tally.compared} Kineto inputs read both ways) in {elapsed:.0f} s"
        )
    kinds = Counter(f.kind for f in tally.findings)
    print("findings:", dict(kinds) or "none")
    print("by category:", dict(tally.by_category))
    print()
    print(table(tally))
    sys.exit(1 if tally.findings else 0)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    main()
