"""Signs that a process failed: NCCL WARNs that are not probes or teardown, and Python exceptions that
ended a script, with the rank of the process where a line says it."""

from __future__ import annotations

import polars as pl

from nccl_logsift.grammar import load_grammars
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.exits import assemble_exits
from nccl_logsift.resolve.hosts import nccl_host_expr
from nccl_logsift.resolve.job import Job, per_job
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.work import timeouts
from nccl_logsift.tables import MODULE_FRAME

# Error kinds that are never a sign of a process's failure: probes, retries and fallbacks NCCL handled, and
# teardown chatter (the roles of grammars/nccl/errors.toml [kinds], which findings/vocabulary.py gives rules).
BENIGN_KINDS = tuple(
    kind.name for kind in load_grammars().family("errors").kinds if kind.role in ("benign", "teardown")
)


def unranked_exits(job: Job) -> int:
    """Processes that ended with an uncaught top-level Python exception no line ties to a rank (an unlabelled
    stream, no launcher report): counted against the world ranks missing from NCCL init."""
    if _launcher_reports(job):
        return 0
    return sum(1 for r in uncaught_exceptions(job) if r["job_rank"] is None)


def _launcher_reports(job: Job) -> bool:
    exits = job.table("exits")
    return not exits.is_empty() and "event" in exits.columns


def uncaught_exceptions(job: Job) -> list[dict]:
    """Python exceptions that reached the top level of the script (``Traceback`` whose first frame is
    ``<module>``), with the exception that ends each traceback: the process exits with code 1."""
    apps = job.table("app_errors")
    lines = job.lines
    if apps.is_empty() or "event" not in apps.columns or lines.is_empty():
        return []
    stream = [c for c in ("source_id", "task", "mpi_rank", "torch_rank", "local_rank") if c in apps.columns]
    rows = with_job_rank(job, apps.sort("source_id", "line_no"))
    rows = rows.with_columns(
        tb=(pl.col("event") == "traceback").cast(pl.Int32).cum_sum().over(stream, order_by=["line_no"])
    )
    tracebacks = rows.filter(pl.col("event") == "traceback").select(*stream, "tb", "line_no")
    first_frames = tracebacks.select("source_id", (pl.col("line_no") + 1).alias("line_no")).join(
        lines.filter(pl.col("part") == 0).select("source_id", "line_no", "text"),
        on=["source_id", "line_no"],
        how="left",
    )
    top = first_frames.filter(pl.col("text").fill_null("").str.contains(MODULE_FRAME)).select(
        "source_id", (pl.col("line_no") - 1).alias("line_no")
    )
    tracebacks = tracebacks.join(top, on=["source_id", "line_no"], how="semi")
    if tracebacks.is_empty() or "error_class" not in rows.columns:
        return []
    ends = (
        rows.filter((pl.col("tb") > 0) & pl.col("error_class").is_not_null())
        .group_by(*stream, "tb")
        .agg(pl.all().first())
    )
    out = []
    matched = ends.join(tracebacks.select(*stream, "tb"), on=[*stream, "tb"], how="inner", nulls_equal=True)
    for r in matched.sort("line_no").iter_rows(named=True):
        text = r.get("nccl_error") or r.get("detail") or ""
        r["what"] = r["error_class"] + (f" ({text})" if text else "")
        out.append(r)
    return out


@per_job
def failure_rows(job: Job) -> pl.DataFrame:
    """Any sign that a process failed in NCCL: a WARN that is not a probe or teardown message, or a
    non-zero '-> N' chain line (with seq). Real failures of the catch-all kinds are followed by a chain."""
    errors = job.table("errors")
    if errors.is_empty() or "error_kind" not in errors.columns:
        return pl.DataFrame(schema={"host": pl.String, "pid": pl.Int64, "seq": pl.Int64})
    rows = errors.filter(
        pl.col("host").is_not_null()
        & (
            ((pl.col("level") == "WARN") & ~pl.col("error_kind").is_in(BENIGN_KINDS))
            | ((pl.col("error_kind") == "chain") & (pl.col("result_code").fill_null(0) > 0))
        )
    )
    return with_seq(rows)


TEST_FAILURES = ("test_nccl_failure", "test_cuda_failure", "test_timeout")


@per_job
def nccl_tests_failures(job: Job) -> pl.DataFrame:
    """nccl-tests' own failure lines (``host: Test NCCL failure file:line 'error / last error'``, CUDA
    failures, timeouts) with ``job_rank``: the launcher label of the line; else the rank of the one process
    on that host whose ``.. host pid P: Test failure`` trace follows, read from the test's device list
    (``#  Rank 2 Group 0 Pid P on host``); else the first failed process of mpirun's exit block, when the
    device list puts it on that host."""
    tests = job.table("nccltests")
    if tests.is_empty() or "event" not in tests.columns:
        return pl.DataFrame()
    failures = with_job_rank(job, tests.filter(pl.col("event").is_in(TEST_FAILURES)))
    if failures.is_empty():
        return failures
    host = nccl_host_expr(pl.col("test_host"))
    devices = (
        tests.filter(pl.col("event") == "device")
        .select(
            host.alias("_h"),
            pl.col("test_pid").alias("_pid"),
            pl.col("rank").cast(pl.Int64).alias("_dev_rank"),
        )
        .drop_nulls()
        .unique(["_h", "_pid"])
    )
    traces = (
        tests.filter((pl.col("event") == "test_failure") & pl.col("test_pid").is_not_null())
        .select(host.alias("_h"), pl.col("test_pid").alias("_pid"))
        .unique()
    )
    # Only a host with one failing process says which one printed the failure.
    traced = traces.join(devices, on=["_h", "_pid"], how="inner").unique("_h", keep="none")
    traced = traced.select("_h", _traced="_dev_rank")
    exits = job.table("exits")
    if not exits.is_empty():
        first = assemble_exits(exits).filter(pl.col("root_cause") & pl.col("rank").is_not_null())
        placed = first.select(_dev_rank="rank").join(devices.unique("_dev_rank"), on="_dev_rank", how="inner")
        traced = pl.concat([traced, placed.select("_h", _traced="_dev_rank")])
        traced = traced.unique("_h", keep="first", maintain_order=True)
    return (
        failures.with_columns(_h=host)
        .join(traced, on="_h", how="left", maintain_order="left")
        .with_columns(job_rank=pl.coalesce("job_rank", "_traced"))
        .drop("_h", "_traced")
    )


def hang_evidence(job: Job) -> bool:
    """Something says the job stopped abnormally: a watchdog fired, a comm aborted, a process died, a WARN
    (the rules that grade a stall or a straggler by it)."""
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
