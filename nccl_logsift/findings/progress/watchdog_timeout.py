"""LS103 watchdog-timeout: PyTorch's NCCL watchdog aborted collectives that did not finish in time."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.work import pg_groups, timeouts, work_states


class WatchdogTimeout(Rule):
    """PyTorch's NCCL watchdog aborted collectives that did not finish in time.

    What it means:
        ProcessGroupNCCL's watchdog found a collective that had been running longer than the process
        group's timeout, aborted the communicator and (by default) took the process down.

    Why it matters:
        The timeout is where a hang becomes visible, but it is usually a consequence: the ranks that time out
        are the ones that were waiting. The cause is a rank that never arrived, a mismatch, a network or GPU
        failure; look at the other findings first. "last completed" values that are not plausible counts
        (uninitialised memory in some PyTorch versions) are reported as unknown.

    How it is detected:
        ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=…, OpType=…, …, Timeout(ms)=…)``
        and the blocking-wait variant, grouped by process group (its GUID where PyTorch prints one: groups
        of different ranks share a PG ID) and SeqNum, with the "last enqueued / last completed" work of the
        same ranks when PyTorch printed them. Groups of one kind (the same PG ID and description) that
        timed out at the same SeqNums are reported together.

    Example:
        ``[rank3]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective
        operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, NumelIn=6553600, NumelOut=6553600,
        Timeout(ms)=600000) ran for 600064 milliseconds before timing out.``

    What to do:
        Find the rank that did not time out or is behind (rank-behind, collective-mismatch findings). Raising
        the timeout only helps when a rank is legitimately slow (a long checkpoint, a first compilation).
        Enable the flight recorder for the next run (TORCH_FR_BUFFER_SIZE; TORCH_NCCL_TRACE_BUFFER_SIZE, the
        name older PyTorch reads, is still accepted).
    """

    code = "LS103"
    name = "watchdog-timeout"
    kind = Kind.WATCHDOG_TIMEOUT
    severity = Severity.ERROR

    def check(self, job: Job) -> Iterator[Finding]:
        rows = timeouts(job)
        if rows.is_empty():
            return
        states = work_states(job)
        for pg, groups, group in _alike_groups(job, rows):
            ranks = sorted(group["job_rank"].drop_nulls().unique().to_list())
            seqs = sorted(group["seq"].drop_nulls().unique().to_list())
            ops = sorted(group["op_type"].drop_nulls().unique().to_list())
            title = _title(pg, groups, group, ranks, seqs, ops)
            notes = _implausible_note(states, groups)
            yield self.finding(
                job,
                title + "." + notes if notes else title,
                evidence_rows=group.select("source_id", "line_no", "part"),
                ranks=ranks,
                pg=pg,
                seq=seqs[0] if len(seqs) == 1 else None,
                op=ops[0] if len(ops) == 1 else None,
                advice=ADVICE,
            )


ADVICE = (
    "These ranks were waiting for a peer. When another finding names a cause, start there. When every rank "
    "timed out in the same collective and nothing else is wrong, suspect the network or a GPU: check the "
    "transports and dmesg (Xid, link errors) on every host. If a rank was legitimately slow, raise the "
    "timeout of init_process_group; for the next run set TORCH_FR_BUFFER_SIZE=2000 "
    "(TORCH_NCCL_TRACE_BUFFER_SIZE in older PyTorch) to get a flight-recorder dump."
)


def _title(pg: str, groups: list[str], group: pl.DataFrame, ranks: list, seqs: list, ops: list) -> str:
    """'4 rank(s) of process group 2 hit the watchdog timeout of 600 s in AllReduce #12'."""
    timeout = group["timeout_ms"].drop_nulls()
    seq_text = f"#{seqs[0]}" if len(seqs) == 1 else f"#{seqs[0]}–#{seqs[-1]}" if seqs else ""
    which = f"process group {pg}" if len(groups) == 1 else f"{len(groups)} process groups {pg}"
    return (
        f"{len(ranks)} rank(s) of {which} hit the watchdog timeout"
        f"{f' of {timeout.max() / 1000:g} s' if timeout.len() else ''} in "
        f"{'/'.join(ops) or 'a collective'} {seq_text}"
    ).rstrip()


def _implausible_note(states: pl.DataFrame, groups: list[str]) -> str:
    """A note when a 'last completed' PyTorch printed for these groups is uninitialised memory."""
    if states.is_empty():
        return ""
    mine = states.filter(pl.col("pg").is_in(groups))
    if mine.height and mine["implausible"].any():
        return " Some 'last completed' values PyTorch printed are uninitialised memory: treated as unknown."
    return ""


def _alike_groups(job: Job, rows: pl.DataFrame) -> Iterator[tuple[str, list[str], pl.DataFrame]]:
    """The timeouts by process group, where groups of one family (the same PG ID and description, e.g.
    the eight data-parallel groups) that timed out at the same SeqNums are taken together: (the group's label,
    or the family's for several, the groups, their rows)."""
    family = dict(pg_groups(job).select("label", "pg_family").iter_rows())
    alike: dict[tuple, list[tuple[str, pl.DataFrame]]] = {}
    for (pg,), group in rows.group_by("pg", maintain_order=True):
        seqs = tuple(group["seq"].unique().sort(nulls_last=True).to_list())
        alike.setdefault((family.get(pg, pg), seqs), []).append((pg, group))
    for (name, _), members in alike.items():
        if len(members) == 1:
            yield members[0][0], [members[0][0]], members[0][1]
        else:
            yield name, [pg for pg, _ in members], pl.concat([g for _, g in members])
