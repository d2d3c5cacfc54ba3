"""Peak memory of ``gpuscope diagnose`` on huge generated Kineto traces (issue #22 item 3).

Usage::

    python benchmarks/memory.py --size 2G            # build a 2 GB trace in /tmp, measure, delete
    python benchmarks/memory.py --size 8G --keep     # keep the trace for another run
    python benchmarks/memory.py --trace big.json.gz  # measure an existing trace

The trace is a generated training loop (``gpuscope.testing.generator``) whose steps are
repeated, each copy shifted in time and in its ids (correlation, External id, Python id, flow id,
step number), until the decompressed text reaches ``--size``; it is written gzip (level 1),
streaming, so this script never holds more than one copy of the base steps. ``--size`` counts
decompressed bytes.

The measurement runs ``gpuscope diagnose TRACE --json OUT`` in a child process and reads its peak
resident set from ``wait4`` (``ru_maxrss``): the file's text is never all in memory when that peak
stays below the text's size. The child runs with ``nice``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from zlib_ng import zlib_ng

ROOT = Path(__file__).resolve().parents[1]
_ID_ARGS = ("Python id", "Python parent id", "External id", "correlation")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def parse_size(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)i?B?", text.strip(), re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 2G")
    return int(float(match.group(1)) * units[match.group(2).upper()])


class _Template:
    """One event as text with holes for the values each copy shifts."""

    def __init__(self, event: dict[str, Any], id_span: int, step_count: int) -> None:
        holes: dict[str, Any] = {}
        event = json.loads(json.dumps(event))
        if isinstance(event.get("ts"), (int, float)):
            holes["ts"] = float(event["ts"])
            event["ts"] = "\x00ts"
        args = event.get("args")
        if isinstance(args, dict):
            for key in _ID_ARGS:
                if isinstance(args.get(key), int):
                    holes[key] = args[key]
                    args[key] = f"\x00{key}"
        if isinstance(event.get("id"), int):
            holes["id"] = event["id"]
            event["id"] = "\x00id"
        step = _STEP.match(str(event.get("name", "")))
        if step:
            holes["step"] = int(step.group(1))
            event["name"] = "\x00step"
        text = json.dumps(event).replace("%", "%%")
        for key in holes:
            text = text.replace(json.dumps(f"\x00{key}"), f"%({key})s")
        self.text = text
        self.holes = holes
        self.id_span = id_span
        self.step_count = step_count

    def render(self, copy: int, shift_us: float) -> str:
        values: dict[str, str] = {}
        for key, value in self.holes.items():
            if key == "ts":
                values[key] = f"{value + shift_us:.3f}"
            elif key == "step":
                values[key] = json.dumps(f"ProfilerStep#{value + copy * self.step_count}")
            else:
                values[key] = str(value + copy * self.id_span)
        return self.text % values


def build(path: Path, size: int, steps: int = 20) -> dict[str, Any]:
    """Write a gzip Kineto trace of about ``size`` decompressed bytes to ``path``."""
    sys.path.insert(0, str(ROOT / "src"))
    from gpuscope.testing.generator import GeneratorConfig, generate

    document = generate(GeneratorConfig(seed=7, steps=steps)).document
    events = document["traceEvents"]
    once = [e for e in events if e.get("ph") not in ("X", "s", "f")]
    repeated = [e for e in events if e.get("ph") in ("X", "s", "f")]
    ends = [e["ts"] + e.get("dur", 0) for e in repeated if isinstance(e.get("ts"), (int, float))]
    starts = [e["ts"] for e in repeated if isinstance(e.get("ts"), (int, float))]
    span_us = float(int(max(ends) - min(starts)) + 100)
    ids = [
        v
        for e in repeated
        for v in [e.get("id"), *((e.get("args") or {}).get(k) for k in _ID_ARGS)]
        if isinstance(v, int)
    ]
    id_span = max(ids) + 1
    templates = [_Template(e, id_span, steps) for e in repeated]
    head = {k: v for k, v in document.items() if k != "traceEvents"}
    deflate = zlib_ng.compressobj(1, zlib_ng.DEFLATED, 16 + zlib_ng.MAX_WBITS)
    written = copies = 0
    with path.open("wb") as out:

        def put(text: str) -> None:
            nonlocal written
            data = text.encode()
            written += len(data)
            out.write(deflate.compress(data))

        put("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items()))
        put('  "traceEvents": [\n  ' + ",\n  ".join(json.dumps(e) for e in once))
        while written < size:
            shift = copies * span_us
            put(",\n  " + ",\n  ".join(t.render(copies, shift) for t in templates))
            copies += 1
        put("\n  ]\n}\n")
        out.write(deflate.flush())
    return {"text_bytes": written, "file_bytes": path.stat().st_size, "copies": copies}


def measure(trace: Path, extra: list[str]) -> dict[str, Any]:
    """Peak RSS and wall time of ``gpuscope diagnose`` on ``trace`` in a child process."""
    out = Path(f"/tmp/gpuscope-mem-{os.getpid()}.json")
    command = [sys.executable, "-m", "gpuscope", "diagnose", str(trace), "--json", str(out), *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    started = time.perf_counter()
    child = subprocess.Popen(
        ["nice", *command], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    stderr = child.stderr.read().decode() if child.stderr else ""
    verdict = None
    if out.exists():
        verdict = json.loads(out.read_text()).get("verdict", {}).get("summary")
        out.unlink()
    return {
        "exit": os.waitstatus_to_exitcode(status),
        "peak_rss_mib": usage.ru_maxrss / 1024,
        "wall_s": round(wall, 1),
        "verdict": verdict,
        "stderr": stderr.strip()[-400:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=parse_size("2G"))
    parser.add_argument("--trace", type=Path, help="measure this trace instead of building one")
    parser.add_argument("--keep", action="store_true", help="keep the built trace")
    parser.add_argument("extra", nargs="*", help="more options for gpuscope diagnose")
    args = parser.parse_args()
    trace = args.trace
    built: dict[str, Any] = {}
    if trace is None:
        trace = Path(f"/tmp/gpuscope-mem-{args.size >> 20}M.json.gz")
        started = time.perf_counter()
        built = build(trace, args.size)
        built["build_s"] = round(time.perf_counter() - started, 1)
        print(json.dumps({"built": str(trace), **built}), flush=True)
    try:
        result = measure(trace, args.extra)
    finally:
        if args.trace is None and not args.keep:
            trace.unlink()
    print(json.dumps({"trace": str(trace), **built, **result}, indent=1))


if __name__ == "__main__":
    main()
