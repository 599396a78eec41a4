"""Rules about speed: ranks that arrive late, runs that move data slowly (LS6xx).

| code | name | kind | severity |
|---|---|---|---|
| LS601 | latency-outlier | latency_outlier | warning |

A slow rank is not a stuck rank: it makes progress, every collective completes, but everyone waits for it
at every step. Arrival times are compared only for the same call (communicator uid and per-communicator
position, the ``ordinal`` of the ``collectives`` table) and only as differences between ranks, over many
calls, with a robust centre (median) and spread (median absolute deviation).
"""

from __future__ import annotations

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.performance.latency_outlier import LatencyOutlier

RULES: tuple[type[Rule], ...] = (LatencyOutlier,)
