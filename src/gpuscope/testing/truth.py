"""The known answers of a generated trace (:class:`Truth`), and the trace (:class:`GeneratedTrace`).

Contract: records only; :mod:`gpuscope.testing._output` computes them from a finished simulation
with plain interval code, never with :mod:`gpuscope.analyses`.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import NamedTuple

import msgspec

from gpuscope.testing.config import JSON

# --- ground truth -----------------------------------------------------------------------------


class Gap(NamedTuple):
    """One GPU-idle interval an injection caused, on the trace's clock."""

    start_ns: int
    end_ns: int
    cause: str
    location: str

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class DeviceTruth(msgspec.Struct, frozen=True):
    """Unions of device intervals, in ns."""

    span_ns: int  # first device event start to last end
    busy_ns: int  # kernels, memcpys and memsets on any stream
    compute_ns: int  # non-communication kernels
    communication_ns: int  # NCCL kernels
    memcpy_ns: int
    memset_ns: int


class Truth(msgspec.Struct, frozen=True):
    """The known answers for one generated trace."""

    device: int
    devices: dict[int, DeviceTruth]
    step_durations_ns: tuple[int, ...]  # host ProfilerStep#N annotations
    kernel_count: int
    gaps: tuple[Gap, ...]
    injected: tuple[str, ...]
    lost_ns_by_cause: dict[str, int]

    @property
    def span_ns(self) -> int:
        return self.devices[self.device].span_ns

    @property
    def busy_ns(self) -> int:
        return self.devices[self.device].busy_ns

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns

    @property
    def compute_ns(self) -> int:
        return self.devices[self.device].compute_ns

    @property
    def communication_ns(self) -> int:
        return self.devices[self.device].communication_ns

    @property
    def memcpy_ns(self) -> int:
        return self.devices[self.device].memcpy_ns

    @property
    def memset_ns(self) -> int:
        return self.devices[self.device].memset_ns


class GeneratedTrace(msgspec.Struct, frozen=True):
    """A Kineto document and its ground truth."""

    document: JSON
    truth: Truth

    def to_bytes(self, compress: bool = False) -> bytes:
        """The document as Kineto lays it out (one event per line); gzip with mtime 0."""
        data = _dumps(self.document).encode()
        return gzip.compress(data, compresslevel=9, mtime=0) if compress else data

    def write(self, path: str | Path) -> Path:
        """Write the document; gzip when the name ends in ``.gz``."""
        target = Path(path)
        target.write_bytes(self.to_bytes(compress=target.name.endswith(".gz")))
        return target


def _dumps(document: JSON) -> str:
    """Kineto's layout: one top-level key per line, one event per line."""
    lines = []
    for key, value in document.items():
        if key == "traceEvents":
            body = ",\n  ".join(json.dumps(e) for e in value)
            lines.append(f'  "traceEvents": [\n  {body}\n  ]')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"
