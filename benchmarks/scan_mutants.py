"""Feed the C scanner (``_kscan.scan_file``) the corpus and seeded mutants of it, directly.

Run by ``scripts/sanitize_scanner`` under AddressSanitizer and UndefinedBehaviorSanitizer, where
any memory error or undefined behaviour aborts the process with a report; run as it is, it only
checks that the scanner returns or raises ``ValueError`` / ``GzipError`` for every input::

    python benchmarks/scan_mutants.py --mutants 2000 --seed 1

Inputs: every Kineto file of the corpus (``$GPUSCOPE_CORPUS``, else ``../shared/corpus``), the
generated seed trace, and ``--mutants`` mutants made by ``fuzz_cli``'s Kineto mutations (plain and
gzip), each scanned with small and large pieces so that values straddle piece boundaries.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fuzz_cli


def scan(data: bytes, piece: int) -> str:
    from gpuscope.readers import _kscan

    fd = os.memfd_create("scan")  # the scanner reads a descriptor, a slice at a time
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        # Small limits too: the bounded paths (text limit, memory budget) run under the sanitizers.
        text_limit, memory_limit = (1 << 40, 1 << 40) if piece > 64 else (1 << 16, 1 << 18)
        _kscan.scan_file(fd, piece, bytearray(1), text_limit, memory_limit)
    except _kscan.GzipError:
        return "gzip error"
    except _kscan.LimitError:
        return "limit"
    except ValueError:
        return "declined"
    finally:
        os.close(fd)
    return "scanned"


def inputs(mutants: int, seed: int) -> list[tuple[str, bytes]]:
    found: list[tuple[str, bytes]] = []
    root = fuzz_cli.CORPUS / "kineto"
    for path in sorted(root.rglob("*.json*")) if root.exists() else []:
        if path.stat().st_size < (64 << 20):
            found.append((str(path.relative_to(fuzz_cli.CORPUS)), path.read_bytes()))
    base = fuzz_cli.kineto_seed()
    found.append(("generated", base))
    names = sorted(fuzz_cli.KINETO)
    for i in range(mutants):
        rng = random.Random(f"scan:{seed}:{i}")
        name = names[i % len(names)]
        data = fuzz_cli.KINETO[name](rng, base)
        if rng.random() < 0.3:
            data = gzip.compress(data, 1, mtime=0)
            if rng.random() < 0.3:
                data = data[: rng.randrange(10, len(data))]
        found.append((f"{name}#{i}", data))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    began = time.perf_counter()
    outcomes: dict[str, int] = {}
    cases = inputs(args.mutants, args.seed)
    for _name, data in cases:
        for piece in (64, 4 << 20):
            outcome = scan(data, piece)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
    elapsed = time.perf_counter() - began
    print(f"{len(cases)} inputs scanned twice each in {elapsed:.0f} s: {outcomes}")


if __name__ == "__main__":
    main()
