"""Assemble the Report from the parse summary, the job's tables and the triaged findings."""

from __future__ import annotations

import dataclasses

import polars as pl

from nccl_logsift.findings.triage import diagnose, verdict_text
from nccl_logsift.flight.advisor import advise
from nccl_logsift.flight.audit import audit as audit_dumps
from nccl_logsift.model import Evidence, Finding, InputInfo, JobSummary, RankState, Report, ReportViews
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.processes import launcher_hosts
from nccl_logsift.resolve.transports import logged_hosts
from nccl_logsift.resolve.work import PLAUSIBLE_SEQ, work_states
from nccl_logsift.summary import InputSummary, ParseSummary

MAX_RANK_ROWS = 4096 * 4  # enough for every rank of the largest jobs on a few communicators


def build_report(summary: ParseSummary, job: Job, findings: list[Finding], views: bool = True) -> Report:
    """The Report; ``views`` computes what only the HTML page draws (not part of the findings contract)."""
    # A path that could not be read at all is an input too: a consumer of the JSON must see it was given.
    read = [*summary.inputs, *map(InputSummary.skipped, summary.skipped)]
    inputs = tuple(InputInfo(i.path, i.bytes, i.lines, i.unparsed_lines, i.problems) for i in read)
    job_summary = summarize_job(job)
    ranks = rank_states(job)
    notes = tuple(f"{i.path}: {p.describe()}" for i in inputs for p in i.problems) + tuple(summary.damage())
    diagnosis = dataclasses.replace(diagnose(findings), caveat=_cut_short(inputs))
    text = verdict_text(diagnosis, job_summary.ranks_seen, len(job_summary.hosts))
    dumps = audit_dumps(job)
    return Report(
        inputs=inputs,
        job=job_summary,
        verdict=text,
        findings=tuple(findings),
        ranks=ranks,
        notes=notes,
        views=_views(job, findings) if views else None,
        dumps=dumps,
        next_run=advise(job, dumps),
        diagnosis=diagnosis,
    )


def _cut_short(inputs: tuple[InputInfo, ...]) -> str:
    """What the verdict cannot speak for: inputs not read to their end. A verdict of "healthy" over a log
    whose tail was lost says less than it seems, and the reader of the verdict alone must know it."""
    cut = [i.path for i in inputs if any(p.cuts_input for p in i.problems)]
    if not cut:
        return ""
    shown = ", ".join(cut[:3]) + (f" and {len(cut) - 3} more" if len(cut) > 3 else "")
    return f"Not all input could be read ({shown}): this covers what was read; the notes say what was lost."


def summarize_job(job: Job) -> JobSummary:
    versions = job.table("versions")
    nccl_versions: tuple[str, ...] = ()
    if not versions.is_empty():
        # The library's own versions: RCCL also logs ROCr's and the kernel's (products ROCr, Linux).
        labelled = (
            versions.filter(pl.col("product").is_in(["NCCL", "RCCL"]) | pl.col("product").is_null())
            .select(
                pl.when(pl.col("product") == "RCCL")
                .then(pl.format("RCCL {}", "version"))
                .otherwise(pl.col("version"))
            )
            .to_series()
        )
        nccl_versions = tuple(sorted(set(labelled.drop_nulls().to_list())))
    hosts = logged_hosts(job) | launcher_hosts(job)
    ranks = (
        set(job.processes["global_rank"].drop_nulls().to_list()) if not job.processes.is_empty() else set()
    )
    ranks |= set(job.torch_ranks["rank"].to_list())
    comms = job.table("communicators")
    return JobSummary(
        nccl_versions=nccl_versions,
        torch_version=None,  # PyTorch does not print its version in these logs
        world_size=job.world_size,
        hosts=tuple(sorted(hosts)),
        ranks_seen=len(ranks),
        communicators=comms["comm_uid"].n_unique() if not comms.is_empty() else 0,
    )


# The columns of a rank's last call that its state shows, in the order rank_states reads them.
_STATE_COLUMNS = ("global_rank", "rank", "comm_uid", "ordinal", "source_id", "line_no", "host", "pid", "op")


def rank_states(job: Job) -> tuple[RankState, ...]:
    """Where every rank stopped, per communicator: its last COLL line, or PyTorch's view of its work."""
    coll = job.table("collectives")
    states: list[RankState] = []
    completed = _last_completed(job)
    if not coll.is_empty() and coll["comm_uid"].drop_nulls().len():
        # The columns a rank's state shows, first: a sort of every column of a 4096-rank job's window of
        # calls held ~60 MB more than anything before it.
        shown = [*_STATE_COLUMNS, "part"]  # and the line's part, which its evidence is looked up by
        last = (
            coll.select(shown)
            .filter(pl.col("comm_uid").is_not_null())
            .sort("ordinal")
            .group_by("comm_uid", "rank")
            .agg(pl.all().last())
            .sort("comm_uid", "global_rank", "rank")
            .head(MAX_RANK_ROWS)
        )
        evidence = {
            (e.line, e.path): e
            for e in job.evidence(last.select("source_id", "line_no", "part"), limit=last.height)
        }
        # By columns, not a dict per row: a 4096-rank job has 16k states.
        paths = job.paths
        for global_rank, member, comm, ordinal, source, line, host, pid, op in zip(
            *(last.get_column(name).to_list() for name in _STATE_COLUMNS)
        ):
            rank = global_rank if global_rank is not None else member
            path = paths[source] if source < len(paths) else "?"
            states.append(
                RankState(
                    rank=rank,
                    host=host,
                    pid=pid,
                    comm=comm,
                    last_op=op,
                    last_seq=ordinal + 1,
                    last_completed_seq=completed.get(rank),
                    last_line=evidence.get((line, path)),
                )
            )
        return tuple(states)
    work = work_states(job)
    if work.is_empty():
        return ()
    last = work.sort("line_no").group_by("job_rank", "pg").agg(pl.all().last()).sort("pg", "job_rank")
    for row in last.iter_rows(named=True):
        path = job.paths[row["source_id"]] if row["source_id"] < len(job.paths) else "?"
        ev = job.evidence(pl.DataFrame([{k: row[k] for k in ("source_id", "line_no", "part")}]), 1)
        proc = job.process_of(row["job_rank"]) if row["job_rank"] is not None else None
        states.append(
            RankState(
                rank=row["job_rank"],
                host=proc["host"] if proc else row.get("host"),
                pid=proc["pid"] if proc else None,
                comm=row["pg"],
                last_op=None,
                last_seq=row["last_enqueued"],
                last_completed_seq=row["last_completed"],
                last_line=ev[0] if ev else Evidence(path, row["line_no"], ""),
            )
        )
    return tuple(states)


def _last_completed(job: Job) -> dict[int, int]:
    work = work_states(job)
    if work.is_empty():
        return {}
    rows = work.filter(
        pl.col("last_completed").is_between(-1, PLAUSIBLE_SEQ) & pl.col("job_rank").is_not_null()
    )
    return dict(rows.group_by("job_rank").agg(pl.col("last_completed").max()).iter_rows())


def _views(job: Job, findings: list[Finding]) -> ReportViews:
    from nccl_logsift.views import build_views  # the HTML page's only: JSON and text go without

    return build_views(job, findings)
