"""The batch output: a Hive-partitioned Parquet dataset that polars, DuckDB and Spark read as it is.

    OUT/
      _logsift_batch.json                       marks OUT as a batch dataset (ignored by dataset readers)
      jobs/run_date=2025-11-20/<job_key>.parquet        one row per job: status, summary, verdict
      findings/run_date=2025-11-20/<job_key>.parquet    one row per finding (the findings contract v1)
      ranks/run_date=2025-11-20/<job_key>.parquet       one row per rank and communicator: where it stopped
      gpus/run_date=2025-11-20/<job_key>.parquet        one row per process: its host, rank and GPU
      tables/<table>/run_date=.../<job_key>.parquet     with --tables: the tables of ``logsift parse``
      reports/run_date=.../<job_key>.html               the job's HTML report, as ``logsift report`` writes it
      fleet.json, fleet.html                            the fleet summary

Every table is partitioned by ``run_date``, the day (UTC) the job last wrote a log, because fleet
questions are asked over a period ("this month"); ``job_key`` joins every table. Each job writes its own
files, the ``jobs`` row last, so a job whose ``jobs`` row exists is complete, and an interrupted batch
loses at most the jobs in flight. Files are written under a temporary name and renamed into place; what a
stopped worker left half-written (``*.tmp`` files, ``.staging-*`` directories) is removed when the batch is
interrupted (:func:`remove_unfinished`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from nccl_logsift.errors import InputError

PARTITION = "run_date"
STAGING_PREFIX = ".staging-"  # a job's parser tables are written in OUT/.staging-*/ and moved into place
UNFINISHED_SUFFIX = ".tmp"
MARKER = "_logsift_batch.json"
DATASET_FORMAT = "nccl-logsift/batch/v1"

_EVIDENCE = pa.struct([("path", pa.string()), ("line", pa.int64()), ("text", pa.string())])

JOBS = pa.schema(
    [
        ("job_key", pa.string()),
        ("job_id", pa.string()),
        ("archive", pa.string()),
        (
            "status",
            pa.string(),
        ),  # ok | incomplete (some input unreadable) | failed (nothing could be analysed)
        ("message", pa.string()),  # why the job failed, or the input problems of an incomplete one
        ("files", pa.int32()),
        ("file_bytes", pa.int64()),  # on disk (compressed size for .gz/.zst/.bz2)
        ("bytes", pa.int64()),  # log text read (decompressed)
        ("lines", pa.int64()),
        ("unparsed_lines", pa.int64()),
        ("nccl_version", pa.string()),  # the job's NCCL version (the lowest when ranks disagree)
        ("nccl_versions", pa.list_(pa.string())),
        ("world_size", pa.int64()),
        ("hosts", pa.list_(pa.string())),
        ("ranks_seen", pa.int64()),
        ("communicators", pa.int64()),
        ("findings", pa.int32()),
        ("primary_kinds", pa.list_(pa.string())),  # the root causes' kinds, in report order
        ("worst_severity", pa.string()),
        ("verdict", pa.string()),
        ("fingerprint", pa.string()),  # of the inputs: path, size, mtime of every file
        ("logsift_version", pa.string()),
        ("analysed_at", pa.timestamp("us", tz="UTC")),
        ("seconds", pa.float64()),
    ]
)

FINDINGS = pa.schema(
    [
        ("job_key", pa.string()),
        ("job_id", pa.string()),
        ("position", pa.int32()),  # order in the report: root causes first
        ("code", pa.string()),
        ("kind", pa.string()),
        ("severity", pa.string()),
        ("primary", pa.bool_()),
        ("title", pa.string()),
        ("ranks", pa.list_(pa.int64())),
        ("hosts", pa.list_(pa.string())),
        ("comm", pa.string()),
        ("pg", pa.string()),
        ("seq", pa.int64()),
        ("op", pa.string()),
        ("evidence", pa.list_(_EVIDENCE)),
        ("advice", pa.string()),
    ]
)

RANKS = pa.schema(
    [
        ("job_key", pa.string()),
        ("job_id", pa.string()),
        ("rank", pa.int64()),
        ("host", pa.string()),
        ("pid", pa.int64()),
        ("comm", pa.string()),
        ("last_op", pa.string()),
        ("last_seq", pa.int64()),
        ("last_completed_seq", pa.int64()),
        ("last_line", _EVIDENCE),
    ]
)

GPUS = pa.schema(
    [
        ("job_key", pa.string()),
        ("job_id", pa.string()),
        ("host", pa.string()),
        ("rank", pa.int64()),  # global rank
        ("cuda_dev", pa.int64()),
        (
            "bus_id",
            pa.string(),
        ),  # PCI bus id as NCCL prints it: names the GPU whatever CUDA_VISIBLE_DEVICES says
    ]
)

SCHEMAS = {"jobs": JOBS, "findings": FINDINGS, "ranks": RANKS, "gpus": GPUS}
TABLES_DIR = "tables"
REPORTS_DIR = "reports"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def prepare(out: Path) -> None:
    """Create OUT, or check that an existing OUT is a batch dataset (never write into anything else)."""
    marker = out / MARKER
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not marker.exists():
        raise InputError(f"{out}: not empty and not a logsift batch dataset; choose a new or empty directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        if not marker.exists():
            marker.write_text(
                json.dumps({"format": DATASET_FORMAT, "partitioning": ["hive", PARTITION]}) + "\n"
            )
    except OSError as exc:
        raise InputError(f"cannot create output directory {out}: {exc.strerror}") from exc


def part_path(out: Path, table: str, run_date: str | None, job_key: str) -> Path:
    """Where one job's rows of ``table`` live; parser tables sit under ``tables/``."""
    base = out / table if table in SCHEMAS else out / TABLES_DIR / table
    return base / _partition(run_date) / f"{job_key}.parquet"


