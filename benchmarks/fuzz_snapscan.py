"""Mutation fuzzing of the C snapshot scanner (``readers/_snapscan.c``) against the reference
reader (the no-globals unpickler), in process, no dependencies.

Seeds are generated snapshots (every planted cause, protocols 2, 4 and 5) and small odd ones;
each run flips, inserts, deletes, truncates or splices bytes of a seed, then reads the result
both ways. The two must agree: the same record, or both a one-line error (messages that differ
are counted, not failures: the unpickler's wording of a broken opcode is its own). A crash kills
the process: the input being read is always in ``--out``/current.pickle first. With an
AddressSanitizer build it also finds memory errors::

    (cd src/gpuscope/readers && gcc -O1 -g -fsanitize=address -shared -fPIC \\
        $(python3-config --includes) _snapscan.c -o _snapscan$(python3-config --extension-suffix))
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) \\
        ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \\
        python benchmarks/fuzz_snapscan.py --runs 20000

(``allocator_may_return_null``: the unpickler asks for absurd sizes a mutated length gives, and
must get its MemoryError; then rebuild normally: ``pip install -e . --no-deps``).
"""

from __future__ import annotations

import argparse
import pickle
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from gpuscope.errors import InputError
from gpuscope.model import MemoryRecord
from gpuscope.readers import snapshot
from gpuscope.testing.memory import MEMORY_CAUSES, generate_snapshot

BUDGET = 4 << 30


def seeds() -> list[bytes]:
    found = []
    for cause in MEMORY_CAUSES:
        document, _ = generate_snapshot(cause, seed=1, layers=2)
        found += [pickle.dumps(document, protocol=p) for p in (2, 4, 5)]
    frame = {"filename": "/u/a.py", "line": 3, "name": "f"}
    entry = {"action": "alloc", "addr": 1 << 40, "size": 512, "stream": 0, "time_us": 7}
    odd = {
        "segments": [],
        "device_traces": [[entry | {"frames": [frame]}, entry | {"action": "x"}], []],
    }
    found.append(pickle.dumps(odd, protocol=4))
    return found


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4))):
        at = rng.randrange(len(b)) if b else 0
        kind = rng.randrange(6)
        if kind == 0 and b:
            b[at] = rng.randrange(256)
        elif kind == 1:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif kind == 2:
            del b[at : at + rng.randint(1, 16)]
        elif kind == 3:
            del b[at:]
        elif kind == 4 and b:
            b[at] = rng.choice(b"()]}eausqhj\x94\x8c\x8a\x85\x86\x87.0120N")
        else:
            other = rng.choice(pool)
            start = rng.randrange(len(other))
            b[at:at] = other[start : start + rng.randint(1, 64)]
    return bytes(b)


def outcome(read: object, path: Path) -> MemoryRecord | str:
    try:
        job = read(path, BUDGET)  # type: ignore[operator]
        return job.memory[0]  # type: ignore[no-any-return]
    except InputError as error:
        return "error: " + str(error).splitlines()[0]


def same(a: MemoryRecord, b: MemoryRecord) -> bool:
    for field in MemoryRecord.__struct_fields__:
        x, y = getattr(a, field), getattr(b, field)
        if field in ("segments", "blocks", "events"):
            if not all(np.array_equal(getattr(x, c), getattr(y, c)) for c in x.__struct_fields__):
                return False
        elif x != y:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="gpuscope-fz-")))
    args = parser.parse_args()
    if snapshot._snapscan is None:
        sys.exit("fuzz_snapscan: the scanner is not built")
    rng = random.Random(args.seed)
    pool = seeds()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "current.pickle"
    counts = {"same record": 0, "both errors": 0, "errors worded apart": 0, "fell back": 0}
    disagreements = 0
    start = time.perf_counter()
    for run in range(args.runs):
        data = mutate(rng, rng.choice(pool), pool)
        path.write_bytes(data)

        def scanned(p: Path, budget: int) -> object:
            try:
                return snapshot._read_scanned(p, budget)
            except snapshot._UnfollowedError:
                counts["fell back"] += 1
                return snapshot._read_decoded(p, budget)

        a, b = outcome(scanned, path), outcome(snapshot._read_decoded, path)
        if isinstance(a, str) and isinstance(b, str):
            counts["both errors" if a == b else "errors worded apart"] += 1
        elif isinstance(a, MemoryRecord) and isinstance(b, MemoryRecord) and same(a, b):
            counts["same record"] += 1
        else:
            disagreements += 1
            kept = args.out / f"disagree-{run}.pickle"
            kept.write_bytes(data)
            print(f"disagreement: {kept}: {str(a)[:120]!r} vs {str(b)[:120]!r}")
        if (run + 1) % 500 == 0 or run + 1 == args.runs:
            print(
                f"{run + 1:,} inputs in {time.perf_counter() - start:.0f} s: "
                + ", ".join(f"{k} {v:,}" for k, v in counts.items())
                + f"; disagreements {disagreements}",
                flush=True,
            )
    sys.exit(1 if disagreements else 0)


if __name__ == "__main__":
    main()
