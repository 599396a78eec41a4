"""Rules about how far each rank got: ranks behind, mismatched collectives, watchdog timeouts (LS1xx).

| code | name | kind | severity |
|---|---|---|---|
| LS101 | rank-behind | rank_behind | critical |
| LS102 | collective-mismatch | collective_mismatch | critical |
| LS103 | watchdog-timeout | watchdog_timeout | error |

Positions are compared within one communicator (NCCL) or one process group (PyTorch) only: NCCL counts
calls per communicator (:func:`positioned`: opCount where it counts every call, else ``ordinal``, the
parser's count of COLL lines, grammar §5.2), PyTorch numbers work per process group (SeqNum, from 1). A
finding's ``#n`` is position + 1, or the SeqNum: nccl_logsift/call_numbers.py says it for users.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.wording import describe_rank, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.job import Job, per_job, rank_range
from nccl_logsift.resolve.positions import (
    P2P_OPS,
    CommProgress,
    first_divergences,
    members_last_calls,
    per_position,
    positioned,
    progress_of,
    with_signature,
)
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.releases import teardown_is_logged
from nccl_logsift.resolve.work import DEFAULT_PG, pg_groups, timeouts, work_states

# Calls a process may still enqueue after a collective that will never complete, before its stream blocks
# (the rest of a step's gradient buckets): a hang ends a communicator's log within this many positions.
STOP_TAIL = 64


def _graded(job: Job, coll: pl.DataFrame, row: dict, hung: bool) -> tuple[Severity, str]:
    """A divergence is critical when the job hung: a sign of failure anywhere, or, in a log of NCCL lines only
    (NCCL_DEBUG_FILE, RCCL runs without PyTorch), the communicator's calls stopping right after it."""
    if hung or _stopped_after(job, coll, row["comm_uid"], row["ordinal"]):
        return Severity.CRITICAL, ""
    return Severity.WARNING, " (no sign of a hang: possibly a log line lost to interleaving)"


def _stopped_after(job: Job, coll: pl.DataFrame, uid: str, ordinal: int) -> bool:
    """The communicator's calls end within STOP_TAIL positions of ``ordinal`` on every rank and no process
    destroyed or aborted it: the job stopped there. A line lost to interleaving shifts positions anywhere in
    a run that goes on. Where the release logs teardown only on request (DESTROY, NCCL 2.30.3+) and this log
    shows none, a run that ended normally stops the same way, so the end of the calls proves a hang only
    where no line can have been lost: each process of the communicator wrote its own stream."""
    calls = coll.filter(pl.col("comm_uid") == uid)
    last = calls["ordinal"].max()
    if not teardown_is_logged(job):
        return last is not None and last - ordinal <= STOP_TAIL and not _streams_shared(calls)
    inst = job.table("communicators")
    ended = (
        not inst.is_empty()
        and {"comm_uid", "ended"} <= set(inst.columns)
        and inst.filter((pl.col("comm_uid") == uid) & pl.col("ended").is_not_null()).height > 0
    )
    return last is not None and last - ordinal <= STOP_TAIL and not ended


def _streams_shared(calls: pl.DataFrame) -> bool:
    """Some input holds the calls of several processes: their output was interleaved, and a COLL line can
    have been torn and lost."""
    if calls.is_empty() or not {"source_id", "host", "pid"} <= set(calls.columns):
        return True
    writers = calls.group_by("source_id").agg(pl.struct("host", "pid").n_unique().alias("n"))
    return bool(writers["n"].max() > 1)


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
        lagging = self._lagging(job, failing)
        # Only the lagging communicators are split out (one group each took ~0.05 ms: 0.2 s over a 4096-rank
        # job's thousands); in the order of members_last_calls, as comm_progress gives them.
        last = members_last_calls(job)
        for progress in (
            progress_of(last.filter(pl.col("comm_uid").is_in(sorted(lagging)))) if lagging else []
        ):
            finding = self._from_collectives(job, progress, failing)
            if finding:
                reported.update(finding.ranks)
                yield finding
        yield from self._from_torch(job, reported)

    @staticmethod
    def _lagging(job: Job, failing: bool) -> set[str]:
        """The communicators :meth:`_from_collectives` reports, found in one pass over every member's last
        call (its filters took ~0.3 ms a communicator, ~1 s over the ~3k of a 4096-rank job)."""
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

    def _from_collectives(self, job: Job, progress: CommProgress, failing: bool) -> Finding | None:
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


