"""The processes of a job as the launcher names them: the hosts in its exit reports and line prefixes, and
the (host, pid) key of a process. Which rank a process or a row is: resolve/ranks.py."""

from __future__ import annotations

import polars as pl

from nccl_logsift.resolve.hosts import nccl_host_expr
from nccl_logsift.resolve.job import Job


# --------------------------------------------------------------------------------------------- shared helpers
def launcher_hosts(job: Job) -> frozenset[str]:
    """The hosts the launcher names: in its exit reports (``srun: error: HOST: task N``, torchrun's failure
    summary, mpirun's and PALS's, slurmstepd's cancellation) and in the prefixes pdsh puts on each line,
    cut to the short name NCCL prints. A log without NCCL lines (NCCL_DEBUG unset) has no Init line to tie
    a process to its host, and these are then the only names of its hosts. An address is left out: nothing
    says which named host it is, and counting it could count a host twice."""
    named = [
        frame[column].drop_nulls()
        for frame, column in ((job.table("exits"), "exit_host"), (job.lines, "launcher_host"))
        if not frame.is_empty() and column in frame.columns
    ]
    if not named:
        return frozenset()
    hosts = pl.concat(named).unique()
    hosts = nccl_host_expr(hosts.filter(~hosts.str.contains(r"^\d+(\.\d+){3}$|:")))
    return frozenset(hosts.filter(hosts.str.len_chars() > 0).to_list())


PROC = ["host", "pid"]
