"""How to install an optional part of gpuscope, as a command that works when pasted.

gpuscope is installed from its checkout (it is not on PyPI), so ``pip install 'gpuscope[torch]'``
fails. An editable install knows its checkout: the hint names it, and runs from any folder.
"""

from __future__ import annotations

from pathlib import Path


def install_line(extra: str) -> str:
    """``pip install -e '/path/to/gpuscope[extra]'``, or the same from the checkout's folder."""
    root = Path(__file__).resolve().parents[2]  # src/gpuscope/_install.py -> the checkout
    if (root / "pyproject.toml").is_file() and (root / "src" / "gpuscope").is_dir():
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install -e '.[{extra}]' (in the gpuscope checkout)"