class CollectiveMismatch(Rule):
    """Ranks called different collectives (or sizes) at the same position.

    What it means:
        At the same position of the same communicator or process group, some ranks called another
        operation, element count, datatype, reduction or root than the others. NCCL then waits forever (or
        corrupts data), because the calls cannot be matched.

    Why it matters:
        This is an application bug, not an infrastructure fault: a rank-dependent branch, an extra or
        missing collective (a rank-0-only barrier, a parameter frozen on one rank), or different tensor
        shapes. Restarting the job hits it again.

    How it is detected:
        COLL lines are aligned per communicator by position (ordinal); the first position where the members
        disagree on (op, count, datatype, redop, root) is the divergence, and the minority signature names
        the culprits. For point-to-point pairs, both sides sending (or both receiving) at the same position
        is a deadlock. From PyTorch: the collective-fingerprint reports of TORCH_DISTRIBUTED_DEBUG=DETAIL
        (``Detected mismatch between collectives on ranks. Rank R is running collective: …, but Rank K is
        running collective: …``), where every rank's fingerprint is known from its own report or its peers',
        and the fingerprints (op, shapes, dtypes, sequence number) held by fewer ranks name the culprits (with
        no majority, as with two ranks, every side is named and neither is blamed); these reports, when
        present, are the finding. Else watchdog timeouts of one process group at the same SeqNum with
        different OpType or sizes. A divergence is critical when the job shows a hang (watchdog, abort, WARN,
        failed exit) or, in a log of NCCL lines only, when the communicator's calls stop within 64 positions
        of it and no process destroys it (where teardown is logged: from NCCL 2.30.3 only with DESTROY in
        NCCL_DEBUG_SUBSYS); otherwise a warning only: a COLL line lost to interleaved output shifts the
        counted positions the same way.

    Example:
        Ranks 1–3 time out in ``WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=6553600 …)`` while rank 0
        times out in ``WorkNCCL(SeqNum=12, OpType=_ALLGATHER_BASE, NumelIn=1638400 …)``.

    What to do:
        Look at the code path that issues the collective at that position on the culprit rank; run with
        ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` to have PyTorch check collective fingerprints, and make every
        rank issue the same sequence of collectives with the same shapes.
    """

    code = "LS102"
    name = "collective-mismatch"
    kind = Kind.COLLECTIVE_MISMATCH
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        reported = list(self._from_fingerprints(job))
        if reported:
            # PyTorch compared the fingerprints itself before running the collective: what NCCL or the
            # watchdog logged afterwards is fallout (ranks stopped at different points as they raised).
            yield from reported
            return
        found = list(self._from_collectives(job))
        yield from found
        covered = {r for f in found for r in f.ranks}
        for finding in self._from_torch(job):
            if not set(finding.ranks) & covered:  # the NCCL view of the same divergence is more precise
                yield finding

    def _from_collectives(self, job: Job) -> Iterator[Finding]:
        coll = job.table("collectives")
        if coll.is_empty() or "comm_uid" not in coll.columns:
            return
        # A real mismatch hangs the job. Without any sign of failure, a divergence is more likely a COLL line
        # lost to interleaved output (which shifts the counted positions), so it is only a warning then.
        hung = hang_evidence(job)
        coll = positioned(
            coll.filter(pl.col("comm_uid").is_not_null()), job.table("coll_stats")
        ).with_columns(ordinal=pl.col("position"))
        first, pairs = first_divergences(per_position(coll))
        coll = with_signature(coll)
        for row in first.iter_rows(named=True):
            severity, suspect = _graded(job, coll, row, hung)
            at = coll.filter((pl.col("comm_uid") == row["comm_uid"]) & (pl.col("ordinal") == row["ordinal"]))
            # Signatures in the order of their first line; of two equally common, the first seen is the
            # majority.
            at = at.sort("source_id", "line_no", "part")
            counts = at.group_by("sig", maintain_order=True).agg(
                pl.len(), pl.col("global_rank"), pl.col("op").first(), pl.col("count").first()
            )
            majority = counts.sort("len", descending=True, maintain_order=True).row(0, named=True)
            minority = at.filter(pl.col("sig") != majority["sig"])
            if minority.height * 2 > at.height:
                continue
            ranks = [int(r) for r in minority["global_rank"].drop_nulls().to_list()]
            odd = minority.row(0, named=True)
            title = (
                f"At call #{row['ordinal'] + 1} of communicator {row['comm_uid']}, rank(s) "
                f"{ranks_text(ranks)} called "
                f"{odd['op']}(count {odd['count']}, datatype {odd['datatype']}) while "
                f"{at.height - minority.height} "
                f"rank(s) called {majority['op']}(count {majority['count']})"
            )
            if minority.height * 2 == at.height:
                # As many ranks on each side (always so with two ranks): no majority says which call was
                # meant, so both sides are named and neither is blamed.
                agree = at.filter(pl.col("sig") == majority["sig"])["global_rank"].drop_nulls()
                same = [int(r) for r in agree.to_list()]
                title = (
                    f"At call #{row['ordinal'] + 1} of communicator {row['comm_uid']}, rank(s) "
                    f"{ranks_text(same)} called {majority['op']}(count {majority['count']}) while rank(s) "
                    f"{ranks_text(ranks)} called {odd['op']}(count {odd['count']}, datatype "
                    f"{odd['datatype']}): as many ranks on each side, so the logs cannot say which side is "
                    "wrong"
                )
                ranks = sorted(ranks + same)
            before = coll.filter(
                (pl.col("comm_uid") == row["comm_uid"]) & (pl.col("ordinal") == row["ordinal"] - 1)
            )
            rows = pl.concat(
                [minority.head(2), at.filter(pl.col("sig") == majority["sig"]).head(2), before.head(1)]
            )
            yield self.finding(
                job,
                title + suspect,
                evidence_rows=rows.select("source_id", "line_no", "part"),
                ranks=ranks,
                comm=row["comm_uid"],
                seq=row["ordinal"] + 1,
                op=odd["op"],
                advice=self._advice(),
                severity=severity,
            )
        for row in pairs.iter_rows(named=True):
            severity, suspect = _graded(job, coll, row, hung)
            at = coll.filter((pl.col("comm_uid") == row["comm_uid"]) & (pl.col("ordinal") == row["ordinal"]))
            op = at["op"].first()
            culprits = self._p2p_deviants(coll, row["comm_uid"], row["ordinal"])
            ranks = [
                int(r)
                for r in (culprits if culprits is not None else at)["global_rank"].drop_nulls().to_list()
            ]
            who = (
                f"rank(s) {ranks_text(ranks)} call {op} where the same position of the other pipeline pairs "
                "calls "
                f"{'Recv' if op == 'Send' else 'Send'}"
                if culprits is not None
                else f"ranks {ranks_text(ranks)}"
            )
            title = (
                f"Both sides of point-to-point communicator {row['comm_uid']} call {op} at call "
                f"#{row['ordinal'] + 1}: a send/recv deadlock ({who})"
            )
            yield self.finding(
                job,
                title + suspect,
                evidence_rows=at.select("source_id", "line_no", "part"),
                ranks=ranks,
                comm=row["comm_uid"],
                seq=row["ordinal"] + 1,
                op=op,
                advice=self._advice(),
                severity=severity,
            )

    @staticmethod
    def _p2p_deviants(coll: pl.DataFrame, uid: str, ordinal: int) -> pl.DataFrame | None:
        """The side of a deadlocked pair whose op differs from what that side does in the other pairs.

        Pipeline stages repeat one schedule, so the other 2-rank point-to-point communicators show what
        each side should call at this position; None when there is no such majority to compare with.
        """
        pairs = coll.filter(
            pl.col("op").is_in(P2P_OPS) & (pl.col("nranks") == 2) & (pl.col("ordinal") == ordinal)
        )
        others = pairs.filter(pl.col("comm_uid") != uid)
        if others.is_empty():
            return None
        expected = others.group_by("rank").agg(pl.col("op").mode().sort().first().alias("expected"), pl.len())
        mine = pairs.filter(pl.col("comm_uid") == uid).join(
            expected, on="rank", how="inner", maintain_order="left"
        )
        deviants = mine.filter(pl.col("op") != pl.col("expected"))
        return deviants if 0 < deviants.height < mine.height else None

    def _from_fingerprints(self, job: Job) -> Iterator[Finding]:
        """TORCH_DISTRIBUTED_DEBUG=DETAIL reports: each rank that raised names its own fingerprint and the
        first rank (in group order) whose fingerprint differs; fingerprints fewer ranks hold are the odd ones.
        """
        prints = fingerprints(job)
        if prints.is_empty():
            return
        per_sig = prints.group_by("sig", maintain_order=True).agg(pl.col("rank"), pl.len())
        per_sig = per_sig.sort("len", descending=True, maintain_order=True)
        top = per_sig["len"].first()
        tied = per_sig.filter(pl.col("len") == top).height > 1
        # With two ranks (or a tie) nothing says which side is wrong: every side is named.
        odd_sigs = per_sig["sig"] if tied else per_sig["sig"].slice(1)
        odd = prints.filter(pl.col("sig").is_in(odd_sigs.implode()))
        usual = prints.filter(~pl.col("sig").is_in(odd_sigs.implode()))
        ranks = sorted(odd["rank"].to_list())
        first = odd.row(0, named=True)
        # One sequence number for all: say it once; else each side's is part of the difference.
        seqs = prints["seq"].drop_nulls().unique()
        at = f" at SequenceNumber {seqs[0]}" if seqs.len() == 1 else ""
        show = functools.partial(_fingerprint_text, with_seq=not at)
        if tied:
            examples = prints.unique("sig", keep="first", maintain_order=True)
            example = {row["sig"]: row for row in examples.iter_rows(named=True)}
            sides = "; ".join(
                f"rank(s) {ranks_text(sorted(r))} ran {show(example[sig])}"
                for sig, r in per_sig.select("sig", "rank").iter_rows()
            )
            title = f"{DETAIL} found mismatched collectives{at} and no majority: {sides}"
        else:
            title = (
                f"{DETAIL} found mismatched collectives{at}: rank(s) {ranks_text(ranks)} ran {show(first)} "
                f"while {usual.height} rank(s) ran {show(usual.row(0, named=True))}"
            )
        reports = fingerprint_reports(job)
        culprit = pl.col("reporter").is_in(ranks)
        ev = pl.concat([reports.filter(culprit).head(3), reports.filter(~culprit).head(2)])
        yield self.finding(
            job,
            title,
            evidence_rows=ev.select("source_id", "line_no", "part"),
            ranks=ranks,
            seq=first["seq"],
            op=first["op"],
            advice=self._advice(),
        )

    def _from_torch(self, job: Job) -> Iterator[Finding]:
        rows = timeouts(job)
        if rows.is_empty():
            return
        rows = rows.with_columns(
            sig=pl.concat_str(
                [pl.col("op_type").fill_null("-"), pl.col("numel_in").cast(pl.String).fill_null("-")],
                separator="|",
            )
        )
        for (pg, seq), group in rows.group_by("pg", "seq", maintain_order=True):
            per_rank = group.unique("job_rank", keep="first", maintain_order=True)
            if per_rank["sig"].n_unique() < 2:
                if (
                    per_rank.height == 2
                    and per_rank["op_type"].n_unique() == 1
                    and per_rank["op_type"].first() in ("SEND", "RECV")
                ):
                    ranks = sorted(per_rank["job_rank"].drop_nulls().to_list())
                    op = per_rank["op_type"].first()
                    title = (
                        f"Both ranks {ranks_text(ranks)} of process group {pg} wait in {op} #{seq}: a "
                        "send/recv deadlock"
                    )
                    yield self.finding(
                        job,
                        title,
                        evidence_rows=per_rank.select("source_id", "line_no", "part"),
                        ranks=ranks,
                        pg=pg,
                        seq=seq,
                        op=op,
                        advice=self._advice(),
                    )
                continue
            if per_rank["op_type"].is_in(["SEND", "RECV"]).all():
                # Point-to-point work: one stage sends while the next receives at the same SeqNum, and a PG id
                # names a different pair on each pipeline, so a majority says nothing about who is wrong.
                continue
            counts = (
                per_rank.group_by("sig", maintain_order=True)
                .agg(pl.len())
                .sort("len", descending=True, maintain_order=True)
            )
            majority = counts["sig"].first()
            minority = per_rank.filter(pl.col("sig") != majority)
            if minority.height * 2 >= per_rank.height:
                continue
            ranks = sorted(minority["job_rank"].drop_nulls().to_list())
            odd = minority.row(0, named=True)
            usual = per_rank.filter(pl.col("sig") == majority).row(0, named=True)
            title = (
                f"In process group {pg}, rank(s) {ranks_text(ranks)} timed out in {odd['op_type']} #{seq} "
                f"(numel {odd['numel_in']}) while {per_rank.height - minority.height} rank(s) wait in "
                f"{usual['op_type']} #{seq} (numel {usual['numel_in']})"
            )
            rows_ev = pl.concat([minority.head(2), per_rank.filter(pl.col("sig") == majority).head(2)])
            yield self.finding(
                job,
                title,
                evidence_rows=rows_ev.select("source_id", "line_no", "part"),
                ranks=ranks,
                pg=pg,
                seq=seq,
                op=odd["op_type"],
                advice=self._advice(),
            )

    @staticmethod
    def _advice() -> str:
        return (
            "Find the code path that issues this collective on the culprit rank(s): a rank-dependent branch, "
            "a "
            "collective skipped or added on one rank, or different tensor shapes. Re-run with "
            "TORCH_DISTRIBUTED_DEBUG=DETAIL to have PyTorch compare collective fingerprints across ranks."
        )


