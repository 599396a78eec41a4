"""The rules about how far each rank got: ranks behind, mismatched collectives, watchdog timeouts (LS1xx).

| code | name | kind | severity |
|---|---|---|---|
| LS101 | rank-behind | rank_behind | critical |
| LS102 | collective-mismatch | collective_mismatch | critical |
| LS103 | watchdog-timeout | watchdog_timeout | error |

One rule a module. Positions are compared within one communicator (NCCL) or one process group (PyTorch)
only: NCCL counts calls per communicator (:func:`~nccl_logsift.resolve.positions.positioned`), PyTorch
numbers work per process group (SeqNum, from 1). A finding's ``#n`` is position + 1, or the SeqNum:
nccl_logsift/call_numbers.py says it for users.
"""

from __future__ import annotations

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.progress.collective_mismatch import CollectiveMismatch
from nccl_logsift.findings.progress.rank_behind import RankBehind
from nccl_logsift.findings.progress.watchdog_timeout import WatchdogTimeout

RULES: tuple[type[Rule], ...] = (RankBehind, CollectiveMismatch, WatchdogTimeout)
