"""How long a large PyTorch memory snapshot takes to diagnose, and the peak memory it takes.

Writes a generated snapshot of about ``--size-mb`` (default 1024) shaped as
``torch.cuda.memory._dump_snapshot`` writes one (protocol 4, memoised strings, a traceback list
of its own per trace entry, its frames dicts shared among all tracebacks, as
``torch/csrc/profiler/combined_traceback.cpp`` builds them; the tracebacks drawn from a few
thousand call paths, as a training loop repeats its allocations), streaming the pickle opcodes so
that writing it takes no memory; then runs ``gpuscope diagnose --json`` on it in a child process
under ``/usr/bin/time`` and prints the wall time and the peak RSS.

Run: ``python benchmarks/memory_snapshot.py [--size-mb 1024] [--keep PATH]``
The issue's target: 1 GB diagnosed in under 60 s with a peak RSS under 3 GB (benchmarks/README.md
has the figures measured).
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


#: Distinct call paths that allocate (a training step repeats the same few thousand), each
#: TRACEBACK_FRAMES frames drawn from a pool of FRAMES distinct frames.
CALL_PATHS = 2000
FRAMES = 400
TRACEBACK_FRAMES = 12
_LONG_BINGET = struct.Struct("<cI")
_LONG8 = struct.Struct("<q")


class _Writer:
    """Pickle opcodes by hand (protocol 4) as ``pickle.dump`` writes a snapshot, the memo numbered
    as the unpickler numbers it; each entry's bytes packed at once (a GB takes a minute)."""

    def __init__(self, out: io.BufferedWriter) -> None:
        self.out = out
        self.memo = 0
        self.strings: dict[str, int] = {}
        self.frames: dict[int, int] = {}  # frame number -> its dict's memo index
        out.write(b"\x80\x04")

    def memoize(self) -> bytes:
        self.memo += 1
        return b"\x94"

    def get(self, index: int) -> bytes:
        return _LONG_BINGET.pack(b"j", index)

    def string(self, text: str) -> bytes:
        known = self.strings.get(text)
        if known is not None:
            return self.get(known)
        data = text.encode()
        self.strings[text] = self.memo
        return b"\x8c" + bytes([len(data)]) + data + self.memoize()

    def frame(self, f: int) -> bytes:
        known = self.frames.get(f)
        if known is not None:
            return self.get(known)
        file = f"/work/proj/model_{f % 20}.py" if f % 3 else f"/venv/torch/nn/f{f % 7}.py"
        index = self.memo
        data = b"}" + self.memoize() + b"("
        data += self.string("filename") + self.string(file)
        data += self.string("line") + b"J" + struct.pack("<i", 10 + f)
        data += self.string("name") + self.string("forward") + b"u"
        self.frames[f] = index
        return data

    def entry(self, action: str, addr: int, size: int, time_us: int, path: list[int]) -> bytes:
        """One trace entry, with its own traceback list (torch builds one per entry) of frames
        shared among all tracebacks."""
        data = b"}" + self.memoize() + b"("
        data += self.string("action") + self.string(action)
        data += self.string("addr") + b"\x8a\x08" + _LONG8.pack(addr)
        data += self.string("size") + b"\x8a\x08" + _LONG8.pack(size)
        data += self.string("stream") + b"K\x00"
        data += self.string("time_us") + b"\x8a\x08" + _LONG8.pack(time_us)
        data += self.string("compile_context") + self.string("N/A")
        data += self.string("user_metadata") + self.string("")
        data += self.string("frames") + b"]" + self.memoize() + b"("
        data += b"".join([self.frame(f) for f in path]) + b"e"
        return data + b"u"


