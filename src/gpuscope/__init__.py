"""gpuscope: why the GPU is not working, and what to change.

Public API::

    job = gpuscope.load("trace.json.gz")      # a file, or a folder of per-rank traces
    diagnosis = gpuscope.diagnose(job)       # pure analyses, typed results
    # Finding is the one finding type; the result types of the other entry points (a diff's
    # RunDiff, a gate's CheckOutcome, scaling and sweep reports, the rank analysis, a fleet
    # table, a job diagnosed from per-rank summaries) are exported here too, all msgspec Structs
    # a Diagnosis is plain data: its DeviceReports, Verdict and Findings hold no trace, and
    # `gpuscope diagnose --json` saves it whole (gpuscope.diagnosis.saved reads it back)
"""

from __future__ import annotations

__version__ = "0.1.0"

# typing imports re and enum (~5 ms): the console script starts reading a trace before them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from gpuscope.analyses.ranks import RankAnalysis
    from gpuscope.compare.diff import CheckOutcome, RunDiff, RunSummary
    from gpuscope.compare.scaling import ScalingReport, SweepReport
    from gpuscope.diagnosis import DeviceReport, Diagnosis, InputSummary, Options, diagnose
    from gpuscope.diagnosis.findings import Finding, Verdict
    from gpuscope.distributed import JobDiagnosis
    from gpuscope.errors import GpuscopeError, InputError
    from gpuscope.fleet import FleetTable
    from gpuscope.model import Job, Trace
    from gpuscope.readers import load

# Imported on first use (PEP 562): the command line starts without loading every analysis.
_HOME = {
    "Diagnosis": "gpuscope.diagnosis",
    "DeviceReport": "gpuscope.diagnosis",
    "InputSummary": "gpuscope.diagnosis",
    "Finding": "gpuscope.diagnosis.findings",
    "Verdict": "gpuscope.diagnosis.findings",
    "Options": "gpuscope.diagnosis",
    "diagnose": "gpuscope.diagnosis",
    "GpuscopeError": "gpuscope.errors",
    "InputError": "gpuscope.errors",
    "Job": "gpuscope.model",
    "Trace": "gpuscope.model",
    "load": "gpuscope.readers",
    "RunSummary": "gpuscope.compare.diff",
    "RunDiff": "gpuscope.compare.diff",
    "CheckOutcome": "gpuscope.compare.diff",
    "RankAnalysis": "gpuscope.analyses.ranks",
    "ScalingReport": "gpuscope.compare.scaling",
    "SweepReport": "gpuscope.compare.scaling",
    "FleetTable": "gpuscope.fleet",
    "JobDiagnosis": "gpuscope.distributed",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'gpuscope' has no attribute {name!r}")
    from importlib import import_module  # noqa: PLC0415

    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "CheckOutcome",
    "DeviceReport",
    "Diagnosis",
    "Finding",
    "FleetTable",
    "GpuscopeError",
    "InputError",
    "InputSummary",
    "Job",
    "JobDiagnosis",
    "Options",
    "RankAnalysis",
    "RunDiff",
    "RunSummary",
    "ScalingReport",
    "SweepReport",
    "Trace",
    "Verdict",
    "__version__",
    "diagnose",
    "load",
]
