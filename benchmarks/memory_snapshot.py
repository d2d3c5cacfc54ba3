"""How long a large PyTorch memory snapshot takes to diagnose, and the peak memory it takes.

Writes a generated snapshot of about ``--size-mb`` (default 1024) shaped as
``torch.cuda.memory._dump_snapshot`` writes one (protocol 4, memoised strings, one traceback list
per allocation shared by its alloc and free entries, frames shared among tracebacks), streaming
the pickle opcodes so that writing it takes no memory; then runs ``gpuscope diagnose --json`` on
it in a child process under ``/usr/bin/time`` and prints the wall time and the peak RSS.

Run: ``python benchmarks/memory_snapshot.py [--size-mb 1024] [--keep PATH]``
The issue's target: 1 GB diagnosed in under 60 s with a peak RSS under 3 GB (benchmarks/README.md
has the figures measured).
"""

from __future__ import annotations

import argparse
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


class _Writer:
    """Pickle opcodes by hand (protocol 4): the memo is numbered as the unpickler numbers it."""

    def __init__(self, out: io.BufferedWriter) -> None:
        self.out = out
        self.memo = 0
        self.frames: dict[int, int] = {}  # frame number -> its dict's memo index
        self.last_list = -1
        self.strings: dict[str, int] = {}
        out.write(b"\x80\x04")

    def memoize(self) -> int:
        self.out.write(b"\x94")
        self.memo += 1
        return self.memo - 1

    def get(self, index: int) -> None:
        self.out.write(b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index))

    def string(self, text: str) -> None:
        known = self.strings.get(text)
        if known is not None:
            self.get(known)
            return
        data = text.encode()
        self.out.write(b"\x8c" + bytes([len(data)]) + data)
        self.strings[text] = self.memoize()

    def integer(self, value: int) -> None:
        if 0 <= value < 256:
            self.out.write(b"K" + bytes([value]))
        elif -(1 << 31) <= value < 1 << 31:
            self.out.write(b"J" + struct.pack("<i", value))
        else:
            data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
            self.out.write(b"\x8a" + bytes([len(data)]) + data)

    def dict_of(self, items: list[tuple[str, object]]) -> None:
        self.out.write(b"}")
        self.memoize()
        self.out.write(b"(")
        for key, value in items:
            self.string(key)
            self.value(value)
        self.out.write(b"u")

    def value(self, value: object) -> None:
        if isinstance(value, bool):
            self.out.write(b"\x88" if value else b"\x89")
        elif isinstance(value, int):
            self.integer(value)
        elif isinstance(value, str):
            self.string(value)
        elif isinstance(value, _Ref):
            self.get(value.index)
        elif isinstance(value, _Frames):
            self.last_list = self.memo
            self.out.write(b"]")
            self.memoize()
            self.out.write(b"(")
            for f in value.frames:
                known = self.frames.get(f)
                if known is not None:
                    self.get(known)
                    continue
                self.frames[f] = self.memo
                file = f"/work/proj/model_{f % 20}.py" if f % 3 else f"/venv/torch/nn/f{f % 7}.py"
                self.dict_of([("filename", file), ("line", 10 + f), ("name", "forward")])
            self.out.write(b"e")
        else:
            raise TypeError(type(value))


class _Frames:
    """A traceback written at its allocation (frames written at their first use)."""

    def __init__(self, frames: list[int]) -> None:
        self.frames = frames


class _Ref:
    def __init__(self, index: int) -> None:
        self.index = index


def write_snapshot(path: Path, size_bytes: int, seed: int = 0) -> int:
    """A training loop's snapshot of about ``size_bytes``; returns the trace entries written."""
    rng = random.Random(seed)
    with path.open("wb") as raw:
        out = io.BufferedWriter(raw, 1 << 20)
        w = _Writer(out)
        out.write(b"}")
        w.memoize()
        out.write(b"(")
        w.string("segments")
        out.write(b"]")
        w.memoize()  # no segments: the trace alone (the dump is small beside it)
        w.string("device_traces")
        out.write(b"]")
        w.memoize()
        out.write(b"(]")
        w.memoize()
        # A pool of frames, each a dict written at its first use and shared afterwards.
        frames = list(range(400))
        entries = 0
        live: list[tuple[int, int, int]] = []
        address = 1 << 40
        time_us = 1_700_000_000_000_000
        batch = 0
        out.write(b"(")
        while raw.tell() < size_bytes:
            if live and (len(live) > 2000 or rng.random() < 0.45):
                addr, size, stack = live.pop(rng.randrange(len(live)))
                actions = ("free_requested", "free_completed")
            else:
                addr, size = address, rng.choice((512, 4096, 1 << 20, 8 << 20))
                address += size
                stack = -1  # written with the entry, as the value of its "frames"
                actions = ("alloc",)
            for action in actions:
                time_us += rng.randint(1, 30)
                w.dict_of(
                    [
                        ("action", action),
                        ("addr", addr),
                        ("size", size),
                        ("stream", 0),
                        ("time_us", time_us),
                        ("compile_context", "N/A"),
                        ("user_metadata", ""),
                        ("frames", _Ref(stack) if stack >= 0 else _Frames(rng.sample(frames, 12))),
                    ]
                )
                if stack < 0:
                    stack = w.last_list
                    live.append((addr, size, stack))
                entries += 1
                batch += 1
                if batch == 1000:
                    out.write(b"e(")
                    batch = 0
        out.write(b"e")  # the last batch of entries
        out.write(b"e")  # device_traces: [entries]
        out.write(b"u.")
        out.flush()
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--keep", type=Path, help="Write the snapshot here and keep it.")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="gpuscope-snapshot-")
    path = args.keep or Path(folder) / "snapshot.pickle"
    start = time.perf_counter()
    entries = write_snapshot(path, args.size_mb * MIB)
    size = path.stat().st_size
    print(
        f"wrote {size / MIB:,.0f} MiB, {entries:,} trace entries"
        f" in {time.perf_counter() - start:.1f} s"
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
    if args.keep is None:
        path.unlink()


if __name__ == "__main__":
    main()
