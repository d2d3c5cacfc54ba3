"""Whether a file is a diagnosis gpuscope saved, from its first bytes.

Contract: :func:`is_saved_diagnosis` reads at most :data:`HEAD_BYTES` of a file and imports
nothing heavy, so a command can tell a saved diagnosis (``gpuscope diagnose --json``) from a
trace before it starts reading a trace ahead (:mod:`gpuscope.readers._early`): a saved document
is decoded by :mod:`gpuscope.diagnosis.saved` and never sent to a trace reader.
"""

from __future__ import annotations

from pathlib import Path

#: The ``schema`` of the document ``diagnose --json`` writes, its first key.
DIAGNOSIS_SCHEMA = "gpuscope/diagnosis-1"
#: The document's opening (``{``, indentation, ``"schema": "..."``) fits well within this.
HEAD_BYTES = 256


def is_saved_diagnosis(path: str | Path) -> bool:
    """Whether ``path`` is a regular file that opens as the JSON document ``diagnose --json``
    writes. False for anything else, including a file that cannot be read (its reader says why)."""
    p = Path(path)
    try:
        if not p.is_file():
            return False
        with p.open("rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and DIAGNOSIS_SCHEMA.encode() in head
