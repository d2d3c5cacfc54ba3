"""The hostile families of ``fuzz_cli.py`` (issue #30): tampered saved diagnoses, special output
files, MCP sessions, extreme timestamps, meaning-preserving rewrites, injection into every
command, concurrent writers and kills, and environment variables naming odd files.

Each builder returns a :class:`fuzz_cli.Case` from ``(rng, work)`` alone. A case names the files
it reads (``inputs``: their bytes must not change), the special files it points outputs at
(``specials``: their kind and identity must not change), the verdict the run must keep
(``bound``: meaning-preserving rewrites) and, for work that is not one command line, a
``custom`` function that runs it and returns its findings as ``(kind, detail)`` pairs.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Text that must never reach a terminal as it is: an OSC title, a CSI, the C1 CSI, a
#: right-to-left override, a line separator, a bell; and rich markup, which must print as typed.
HOSTILE = "x\x1b]0;pwned\x07\x1b[2J\u009b31m\u202eevil\u2028[link=http://x]m[/link][bold]b"
SAFE_NAME = "x\x1b]0;pwned\x07\u009b31m\u202eevil"  # the same, as a file name (no slash)

YEAR_US = 365 * 86_400 * 10**6


@dataclass
class Extra:
    """What a hostile seed adds to ``fuzz_cli.Seeds``: the seed trace's saved diagnosis, its
    verdict's bound and idle share, a fleet table and a run summary built from it."""

    saved: bytes
    bound: str
    idle_pct: float
    fleet_json: bytes
    summary_json: bytes
    warnings: list[str] = field(default_factory=list)


def build_extra(kineto: bytes) -> Extra:
    import tempfile

    import msgspec

    from gpuscope import fleet
    from gpuscope.compare.diff import summarize
    from gpuscope.diagnosis import diagnose
    from gpuscope.readers import load
    from gpuscope.render.json import dumps

    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "seed.json"
        path.write_bytes(kineto)
        result = diagnose(load(path))
        table = fleet.diagnose_input(str(path))
    saved = dumps(result)
    verdict = json.loads(saved)["verdict"]
    doc = {
        "schema": fleet.SCHEMA,
        "jobs": [msgspec.structs.asdict(j) for j in table.jobs],
        "findings": [msgspec.structs.asdict(f) for f in table.findings],
    }
    return Extra(
        saved=saved,
        bound=verdict["bound"],
        idle_pct=float(verdict["idle_pct"]),
        fleet_json=json.dumps(doc).encode(),
        summary_json=msgspec.json.encode(summarize(result)),
    )


def _case(
    fc: Any, rng: random.Random, category: str, detail: str, argv: list[str], **more: Any
) -> Any:
    return fc.Case(rng.randrange(1 << 30), 0, category, detail, argv, **more)


def _good(work: Path, kineto: bytes, name: str = "good.json") -> Path:
    path = work / name
    path.write_bytes(kineto)
    return path


# --- tampered saved diagnoses --------------------------------------------------------------------


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:2]):
            yield from _paths(v, (*prefix, i))


SAVED_VALUES: list[Any] = [
    2**64,
    -(2**64),
    2**63,
    10**30,
    -5,
    "inf",
    "-inf",
    "nan",
    1e308,
    -1e308,
    None,
    "x",
    [],
    {},
    True,
    "DELETE",
    "DEEP",
    7000.0,
    -0.5,
]


