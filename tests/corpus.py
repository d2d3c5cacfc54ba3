"""The one way tests reach the real-trace corpus in ``../shared/corpus``.

Locally a missing corpus skips the tests that need it; in CI (``CI=true``) it fails them, so that a
green CI run always means the corpus was read. ``GPUSCOPE_CORPUS`` points elsewhere if needed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def corpus_root() -> Path:
    return Path(os.environ.get("GPUSCOPE_CORPUS", ROOT.parent / "shared" / "corpus"))


def reference_root() -> Path:
    return corpus_root().parent / "reference"


def corpus(relative: str) -> Path:
    """The path of a corpus file or folder; skips (locally) or fails (CI) when it is missing."""
    path = corpus_root() / relative
    if not path.exists():
        message = f"corpus file missing: {path}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
