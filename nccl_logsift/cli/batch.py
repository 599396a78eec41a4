"""``logsift batch``: analyse every job of an archive into one Parquet dataset and a fleet summary."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from nccl_logsift.batch.engines import engine_for
from nccl_logsift.batch.run import BatchOptions, BatchResult, plan, run_batch
from nccl_logsift.batch.task import JobOutcome
from nccl_logsift.cli.output import check_directory, text_width
from nccl_logsift.render.controls import visible


@click.command()
@click.argument("archives", nargs=-1, required=True, type=click.Path(exists=True, path_type=str))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of the dataset (created if missing; an earlier batch's dataset is added to).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where jobs run: a process pool here, or tasks on a Ray cluster.",
)
@click.option(
    "-j",
    "--jobs",
    "workers",
    type=click.IntRange(min=1),
    default=None,
    help="Jobs analysed at once (default: one per core; with Ray, as many as the cluster's CPUs run).",
)
@click.option(
    "--job-pattern",
    metavar="GLOB",
    default=None,
    help="Group files into jobs by a glob over paths inside ARCHIVE; {job} marks the job's name, "
    "e.g. '{job}.rank*.log*' (default: one job per directory or file in ARCHIVE).",
)
@click.option(
    "--tables",
    is_flag=True,
    help="Also write every job's parser tables (as `logsift parse` does; a second read of each job), "
    "which name the culprits' NICs.",
)
@click.option(
    "--address",
    metavar="ADDR",
    default=None,
    help="Ray cluster to run on ('auto' for the one this node belongs to, or HEAD:6379); "
    "default: start Ray here.",
)
@click.option(
    "--retry-failed", is_flag=True, help="Analyse jobs that failed before again, even when unchanged."
)
def batch(
    archives: tuple[str, ...],
    output: Path,
    engine: str,
    workers: int | None,
    job_pattern: str | None,
    tables: bool,
    address: str | None,
    retry_failed: bool,
) -> None:
    """Analyse every job of an archive: one Parquet dataset, one fleet summary.

    Each ARCHIVE is a directory holding one directory (or one file) per job, a directory whose files
    --job-pattern groups into jobs, or a single job's log. Compressed logs (.gz, .zst, .bz2) are read
    directly. Every job is analysed exactly as `logsift analyze` would; jobs analysed by an earlier run
    from the same files are skipped, so an interrupted batch resumes where it stopped. A job that cannot
    be read is recorded with status 'failed' and its reason; the batch goes on.

    \b
    Writes to OUTPUT (Hive-partitioned by run_date, readable by polars, DuckDB, Spark):
      jobs/ findings/ ranks/ gpus/   one row per job / finding / rank / process, keyed by job_key
      tables/<table>/                with --tables: the tables `logsift parse` writes
      reports/                       each job's HTML report, as `logsift report` writes it
      fleet.json, fleet.html         the jobs (filterable, linked to their reports), root causes by kind,
                                     culprit hosts/GPUs/NICs, kinds by NCCL version

    \b
    Examples:
      logsift batch /archive/2025-11 -o fleet/
      logsift batch logs/ --job-pattern '{job}.rank*.log.gz' -o fleet/ --jobs 8
      logsift batch /nfs/archive -o /nfs/fleet --engine ray --address auto
    """
    options = BatchOptions(
        archives=archives,
        out=output,
        engine=engine,
        workers=workers,
        job_pattern=job_pattern,
        tables=tables,
        address=address,
        retry_failed=retry_failed,
    )
    runner = engine_for(engine, workers, address)
    check_directory(output)  # a dataset that cannot be written fails now, not as one failed row per job
    work = plan(options)
    if not work.todo and not work.skipped:
        click.echo(
            f"Warning: no job found in {', '.join(archives)}"
            f"{f' matching --job-pattern {job_pattern!r}' if job_pattern else ''}.",
            err=True,
        )
    with batch_progress(len(work.todo)) as progress:
        result = run_batch(options, runner, work, progress)
    _print_result(result, output)


@contextmanager
def batch_progress(total: int, stream: TextIO | None = None) -> Iterator[Callable[[JobOutcome], None] | None]:
    """A bar of jobs done and MB/s of log text on stderr when it is a terminal; nothing otherwise."""
    stream = stream or sys.stderr
    if not stream.isatty() or total == 0:
        yield None
        return
    columns = (
        TextColumn("analysing"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs"),
        RateColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(file=stream, highlight=False), transient=True) as bar:
        task = bar.add_task("jobs", total=total, bytes=0)

        def advance(outcome: JobOutcome) -> None:
            bar.update(task, advance=1, bytes=bar.tasks[0].fields["bytes"] + outcome.bytes)

        yield advance


class RateColumn(ProgressColumn):
    """Decimal MB of log text per second since the batch started (whole jobs, so it moves in steps)."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.fields.get("bytes", 0) / elapsed / 1e6 if elapsed > 0 else 0.0
        return Text(f"{rate:,.1f} MB/s", style="progress.data.speed")


def _print_result(result: BatchResult, output: Path) -> None:
    console = Console(highlight=False, width=text_width(None, sys.stdout.isatty()))
    summary = result.summary
    console.print(
        f"Found {result.found} job(s): analysed {result.analysed}, skipped {result.skipped} already analysed"
        f"{f', {result.failed} failed' if result.failed else ''}."
    )
    console.print(
        f"Dataset of {summary.jobs} job(s) in {output}/ ({summary.incomplete} from damaged input, "
        f"{summary.failed} unreadable, {summary.with_root_cause} with a root cause); "
        f"summary in {output}/fleet.json, page and job "
        f"list in {output}/fleet.html, each job's report under {output}/reports/"
    )
    if summary.kinds:
        kinds = Table(
            "kind", "jobs (root cause)", "jobs (any)", title="Findings by kind", title_justify="left"
        )
        for k in summary.kinds:
            kinds.add_row(k.kind, f"{k.root_cause_jobs:,}", f"{k.jobs:,}")
        console.print(kinds)
    if summary.hosts:
        hosts = Table(
            "host", "jobs", "root causes", title="Hosts implicated most often", title_justify="left"
        )
        for c in summary.hosts[:10]:
            hosts.add_row(escape(visible(c.name)), f"{c.jobs:,}", ", ".join(c.kinds))
        console.print(hosts)
