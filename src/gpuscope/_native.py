"""Whether a compiled extension (the Kineto scanner ``readers/_kscan.c``, the replay solver
``analyses/_replay.c``) can be used: built, and from the source this code follows.

Each extension exports ``VERSION``, raised whenever what it takes or returns changes, and the
Python side names the version it follows. A build of older source (a checkout updated without
rebuilding) is not used: its pure-Python twin gives the same result, slower, and one line on
stderr says so and how to rebuild.
"""

from __future__ import annotations

from types import ModuleType


def current(module: ModuleType, wanted: int, what: str) -> bool:
    """Whether ``module`` (the extension ``what``) was built from version ``wanted`` of its
    source; when not, says so once, in one line."""
    version = getattr(module, "VERSION", 1)
    if version == wanted:
        return True
    import logging  # noqa: PLC0415 - only a stale build says anything (logging costs ~5 ms)

    logging.getLogger("gpuscope").warning(
        "gpuscope: the %s extension is stale (built from version %s of its source, this code"
        " follows %s): using the slower pure-Python path; rebuild it with `pip install -e .`",
        what,
        version,
        wanted,
    )
    return False
