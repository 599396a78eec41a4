"""LS102 collective-mismatch: Ranks called different collectives (or sizes) at the same position."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.wording import ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.failures import hang_evidence
from nccl_logsift.resolve.job import Job, per_job
from nccl_logsift.resolve.positions import (
    P2P_OPS,
    first_divergences,
    per_position,
    positioned,
    with_signature,
)
from nccl_logsift.resolve.releases import teardown_is_logged
from nccl_logsift.resolve.work import DEFAULT_PG, timeouts

# Calls a process may still enqueue after a collective that will never complete, before its stream blocks
# (the rest of a step's gradient buckets): a hang ends a communicator's log within this many positions.
STOP_TAIL = 64


def _graded(job: Job, coll: pl.DataFrame, row: dict, hung: bool) -> tuple[Severity, str]:
    """A divergence is critical when the job hung: a sign of failure anywhere, or, in a log of NCCL lines only
    (NCCL_DEBUG_FILE, RCCL runs without PyTorch), the communicator's calls stopping right after it. Not when
    the world's watchdog shows the call completed: then the job hung elsewhere, later."""
    if _completed_past(job, coll, row["comm_uid"], row["ordinal"]):
        return Severity.WARNING, (
            " (the watchdog shows later calls of this communicator pending, so this one completed: "
            "probably a log line lost to interleaving)"
        )
    if hung or _stopped_after(job, coll, row["comm_uid"], row["ordinal"]):
        return Severity.CRITICAL, ""
    return Severity.WARNING, " (no sign of a hang: possibly a log line lost to interleaving)"


# How far the default process group's work numbers may run ahead of the world communicator's calls (a
# coalesced or grouped op is one work and several calls, or the other way round).
SEQ_SLACK = 8


def _completed_past(job: Job, coll: pl.DataFrame, uid: str, ordinal: int) -> bool:
    """The divergence at ``ordinal`` (0-based) of the world communicator completed: some rank's watchdog
    fired in the default process group at a work numbered well past it, and a watchdog waits on the oldest
    work still pending, so every work before it completed there. No mismatched collective completes."""
    world = job.world_size
    calls = coll.filter(pl.col("comm_uid") == uid)
    if not world or calls.is_empty() or calls["nranks"].max() != world:
        return False
    fired = timeouts(job)
    if fired.is_empty():
        return False
    pending = fired.filter(pl.col("pg").str.split(" ").list.first() == DEFAULT_PG)["seq"].drop_nulls()
    return pending.len() > 0 and int(pending.min()) > ordinal + 1 + SEQ_SLACK


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
        disagree on (op, count, datatype, redop, root) is the divergence, and the minority signature names the
        culprits. With as many ranks on each side (a pair), the communicators alike (same size, same op at
        that position: the other data-parallel groups) break the tie when two thirds of their calls there
        agree with one side; else both sides are named. For point-to-point pairs, both sides sending (or both
        receiving) at the same position is a deadlock. From PyTorch: the collective-fingerprint reports of
        TORCH_DISTRIBUTED_DEBUG=DETAIL (``Detected mismatch between collectives on ranks. Rank R is running
        collective: …, but Rank K is running collective: …``), where every rank's fingerprint is known from
        its own report or its peers', and the fingerprints (op, shapes, dtypes, sequence number) held by fewer
        ranks name the culprits (with no majority, as with two ranks, every side is named and neither is
        blamed); these reports, when present, are the finding. Else watchdog timeouts of one process group at
        the same SeqNum with different OpType or sizes. A divergence is critical when the job shows a hang
        (watchdog, abort, WARN, failed exit) or, in a log of NCCL lines only, when the communicator's calls
        stop within 64 positions of it and no process destroys it (where teardown is logged: from NCCL 2.30.3
        only with DESTROY in NCCL_DEBUG_SUBSYS); otherwise a warning only: a COLL line lost to interleaved
        output shifts the counted positions the same way.

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
            sibling = (
                self._sibling_majority(coll, row["comm_uid"], row["ordinal"])
                if minority.height * 2 == at.height
                else None
            )
            if sibling is not None and sibling in (majority["sig"], odd["sig"]):
                # As many ranks on each side, but the communicators alike (the other data-parallel groups)
                # called one of the two at this position: the other side is the odd one.
                if sibling == odd["sig"]:
                    minority = at.filter(pl.col("sig") == majority["sig"])
                    majority = counts.filter(pl.col("sig") == odd["sig"]).row(0, named=True)
                    odd = minority.row(0, named=True)
                ranks = [int(r) for r in minority["global_rank"].drop_nulls().to_list()]
                title = (
                    f"At call #{row['ordinal'] + 1} of communicator {row['comm_uid']}, rank(s) "
                    f"{ranks_text(ranks)} called {odd['op']}(count {odd['count']}, datatype "
                    f"{odd['datatype']}) while {at.height - minority.height} rank(s) called "
                    f"{majority['op']}(count {majority['count']}), as the other communicators of "
                    f"{int(at['nranks'].max())} ranks did at this call"
                )
            elif minority.height * 2 == at.height:
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
    def _sibling_majority(coll: pl.DataFrame, uid: str, ordinal: int) -> int | None:
        """The signature that the other communicators of this one's size called at this position, when at
        least two of them exist and two thirds of their calls there agree: replicas of one parallel group
        (the data-parallel groups, say) run the same program, so their call says which side of a tie in
        this one is the odd one. None otherwise."""
        mine = coll.filter((pl.col("comm_uid") == uid) & (pl.col("ordinal") == ordinal))
        # Alike: of the same size, calling a collective of one of the ops called here (point-to-point
        # pairs of the pipeline have this size too, and other groups of it may run other collectives).
        others = coll.filter(
            (pl.col("nranks") == mine["nranks"].max())
            & (pl.col("ordinal") == ordinal)
            & (pl.col("comm_uid") != uid)
            & pl.col("op").is_in(mine["op"].unique().implode())
            & ~pl.col("op").is_in(P2P_OPS)
        )
        if others["comm_uid"].n_unique() < 2:
            return None
        top = others.group_by("sig").len().sort("len", "sig", descending=True).row(0, named=True)
        return int(top["sig"]) if top["len"] * 3 >= others.height * 2 else None

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
