"""The live view of a running job: what ``logsift watch`` shows while the log is still being written.

``state`` folds each parsed batch into a small table of per-rank progress and turns it into events (a rank
that stopped advancing while its peers went on, a WARN); ``feed`` runs the parser in a worker thread so
the caller can wake on a timer even when the job writes nothing. The verdict at the end is still the one
``analyze`` gives (``pipeline.Analysis``): live events are early warnings, not a second diagnosis.
"""

from nccl_logsift.live.feed import Feed
from nccl_logsift.live.state import EventKind, LiveEvent, LiveSnapshot, LiveState, RankRow

__all__ = ["EventKind", "Feed", "LiveEvent", "LiveSnapshot", "LiveState", "RankRow"]
