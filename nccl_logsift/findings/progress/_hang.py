"""Whether the job stopped abnormally, for the rules that grade a stall by it (LS101, LS102)."""

from __future__ import annotations

import polars as pl

from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.work import timeouts


def hang_evidence(job: Job) -> bool:
    """Something says the job stopped abnormally: a watchdog fired, a comm aborted, a process died, a WARN."""
    if not timeouts(job).is_empty():
        return True
    comms = job.table("comms")
    if not comms.is_empty() and comms.filter(pl.col("what") == "Abort").height:
        return True
    lines = job.lines
    if (
        not lines.is_empty()
        and lines.select(((pl.col("producer") == "nccl") & (pl.col("level") == "WARN")).any()).item()
    ):
        return True
    exits = job.table("exits")
    return not exits.is_empty() and exits.filter(pl.col("exit_code").fill_null(0) != 0).height > 0
