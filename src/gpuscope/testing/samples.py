"""Generated GPU sample logs with known answers: ``nvidia-smi`` CSV and ``dcgmi dmon`` text.

Contract: :func:`nvidia_smi_log` and :func:`dcgmi_dmon_log` return the text the tools print for a
utilisation schedule given per GPU (one value a sample, a sample a second), in the layouts their
readers take (:mod:`gpuscope.readers.samples`); :class:`SampleLog` carries the text and the
answer: each GPU's mean utilisation. Names are long on purpose (a real ``nvidia-smi`` name and a
busy-then-idle schedule make the long headlines and evidence a terminal must wrap whole).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

__all__ = ["SampleLog", "dcgmi_dmon_log", "nvidia_smi_log"]

#: Two GPUs: one busy, then idle a long stretch, then busy; one steady at 70% with memory full.
DEFAULT_UTIL = ([90.0] * 5 + [0.0] * 12 + [80.0] * 3, [70.0] * 20)
H100_NAME = "NVIDIA H100 80GB HBM3"


class SampleLog(msgspec.Struct, frozen=True):
    """A generated log and its answer."""

    text: str
    name: str  # a file name its reader recognises by content (the suffix is only a habit)
    mean_util_pct: list[float]  # per GPU, in index order

    def write(self, folder: Path) -> Path:
        path = folder / self.name
        path.write_text(self.text)
        return path


def nvidia_smi_log(util_pct: Sequence[Sequence[float]] = DEFAULT_UTIL) -> SampleLog:
    """``nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used,memory.total
    --format=csv -l 1``: GPU 0 uses 2 GiB of its memory, the others nearly all of it."""
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"]
    for i in range(max(len(u) for u in util_pct)):
        stamp = f"2024/01/15 10:{i // 60:02d}:{i % 60:02d}.000"
        for gpu, series in enumerate(util_pct):
            if i < len(series):
                used = 2048 if gpu == 0 else 75000
                lines.append(
                    f"{stamp}, {gpu}, {H100_NAME}, {series[i]:.0f} %, {used} MiB, 81559 MiB"
                )
    means = [sum(u) / len(u) for u in util_pct]
    return SampleLog("\n".join(lines) + "\n", "nvidia-smi.csv", means)


def dcgmi_dmon_log(util_pct: Sequence[Sequence[float]] = DEFAULT_UTIL) -> SampleLog:
    """``dcgmi dmon -e 203,1002,1005,252`` (GPU utilisation, SM active, DRAM active, memory
    used in MiB): SM activity is a third of the utilisation, DRAM activity a tenth."""
    lines = ["#Entity   ID    GPUTL  SMACT  DRAMA  FBUSD", "ID"]
    for i in range(max(len(u) for u in util_pct)):
        for gpu, series in enumerate(util_pct):
            if i < len(series):
                u = series[i]
                lines.append(
                    f"GPU {gpu}           {u:.0f}     {u / 300:.3f}  {u / 1000:.3f}  10240"
                )
    means = [sum(u) / len(u) for u in util_pct]
    return SampleLog("\n".join(lines) + "\n", "dcgmi-dmon.txt", means)
