"""Findings from PyTorch Flight Recorder dumps, and their fusion with the findings from the logs.

| code | name | kind |
|---|---|---|
| LS701 | flight-recorder-mismatch | collective_mismatch |
| LS702 | flight-recorder-rank-behind | rank_behind |

A dump holds what each rank enqueued per process group, with sizes and dtypes the logs do not print. Its
entries are compared across ranks by ``collective_seq_id`` within a process group, as fr_trace does
(``torch/distributed/flight_recorder/components/builder.py``, ``build_collectives``). Where a log finding
already names the same ranks for the same kind of problem, :func:`fuse` adds the dump entries to its evidence
instead of reporting it twice. Ranks without a dump are filled from their logs (the SeqNums PyTorch prints
in watchdog and dump-signal lines).
"""

from __future__ import annotations

import dataclasses

from nccl_logsift.findings.flight.flight_recorder_mismatch import FlightRecorderMismatch
from nccl_logsift.findings.flight.flight_recorder_rank_behind import FlightRecorderRankBehind
from nccl_logsift.model import Finding

FR_CODES = (FlightRecorderMismatch.code, FlightRecorderRankBehind.code)


def fuse(findings: list[Finding]) -> list[Finding]:
    """Fold each Flight Recorder finding into a log finding of the same kind naming the same ranks: the log
    finding keeps its title and position, and quotes the dump entries beside its lines. A Flight Recorder
    finding no log finding matches stands on its own."""
    logs = [f for f in findings if f.code not in FR_CODES]
    kept: list[Finding] = []
    for fr in (f for f in findings if f.code in FR_CODES):
        target = next(
            (i for i, f in enumerate(logs) if f.kind == fr.kind and set(f.ranks) == set(fr.ranks)), None
        )
        if target is None:
            target = next(
                (i for i, f in enumerate(logs) if f.kind == fr.kind and set(f.ranks) & set(fr.ranks)), None
            )
        if target is None:
            kept.append(fr)
            continue
        host = logs[target]
        extra = tuple(e for e in fr.evidence if e not in host.evidence)
        logs[target] = dataclasses.replace(host, evidence=host.evidence + extra)
    return logs + kept


RULES = (FlightRecorderMismatch, FlightRecorderRankBehind)
