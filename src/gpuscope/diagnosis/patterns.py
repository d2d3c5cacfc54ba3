"""The pattern tags findings carry, and what each means, in one place (as data).

A finding's ``cause`` says what wastes the time (``data_loader``, ``exposed_communication``); its
``pattern`` says which of a few shapes of waste it is, the words the fix advice is organised by.
Renderers show a tag with its one-line meaning where it is first shown.
"""

from __future__ import annotations

from collections.abc import Iterable

#: pattern -> what it means, in one line.
PATTERNS: dict[str, str] = {
    "ghost_gpu": "the GPU is held but idle, waiting for the host (data, syncs, launches)",
    "copy_bound": "the device is busy moving data (host, peer or page copies), not computing",
    "latency_mirage": "time that looks like work is waiting: for communication or a late peer",
    "bloated_context": "more memory traffic or batch than the work needs",
    "tensor_cores_unused": "matrix math in FP32 that tensor cores would run several times faster",
    "fusion": "chains of small memory-bound kernels that one fused kernel would replace",
    "startup": "one-time start-up (context, module loading, compilation), not the steady state",
}


def legend(patterns: Iterable[str]) -> str:
    """``tags: [ghost_gpu] the GPU is ...; [latency_mirage] ...`` for the tags given, in order."""
    shown = list(dict.fromkeys(patterns))
    parts = [f"[{p}] {PATTERNS[p]}" for p in shown if p in PATTERNS]
    return "tags: " + "; ".join(parts) if parts else ""
