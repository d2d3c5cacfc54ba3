"""Which device work is communication, decided by name in one place.

Contract: :func:`communication_name_mask` maps a trace's interned names to booleans, once per
distinct name; :func:`communication_of` answers for the names some rows use, matching only
those. The patterns live in ``data/communication_kernels.txt`` so that the list is data,
reviewed and tested as such, not scattered through the analyses. :class:`NamePattern` matches
kernel names without regard to case, fast.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

#: Package data; read from the file system (importlib.resources would cost more to import).
DATA = Path(__file__).parent / "data"

#: How much of a name is classified: C++ template kernel names run to a few thousand
#: characters, and what identifies a kernel (its library, collective, algorithm) comes first.
#: A name of megabytes (a corrupt or hostile trace) would otherwise cost minutes per pattern.
MAX_CLASSIFIED_CHARS = 8192

#: Escaped letters whose meaning does not depend on case (classes and anchors): kept as written.
_CASELESS_ESCAPES = frozenset("bBwWdDsSAZ")


class NamePattern:
    """A regex searched in names without regard to case, fast on ASCII names.

    Python's ``re`` runs several times slower with IGNORECASE, and kernel names are long. For
    an ASCII name, searching the lowered name for the pattern with its letters lowered (case
    matters then) finds a match exactly when the case-insensitive search does, provided the
    pattern is ASCII with no character sets, inline flags or letter escapes beyond
    :data:`_CASELESS_ESCAPES`. Other patterns, and non-ASCII names, use the case-insensitive
    regex itself.
    """

    __slots__ = ("_caseless", "_lowered", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        lowered = _lowered(source)
        self._lowered = re.compile(lowered) if lowered is not None else None
        self._caseless: re.Pattern[str] | None = None  # compiled when first needed

    @property
    def pattern(self) -> re.Pattern[str]:
        """The case-insensitive regex."""
        if self._caseless is None:
            self._caseless = re.compile(self.source, re.IGNORECASE)
        return self._caseless

    def search(self, name: str) -> bool:
        """Whether the pattern occurs in the name's first :data:`MAX_CLASSIFIED_CHARS`."""
        name = name[:MAX_CLASSIFIED_CHARS]
        if self._lowered is not None and name.isascii():
            return self._lowered.search(name.lower()) is not None
        return self.pattern.search(name) is not None


def _lowered(source: str) -> str | None:
    """``source`` with every letter lowered but escaped ones, or None when lowering could
    change what it matches (see :class:`NamePattern`)."""
    if not source.isascii() or "[" in source or "(?" in source.replace("(?:", ""):
        return None
    out: list[str] = []
    escaped = False
    for char in source:
        if escaped:
            if char.isalnum() and char not in _CASELESS_ESCAPES:
                return None  # \x41, \1, \N{...}: a letter or reference lowering would miss
            out.append(char)
            escaped = False
        else:
            escaped = char == "\\"
            out.append(char.lower())
    return "".join(out)


@cache
def _communication() -> NamePattern:
    text = (DATA / "communication_kernels.txt").read_text("utf-8")
    lines = [line.strip() for line in text.splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    return NamePattern("|".join(f"(?:{p})" for p in patterns))


@lru_cache(maxsize=1 << 14)
def is_communication(name: str) -> bool:
    """Remembered per name: each device's work and its bounds ask about the same kernels, and so
    do the ranks of one job."""
    return _communication().search(name)


def communication_name_mask(names: list[str]) -> NDArray[np.bool_]:
    """``mask[name_id]`` is True when that name is a communication kernel."""
    return np.fromiter((is_communication(n) for n in names), dtype=np.bool_, count=len(names))


def communication_of(names: list[str], name_ids: NDArray[np.int32]) -> NDArray[np.bool_]:
    """Per entry of ``name_ids`` (ids into ``names``): is that name a communication kernel?

    Each distinct name is matched once, and names no id refers to not at all: most of a trace's
    names are host events, and matching them all would cost more than the analysis they feed.
    """
    if name_ids.size == 0:
        return np.zeros(0, dtype=np.bool_)
    used = np.flatnonzero(np.bincount(name_ids, minlength=len(names)))
    mask = np.zeros(len(names), dtype=np.bool_)
    mask[used] = [is_communication(names[i]) for i in used.tolist()]
    return mask[name_ids]
