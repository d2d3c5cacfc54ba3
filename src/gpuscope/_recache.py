"""Compiled regular expressions kept between runs of the console script, as Python keeps bytecode.

Why: CPython's regex compiler (``re._parser`` and ``re._compiler``) is written in Python. A
``gpuscope diagnose`` compiles ~170 patterns (gpuscope's name tables, and the modules of the
standard library and numpy that it imports) for ~9 ms of a ~200 ms run, most of it on the thread
that imports while the trace is scanned. What the compiler makes of a pattern, the code that
``_sre.compile`` takes, depends on the pattern, its flags and the interpreter's regex engine
only: kept in a file, a pattern is rebuilt in ~1 µs.

Why the answer cannot change: a kept pattern is rebuilt from the very code the compiler made
for it (the same call ``re._compiler.compile`` ends with), and ``_sre.compile`` validates that
code as it would the compiler's. The file names the engine it was made for (cache tag, the
engine's magic number and limits); made for another, it is not read. A file that cannot be
read, or a pattern whose kept code the engine refuses, costs a compile as usual.

Where and when: beside gpuscope's bytecode (``__pycache__``, or under ``sys.pycache_prefix``),
written at exit by a run that compiled a pattern the file lacked, unless Python writes no
bytecode either (``-B``, ``PYTHONDONTWRITEBYTECODE``); a directory that cannot be written is
left alone. At most :data:`MAX_PATTERNS` are kept: a run that would pass it keeps its own.

Process state is the caller's: :func:`install` replaces ``re._compiler.compile`` for the whole
process, so only the console script calls it, for the commands that run no program of the
user's (:mod:`gpuscope.console`). It relies on that private function, whose body is the same
in CPython 3.11 to 3.13; on another interpreter or version it installs nothing.
"""

from __future__ import annotations

import atexit
import contextlib
import marshal
import os
import sys
from importlib import import_module
from typing import Any

# The regex engine and its compiler's private modules (typeshed declares none of them).
_sre: Any = import_module("_sre")
_compiler: Any = import_module("re._compiler")
_constants: Any = import_module("re._constants")
_parser: Any = import_module("re._parser")

#: How many patterns the file keeps at most.
MAX_PATTERNS = 2048
#: The interpreters whose ``re._compiler.compile`` this follows.
VERSIONS = frozenset({(3, 11), (3, 12), (3, 13)})
#: The file's name in the bytecode directory.
FILE = "regex.{tag}.marshal"

Key = tuple[str | bytes, int]
Entry = tuple[int, list[int], int, dict[str, int], tuple[str | None, ...]]


class Kept:
    """The patterns kept in the file and those this process compiled, and the compile that
    uses them (installed as ``re._compiler.compile``)."""

    def __init__(self, path: str, engine: tuple[Any, ...]) -> None:
        self.path, self.engine = path, engine
        self.kept = _read(path, engine)
        self.made: dict[Key, Entry] = {}
        self._sre_compile = _sre.compile
        self._parse, self._code = _parser.parse, _compiler._code
        self._original = _compiler.compile
        self._debug = _constants.SRE_FLAG_DEBUG

    def compile(self, p: Any, flags: int = 0) -> Any:
        """``re._compiler.compile``, from the kept code when there is some."""
        if not isinstance(p, (str, bytes)) or flags & self._debug:
            return self._original(p, flags)
        key = (p, int(flags))
        entry = self.kept.get(key) or self.made.get(key)
        if entry is not None:
            try:
                return self._sre_compile(p, *entry)
            except (RuntimeError, TypeError, ValueError):  # refused: compiled anew below
                self.kept.pop(key, None)
        parsed = self._parse(p, flags)
        code = self._code(parsed, flags)
        groupindex = parsed.state.groupdict
        indexgroup: list[str | None] = [None] * parsed.state.groups
        for name, i in groupindex.items():
            indexgroup[i] = name
        entry = (
            int(flags | parsed.state.flags),
            [int(c) for c in code],
            parsed.state.groups - 1,
            dict(groupindex),
            tuple(indexgroup),
        )
        compiled = self._sre_compile(p, *entry)
        self.made[key] = entry
        return compiled

    def undo(self) -> None:
        """Put ``re``'s own compile back."""
        _compiler.compile = self._original

    def save(self) -> None:
        """Keep what this run compiled beside what was kept (this run's alone past the limit):
        written whole to a temporary file and renamed over the old one, so that a reader never
        sees half a file."""
        if not self.made:
            return
        made, kept = self.made, self.kept
        patterns = {**kept, **made} if len(kept) + len(made) <= MAX_PATTERNS else dict(made)
        if len(patterns) > MAX_PATTERNS:
            return
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            with open(temporary, "wb") as file:
                marshal.dump((self.engine, patterns), file)
            os.replace(temporary, self.path)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                os.remove(temporary)


def install(*, at_exit: bool = True) -> Kept | None:
    """Route the process's regex compiles through the kept patterns (saved at exit with
    ``at_exit``, where Python writes bytecode); None where nothing was installed."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] not in VERSIONS:
        return None
    tag = sys.implementation.cache_tag
    engine = (tag, _sre.MAGIC, _sre.CODESIZE, _sre.MAXGROUPS)
    kept = Kept(os.path.join(_directory(), FILE.format(tag=tag)), engine)
    _compiler.compile = kept.compile
    if at_exit and not sys.dont_write_bytecode:
        atexit.register(kept.save)
    return kept


def _directory() -> str:
    """Where Python keeps this package's bytecode (``importlib.util.cache_from_source``'s rule)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.pycache_prefix:
        return os.path.join(sys.pycache_prefix, here.lstrip(os.sep))
    return os.path.join(here, "__pycache__")


def _read(path: str, engine: tuple[Any, ...]) -> dict[Key, Entry]:
    """The kept patterns, or none when the file is missing, unreadable or another engine's."""
    try:
        with open(path, "rb") as file:
            made_for, patterns = marshal.load(file)
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if made_for != engine or not isinstance(patterns, dict):
        return {}
    return patterns