def saved_case(fc: Any, rng: random.Random, seeds: Any, work: Path) -> Any:
    doc = json.loads(seeds.extra.saved)
    choices = [p for p in _paths(doc["diagnosis"])]
    details = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        where = rng.choice(choices)
        value = rng.choice(SAVED_VALUES)
        target = doc["diagnosis"]
        with contextlib.suppress(KeyError, IndexError, TypeError):
            for key in where[:-1]:
                target = target[key]
            if value == "DELETE":
                del target[where[-1]]
            else:
                target[where[-1]] = "@@DEEP@@" if value == "DEEP" else value
        details.append(f"{'.'.join(map(str, where))}={str(value)[:12]}")
    text = json.dumps(doc).replace('"@@DEEP@@"', "[" * 5000 + "]" * 5000)
    if rng.random() < 0.2:
        text = text.replace('"inf"', "Infinity", 1)
    path = work / "saved.json"
    path.write_text(text)
    good = _good(work, seeds.kineto)
    out = work / "out.html"
    argv = rng.choice(
        [
            ["report", str(path), "-o", str(out)],
            ["report", str(path), str(good), "-o", str(out)],
            ["diff", str(path), str(good), "--json", "-"],
            ["diff", str(path), str(path)],
            ["check", str(path), "--max-idle-pct", "50"],
            ["check", str(good), "--baseline", str(path), "--max-regression-pct", "5"],
            ["report", str(path), "-o", str(path)],
        ]
    )
    return _case(fc, rng, "saved", "; ".join(details)[:200], argv, inputs=[path, good])


# --- special output paths ------------------------------------------------------------------------


def _special(
    rng: random.Random, work: Path, good: Path
) -> tuple[Path, str, list[threading.Thread]]:
    kind = rng.choice(
        [
            "fifo-no-reader",
            "fifo-reader",
            "devnull",
            "socket",
            "dir",
            "symlink",
            "dangling-link",
            "input",
            "input-hardlink",
            "input-symlink",
        ]
    )
    readers: list[threading.Thread] = []
    if kind.startswith("fifo"):
        path = work / "out.fifo"
        os.mkfifo(path)
        if kind == "fifo-reader":

            def drain() -> None:
                with contextlib.suppress(OSError), open(path, "rb") as pipe:
                    while pipe.read(1 << 16):
                        pass

            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
            readers.append(reader)
        return path, kind, readers
    if kind == "devnull":
        return private_null(work), kind, readers
    if kind == "socket":
        path = work / "out.sock"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
        _SOCKETS.append(server)
        return path, kind, readers
    if kind == "dir":
        path = work / "outdir"
        path.mkdir()
        return path, kind, readers
    if kind == "symlink":
        (work / "real.out").write_bytes(b"old")
        (work / "link.out").symlink_to(work / "real.out")
        return work / "link.out", kind, readers
    if kind == "dangling-link":
        (work / "link.out").symlink_to(work / "made.out")
        return work / "link.out", kind, readers
    if kind == "input":
        return good, kind, readers
    if kind == "input-hardlink":
        os.link(good, work / "hard.json")
        return work / "hard.json", kind, readers
    (work / "soft.json").symlink_to(good)
    return work / "soft.json", kind, readers


_SOCKETS: list[socket.socket] = []


def private_null(work: Path) -> Path:
    """A character device like ``/dev/null`` made in the case's folder (root may ``mknod``): a
    regression that renamed over it must never take the machine's own ``/dev/null`` with it.
    Without the right to make one, a FIFO nobody reads stands in (also never to be replaced)."""
    path = work / "null"
    if not path.exists():
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except OSError:
            os.mkfifo(path)
    return path


def special_case(fc: Any, rng: random.Random, seeds: Any, work: Path) -> Any:
    good = _good(work, seeds.kineto)
    saved = work / "saved.json"
    saved.write_bytes(seeds.extra.saved)
    table = work / "fleet.json"
    table.write_bytes(seeds.extra.fleet_json)
    out, kind, _readers = _special(rng, work, good)
    commands = [
        ["diagnose", str(good), "--json", "OUT"],
        ["report", str(saved), "-o", "OUT"],
        ["report", str(good), "-o", "OUT"],
        ["annotate", str(good), "-o", "OUT"],
        ["diff", str(good), str(saved), "--json", "OUT"],
        ["history", "--json", "OUT"],
        ["fleet-report", str(table), "-o", "OUT"],
        ["fleet", str(good), "--out", "OUT", "--workers", "1"],
        ["scale", str(good), str(saved), "--json", "OUT"],
    ]
    if kind.startswith("input"):  # the output names the trace: only commands that read it
        commands = [c for c in commands if str(good) in c]
    chosen = rng.choice(commands)
    reads = [p for p in (good, saved, table) if str(p) in chosen]
    argv = [str(out) if a == "OUT" else a for a in chosen]
    specials = [] if kind.startswith("input") else [out]
    return _case(
        fc,
        rng,
        "special-out",
        kind,
        argv,
        inputs=reads,
        specials=specials,
        needs_timeout=True,
    )


