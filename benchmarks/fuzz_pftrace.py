"""Fuzz the C ``.pftrace`` walker against its pure-Python twin (the protobuf reader).

Seeds: a generated run in both of PyTorch's layouts (``gpuscope.testing``), or the ``.pftrace``
files given. Each round cuts, flips, inserts or drops bytes of a seed, reads the result with the
walker and without it, and requires the same trace (every column, name, argument, step, device,
warning and counter) or the same one-line error. Exits 1 at the first disagreement, writing the
input to ``pftrace-disagreement.bin``. Run it under ASan/UBSan with ``scripts/sanitize_pftrace``.

    python benchmarks/fuzz_pftrace.py [--rounds 2000] [--seed 1] [FILE.pftrace ...]
"""

from __future__ import annotations

import argparse
import gzip
import random
import sys
import tempfile
from pathlib import Path

from gpuscope.errors import InputError
from gpuscope.model import Trace
from gpuscope.readers import load
from gpuscope.readers.pftrace import _columns
from gpuscope.testing import generator as g
from gpuscope.testing.pftrace import damaged, to_pftrace
from gpuscope.testing.same import trace_difference


def _read(path: Path, walker: object) -> Trace | str:
    saved, _columns._pfscan = _columns._pfscan, walker  # type: ignore[assignment]
    try:
        return load(path).traces[0]
    except InputError as error:
        return str(error)
    finally:
        _columns._pfscan = saved


def disagreement(a: Trace | str, b: Trace | str) -> str | None:
    """What differs between the walker's read and the twin's (None: nothing)."""
    if isinstance(a, str) or isinstance(b, str):
        return None if a == b else f"{a!r} / {b!r}"
    return trace_difference(a, b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    walker = _columns._pfscan
    if walker is None:
        sys.exit("fuzz_pftrace: the C walker is not built (pip install -e .)")
    rng = random.Random(args.seed)
    seeds = [p.read_bytes() for p in args.files]
    if not seeds:
        doc = g.generate(g.GeneratorConfig(seed=args.seed, steps=2, layers=2)).document
        seeds = [gzip.decompress(to_pftrace(doc, "cuspy")), to_pftrace(doc, "monitor")]
    seeds = [gzip.decompress(s) if s[:2] == b"\x1f\x8b" else s for s in seeds]
    outcomes = {"same trace": 0, "same error": 0}
    with tempfile.TemporaryDirectory(prefix="gpuscope-fuzz-pftrace-") as scratch:
        path = Path(scratch) / "mutant.pftrace"
        for _ in range(args.rounds):
            seed = rng.choice(seeds)
            data = damaged(seed, rng, rng.randrange(1, 4))
            path.write_bytes(data)
            walked, decoded = _read(path, walker), _read(path, None)
            differs = disagreement(walked, decoded)
            if differs is not None:
                Path("pftrace-disagreement.bin").write_bytes(data)
                print(f"fuzz_pftrace: the walker and protobuf disagree ({differs})")
                return 1
            outcomes["same error" if isinstance(walked, str) else "same trace"] += 1
    print(f"fuzz_pftrace: {args.rounds} mutants, walker = protobuf on all: {outcomes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
