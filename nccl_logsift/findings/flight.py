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
from collections import Counter
from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.wording import rank_word
from nccl_logsift.model import Evidence, Finding, Kind, Severity
from nccl_logsift.resolve.job import Job, per_job

FR_EVIDENCE = 4  # dump entries a finding quotes per side
# torch-table events that print a rank's last enqueued / completed SeqNum on a process group.
PROGRESS_EVENTS = ("timeout_at_work", "exception_at_work", "failure_at_work", "dump_signal")


def entry_evidence(job: Job, rows: pl.DataFrame, limit: int = FR_EVIDENCE) -> tuple[Evidence, ...]:
    """Dump entries as evidence: the dump's path, the entry's index, and the entry in one line."""
    if rows.is_empty():
        return ()
    paths = dict(job.table("flight_dumps").select("dump_id", "path").iter_rows())
    return tuple(
        Evidence(paths.get(row["dump_id"], "?"), int(row["entry"]), describe_entry(row))
        for row in rows.head(limit).iter_rows(named=True)
    )


def describe_entry(row: dict) -> str:
    shapes = lambda sizes, dtypes: (
        ", ".join(f"{list(s)} {d}" for s, d in zip(sizes or [], dtypes or [None] * len(sizes or []))) or "-"
    )
    where = f" at {row['call_site']}" if row.get("call_site") else ""
    into = shapes(row["input_sizes"], row["input_dtypes"])
    out = shapes(row["output_sizes"], row["output_dtypes"])
    return (
        f"Flight Recorder entry {row['entry']} of rank {row['rank']}: process group {_pg(row)} collective "
        f"#{row['collective_seq_id']} {row['profiling_name']} in {into} out {out}, {row['state']}{where}"
    )


def _pg(row: dict) -> str:
    return f"{row['pg_name']} ({row['pg_desc']})" if row.get("pg_desc") else str(row["pg_name"])


def _signature(row: dict) -> tuple:
    return (
        row["op"],
        _frozen(row["input_sizes"]),
        _frozen(row["input_dtypes"]),
        _frozen(row["output_sizes"]),
        _frozen(row["output_dtypes"]),
    )


def _frozen(value):
    if isinstance(value, (list, tuple, pl.Series)):
        return tuple(_frozen(v) for v in value)
    return value


def _call(row: dict) -> str:
    sizes = ", ".join(f"{list(s)}" for s in row["input_sizes"] or [])
    dtypes = ", ".join(row["input_dtypes"] or [])
    out = ", ".join(f"{list(s)}" for s in row["output_sizes"] or [])
    return f"{row['op']} (in {sizes or '-'} {dtypes}, out {out or '-'})"


@per_job
def collectives(job: Job) -> pl.DataFrame:
    """Collective entries, one per rank, process group and SeqNum (coalesced groups, which share a SeqNum
    on one rank, are left out: their ops are compared as a group by fr_trace, not here)."""
    fr = job.table("flight_recorder")
    if fr.is_empty():
        return fr
    fr = fr.filter(
        ~pl.col("is_p2p").fill_null(False)
        & pl.col("collective_seq_id").is_not_null()
        & (pl.col("collective_seq_id") > 0)
        & pl.col("rank").is_not_null()
        & pl.col("pg_name").is_not_null()
    )
    return fr.filter(pl.len().over("rank", "pg_name", "collective_seq_id") == 1).sort(
        "pg_name", "collective_seq_id", "rank"
    )


@per_job
def mismatches(job: Job) -> list[dict]:
    """Per process group, the first SeqNum where the ranks' entries disagree: the majority's, the others'."""
    found = []
    coll = collectives(job)
    if coll.is_empty():
        return found
    shared = coll.filter(pl.len().over("pg_name", "collective_seq_id") > 1)
    for (pg_name,), group in shared.group_by("pg_name", maintain_order=True):
        for (seq,), at in group.group_by("collective_seq_id", maintain_order=True):
            rows = at.to_dicts()
            counts = Counter(_signature(r) for r in rows)
            if len(counts) < 2:
                continue
            # The majority is what most ranks called; on a tie, what the lowest rank called.
            major = max(
                counts, key=lambda s: (counts[s], -min(r["rank"] for r in rows if _signature(r) == s))
            )
            found.append(
                {
                    "pg_name": pg_name,
                    "seq": seq,
                    "major": [r for r in rows if _signature(r) == major],
                    "minor": [r for r in rows if _signature(r) != major],
                }
            )
            break
    return sorted(found, key=lambda m: m["major"][0]["time_created_ns"] or 0)


class FlightRecorderMismatch(Rule):
    """Flight Recorder dumps show ranks enqueuing different collectives at the same SeqNum.

    What it means:
        At the same collective SeqNum of the same process group, the dumps of some ranks record another
        operation, tensor shape or dtype than the others. The calls cannot be matched: NCCL waits forever
        or corrupts data.

    Why it matters:
        It is an application bug (a rank-dependent branch, a parameter present on one rank only, different
        shapes), and the dump says which call, with its shapes, dtypes and the Python line that made it.
        Restarting the job hits it again.

    How it is detected:
        Entries of every dump are grouped by process group GUID and ``collective_seq_id`` (p2p entries and
        coalesced groups aside); where ranks disagree on (op without backend prefix, input sizes and dtypes,
        output sizes and dtypes), the signature most ranks share is the majority; the other ranks are named.
        Only the first disagreeing SeqNum of each process group is reported: later ones follow from it.

    Example:
        At collective #15 of process group 0 (default_pg), rank 1 enqueued ``nccl:_all_gather_base`` with
        input ``[1024] Float`` while ranks 0, 2 and 3 enqueued ``nccl:all_reduce`` with ``[65536] Float``.

    What to do:
        Open the call site the dump entry names on the culprit rank and make every rank issue the same
        collectives with the same shapes; ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` checks this at run time.
    """

    code = "LS701"
    name = "flight-recorder-mismatch"
    kind = Kind.COLLECTIVE_MISMATCH
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        for m in mismatches(job):
            major, minor = m["major"], m["minor"]
            first_major, first_minor = major[0], minor[0]
            title = (
                f"Flight Recorder: at collective #{m['seq']} of process group {_pg(first_major)}, "
                f"{rank_word(r['rank'] for r in minor)} enqueued {_call(first_minor)} while "
                f"{rank_word(r['rank'] for r in major)} enqueued {_call(first_major)}"
            )
            evidence = entry_evidence(job, pl.DataFrame(minor), FR_EVIDENCE) + entry_evidence(
                job, pl.DataFrame(major), 2
            )
            site = f" ({first_minor['call_site']})" if first_minor.get("call_site") else ""
            yield Finding(
                code=self.code,
                name=self.name,
                kind=self.kind,
                severity=self.severity,
                title=title,
                ranks=tuple(sorted({r["rank"] for r in minor})),
                hosts=job.hosts_of([r["rank"] for r in minor]),
                pg=_pg(first_major),
                seq=m["seq"],
                op=first_minor["op"],
                evidence=evidence,
                advice=f"Find why the call site of rank(s) {', '.join(str(r['rank']) for r in minor)}{site} "
                f"issues {first_minor['op']} where the others issue {first_major['op']} with other "
                "shapes; make every rank issue the same collectives in the same order.",
            )


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