@per_job
def fingerprint_reports(job: Job) -> pl.DataFrame:
    """ProcessGroupWrapper's mismatch reports, with ``reporter`` (its global rank) and ``peer`` (the global
    rank it compared itself with). The ranks printed are ranks of the process group; a launcher or
    ``[rankN]:`` label maps the reporter's to a global rank, and a peer's maps through the labelled reports.
    """
    apps = job.table("app_errors")
    if apps.is_empty() or "fp_rank" not in apps.columns:
        return pl.DataFrame()
    rows = apps.filter((pl.col("event") == "collective_mismatch") & pl.col("fp_rank").is_not_null())
    if rows.is_empty():
        return pl.DataFrame()
    rows = job.ranked(rows).with_columns(pl.col("fp_rank").cast(pl.Int64), pl.col("peer_rank").cast(pl.Int64))
    labelled = rows.filter(pl.col("job_rank").is_not_null()).select(pg_rank="fp_rank", global_rank="job_rank")
    labelled = labelled.unique("pg_rank")
    # No label, or labels equal to the printed ranks (the default group): the printed ranks are global.
    same = labelled.is_empty() or bool((labelled["pg_rank"] == labelled["global_rank"]).all())
    to_global = labelled.rename({"pg_rank": "_r"})

    def mapped(column: str, name: str) -> pl.Expr:
        return pl.coalesce("global_rank", pl.col(column) if same else pl.lit(None, pl.Int64)).alias(name)

    rows = rows.join(to_global.rename({"_r": "fp_rank"}), on="fp_rank", how="left", maintain_order="left")
    rows = rows.with_columns(reporter=pl.coalesce("job_rank", mapped("fp_rank", "reporter")))
    rows = rows.drop("global_rank")
    rows = rows.join(to_global.rename({"_r": "peer_rank"}), on="peer_rank", how="left", maintain_order="left")
    return rows.with_columns(mapped("peer_rank", "peer")).drop("global_rank")


