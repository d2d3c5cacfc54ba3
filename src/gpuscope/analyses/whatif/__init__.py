"""What each fix is worth: the trace as a dependency graph, replayed with the fix applied.

Contract: :func:`build_graph` turns one trace (one rank) into a :class:`Graph`; :func:`replay`
gives every node's start and end under an :class:`Edit` set; :func:`step_times` measures steps
on any such schedule. All pure, all numpy: no loop runs per event.

**The graph.** Nodes are the top-level runtime calls of each host thread (nested driver calls
belong to the call around them) and the device work (kernels, copies, memsets) of each stream.
Each node lies on one *chain*, a thread or a stream, in its original order. The edges are:

* **program order**: a call starts no earlier than the previous call on its thread ended plus
  the host's own time between them (``gap``: Python, framework dispatch, the data loader);
* **stream order**: device work starts no earlier than the previous work on its stream ended;
* **launch**: device work starts no earlier than its runtime call started plus the launch
  latency. The latency is the one observed when the work was waiting for its launch, else the
  trace's median latency (a queued kernel's observed delay holds queueing, not latency);
* **host synchronisation**: a blocking call (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
  ``cudaEventSynchronize``, ``cudaFree``, a copy from or to pageable memory or a ``cudaMemcpy``
  without ``Async``: the roles ``sync``, ``free`` and ``copy`` of ``data/runtime_apis.csv``, which
  the idle attribution reads too) returns no earlier than the work it waits for ends, plus the
  few µs it took to return. A copy waits for its own transfer; the others for the latest work
  launched before the call that ended by the time it returned (CUDA returns only when that work is
  done; work still running after the return cannot have been waited for). A call is blocking
  only if the trace agrees: a copy call that returned before its transfer ended did not block;
* **cross-stream events**: ``cudaStreamWaitEvent`` (and ``hipStreamWaitEvent``) makes the next
  work launched to its stream wait for the work the preceding ``cudaEventRecord`` marked: the
  last work launched before the record to the stream the host last launched to, other than the
  waiting stream (the runtime records neither stream in the trace; PyTorch records on the
  current stream, then waits on the other);
* **collectives**: a collective on one rank ends no earlier than its last participant started
  it plus the transfer. Its duration is taken as observed (waiting included); the edits that
  move arrivals (straggler, collective wait) shorten it by the waiting they remove, computed
  across ranks by :func:`gpuscope.analyses.ranks.collective_waits`.

**The replay** solves ``start = max(chain predecessor's end + gap, incoming edges)`` and
``end = max(start + duration, awaited end + tail)`` for every node. Along a chain the recurrence is
a max-plus scan, ``e_i = A_i + cummax(b_j - A_j)``, one numpy pass over every chain at once; the
cross-chain edges are then refreshed, until nothing moves (each pass settles one more hop of
the longest dependency path). Without edits the replay reproduces the trace's own schedule.

**Steps.** Work belongs to the profiler step whose host range its launch falls in. A step on the
device ends when its last work ends and begins where the previous step ended (the first: when
its first work starts); with no steps recorded the window is one step. Edits move
work between steps, so a step's own saving is noisy (it gives the range); their mean is the
change of the steps' whole device span over their number.
"""

from __future__ import annotations

from gpuscope.analyses.whatif.edits import ASSUMPTIONS, EditInputs, apply_edit, removed_ns
from gpuscope.analyses.whatif.graph import (
    DEFAULT_LAUNCH_LATENCY_NS,
    NEG,
    QUEUED_GAP_NS,
    RETURN_TOLERANCE_NS,
    Edit,
    Graph,
    build_graph,
)
from gpuscope.analyses.whatif.predict import Prediction, Replayer
from gpuscope.analyses.whatif.schedule import MAX_PASSES, replay, step_times

__all__ = [
    "ASSUMPTIONS",
    "DEFAULT_LAUNCH_LATENCY_NS",
    "MAX_PASSES",
    "NEG",
    "QUEUED_GAP_NS",
    "RETURN_TOLERANCE_NS",
    "Edit",
    "EditInputs",
    "Graph",
    "Prediction",
    "Replayer",
    "apply_edit",
    "build_graph",
    "removed_ns",
    "replay",
    "step_times",
]
