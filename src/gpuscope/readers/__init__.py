"""Readers: one per input format. Content decides the format, never the file name.

Contract: :func:`load` turns a file or a folder into a :class:`~gpuscope.model.Job` or raises
:class:`~gpuscope.errors.InputError` naming the file and what is wrong with it. Each format is a
:class:`Reader` in ``READERS``: ``sniff`` looks at the first bytes of a file (decompressed when
gzip), ``read`` returns the job fragment the file holds (timelines, kernel counters or samples).
Adding a format is one module and one line in ``READERS`` (``_load.py``).

The files of a folder are read in parallel worker processes when they are large enough to gain
from it (``GPUSCOPE_WORKERS`` sets the number; see :func:`folder_workers`); the result is the
same Job as reading them one after another.

This package imports its parts on first use, so that :mod:`gpuscope.readers._scan` (the Kineto
scanner's threads, which need neither numpy nor the model) can start before the rest loads.
"""

from __future__ import annotations

from importlib import import_module

# No typing at run time: the console script's read-ahead loads this before typing (~3 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuscope.readers._load import (
        PARALLEL_MIN_BYTES,
        READERS,
        Reader,
        folder_workers,
        load,
        load_file,
        require_device_activity,
    )

__all__ = [
    "PARALLEL_MIN_BYTES",
    "READERS",
    "Reader",
    "folder_workers",
    "load",
    "load_file",
    "require_device_activity",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'gpuscope.readers' has no attribute {name!r}")
    value = getattr(import_module("gpuscope.readers._load"), name)
    globals()[name] = value
    return value
