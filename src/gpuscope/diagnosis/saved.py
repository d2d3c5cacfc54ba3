"""A diagnosis saved as JSON, and read back into the same value.

Contract: :func:`to_builtins` turns a :class:`~gpuscope.diagnosis.Diagnosis` into JSON-ready
builtins (``diagnose --json`` writes them under the document's ``"diagnosis"`` key, beside the
curated fields of ``docs/json.md``); :func:`from_builtins` decodes them back into the typed
value, validated by msgspec against the types. ``from_builtins(to_builtins(d))`` equals ``d``
field by field (NaN stays NaN), so every renderer draws a saved diagnosis exactly as it draws a
fresh one. :func:`is_saved` and :func:`read` let a command take a saved file wherever it takes a
trace; a JSON document without the saved form is bad input (exit 2), never a guess.

Encoding: numpy arrays (idle gaps, per-kernel bounds) become lists and come back as arrays of
the annotated dtype; a float that is not finite (a share the input cannot give) is written as
the string ``"nan"`` / ``"inf"`` / ``"-inf"``, since JSON has no such numbers.
"""

from __future__ import annotations

import math
import typing
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

import gpuscope.diagnosis as _diagnosis
from gpuscope._files import note_input_path
from gpuscope._sniff import DIAGNOSIS_SCHEMA, is_saved_diagnosis
from gpuscope.analyses.counters import CounterSummary, MeasuredBounds
from gpuscope.analyses.samples import GpuUtilisation, SampleOptions
from gpuscope.diagnosis import Diagnosis
from gpuscope.errors import CorruptInputError

#: The ``schema`` of the JSON document ``diagnose --json`` writes (``render.json.SCHEMA``).
DOCUMENT_SCHEMA = DIAGNOSIS_SCHEMA
SAVED_KEY = "diagnosis"

# The diagnosis module names these types only for type checkers (their modules load when a job
# has counters or samples); decoding resolves the annotations in that module's namespace.
vars(_diagnosis).update(
    CounterSummary=CounterSummary,
    MeasuredBounds=MeasuredBounds,
    GpuUtilisation=GpuUtilisation,
    SampleOptions=SampleOptions,
)


def to_builtins(diagnosis: Diagnosis) -> Any:
    return _finite(msgspec.to_builtins(diagnosis, enc_hook=_encode))


def from_builtins(data: Any) -> Diagnosis:
    # Lax: the strings "nan" / "inf" decode into float fields.
    return msgspec.convert(data, Diagnosis, strict=False, dec_hook=_decode)


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise NotImplementedError(f"cannot save {type(value).__name__}")


def _decode(kind: type, value: Any) -> Any:
    if typing.get_origin(kind) is np.ndarray:
        dtype = typing.get_args(typing.get_args(kind)[1])[0]
        return np.asarray(value, dtype=dtype)
    raise NotImplementedError(f"cannot read {kind}")


def _finite(value: Any) -> Any:
    """``value`` with every non-finite float written as a string."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        # A column of integers (an array's list): nothing to rewrite, the common case.
        if value and type(value[0]) is int and all(type(v) is int for v in value):
            return value
        return [_finite(v) for v in value]
    return value


def is_saved(path: str | Path) -> bool:
    """Whether ``path`` is a JSON document that ``gpuscope diagnose --json`` wrote (from its
    first bytes: :func:`gpuscope._sniff.is_saved_diagnosis`)."""
    return is_saved_diagnosis(path)


def read(path: str | Path) -> Diagnosis:
    """The diagnosis saved in ``path`` (see :func:`is_saved`)."""
    note_input_path(path)  # no output of the command may overwrite it
    try:
        document = msgspec.json.decode(Path(path).read_bytes())
    except (OSError, msgspec.DecodeError) as error:
        raise CorruptInputError(path, f"not a readable gpuscope JSON document ({error})") from None
    saved = document.get(SAVED_KEY) if isinstance(document, dict) else None
    if saved is None:
        raise CorruptInputError(
            path,
            "a gpuscope JSON document without the saved diagnosis (written before gpuscope"
            " saved it): run `gpuscope diagnose TRACE --json FILE` again",
        )
    try:
        return from_builtins(saved)
    except msgspec.ValidationError as error:
        raise CorruptInputError(path, f"the saved diagnosis does not decode: {error}") from None
