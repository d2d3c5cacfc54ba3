"""What to change for each cause: concrete advice, in the words a PyTorch user would type.

Contract: :func:`advice` returns the fix for a finding's cause given what the evidence says
(locations, names seen in the trace). The text is data for the renderers; nothing here
measures.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope import causes
from gpuscope.analyses.ranks import StragglerStat

#: The fix template of every cause (data/causes.csv); :func:`advice` sharpens it with evidence.
_FIXES: dict[str, str] = causes.fixes()


def advice(cause: str, seen: Sequence[str] = ()) -> str:
    """The fix for ``cause``, sharpened by names seen in the evidence."""
    text = _FIXES.get(cause, _FIXES["unknown"])
    joined = " ".join(seen)
    if cause == "data_loader" and "_SingleProcessDataLoaderIter" in joined:
        text = "The loader runs in the training process (`num_workers=0`). " + text
    if cause == "h2d_copy" and "copies with no compute alongside" in joined:
        text += (
            " When the copies are large and already pinned, overlap them with compute: copy the"
            " next batch on a side stream (`torch.cuda.Stream`, `non_blocking=True`) while this one"
            " runs, keep data resident on the GPU across steps, or move less (smaller dtypes,"
            " decode on the GPU)."
        )
    if cause == "host_sync" and ("item" in joined or "_local_scalar_dense" in joined):
        text = "`.item()` in the step loop forces a sync. " + text
    return text


def straggler_advice(s: StragglerStat) -> str:
    """What to do about one straggler rank: balance its work, or fix its host."""
    busy_share = s.busy_in_window_ns / s.window_ns if s.window_ns else 0.0
    if busy_share >= 0.5 or not s.idle_causes:
        top = short_name(s.top_kernels[0][0], 50) if s.top_kernels else "its kernels"
        head = (
            f"Rank {s.rank} computes longer than its peers before each collective (busy"
            f" {100 * busy_share:.0f}% of the time they waited, mostly {top}): give it less work"
            " (balance data shards, sequence lengths or embedding tables across ranks) or check its"
            " GPU for throttling or low clocks (`nvidia-smi -q -d PERFORMANCE,CLOCK`)."
        )
    else:
        cause = s.idle_causes[0][0]
        head = (
            f"Rank {s.rank}'s GPU sat idle {100 * (1 - busy_share):.0f}% of the time the others"
            f" waited, mostly {cause}: its host is the slow part. " + advice(cause)
        )
    return (
        head + " Overlapping collectives with compute (DDP `bucket_cap_mb`, FSDP prefetching)"
        " makes a late rank cost less."
    )


def short_name(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