# --- environment variables naming odd files ------------------------------------------------------


def env_case(fc: Any, rng: random.Random, seeds: Any, work: Path) -> Any:
    good = _good(work, seeds.kineto)
    kind = rng.choice(
        [
            "fifo",
            "dir",
            "devnull",
            "input",
            "junk",
            "missing-folder",
            "max-memory",
            "max-memory-tiny",
        ]
    )
    env: dict[str, str] = {}
    specials: list[Path] = []
    if kind == "fifo":
        history = work / "history.fifo"
        os.mkfifo(history)
        specials.append(history)
    elif kind == "dir":
        history = work / "hdir"
        history.mkdir()
        specials.append(history)
    elif kind == "devnull":
        history = private_null(work)
        specials.append(history)
    elif kind == "input":
        history = good
    elif kind == "junk":
        history = work / "junk.sqlite"
        history.write_bytes(b"SQLite format 3\x00" + bytes(rng.randrange(256) for _ in range(3000)))
    else:
        history = work / "no" / "such" / "history.sqlite"
    if kind != "missing-folder" or rng.random() < 0.5:
        env["GPUSCOPE_HISTORY"] = str(history)
    if kind.startswith("max-memory"):
        env["GPUSCOPE_MAX_MEMORY"] = rng.choice(
            ["abc", "0", "-5", "1e400", "1K", "nan", "10G", ""]
            if kind == "max-memory"
            else ["1", "100", "2K"]
        )
    argv = rng.choice(
        [
            ["history"],
            ["history", "--limit", "99999999999999999999"],
            ["diff", "#1", str(good)],
            ["check", str(good), "--baseline", "1", "--max-regression-pct", "5"],
            ["diagnose", str(good), "--save", "--json", "-"],
            ["diagnose", str(good), "--json", "-"],
        ]
    )
    return _case(
        fc,
        rng,
        "env",
        f"{kind} {env}"[:200],
        argv,
        inputs=[good],
        specials=specials,
        env=env,
        needs_timeout=True,
    )


# --- extreme timestamps and meaning-preserving rewrites ------------------------------------------


def _events(doc: dict[str, Any], cat: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in doc["traceEvents"]
        if isinstance(e, dict) and "ts" in e and (cat is None or e.get("cat") == cat)
    ]


def timestamps_case(fc: Any, rng: random.Random, seeds: Any, work: Path) -> Any:
    doc = json.loads(seeds.kineto)
    kind = rng.choice(
        [
            "late-runtime",
            "late-kernel",
            "negated",
            "ten-year-kernel",
            "cpu-op-at-zero",
            "shuffled",
            "one-instant",
            "negative-dur",
            "huge-float",
            "string-ts",
            "early-kernel",
        ]
    )
    bound = None
    if kind in ("late-runtime", "late-kernel", "early-kernel"):
        cat = "cuda_runtime" if kind == "late-runtime" else "kernel"
        event = rng.choice(_events(doc, cat))
        event["ts"] += (
            rng.choice([133, 158, 1000]) * YEAR_US * (-1 if kind == "early-kernel" else 1)
        )
    elif kind == "negated":
        for e in _events(doc):
            e["ts"] = -e["ts"]
    elif kind == "ten-year-kernel":
        rng.choice(_events(doc, "kernel"))["dur"] = 10 * YEAR_US
    elif kind == "cpu-op-at-zero":
        ops = [e for e in _events(doc, "cpu_op") if str(e.get("name", "")).startswith("aten::")]
        rng.choice(ops)["ts"] = 0
        bound = seeds.extra.bound  # the window must not stretch: the verdict stays
    elif kind == "shuffled":
        stamps = [e["ts"] for e in _events(doc)]
        rng.shuffle(stamps)
        for e, s in zip(_events(doc), stamps, strict=True):
            e["ts"] = s
    elif kind == "one-instant":
        for e in _events(doc):
            e["ts"] = 1000
    elif kind == "negative-dur":
        rng.choice(_events(doc, "kernel"))["dur"] = -rng.choice([1, 10**6, 10**15])
    elif kind == "huge-float":
        rng.choice(_events(doc))["ts"] = rng.choice([1e300, 1.7e308, 9.3e18, 2.0**63])
    elif kind == "string-ts":
        rng.choice(_events(doc))["ts"] = rng.choice(["12", "x", "1e400"])
    path = work / "trace.json"
    path.write_text(json.dumps(doc))
    argv = rng.choice(
        [
            ["diagnose", str(path), "--json", "-"],
            ["diagnose", str(path)],
            ["diff", str(path), str(_good(work, seeds.kineto)), "--json", "-"],
            ["check", str(path), "--max-idle-pct", "90"],
        ]
    )
    if bound is not None:
        argv = ["diagnose", str(path), "--json", "-"]
    return _case(fc, rng, "timestamps", kind, argv, inputs=[path], bound=bound, kineto=path)


