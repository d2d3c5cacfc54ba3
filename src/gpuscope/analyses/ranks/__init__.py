"""Many GPUs: the ranks of one job side by side, clocks aligned on collectives, who waits for whom.

Contract: :func:`analyse_ranks` is pure. It takes one :class:`Participant` per rank's device (the
figures the per-device analyses already computed) and returns a :class:`RankAnalysis`. The package
re-exports the public names of its modules: ``collectives`` (a device's collectives, thresholds),
``matching`` (groups, clocks, waits), ``stragglers``, ``traffic`` (bandwidth, exposure),
``results`` (the records), ``summary`` (one rank reduced to a few KB: all the cross-rank analysis
reads) and ``analysis`` (the entry points: :func:`analyse_summaries` reads summaries alone, so
ranks can be reduced on other processes or machines; :func:`analyse_ranks` summarises
participants in this process and calls it).

* **Collectives** are the communication kernels of each device (:func:`collectives`). Each belongs
  to a process group: the ``Process Group Name`` its args (or its ``record_param_comms`` op's)
  recorded, else the communication stream it ran on, by order of first use. The n-th collective
  of a group on one rank is matched with the n-th of that group on every other rank.
* **Clocks**: a collective ends at nearly the same instant on every rank (it cannot finish before
  the last rank joins, and then all finish together), so each rank's clock offset from the lowest
  rank is the median difference of matched collective end times. ``None``: nothing to align on.
* **Waiting**: the last rank to start a collective (after alignment) is its *last arrival*; every
  other rank waits inside the collective for ``its duration - the last arrival's duration``. The
  part of that wait with no compute running alongside is *exposed wait*: device time lost.
* **Stragglers**: every rank that arrives last more often than chance would make it, by more
  than :data:`STRAGGLER_MIN_LATE_NS` on average, and whose lateness causes at least
  :data:`STRAGGLER_MIN_CAUSED_SHARE` of all the waiting inside collectives. Ranks may take turns
  (two hosts that each issue their work late at some steps): no rank need be last at a majority.
  The ranks are tested step-down, most last arrivals first: each against "every rank not yet
  named equally likely to be last" over the collectives the named ranks did not come last at
  (binomial tail at most :data:`STRAGGLER_MAX_CHANCE` over the ranks still in question, or last
  at every one of two or more). Only *contested* collectives count (some rank waited in them at
  least :data:`CONTESTED_WAIT_NS`): in the others who came last is clock noise. For each, what
  it was doing while the others waited (kernels and idle causes inside those windows, on its own
  clock), and what its host was doing before it arrived (its idle time, by cause and line,
  between its previous collective and each late arrival).
* **Bandwidth**: per kind of collective, message bytes (``In/Out msg nelems`` x ``dtype`` when
  recorded) over the transfer time (the last arrival's duration, which holds no waiting): the
  algorithm bandwidth, and the bus bandwidth NCCL reports (x 2(n-1)/n for all-reduce, x (n-1)/n
  for all-gather / reduce-scatter / all-to-all), against the link's peak per direction (half the
  facts table's bidirectional ``interconnect_bytes_per_s``).
* **Exposure**: per profiler step, communication and exposed communication time, and which
  collectives run fully exposed or are small enough for their fixed cost to dominate.

When only some ranks of a job are present, the analysis covers what is there and says so in
``notes``; with one rank there is no matching, so waits and stragglers are ``None`` / empty and
bandwidth figures include any waiting (a lower bound).
"""

from gpuscope.analyses.ranks.analysis import (
    Describe,
    WaitCuts,
    analyse_ranks,
    analyse_summaries,
    collective_waits,
)
from gpuscope.analyses.ranks.collectives import (
    CONTESTED_WAIT_NS,
    FULLY_EXPOSED_SHARE,
    SMALL_COLLECTIVE_NS,
    SMALL_MESSAGE_BYTES,
    STRAGGLER_MAX_CHANCE,
    STRAGGLER_MIN_CAUSED_SHARE,
    STRAGGLER_MIN_LATE_NS,
    CollectiveTable,
    Participant,
    bus_factor,
    collective_kind,
    collectives,
)
from gpuscope.analyses.ranks.results import (
    BandwidthStat,
    ExposureSummary,
    GroupStat,
    RankAnalysis,
    RankStat,
    StepCommunication,
    StragglerDetail,
    StragglerStat,
)
from gpuscope.analyses.ranks.summary import (
    RankSummary,
    step_communication,
    straggler_detail,
    summarise,
)

__all__ = [
    "CONTESTED_WAIT_NS",
    "FULLY_EXPOSED_SHARE",
    "SMALL_COLLECTIVE_NS",
    "SMALL_MESSAGE_BYTES",
    "STRAGGLER_MAX_CHANCE",
    "STRAGGLER_MIN_CAUSED_SHARE",
    "STRAGGLER_MIN_LATE_NS",
    "BandwidthStat",
    "CollectiveTable",
    "Describe",
    "ExposureSummary",
    "GroupStat",
    "Participant",
    "RankAnalysis",
    "RankStat",
    "RankSummary",
    "StepCommunication",
    "StragglerDetail",
    "StragglerStat",
    "WaitCuts",
    "analyse_ranks",
    "analyse_summaries",
    "bus_factor",
    "collective_kind",
    "collective_waits",
    "collectives",
    "step_communication",
    "straggler_detail",
    "summarise",
]
