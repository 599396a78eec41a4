"""One batch: find the jobs, skip those already analysed, run the rest on an engine, summarise the fleet."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from nccl_logsift import __version__
from nccl_logsift.batch import dataset, fleet
from nccl_logsift.batch.archive import JobInput, find_jobs
from nccl_logsift.batch.task import JobOutcome, Status
from nccl_logsift.errors import OutputError
from nccl_logsift.render.html import render_fleet


@dataclass(frozen=True, slots=True)
class BatchOptions:
    archives: tuple[str, ...]
    out: Path
    engine: str = "local"  # local | ray
    workers: int | None = None  # processes (local) or tasks in parallel (ray); default: every core
    job_pattern: str | None = None
    tables: bool = False  # also write the parser tables of every job
    address: str | None = None  # Ray cluster address; None starts a local Ray
    retry_failed: bool = False  # analyse failed jobs again even when their inputs did not change


@dataclass(frozen=True, slots=True)
class Plan:
    """The jobs found, split into those to analyse and those already analysed."""

    todo: tuple[JobInput, ...]
    skipped: int

    @property
    def bytes(self) -> int:
        return sum(job.bytes for job in self.todo)


@dataclass(frozen=True, slots=True)
class BatchResult:
    found: int
    skipped: int
    analysed: int
    failed: int
    summary: fleet.FleetSummary


def plan(options: BatchOptions) -> Plan:
    """Find the jobs; a job whose inputs and logsift version match its ``jobs`` row is skipped.

    A job analysed before from other inputs (or by another version) has its old rows removed first, and
    so have the parts of a job whose analysis was interrupted before its ``jobs`` row was written, so that
    a changed run date cannot leave two versions of it in two partitions.
    """
    jobs = find_jobs(options.archives, options.job_pattern)
    dataset.prepare(options.out)
    done = (
        fleet.scan(options.out, "jobs")
        .select("job_key", "fingerprint", "logsift_version", "status", dataset.PARTITION)
        .collect()
    )
    current = pl.DataFrame(
        {"job_key": [j.key for j in jobs], "fingerprint_now": [j.fingerprint for j in jobs]},
        schema={"job_key": pl.String, "fingerprint_now": pl.String},
    )
    compared = done.join(current, on="job_key", how="inner").with_columns(
        same=(pl.col("fingerprint") == pl.col("fingerprint_now"))
        & (pl.col("logsift_version") == __version__)
        & ((pl.col("status") != Status.FAILED) | (not options.retry_failed))
    )
    dataset.remove_orphans(options.out, set(done["job_key"]))
    unchanged = set(compared.filter("same")["job_key"])
    for key, run_date in compared.filter(~pl.col("same")).select("job_key", dataset.PARTITION).iter_rows():
        dataset.remove_job(options.out, run_date, key)
    todo = tuple(job for job in jobs if job.key not in unchanged)
    return Plan(todo, len(jobs) - len(todo))


def run_batch(
    options: BatchOptions,
    engine,
    work: Plan | None = None,
    on_outcome: Callable[[JobOutcome], None] | None = None,
) -> BatchResult:
    """Analyse the jobs of ``work`` (planned here when not given) on ``engine``, then summarise the
    dataset."""
    work = work or plan(options)
    failed = 0
    try:
        for outcome in engine.run(work.todo, str(options.out), options.tables):
            failed += outcome.status == Status.FAILED
            if on_outcome is not None:
                on_outcome(outcome)
    except BaseException:
        # Interrupted: the engine has stopped its workers on the way out; what they were writing goes.
        dataset.remove_unfinished(options.out)
        raise
    summary = fleet.summarize(options.out)
    try:
        (options.out / "fleet.json").write_text(fleet.summary_json(summary))
        (options.out / "fleet.html").write_text(render_fleet(summary))
    except OSError as exc:
        raise OutputError(
            f"cannot write the fleet summary into {options.out}: {exc.strerror or exc}"
        ) from None
    return BatchResult(len(work.todo) + work.skipped, work.skipped, len(work.todo), failed, summary)
