"""LS702 flight-recorder-rank-behind: Flight Recorder dumps show ranks that never enqueued the collective
their peers wait in."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.flight._entries import collectives, entry_evidence, mismatches
from nccl_logsift.findings.wording import rank_word
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.job import Job, per_job

# torch-table events that print a rank's last enqueued / completed SeqNum on a process group.
PROGRESS_EVENTS = ("timeout_at_work", "exception_at_work", "failure_at_work", "dump_signal")


@per_job
def progress(job: Job) -> pl.DataFrame:
    """Last enqueued and completed SeqNum per rank and process group: from the dumps, and for ranks without a
    dump from their log lines. Columns rank, pg_name, pg_desc, last_enqueued, last_completed, source."""
    status = job.table("flight_pg_status")
    schema = {
        "rank": pl.Int64,
        "pg_name": pl.String,
        "pg_desc": pl.String,
        "last_enqueued": pl.Int64,
        "last_completed": pl.Int64,
        "source": pl.String,
        "source_id": pl.UInt16,
        "line_no": pl.UInt32,
    }
    frames = [pl.DataFrame(schema=schema)]
    if not status.is_empty():
        frames.append(
            status.filter(pl.col("pg_name").is_not_null() & pl.col("rank").is_not_null()).select(
                "rank",
                "pg_name",
                "pg_desc",
                last_enqueued=pl.col("last_enqueued_collective"),
                last_completed=pl.col("last_completed_collective"),
                source=pl.lit("dump"),
                source_id=pl.lit(None, pl.UInt16),
                line_no=pl.lit(None, pl.UInt32),
            )
        )
    dumped = set(frames[-1]["rank"].to_list())
    torch = job.table("torch")
    if not torch.is_empty() and {"event", "last_enqueued", "pg_id"} <= set(torch.columns):
        rank = pl.coalesce(
            *[
                pl.col(c).cast(pl.Int64)
                for c in ("global_rank", "torch_rank", "pg_rank")
                if c in torch.columns
            ]
        )
        logged = torch.filter(
            pl.col("event").is_in(PROGRESS_EVENTS) & pl.col("last_enqueued").is_not_null()
        ).select(
            rank=rank,
            pg_name=pl.col("pg_id").cast(pl.String),
            pg_desc=pl.col("pg_desc"),
            last_enqueued=pl.col("last_enqueued").cast(pl.Int64),
            last_completed=pl.col("last_completed").cast(pl.Int64),
            source=pl.lit("log"),
            source_id=pl.col("source_id").cast(pl.UInt16),
            line_no=pl.col("line_no").cast(pl.UInt32),
        )
        # The log's PG id is the rank's local one: the same as the GUID for the default group only, so only
        # the default group (id 0) of ranks without a dump is filled from the logs.
        logged = logged.filter(
            (pl.col("pg_name") == "0") & pl.col("rank").is_not_null() & ~pl.col("rank").is_in(list(dumped))
        )
        frames.append(
            logged.sort("line_no")
            .group_by("rank", "pg_name", maintain_order=True)
            .agg(pl.all().last())
            .select(list(schema))
        )
    return pl.concat([f.select(list(schema)).cast(schema) for f in frames])


class FlightRecorderRankBehind(Rule):
    """Flight Recorder dumps show ranks that never enqueued the collective their peers wait in.

    What it means:
        In a process group, some ranks enqueued collective #N (and it never completed), while others stopped
        at an earlier SeqNum: those never called #N, and the group waits for them.

    Why it matters:
        The ranks that are behind are the likely culprits (a data loader, checkpoint I/O, a rank-dependent
        branch); the ranks that timed out are only waiting for them.

    How it is detected:
        Per process group, each rank's last enqueued SeqNum is read from the dump's ``pg_status`` (which
        survives the ring buffer wrapping); ranks without a dump are filled from their log lines that print
        ``Last enqueued NCCL work``. If the ranks furthest ahead have not completed their last collective, the
        ranks with a lower last enqueued SeqNum are named. When every rank that left a trace waits in the same
        collective, the members of the group that left neither a dump nor a logged SeqNum are named instead,
        at error severity (fr_trace's "missing ranks"). Process groups with a mismatch (LS701) are left to
        that finding.

    Example:
        Ranks 0, 1 and 3 enqueued collective #13 (all_reduce) of process group 0 (default_pg), which is still
        scheduled; rank 2's last was #12.

    What to do:
        Dump the Python stack of the ranks behind while the job still hangs (``py-spy dump --pid``) and find
        what they do instead of calling the collective.
    """

    code = "LS702"
    name = "flight-recorder-rank-behind"
    kind = Kind.RANK_BEHIND
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        prog = progress(job)
        if prog.is_empty() or job.table("flight_dumps").is_empty():
            return
        mismatched = {m["pg_name"] for m in mismatches(job)}
        seen: dict[tuple[int, ...], Finding] = {}
        for (pg_name,), group in prog.group_by("pg_name", maintain_order=True):
            if pg_name in mismatched or group.height < 2:
                continue
            front = group["last_enqueued"].max()
            leaders = group.filter(pl.col("last_enqueued") == front)
            # The front is stuck when its ranks have not completed what they enqueued; otherwise the dump was
            # taken while a healthy job ran and the difference is only timing.
            if not (leaders["last_completed"] < front).all():
                continue
            behind = group.filter(pl.col("last_enqueued") < front)
            if behind.is_empty():
                silent = job_members(job, pg_name) - set(group["rank"].to_list())
                found = self._silent(job, pg_name, silent, leaders) if silent else None
            else:
                found = self._behind(job, pg_name, behind, leaders, front)
            if found is not None and found.ranks not in seen:
                seen[found.ranks] = found
        yield from seen.values()

    def _behind(
        self, job: Job, pg_name: str, behind: pl.DataFrame, leaders: pl.DataFrame, front: int
    ) -> Finding:
        """Ranks whose last enqueued SeqNum is below the stuck leaders': the group waits for them."""
        ranks = tuple(sorted(behind["rank"].to_list()))
        first_missing = behind["last_enqueued"].min() + 1  # where the leaders' collective waits for them
        stuck = _entries(job, pg_name, first_missing, leaders["rank"].to_list())
        op = stuck["op"][0] if not stuck.is_empty() else None
        lasts = ", ".join(
            f"rank {r}: #{e}" + (" (from its log; no dump)" if s == "log" else "")
            for r, e, s in behind.sort("rank").select("rank", "last_enqueued", "source").iter_rows()
        )
        ahead = "wait for it" if front == first_missing else f"went on to #{front}"
        title = (
            f"Flight Recorder: {rank_word(ranks)} never enqueued collective #{first_missing}"
            + (f" ({op})" if op else "")
            + f" of process group {_pg_label(pg_name, behind, leaders)} (last enqueued: {lasts}), while "
            + f"{rank_word(leaders['rank'].to_list())} enqueued it and {ahead}"
        )
        logged = behind.filter(pl.col("source") == "log").select("source_id", "line_no")
        evidence = entry_evidence(job, _last_entries(job, pg_name, ranks)) + job.evidence(logged, 2)
        return Finding(
            code=self.code,
            name=self.name,
            kind=self.kind,
            severity=self.severity,
            title=title,
            ranks=ranks,
            hosts=job.hosts_of(ranks),
            pg=_pg_label(pg_name, behind, leaders),
            seq=first_missing,
            op=op,
            evidence=evidence + entry_evidence(job, stuck, 2),
            advice="While the job still hangs, dump the Python stacks of the ranks behind (py-spy dump "
            "--pid) and find what they do instead of calling the collective; the dump entries name "
            "the call site.",
            first_seen=job.first_seen(logged) if not logged.is_empty() else None,
        )

    def _silent(self, job: Job, pg_name: str, silent: set[int], leaders: pl.DataFrame) -> Finding:
        """Every rank that left a trace waits in the same collective, and some members left none: those are
        the suspects (fr_trace reports them as missing ranks), named with less certainty (error)."""
        waiting = int(leaders["last_completed"].max()) + 1
        stuck = _entries(job, pg_name, waiting, leaders["rank"].to_list())
        op = stuck["op"][0] if not stuck.is_empty() else None
        ranks = tuple(sorted(silent))
        pg = _pg_label(pg_name, leaders)
        return Finding(
            code=self.code,
            name=self.name,
            kind=self.kind,
            severity=Severity.ERROR,
            title=f"Flight Recorder: {rank_word(ranks)} of process group {pg} left no dump and no progress "
            f"in the logs, while every rank that dumped waits in collective #{waiting}"
            + (f" ({op})" if op else ""),
            ranks=ranks,
            hosts=job.hosts_of(ranks),
            pg=pg,
            seq=waiting,
            op=op,
            evidence=entry_evidence(job, stuck, 3),
            advice="Look at the ranks without a dump first: a rank that died or hung outside PyTorch's "
            "watchdog writes none. Their logs (last lines, exit status) and a py-spy dump while it "
            "hangs say which.",
        )


def _entries(job: Job, pg_name: str, seq: int, ranks: list[int]) -> pl.DataFrame:
    """The collective entries of these ranks at one SeqNum of a process group."""
    coll = collectives(job)
    if coll.is_empty():
        return coll
    at = (pl.col("pg_name") == pg_name) & (pl.col("collective_seq_id") == seq)
    return coll.filter(at & pl.col("rank").is_in(ranks))


def _last_entries(job: Job, pg_name: str, ranks: tuple[int, ...]) -> pl.DataFrame:
    """The last collective entry of each of these ranks on a process group (a rank without a dump: none)."""
    coll = collectives(job)
    if coll.is_empty():
        return coll
    mine = coll.filter(pl.col("rank").is_in(list(ranks)) & (pl.col("pg_name") == pg_name))
    if mine.is_empty():
        return mine
    return mine.sort("collective_seq_id").group_by("rank").agg(pl.all().last()).sort("rank")


def _pg_label(pg_name: str, *frames: pl.DataFrame) -> str:
    desc = pl.concat([f.select("pg_desc") for f in frames])["pg_desc"].drop_nulls()
    return f"{pg_name} ({desc[0]})" if desc.len() else pg_name


def job_members(job: Job, pg_name: str) -> set[int]:
    """Global ranks of a process group, from the pg_config of every dump."""
    status = job.table("flight_pg_status")
    if status.is_empty():
        return set()
    lists = status.filter(pl.col("pg_name") == pg_name)["pg_ranks"].drop_nulls().to_list()
    return {r for ranks in lists for r in ranks}