def report_path(run_date: str | None, job_key: str) -> Path:
    """Where a job's HTML report lives, relative to OUT (so fleet.html links to it wherever OUT is moved)."""
    return Path(REPORTS_DIR) / _partition(run_date) / f"{job_key}.html"


def _partition(run_date: str | None) -> str:
    # A job with no file has no date: Hive's null partition, which polars, DuckDB and Spark read as null.
    return f"{PARTITION}={run_date if run_date is not None else NULL_PARTITION}"


def write_report(out: Path, run_date: str | None, job_key: str, page: str) -> None:
    """Write a job's HTML report atomically, like its rows."""
    path = out / report_path(run_date, job_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(page, encoding="utf-8")
    os.replace(staging, path)


def write_part(path: Path, table: pa.Table) -> None:
    """Write ``table`` to ``path`` atomically: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + UNFINISHED_SUFFIX)
    pq.write_table(table, staging, compression="zstd")
    os.replace(staging, path)


def move_part(source: Path, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(source, path)


def remove_job(out: Path, run_date: str | None, job_key: str) -> None:
    """Delete what an earlier analysis of a job wrote (before its inputs changed), ``jobs`` row last."""
    tables = out / TABLES_DIR
    names = sorted(p.name for p in tables.iterdir()) if tables.is_dir() else []
    (out / report_path(run_date, job_key)).unlink(missing_ok=True)
    for table in ["findings", "ranks", "gpus", *names, "jobs"]:
        part_path(out, table, run_date, job_key).unlink(missing_ok=True)


def remove_orphans(out: Path, recorded: set[str]) -> int:
    """Delete every part and report of a job with no ``jobs`` row (``recorded`` holds the keys that have
    one); return how many files went. A job's row is written last, so such parts are what an interrupted
    analysis left. The job is analysed again, under the run date of its files then, and parts left in an
    older partition would count it twice in any query over all partitions."""
    removed = 0
    bases = [out / name for name in SCHEMAS if name != "jobs"] + [out / REPORTS_DIR]
    tables = out / TABLES_DIR
    bases += sorted(p for p in tables.iterdir() if p.is_dir()) if tables.is_dir() else []
    for base in bases:
        for part in base.glob(f"{PARTITION}=*/*"):
            if part.suffix in (".parquet", ".html") and part.stem not in recorded:
                part.unlink(missing_ok=True)
                removed += 1
    return removed


def remove_unfinished(out: Path) -> None:
    """Remove what workers stopped mid-job left behind: staging directories and parts not yet renamed.
    Only for when no worker of this batch runs any more; a job without its ``jobs`` row is analysed again."""
    for staging in out.glob(f"{STAGING_PREFIX}*"):
        shutil.rmtree(staging, ignore_errors=True)
    for part in out.glob(f"**/*.parquet{UNFINISHED_SUFFIX}"):
        part.unlink(missing_ok=True)


def table_glob(out: Path, table: str) -> str:
    """The glob that reads every partition of ``table`` (for polars ``scan_parquet``, DuckDB
    ``read_parquet``)."""
    base = out / table if table in SCHEMAS else out / TABLES_DIR / table
    return str(base / f"{PARTITION}=*" / "*.parquet")
