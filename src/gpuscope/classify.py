"""Which device work is communication, decided by name in one place.

Contract: :func:`communication_name_mask` maps a trace's interned names to booleans, once per
distinct name. The patterns live in ``data/communication_kernels.txt`` so that the list is data,
reviewed and tested as such, not scattered through the analyses.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

#: Package data; read from the file system (importlib.resources would cost more to import).
DATA = Path(__file__).parent / "data"


@cache
def communication_pattern() -> re.Pattern[str]:
    """One compiled alternation of every pattern in the data file."""
    text = (DATA / "communication_kernels.txt").read_text("utf-8")
    lines = [line.strip() for line in text.splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def is_communication(name: str) -> bool:
    return communication_pattern().search(name) is not None


def communication_name_mask(names: list[str]) -> NDArray[np.bool_]:
    """``mask[name_id]`` is True when that name is a communication kernel."""
    pattern = communication_pattern()
    return np.fromiter(
        (pattern.search(n) is not None for n in names), dtype=np.bool_, count=len(names)
    )
