"""gpuscope: why the GPU is not working, and what to change.

Public API::

    job = gpuscope.load("trace.json.gz")      # a file, or a folder of per-rank traces
    diagnosis = gpuscope.diagnose(job)       # pure analyses, typed results
"""

from __future__ import annotations

__version__ = "0.1.0"

from gpuscope.diagnosis import Diagnosis, Options, diagnose
from gpuscope.errors import GpuscopeError, InputError
from gpuscope.model import Job, Trace
from gpuscope.readers import load

__all__ = [
    "Diagnosis",
    "GpuscopeError",
    "InputError",
    "Job",
    "Options",
    "Trace",
    "__version__",
    "diagnose",
    "load",
]