def preserving_case(fc: Any, rng: random.Random, seeds: Any, work: Path) -> Any:
    """A rewrite that keeps the trace's meaning: the verdict must be the intact one."""
    doc = json.loads(seeds.kineto)
    kind = rng.choice(
        [
            "event-order",
            "indent",
            "key-order",
            "unknown-keys",
            "gzip",
            "bom",
            "members",
            "escaped-key",
            "crlf",
        ]
    )
    data: bytes
    if kind == "event-order":
        rng.shuffle(doc["traceEvents"])
        data = json.dumps(doc).encode()
    elif kind == "indent":
        data = json.dumps(doc, indent=rng.choice([None, 0, 1, 4, "\t"])).encode()
    elif kind == "key-order":
        events = [dict(reversed(list(e.items()))) for e in doc["traceEvents"]]
        data = json.dumps({**dict(reversed(list(doc.items()))), "traceEvents": events}).encode()
    elif kind == "unknown-keys":
        doc["zzUnknown"] = {"nested": [1, 2, {"a": None}]}
        for e in doc["traceEvents"][:: max(1, len(doc["traceEvents"]) // 20)]:
            e["zz"] = "extra"
        data = json.dumps(doc).encode()
    elif kind == "gzip":
        data = gzip.compress(seeds.kineto, rng.choice([1, 9]))
    elif kind == "bom":
        data = b"\xef\xbb\xbf" + seeds.kineto
    elif kind == "members":
        size = rng.choice([50, 1000, 65536])
        data = b"".join(
            gzip.compress(seeds.kineto[i : i + size]) for i in range(0, len(seeds.kineto), size)
        )
    elif kind == "escaped-key":
        data = seeds.kineto.replace(b'"traceEvents"', b'"trace\\u0045vents"', 1)
    else:
        data = seeds.kineto.replace(b"\n", b"\r\n")
    path = work / ("trace.json.gz" if data[:2] == b"\x1f\x8b" else "trace.json")
    path.write_bytes(data)
    return _case(
        fc,
        rng,
        "preserving",
        kind,
        ["diagnose", str(path), "--json", "-"],
        inputs=[path],
        bound=seeds.extra.bound,
        idle_pct=seeds.extra.idle_pct,
        kineto=path,
    )


# --- injection into every command ----------------------------------------------------------------


def inject_case(fc: Any, rng: random.Random, seeds: Any, work: Path) -> Any:
    hostile = work / f"{SAFE_NAME}.json"
    hostile.write_bytes(seeds.kineto)
    good = _good(work, seeds.kineto)
    saved = work / f"{SAFE_NAME}.saved.json"
    saved.write_bytes(seeds.extra.saved)
    table = work / "fleet.json"
    rows = json.loads(seeds.extra.fleet_json)
    for row in rows["jobs"] + rows["findings"]:
        row["path"] = HOSTILE
    table.write_text(json.dumps(rows))
    history = work / "history.sqlite"
    _history_with(history, seeds, [HOSTILE, "[bold red]L[/]", None])
    argv = rng.choice(
        [
            ["diagnose", str(hostile)],
            ["diagnose", str(hostile), "--gpu", HOSTILE],
            ["diagnose", str(work / f"{SAFE_NAME}-missing.json")],
            ["diff", str(hostile), str(good)],
            ["diff", str(saved), str(hostile)],
            ["history"],
            ["history", "--label", HOSTILE],
            ["history", "--metric", HOSTILE],
            ["check", str(hostile), "--max-idle-pct", rng.choice(["1", "99"])],
            ["fleet-report", str(table)],
            ["scale", str(hostile), str(good)],
            ["report", str(hostile), "-o", str(work / f"{SAFE_NAME}.html")],
            ["annotate", str(hostile), "-o", str(work / f"{SAFE_NAME}.out.json")],
            ["diagnose", str(good), "--label", HOSTILE, "--json", str(work / "o.json")],
            ["diagnose", str(good), "--top", HOSTILE],
        ]
    )
    return _case(
        fc,
        rng,
        "inject",
        argv[0],
        argv,
        inputs=[hostile, good, saved],
        env={"GPUSCOPE_HISTORY": str(history)},
    )


def _history_with(path: Path, seeds: Any, labels: list[str | None]) -> None:
    import msgspec

    from gpuscope.compare.diff import RunSummary
    from gpuscope.history import History

    summary = msgspec.json.decode(seeds.extra.summary_json, type=RunSummary)
    with History(path) as store:
        for label in labels:
            store.save(summary, label=label)


# --- MCP sessions ---------------------------------------------------------------------------------


def mcp_case(fc: Any, rng: random.Random, seeds: Any, work: Path) -> Any:
    good = _good(work, seeds.kineto)
    fifo = work / "pipe.json"
    os.mkfifo(fifo)
    calls = []
    for _ in range(rng.choice([1, 2, 3])):
        calls.append(
            rng.choice(
                [
                    (
                        "diagnose",
                        rng.choice(
                            ["", " ", str(fifo), str(good), str(work / "none.json"), str(work)]
                        ),
                    ),
                    ("explain", str(good), rng.choice([0, -1, 1, 2, 10**30])),
                    (
                        "report",
                        str(good),
                        rng.choice(
                            [
                                str(good),
                                str(fifo),
                                str(private_null(work)),
                                str(work),
                                str(work / "r.html"),
                                "",
                            ]
                        ),
                    ),
                    ("diff", str(good), rng.choice(["#99999999999999999999", "#1", str(good), ""])),
                    ("list", rng.choice([str(work), "", str(good)])),
                ]
            )
        )

    def run() -> list[tuple[str, str]]:
        from gpuscope import _files
        from gpuscope.commands import _agent
        from gpuscope.errors import InputError

        session = _agent.Session()
        problems: list[tuple[str, str]] = []
        for call in calls:
            _files.forget_inputs()
            try:
                if call[0] == "diagnose":
                    answer = session.diagnose(call[1])
                elif call[0] == "explain":
                    answer = session.explain(call[1], call[2])
                elif call[0] == "report":
                    answer = session.report(call[1], call[2])
                elif call[0] == "diff":
                    answer = session.diff(call[1], call[2])
                else:
                    answer = _agent.list_traces(call[1])
            except InputError:
                continue
            try:
                json.dumps(answer, allow_nan=False)
            except ValueError as error:
                problems.append(("implausible", f"{call[0]}: {error}"))
            problems += [("implausible", f"{call[0]}: {p}") for p in fc.implausible(answer)[:3]]
        return problems

    return _case(
        fc,
        rng,
        "mcp",
        str(calls)[:200],
        ["mcp"],
        inputs=[good],
        specials=[fifo],
        custom=run,
        needs_timeout=True,
    )


# --- concurrent writers and kills -----------------------------------------------------------------

_KILLED_WRITER = """
import sys, time
from gpuscope import _files
def pieces():
    for i in range(200):
        yield b"n" * 50_000
        time.sleep(0.002)
_files.write_output(sys.argv[1], pieces())
print("done", flush=True)
"""


def concurrent_case(fc: Any, rng: random.Random, seeds: Any, work: Path) -> Any:
    kind = rng.choice(["fleet", "history", "fleet", "history", "kill-9"])

    def run() -> list[tuple[str, str]]:
        if kind == "fleet":
            return _concurrent_fleet(seeds, work, rng.choice([2, 3, 4]))
        if kind == "history":
            return _concurrent_history(seeds, work, rng.choice([2, 3, 4]))
        return _killed(work, rng.uniform(0.0, 0.5))

    return _case(
        fc,
        rng,
        "concurrent",
        kind,
        [kind if kind != "kill-9" else "kill-9"],
        custom=run,
        needs_timeout=True,
    )


def _threads(targets: list[Callable[[], None]]) -> list[str]:
    errors: list[str] = []

    def guarded(target: Callable[[], None]) -> None:
        try:
            target()
        except Exception as error:  # judged: any exception from a writer is a finding
            errors.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def _concurrent_fleet(seeds: Any, work: Path, writers: int) -> list[tuple[str, str]]:
    import msgspec

    from gpuscope import fleet

    doc = json.loads(seeds.extra.fleet_json)
    table = work / "fleet.json"

    def part(i: int) -> fleet.FleetTable:
        jobs = [msgspec.convert({**j, "path": f"job{i}"}, fleet.JobRow) for j in doc["jobs"]]
        found = [
            msgspec.convert({**f, "path": f"job{i}"}, fleet.FindingRow) for f in doc["findings"]
        ]
        return fleet.FleetTable(jobs, found)

    errors = _threads([lambda i=i: fleet.store(part(i), table) for i in range(writers)])
    problems = [("traceback", e) for e in errors]
    kept = sorted({j.path for j in fleet.read(table).jobs})
    if kept != [f"job{i}" for i in range(writers)]:
        problems.append(("misread", f"{writers} concurrent fleet writers kept {kept}"))
    return problems


def _concurrent_history(seeds: Any, work: Path, writers: int) -> list[tuple[str, str]]:
    import msgspec

    from gpuscope.compare.diff import RunSummary
    from gpuscope.history import History

    path = work / "history.sqlite"
    summary = msgspec.json.decode(seeds.extra.summary_json, type=RunSummary)

    def save(i: int) -> None:
        with History(path) as store:
            store.save(summary, label=f"w{i}")

    problems = [("traceback", e) for e in _threads([lambda i=i: save(i) for i in range(writers)])]
    with History(path, readonly=True) as store:
        labels = sorted(r.label or "" for r in store.runs())
    if labels != [f"w{i}" for i in range(writers)]:
        problems.append(("misread", f"{writers} concurrent saves kept {labels}"))
    return problems


def _killed(work: Path, delay_s: float) -> list[tuple[str, str]]:
    target = work / "out.bin"
    target.write_bytes(b"old")
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(target)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")},
    )
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(delay_s)
    if child.poll() is None:
        child.send_signal(signal.SIGKILL)
    child.wait(30)
    data = target.read_bytes()
    problems = []
    if data not in (b"old", b"n" * 50_000 * 200):
        problems.append(("overwritten", f"killed mid-write: {len(data)} bytes, neither file whole"))
    # A temporary of a killed writer is swept by the next write to the same path.
    from gpuscope import _files

    _files.write_output(target, b"after")
    left = [p.name for p in work.iterdir() if p.name.endswith(".tmp")]
    if left:
        problems.append(("leftover", f"temporaries left after a kill and a write: {left}"))
    return problems


# --- the family -----------------------------------------------------------------------------------

BUILDERS: dict[str, Callable[[Any, random.Random, Any, Path], Any]] = {
    "saved": saved_case,
    "special-out": special_case,
    "env": env_case,
    "timestamps": timestamps_case,
    "preserving": preserving_case,
    "inject": inject_case,
    "mcp": mcp_case,
    "concurrent": concurrent_case,
}


def close_sockets() -> None:
    while _SOCKETS:
        _SOCKETS.pop().close()
