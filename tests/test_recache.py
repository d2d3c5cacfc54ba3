"""Compiled regexes kept between runs (gpuscope._recache): a kept pattern matches as the one
``re`` compiles, a file made for another engine or corrupt is not read, and nothing is written
where Python writes no bytecode."""

from __future__ import annotations

import marshal
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope import _recache

PATTERNS: list[tuple[str | bytes, int]] = [
    (r"^(?P<file>.*)\((?P<line>\d+)\): (.*)$", 0),
    (r"nccl|rccl|all_?reduce|\bsend\b", re.IGNORECASE),
    (r"\bH100[- ]SXM5?[- ]80GB\b(?!\s*(Ti|Laptop))", re.IGNORECASE),
    (rb'"traceEvents"\s*:\s*\[', 0),
    (r"[\u202a-\u202e\u2066-\u2069]", 0),
    (r"(?i)warm[\W_]?ups?|compil(?:e|ing)", re.ASCII),
]
TEXTS: list[str | bytes] = [
    "train.py(42): forward",
    "ncclDevKernel_AllReduce_Sum",
    "NVIDIA H100 SXM5 80GB",
    b'{"traceEvents" : [',
    "name\u202eevil",
    "Warm-Up step",
]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(_recache, "_directory", lambda: str(tmp_path))
    yield tmp_path
    re.purge()


def _matches() -> list[object]:
    """Every pattern compiled anew (re's own cache emptied) and searched in its text."""
    re.purge()
    found = []
    for (pattern, flags), text in zip(PATTERNS, TEXTS, strict=True):
        match = re.compile(pattern, flags).search(text)  # type: ignore[call-overload]
        found.append(None if match is None else (match.span(), match.groups(), match.groupdict()))
    return found


def _run() -> _recache.Kept:
    """One "process": install, compile and match every pattern, put re back, save."""
    kept = _recache.install(at_exit=False)
    assert kept is not None
    try:
        assert _matches() == EXPECTED
    finally:
        kept.undo()
    kept.save()
    return kept


EXPECTED = _matches()


def test_kept_patterns_match_as_compiled_ones(cache_dir: Path) -> None:
    first = _run()
    assert len(first.made) == len(PATTERNS) and not first.kept
    (saved,) = cache_dir.iterdir()
    assert saved.name == f"regex.{sys.implementation.cache_tag}.marshal"
    second = _run()  # every pattern from the file, none compiled
    assert len(second.kept) == len(PATTERNS) and not second.made
    assert saved.read_bytes() == (cache_dir / saved.name).read_bytes()


def test_a_file_for_another_engine_or_corrupt_is_not_read(cache_dir: Path) -> None:
    _run()
    (saved,) = cache_dir.iterdir()
    made_for, patterns = marshal.loads(saved.read_bytes())
    saved.write_bytes(marshal.dumps((("cpython-399", *made_for[1:]), patterns)))
    assert not _run().kept  # read as none, and written again for this engine
    saved.write_bytes(saved.read_bytes()[:100])  # cut short
    assert not _run().kept
    saved.write_bytes(b"\x00not marshal")
    assert not _run().kept


def test_code_the_engine_refuses_is_compiled_anew(cache_dir: Path) -> None:
    _run()
    (saved,) = cache_dir.iterdir()
    made_for, patterns = marshal.loads(saved.read_bytes())
    broken = {key: (e[0], [255, 255, 255], *e[2:]) for key, e in patterns.items()}
    saved.write_bytes(marshal.dumps((made_for, broken)))
    again = _run()  # every match still right: the refused code was replaced by a compile
    assert len(again.made) == len(PATTERNS)


def test_nothing_is_written_where_python_writes_no_bytecode(tmp_path: Path) -> None:
    """The console script installs it; ``-B`` (as ``PYTHONDONTWRITEBYTECODE``) writes nothing."""
    prefix = tmp_path / "pycache"
    program = (
        "from gpuscope import _recache; import re;"
        "assert _recache.install() is not None; re.compile(r'gpuscope-test-(\\d+)x')"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for flags, written in ((["-B"], False), ([], True)):
        subprocess.run(
            [sys.executable, *flags, "-X", f"pycache_prefix={prefix}", "-c", program],
            check=True,
            env=env,
        )
        assert bool(list(prefix.rglob("regex.*.marshal"))) == written
