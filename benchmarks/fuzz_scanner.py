"""A coverage-guided fuzz target for the C scanner (atheris, i.e. libFuzzer, in process).

Each input is scanned in small and large pieces; the scanner must return or raise ``ValueError``
(declined) or ``GzipError``. For inputs it reads, the msgspec reader must read the same document
to the same events (the harness's agreement check), so a wrong column is a finding too, not only
a crash. With the sanitised build of ``scripts/sanitize_scanner`` it also finds memory errors::

    pip install atheris
    python benchmarks/fuzz_scanner.py -max_total_time=600 -max_len=65536 [CORPUS_DIR]

atheris instruments Python; libFuzzer sees the C scanner's branches only when the extension is
built with clang's ``-fsanitize=fuzzer-no-link`` (``CC=clang
CFLAGS=-fsanitize=fuzzer-no-link,address python setup.py build_ext --inplace``). Built with gcc,
it mutates without coverage feedback from C.
libFuzzer's own flags apply (``-runs=N``, ``-jobs=N``, a corpus folder of seeds: the generated
trace is added when none is given). Crashing inputs are written as ``crash-*`` files.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    try:
        import atheris
    except ImportError:
        sys.exit("fuzz_scanner: needs atheris (pip install atheris)")
    with atheris.instrument_imports():
        from gpuscope.readers import _kscan

    import fuzz_cli

    scratch = Path(tempfile.mkdtemp(prefix="gpuscope-atheris-"))
    trace = scratch / "t.json"

    def one_input(data: bytes) -> None:
        for piece in (64, 4 << 20):
            fd = os.memfd_create("scan")
            try:
                os.write(fd, data)
                os.lseek(fd, 0, os.SEEK_SET)
                _kscan.scan_file(fd, piece, bytearray(1), 1 << 30, 1 << 30)
            except (ValueError, _kscan.GzipError, _kscan.LimitError):
                return
            finally:
                os.close(fd)
        trace.write_bytes(data)
        disagreement = fuzz_cli.compare_readers(trace)
        if disagreement is not None:
            raise AssertionError(disagreement)

    args = list(sys.argv)
    if not any(not a.startswith("-") for a in args[1:]):
        seeds = scratch / "seeds"
        seeds.mkdir()
        (seeds / "generated.json").write_bytes(fuzz_cli.kineto_seed())
        args.append(str(seeds))
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