@per_job
def fingerprints(job: Job) -> pl.DataFrame:
    """One fingerprint per global rank (rank, seq, op, shape, dtypes, sig): what a rank says of itself wins
    over what its peers say of it (2.0 printed a peer's fingerprint without its tensors)."""
    reports = fingerprint_reports(job)
    if reports.is_empty():
        return pl.DataFrame()
    cols = ("seq", "op", "shape", "dtypes")
    own = reports.select(rank="reporter", said_by=pl.lit(0), **{c: f"fp_{c}" for c in cols})
    told = reports.filter(pl.col("peer").is_not_null())
    told = told.select(rank="peer", said_by=pl.lit(1), **{c: f"peer_{c}" for c in cols})
    prints = pl.concat([own, told], how="vertical_relaxed").filter(pl.col("rank").is_not_null())
    prints = prints.sort("said_by", maintain_order=True).unique("rank", keep="first", maintain_order=True)
    sig = pl.concat_str([pl.col(c).cast(pl.String).fill_null("?") for c in cols], separator="|")
    return prints.with_columns(sig=sig).drop("said_by")


DETAIL = "TORCH_DISTRIBUTED_DEBUG=DETAIL"


def _fingerprint_text(row: dict, with_seq: bool = True) -> str:
    parts = [f"shape [{row['shape']}]"] if row.get("shape") is not None else []
    if row.get("dtypes"):
        parts.append(row["dtypes"])
    seq = f" at SequenceNumber {row['seq']}" if with_seq and row.get("seq") is not None else ""
    return f"{row['op']}{'(' + ', '.join(parts) + ')' if parts else ''}{seq}"


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
            timeout = group["timeout_ms"].drop_nulls()
            seq_text = f"#{seqs[0]}" if len(seqs) == 1 else f"#{seqs[0]}–#{seqs[-1]}" if seqs else ""
            which = f"process group {pg}" if len(groups) == 1 else f"{len(groups)} process groups {pg}"
            title = (
                f"{len(ranks)} rank(s) of {which} hit the watchdog timeout"
                f"{f' of {timeout.max() / 1000:g} s' if timeout.len() else ''} in "
                f"{'/'.join(ops) or 'a collective'} {seq_text}"
            ).rstrip()
            notes = ""
            if not states.is_empty():
                mine = states.filter(pl.col("pg").is_in(groups))
                if mine.height and mine["implausible"].any():
                    notes = (
                        " Some 'last completed' values PyTorch printed are uninitialised memory: treated as "
                        "unknown."
                    )
            yield self.finding(
                job,
                title + "." + notes if notes else title,
                evidence_rows=group.select("source_id", "line_no", "part"),
                ranks=ranks,
                pg=pg,
                seq=seqs[0] if len(seqs) == 1 else None,
                op=ops[0] if len(ops) == 1 else None,
                advice=(
                    "These ranks were waiting for a peer. When another finding names a cause, start there. "
                    "When "
                    "every rank timed out in the same collective and nothing else is wrong, suspect the "
                    "network or "
                    "a GPU: check the transports and dmesg (Xid, link errors) on every host. If a rank was "
                    "legitimately slow, raise the timeout of init_process_group; for the next run set "
                    "TORCH_FR_BUFFER_SIZE=2000 (TORCH_NCCL_TRACE_BUFFER_SIZE in older PyTorch) to get a "
                    "flight-recorder dump."
                ),
            )


def _alike_groups(job: Job, rows: pl.DataFrame) -> Iterator[tuple[str, list[str], pl.DataFrame]]:
    """The timeouts by process group, where groups of one family (the same PG ID and description, e.g.
    the eight data-parallel groups) that timed out at the same SeqNums are taken together: (the group's label,
    or the family's for several, the groups, their rows)."""
    family = dict(pg_groups(job).select("label", "family").iter_rows())
    alike: dict[tuple, list[tuple[str, pl.DataFrame]]] = {}
    for (pg,), group in rows.group_by("pg", maintain_order=True):
        seqs = tuple(group["seq"].unique().sort(nulls_last=True).to_list())
        alike.setdefault((family.get(pg, pg), seqs), []).append((pg, group))
    for (name, _), members in alike.items():
        if len(members) == 1:
            yield members[0][0], [members[0][0]], members[0][1]
        else:
            yield name, [pg for pg, _ in members], pl.concat([g for _, g in members])


RULES = (RankBehind, CollectiveMismatch, WatchdogTimeout)
