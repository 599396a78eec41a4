"""The per-job task: analyse one job with the same pipeline as ``logsift analyze``, write its rows.

It runs in a worker (a pool process or a Ray task) and writes the job's files itself, so only a small
:class:`JobOutcome` travels back. Whatever goes wrong with one job — a corrupt archive member, an
unreadable file, a bug the job's logs trigger — becomes a ``failed`` row in ``jobs``, never an exception
that stops the batch.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path

import polars as pl
import pyarrow as pa

from nccl_logsift import __version__
from nccl_logsift.batch import dataset
from nccl_logsift.batch.archive import JobInput
from nccl_logsift.errors import LogsiftError
from nccl_logsift.model import Report
from nccl_logsift.pipeline import ParseOptions, analyze, parse_paths
from nccl_logsift.render.html import render_html
from nccl_logsift.render.json import to_dict
from nccl_logsift.tables import ParquetSink, RankMaps

log = logging.getLogger(__name__)

# The batch is parallel over jobs, so each job is parsed in its worker alone: a job's own parsing
# processes would only compete with the other workers for the same cores.
ANALYZE_OPTIONS = ParseOptions(workers=1)


class Status(StrEnum):
    OK = "ok"
    INCOMPLETE = "incomplete"  # analysed, but some input could not be read (see message)
    FAILED = "failed"  # nothing could be analysed


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What the batch driver learns of a job: enough for the progress bar and the closing line."""

    job_key: str
    job_id: str
    status: str
    message: str | None
    bytes: int  # log text read, or the size on disk when nothing was read
    seconds: float


def run_job(job: JobInput, out: str, with_tables: bool = False) -> JobOutcome:
    """Analyse ``job`` and write its rows under ``out``; the ``jobs`` row is written last."""
    started = time.perf_counter()
    analysed_at = datetime.now(UTC)
    root = Path(out)
    report, message = None, None
    try:
        if not job.files:
            raise LogsiftError("the job holds no files")
        report = analyze(job.paths, ANALYZE_OPTIONS)
        _write_report(root, job, report)
        dataset.write_report(root, job.run_date, job.key, render_html(report))
        if with_tables:
            _write_tables(root, job)
    except LogsiftError as exc:
        message = str(exc)
    except Exception as exc:  # one job's logs must never stop the batch: record what happened instead
        log.debug("job %s failed", job.job_id, exc_info=True)
        message = f"{type(exc).__name__}: {exc}"
    if report is None:
        status = Status.FAILED
    elif message is not None or report.cut_short:
        status = Status.INCOMPLETE
        message = "; ".join([*report.notes, *([message] if message else [])])
    else:
        status = Status.OK
    seconds = time.perf_counter() - started
    row = job_row(job, status, message, report, analysed_at, seconds)
    dataset.write_part(
        dataset.part_path(root, "jobs", job.run_date, job.key), pa.Table.from_pylist([row], dataset.JOBS)
    )
    read = report.bytes if report is not None else job.bytes
    return JobOutcome(job.key, job.job_id, status, message, read, seconds)


def failed_outcome(job: JobInput, out: str, message: str) -> JobOutcome:
    """Record a job whose worker died (killed, out of memory): the driver writes its ``jobs`` row."""
    row = job_row(job, Status.FAILED, message, None, datetime.now(UTC), 0.0)
    dataset.write_part(
        dataset.part_path(Path(out), "jobs", job.run_date, job.key), pa.Table.from_pylist([row], dataset.JOBS)
    )
    return JobOutcome(job.key, job.job_id, Status.FAILED, message, job.bytes, 0.0)


def job_row(
    job: JobInput,
    status: str,
    message: str | None,
    report: Report | None,
    analysed_at: datetime,
    seconds: float,
) -> dict:
    row = {
        "job_key": job.key,
        "job_id": job.job_id,
        "archive": job.archive,
        "status": status,
        "message": message,
        "files": len(job.files),
        "file_bytes": job.bytes,
        "fingerprint": job.fingerprint,
        "logsift_version": __version__,
        "analysed_at": analysed_at,
        "seconds": round(seconds, 3),
    }
    if report is None:
        return row
    contract = to_dict(report)
    summary = contract["job"]
    worst = report.worst_severity
    return row | {
        "bytes": report.bytes,
        "lines": report.lines,
        "unparsed_lines": report.unparsed_lines,
        "nccl_version": summary["nccl_versions"][0] if summary["nccl_versions"] else None,
        "nccl_versions": summary["nccl_versions"],
        "world_size": summary["world_size"],
        "hosts": summary["hosts"],
        "ranks_seen": summary["ranks_seen"],
        "communicators": summary["communicators"],
        "findings": len(contract["findings"]),
        "primary_kinds": [f["kind"] for f in contract["findings"] if f["primary"]],
        "worst_severity": worst.label if worst is not None else None,
        "verdict": contract["verdict"],
    }


def _write_report(root: Path, job: JobInput, report: Report) -> None:
    """The report's findings and ranks, column for column as the findings contract names them, and the
    GPU of every rank from the report's topology view."""
    contract = to_dict(report)
    ident = {"job_key": job.key, "job_id": job.job_id}
    findings = [ident | {"position": i} | f for i, f in enumerate(contract["findings"])]
    ranks = [ident | r for r in contract["ranks"]]
    topology = report.views.topology if report.views is not None else None
    gpus = [
        ident | {"host": host.name, "rank": gpu.rank, "cuda_dev": gpu.cuda_dev, "bus_id": gpu.bus_id}
        for host in (topology.hosts if topology is not None else ())
        for gpu in host.gpus
    ]
    for name, rows in (("findings", findings), ("ranks", ranks), ("gpus", gpus)):
        table = pa.Table.from_pylist(rows, dataset.SCHEMAS[name])
        dataset.write_part(dataset.part_path(root, name, job.run_date, job.key), table)


class _JobSink(ParquetSink):
    """``logsift parse``'s Parquet sink, with the job's key and id on every row so the tables join."""

    def __init__(self, directory: Path, job: JobInput) -> None:
        super().__init__(directory)
        self._ident = [pl.lit(job.key).alias("job_key"), pl.lit(job.job_id).alias("job_id")]

    def write(self, name: str, frame: pl.DataFrame) -> None:
        super().write(name, frame.with_columns(self._ident))

    def finish(self, maps: RankMaps, extra: dict[str, pl.DataFrame]) -> dict[str, int]:
        return super().finish(maps, {name: frame.with_columns(self._ident) for name, frame in extra.items()})


def _write_tables(root: Path, job: JobInput) -> None:
    """The tables ``logsift parse`` writes, one file per table in the job's partition (a second read)."""
    with tempfile.TemporaryDirectory(dir=root, prefix=dataset.STAGING_PREFIX) as staging:
        sink = _JobSink(Path(staging), job)
        parse_paths(job.paths, sink, ParseOptions(workers=1))
        for name, path in sink.files.items():
            dataset.move_part(path, dataset.part_path(root, name, job.run_date, job.key))
