"""LS101 rank-behind: Some ranks stopped before the collective their peers are waiting in."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.progress._hang import hang_evidence
from nccl_logsift.findings.wording import describe_rank
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.job import Job, rank_range
from nccl_logsift.resolve.positions import (
    CommProgress,
    members_last_calls,
    positioned,
    progress_of,
)
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.work import DEFAULT_PG, timeouts, work_states


def stack_advice(job: Job, ranks: list[int]) -> str:
    dumps = []
    for rank in ranks[:4]:
        proc = job.process_of(rank)
        if proc:
            dumps.append(f"`py-spy dump --pid {proc['pid']}` on {proc['host']}")
    where = "; ".join(dumps) if dumps else "`py-spy dump --pid <pid>` on each lagging rank's host"
    return (
        f"While the job still hangs, dump the Python stack of the lagging rank(s): {where}. "
        "A rank that never reaches the collective is usually in a data loader, checkpoint I/O, a "
        "rank-dependent "
        "branch or an early exit; a rank that reached it but never finished points at its GPU or network."
    )


class RankBehind(Rule):
    """Some ranks stopped before the collective their peers are waiting in.

    What it means:
        The listed ranks never reached (or never finished) the collective that the other members of the
        same communicator or process group already entered. Their peers block there until a watchdog fires.

    Why it matters:
        A collective completes only when every member joins. One slow or stuck rank hangs the whole job, and
        the errors appear on the healthy ranks (watchdog timeouts), not on the culprit.

    How it is detected:
        Per communicator, the last COLL line of every member is compared by call number (``logsift explain
        --numbering``); members whose last call number is lower than the others' are behind.
        From PyTorch lines: the ranks of a process group whose watchdog did not fire while most others timed
        out at the same SeqNum, or whose "last enqueued" work is lower than their peers'. When a member of a
        sub-group (tensor or pipeline parallel) is stuck, its peers time out in that group and the other
        ranks later in theirs, so no group holds most of the world: then the few ranks of the world that
        timed out nowhere and raised nothing of their own are the ones the others wait for. A minority only:
        when most ranks are behind, the few ahead are not a hang's cause. Without any sign of a failure
        (watchdog, abort, WARN, non-zero exit) a gap of one call at the end of a log is treated as the normal
        tail of a run and not reported.

    Example:
        ``[rank0]:[E… ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout:
        WorkNCCL(SeqNum=8, OpType=ALLREDUCE, …)`` on ranks 0, 2–7, while rank 1's last COLL line is
        AllReduce #7.

    What to do:
        Dump the stack of the lagging rank while the job hangs (``py-spy dump --pid PID`` on its host) and
        look for data loading, checkpointing or a rank-dependent branch. If the rank reached the collective
        but never finished, check its GPU (``nvidia-smi``, dmesg Xid) and its network links.
    """

    code = "LS101"
    name = "rank-behind"
    kind = Kind.RANK_BEHIND
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        failing = hang_evidence(job)
        reported: set[int] = set()
        lagging = lagging_communicators(job, failing)
        # Only the lagging communicators are split out (one group each took ~0.05 ms: 0.2 s over a 4096-rank
        # job's thousands); in the order of members_last_calls, as comm_progress gives them.
        last = members_last_calls(job)
        for progress in (
            progress_of(last.filter(pl.col("comm_uid").is_in(sorted(lagging)))) if lagging else []
        ):
            finding = self.from_collectives(job, progress, failing)
            if finding:
                reported.update(finding.ranks)
                yield finding
        yield from self._from_torch(job, reported)

    def from_collectives(self, job: Job, progress: CommProgress, failing: bool) -> Finding | None:
        last = progress.last
        if last.height < 2:
            return None
        front = int(last["ordinal"].max())
        behind = last.filter(pl.col("ordinal") < front)
        gap = front - int(behind["ordinal"].max()) if behind.height else 0
        if behind.is_empty() or behind.height * 2 >= last.height:
            return None
        if not failing and gap < 2:
            return None
        ranks = [int(r) for r in behind["global_rank"].fill_null(behind["rank"]).to_list()]
        stuck_at = int(behind["ordinal"].min()) + 1  # 1-based number of the last call the laggards made
        ahead = last.filter(pl.col("ordinal") == front)
        names = ", ".join(describe_rank(job, r) for r in ranks[:4]) + (" …" if len(ranks) > 4 else "")
        missing_op = _next_op(job, progress.uid, stuck_at)
        title = (
            f"{names} never called #{stuck_at + 1}{f' ({missing_op})' if missing_op else ''} on communicator "
            f"{progress.uid} ({progress.nranks} ranks): last call #{stuck_at}, while {ahead.height} rank(s) "
            f"went on to #{front + 1}"
        )
        rows = pl.concat(
            [
                behind.select("source_id", "line_no", "part"),
                ahead.head(2).select("source_id", "line_no", "part"),
            ]
        )
        return self.finding(
            job,
            title,
            evidence_rows=rows.filter(pl.col("line_no").is_not_null()),
            ranks=ranks,
            severity=Severity.CRITICAL if failing else Severity.ERROR,
            advice=stack_advice(job, ranks),
            comm=progress.uid,
            seq=stuck_at + 1,
            op=missing_op,
        )

    def _from_torch(self, job: Job, reported: set[int]) -> Iterator[Finding]:
        timed_out = timeouts(job)
        states = work_states(job)
        world = job.world_size
        if timed_out.is_empty() and states.is_empty():
            return
        waiting = set(timed_out["job_rank"].drop_nulls().to_list()) if not timed_out.is_empty() else set()
        named = False
        for (pg,), group in _by_pg(timed_out, states):
            t_rows, s_rows = group
            reporters = set(t_rows["job_rank"].drop_nulls().to_list()) | set(
                s_rows["job_rank"].drop_nulls().to_list()
            )
            laggards: list[int] = []
            evidence = t_rows.select("source_id", "line_no", "part").head(3)
            seq = (
                int(t_rows["seq"].mode().sort(nulls_last=True).first())
                if t_rows.height and t_rows["seq"].drop_nulls().len()
                else None
            )
            op = (
                t_rows["op_type"].mode().sort(nulls_last=True).first()
                if t_rows.height and t_rows["op_type"].drop_nulls().len()
                else None
            )
            enq = (
                s_rows.filter(pl.col("last_enqueued").is_not_null())
                .group_by("job_rank")
                .agg(pl.col("last_enqueued").max())
            )
            if enq.height >= 2 and enq["last_enqueued"].n_unique() > 1:
                low = enq["last_enqueued"].min()
                candidates = enq.filter(pl.col("last_enqueued") == low)
                if candidates.height * 2 < enq.height:
                    laggards = sorted(candidates["job_rank"].to_list())
                    evidence = pl.concat(
                        [
                            s_rows.filter(pl.col("job_rank").is_in(laggards))
                            .select("source_id", "line_no", "part")
                            .head(3),
                            evidence,
                        ]
                    )
            if not laggards and pg.split(" ")[0] == DEFAULT_PG and world and len(reporters) * 2 > world:
                # A rank whose watchdog fired in another group was waiting there, not stuck outside NCCL.
                laggards = sorted(set(rank_range(world)) - reporters - waiting)
            laggards = [r for r in laggards if r not in reported]
            if not laggards:
                continue
            names = ", ".join(describe_rank(job, r) for r in laggards[:4]) + (
                " …" if len(laggards) > 4 else ""
            )
            where = (
                f"{op} #{seq}"
                if op and seq
                else (f"work #{seq}" if seq else "the collective its peers wait in")
            )
            title = (
                f"{names} never joined {where} of process group {pg}; {len(reporters)} rank(s) timed out "
                "waiting"
            )
            named = True
            yield self.finding(
                job,
                title,
                evidence_rows=evidence,
                ranks=laggards,
                advice=stack_advice(job, laggards),
                pg=pg,
                seq=seq,
                op=op,
            )
        if not named:
            yield from self._silent_across_groups(job, timed_out, waiting, reported)

    def _silent_across_groups(
        self, job: Job, timed_out: pl.DataFrame, waiting: set[int], reported: set[int]
    ) -> Iterator[Finding]:
        """The member of a stuck sub-group who never reports. Its group's peers time out in that group
        (tensor or pipeline parallel), the ranks of the other groups later in another one, so no single
        process group holds most of the world; but nearly every rank of the world timed out somewhere,
        and the few that did not, though they logged, raised nothing of their own: they are the ranks the
        others wait for, stuck outside NCCL (a data loader, I/O). Evidence: the first timeouts, in the
        group where they came first."""
        world = job.world_size
        if not world or timed_out.is_empty() or len(waiting) * 2 <= world:
            return
        silent = set(rank_range(world)) - waiting - reported - _failed_on_their_own(job)
        # Alive: it logged, or the world group's timeouts came after calls every rank had joined.
        seen = set(job.torch_ranks["rank"].to_list()) if not job.torch_ranks.is_empty() else set()
        world_seq = timed_out.filter(pl.col("pg").str.split(" ").list.first() == DEFAULT_PG)["seq"].max()
        joined = isinstance(world_seq, int) and world_seq > 1
        if not silent or len(silent) > max(1, world // 8) or not (joined or silent <= seen):
            return
        ranks = sorted(silent)
        first = timed_out.sort("source_id", "line_no", "part").row(0, named=True)
        groups = timed_out["pg"].drop_nulls().unique(maintain_order=True).to_list()
        names = ", ".join(describe_rank(job, r) for r in ranks)
        title = (
            f"{names} never joined the collective its group waits in: {len(waiting)} of {world} ranks hit "
            f"the watchdog timeout (first in process group {first['pg']}, then "
            f"{len(groups) - 1} other group(s)), and {'it' if len(ranks) == 1 else 'they'} reported none"
        )
        early = timed_out.filter(pl.col("pg") == first["pg"]).select("source_id", "line_no", "part")
        yield self.finding(
            job,
            title,
            evidence_rows=early.head(3),
            ranks=ranks,
            advice=stack_advice(job, ranks),
            pg=first["pg"],
            seq=first.get("seq"),
            op=first.get("op_type"),
        )


def _failed_on_their_own(job: Job) -> set[int]:
    """Ranks with a failure of their own in the logs: an exception, a NCCL WARN, an exit that was not the
    launcher's kill. A silent rank is none of these."""
    failed: set[int] = set()
    for name in ("app_errors", "errors"):
        rows = job.table(name)
        if not rows.is_empty():
            failed |= set(with_job_rank(job, rows)["job_rank"].drop_nulls().to_list())
    return failed


def _next_op(job: Job, uid: str, position: int) -> str | None:
    """The op the ranks that went ahead called at ``position`` (1-based) of communicator ``uid``."""
    coll = job.table("collectives")
    coll = positioned(coll.filter(pl.col("comm_uid") == uid), job.table("coll_stats"))
    at = coll.filter(pl.col("position") == position)
    return at["op"].mode().sort(nulls_last=True).first() if at.height else None


def _by_pg(timed_out: pl.DataFrame, states: pl.DataFrame):
    keys = set()
    for frame in (timed_out, states):
        if not frame.is_empty():
            keys |= set(frame["pg"].to_list())
    for key in sorted(keys, key=str):
        t = timed_out.filter(pl.col("pg") == key) if not timed_out.is_empty() else timed_out
        s = states.filter(pl.col("pg") == key) if not states.is_empty() else states
        if t.is_empty():
            t = pl.DataFrame(
                schema={
                    "job_rank": pl.Int64,
                    "seq": pl.Int64,
                    "op_type": pl.String,
                    "source_id": pl.UInt16,
                    "line_no": pl.UInt32,
                    "part": pl.UInt8,
                }
            )
        if s.is_empty():
            s = pl.DataFrame(
                schema={
                    "job_rank": pl.Int64,
                    "last_enqueued": pl.Int64,
                    "source_id": pl.UInt16,
                    "line_no": pl.UInt32,
                    "part": pl.UInt8,
                }
            )
        yield (key,), (t, s)


def lagging_communicators(job: Job, failing: bool) -> set[str]:
    """The communicators :meth:`RankBehind.from_collectives` reports, found in one pass over every member's
    last call instead of filtering each communicator's members (thousands of communicators on a large job)."""
    ordinal = pl.col("ordinal")
    front = ordinal.max()
    behind = ordinal < front
    screen = (
        members_last_calls(job)
        .group_by("comm_uid")
        .agg(
            members=pl.len(),
            behind=behind.sum(),
            gap=front - ordinal.filter(behind).max(),
        )
    )
    return set(
        screen.filter(
            (pl.col("members") >= 2)
            & (pl.col("behind") > 0)
            & (pl.col("behind") * 2 < pl.col("members"))
            & (pl.lit(failing) | (pl.col("gap") >= 2))
        )["comm_uid"].to_list()
    )