def write_snapshot(path: Path, size_bytes: int, seed: int = 0) -> tuple[int, int]:
    """A training loop's snapshot of about ``size_bytes`` of pickle (gzip for a ``.gz`` name);
    returns the trace entries and the bytes of pickle written."""
    rng = random.Random(seed)
    paths = [rng.sample(range(FRAMES), TRACEBACK_FRAMES) for _ in range(CALL_PATHS)]
    gzipped = path.suffix == ".gz"
    with gzip.open(path, "wb", compresslevel=1) if gzipped else path.open("wb") as raw:
        out = io.BufferedWriter(raw, 1 << 22)  # type: ignore[arg-type]
        w = _Writer(out)
        out.write(b"}" + w.memoize() + b"(" + w.string("segments"))
        # no segments: the trace alone (the dump is small beside it)
        out.write(b"]" + w.memoize() + w.string("device_traces") + b"]" + w.memoize())
        out.write(b"]" + w.memoize() + b"(")
        entries = 0
        live: list[tuple[int, int, list[int]]] = []
        address = 1 << 40
        time_us = 1_700_000_000_000_000
        batch = 0
        written = 0
        while written < size_bytes:
            if live and (len(live) > 2000 or rng.random() < 0.45):
                addr, size, where = live.pop(rng.randrange(len(live)))
                actions: tuple[str, ...] = ("free_requested", "free_completed")
            else:
                addr, size = address, rng.choice((512, 4096, 1 << 20, 8 << 20))
                address += size
                where = paths[rng.randrange(CALL_PATHS)]
                live.append((addr, size, where))
                actions = ("alloc",)
            for action in actions:
                time_us += rng.randint(1, 30)
                data = w.entry(action, addr, size, time_us, where)
                written += len(data)
                out.write(data)
                entries += 1
                batch += 1
                if batch == 1000:
                    out.write(b"e(")
                    batch = 0
        out.write(b"e")  # the last batch of entries
        out.write(b"a")  # device_traces: [entries]
        out.write(b"u.")
        out.flush()
    return entries, written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--keep", type=Path, help="Write the snapshot here and keep it.")
    parser.add_argument("--gzip", action="store_true", help="Write it gzip (level 1).")
    parser.add_argument(
        "--phases", action="store_true", help="Then, in process: reading and diagnosing apart."
    )
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="gpuscope-snapshot-")
    path = args.keep or Path(folder) / ("snapshot.pickle.gz" if args.gzip else "snapshot.pickle")
    start = time.perf_counter()
    entries, size = write_snapshot(path, args.size_mb * MIB)
    print(
        f"wrote {size / MIB:,.0f} MiB of pickle ({path.stat().st_size / MIB:,.0f} MiB on disk),"
        f" {entries:,} trace entries, in {time.perf_counter() - start:.1f} s"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    timing = Path(folder) / "time.txt"
    command = ["/usr/bin/time", "-f", "%e %M", "-o", str(timing), sys.executable, "-m", "gpuscope"]
    result = subprocess.run(
        [*command, "diagnose", str(path), "--json", os.devnull],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall, rss_kb = timing.read_text().split()[-2:]
    print(
        f"diagnose: exit {result.returncode}, {float(wall):.1f} s wall,"
        f" peak RSS {int(rss_kb) / 1024:,.0f} MiB"
    )
    if result.returncode:
        print(result.stderr.strip()[-400:])
    print(
        f"per MiB of snapshot: {float(wall) / (size / MIB) * 1000:.1f} ms,"
        f" {int(rss_kb) / 1024 / (size / MIB):.2f} MiB of RSS"
    )
    if args.phases:
        phases(path)
    if args.keep is None:
        path.unlink()


def phases(path: Path) -> None:
    """Reading (the scanner, then the record from its columns) and the diagnosis, timed apart."""
    sys.path.insert(0, str(ROOT / "src"))
    from gpuscope.diagnosis import diagnose
    from gpuscope.readers import load

    start = time.perf_counter()
    job = load(path)
    read = time.perf_counter()
    diagnose(job)
    print(
        f"in process: read {read - start:.1f} s (scan and record),"
        f" diagnose {time.perf_counter() - read:.1f} s"
    )


if __name__ == "__main__":
    main()
