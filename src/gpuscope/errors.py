"""The errors gpuscope raises, in one place.

Hierarchy::

    GpuscopeError               base of everything gpuscope raises on purpose
    └── InputError              the input cannot be analysed: the path and one line of why
        ├── UnknownFormatError  no format gpuscope reads (or an export is needed first)
        ├── CorruptInputError   not JSON, corrupt gzip, missing tables or columns
        └── EmptyTraceError     readable, but nothing to analyse (no events, no GPU activity)

The CLI prints ``str(error)`` on one line and exits with code 2 for every ``InputError``;
nothing else is caught, so a bug still shows its traceback.
"""

from __future__ import annotations

TYPE_CHECKING = False  # light: the console script's read-ahead loads this before typing
if TYPE_CHECKING:
    from pathlib import Path


class GpuscopeError(Exception):
    """Base class of every error gpuscope raises on purpose."""


class InputError(GpuscopeError):
    """An input that cannot be analysed: ``path: reason``."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self) -> tuple[type[InputError], tuple[str, str]]:
        # Pickled as its two parts (a file read in a child process sends its error back).
        return type(self), (self.path, self.reason)


class UnknownFormatError(InputError):
    """The content is not a format gpuscope reads."""


class CorruptInputError(InputError):
    """The file claims a known format but cannot be decoded."""


class EmptyTraceError(InputError):
    """The trace decodes but holds nothing to analyse."""
