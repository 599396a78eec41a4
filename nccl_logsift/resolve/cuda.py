"""CUDA failures of a job: every CUDA error a process or the driver logged (the error line, the watchdog's
report of it, NCCL's unhandled-CUDA chains, Xid lines), with its process, rank and a key that groups them."""

from __future__ import annotations

import re

import polars as pl

from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.inits import resolve_rows
from nccl_logsift.resolve.job import Job, per_job
from nccl_logsift.resolve.processes import PROC
from nccl_logsift.resolve.ranks import known_ranks

# CUDA error strings that are teardown noise, not a failure: the process is already exiting.
BENIGN_CUDA = ("driver shutting down",)
OOM = re.compile(r"out of memory|CUDA out of memory|OutOfMemory", re.I)
CUDA_WHAT = r"^\s*CUDA error: (.+?)\s*$"  # the first line of a c10::Error from C10_CUDA_CHECK
UNHANDLED_CUDA = 1  # ncclUnhandledCudaError in '-> N' chains


@per_job
def cuda_rows(job: Job) -> pl.DataFrame:
    """Every CUDA failure with host/pid (if any), seq, ``job_rank``, ``origin`` and a grouping ``key``."""
    frames = []
    errors = job.table("errors")
    if not errors.is_empty() and "error_kind" in errors.columns:
        text = pl.col("error_text").fill_null("") if "error_text" in errors.columns else pl.lit("")
        cuda = errors.filter(
            pl.col("error_kind").is_in(("cuda", "alloc"))
            & ~text.str.starts_with("CUMEM")
            & ~pl.col("cuda_error").fill_null("").is_in(BENIGN_CUDA)
        )
        if cuda.height:
            cuda = cuda.with_columns(
                origin=pl.lit("nccl"),
                message=pl.when(pl.col("error_kind") == "alloc")
                .then(
                    pl.format(
                        "Failed to {} {} bytes",
                        pl.col("call").fill_null("allocate"),
                        pl.col("bytes").cast(pl.String).fill_null("?"),
                    )
                )
                .otherwise(pl.col("cuda_error").fill_null(text)),
                key=pl.when(pl.col("error_kind") == "alloc")
                .then(pl.lit("out of memory"))
                .otherwise(pl.col("cuda_error").fill_null(text)),
            )
            frames.append(cuda)
            chains = errors.filter(
                (pl.col("error_kind") == "chain") & (pl.col("result_code") == UNHANDLED_CUDA)
            )
            if chains.height:
                # Chains of processes that printed the CUDA message: evidence for that group.
                owners = cuda.select(*PROC, "key").unique(PROC, keep="first", maintain_order=True)
                frames.append(
                    chains.join(owners, on=PROC, how="inner", maintain_order="left").with_columns(
                        origin=pl.lit("chain"), message=pl.lit(None, pl.String)
                    )
                )
        chains = errors.filter((pl.col("error_kind") == "chain") & (pl.col("result_code") == UNHANDLED_CUDA))
        if chains.height:
            owners = (
                cuda.select(*PROC).unique()
                if cuda.height
                else pl.DataFrame(schema={"host": pl.String, "pid": pl.Int64})
            )
            silent = chains.join(owners, on=PROC, how="anti")
            if silent.height:
                frames.append(
                    silent.with_columns(
                        origin=pl.lit("chain"),
                        message=pl.lit(None, pl.String),
                        key=pl.lit("unhandled CUDA error (ncclUnhandledCudaError, no CUDA message printed)"),
                    )
                )
    apps = job.table("app_errors")
    if not apps.is_empty() and "event" in apps.columns:
        nccl_text = pl.col("nccl_error").fill_null("") if "nccl_error" in apps.columns else pl.lit("")
        code = pl.col("nccl_error_code").fill_null("") if "nccl_error_code" in apps.columns else pl.lit("")
        # A CUDA error the watchdog thread died of reaches the log only as std::terminate's "what():  CUDA
        # error: …" when PyTorch (<= 2.1) printed no watchdog line of its own.
        detail = pl.col("detail") if "detail" in apps.columns else pl.lit(None, pl.String)
        what = detail.fill_null("").str.extract(CUDA_WHAT, 1)
        app = (
            apps.with_columns(
                cuda_error=pl.when(pl.col("event") == "cpp_what").then(what).otherwise(pl.col("cuda_error"))
            )
            .filter(
                pl.col("event").is_in(("cuda_oom", "cuda_error"))
                | ((pl.col("event") == "cpp_what") & pl.col("cuda_error").is_not_null())
                | ((pl.col("event") == "nccl_error") & nccl_text.str.contains("unhandled cuda error"))
                | ((pl.col("event") == "nccl_error_code") & (code == "ncclUnhandledCudaError"))
            )
            .filter(~pl.col("cuda_error").fill_null("").is_in(BENIGN_CUDA))
        )
        if app.height:
            frames.append(
                app.with_columns(
                    origin=pl.lit("torch"),
                    message=pl.coalesce(
                        pl.col("cuda_error"),
                        pl.col("oom_alloc").map_elements(
                            lambda s: f"tried to allocate {s}", return_dtype=pl.String
                        ),
                    ),
                    key=pl.when(pl.col("event") == "cuda_oom")
                    .then(pl.lit("out of memory"))
                    .when(pl.col("event").is_in(("cuda_error", "cpp_what")))
                    .then(pl.col("cuda_error"))
                    .otherwise(pl.lit(None, pl.String)),
                )
            )
        frames.append(_xid_rows(job, apps))
    frames.append(_watchdog_cuda_rows(job))
    frames = [f for f in frames if not f.is_empty()]
    if not frames:
        return pl.DataFrame()
    keep = [
        "source_id",
        "line_no",
        "part",
        "host",
        "pid",
        "tid",
        "origin",
        "message",
        "key",
        "event",
        "error_kind",
        "torch_rank",
        "mpi_rank",
        "task",
        "local_rank",
        "global_rank",
        "gpu_index",
        "oom_alloc",
        "bytes",
        "cuda_error",
        "alt_key",
        "xid",
        "xid_pci",
        "xid_bus",
    ]
    rows = pl.concat(
        [f.select([pl.col(c) if c in f.columns else pl.lit(None).alias(c) for c in keep]) for f in frames],
        how="vertical_relaxed",
    )
    rows = with_seq(rows)
    rows = resolve_rows(job, rows)
    rows = rows.with_columns(job_rank=pl.coalesce("job_rank", _local_rank_to_rank(job, rows)))
    rows = _xid_of_failed_gpu(job, rows)
    rows = _error_of_faulted_gpu(rows)
    # PyTorch's report of a NCCL CUDA failure ("unhandled cuda error") joins the group of that rank's message.
    unkeyed = rows.filter(pl.col("key").is_null())
    if unkeyed.height:
        by_rank = (
            rows.filter(pl.col("key").is_not_null() & pl.col("job_rank").is_not_null())
            .select("job_rank", "key")
            .unique("job_rank", keep="first", maintain_order=True)
        )
        fallback = rows.filter(pl.col("key").is_not_null())["key"]
        default = fallback[0] if fallback.len() else "unhandled CUDA error (reported by PyTorch)"
        rows = (
            rows.join(by_rank.rename({"key": "_rk"}), on="job_rank", how="left", maintain_order="left")
            # An Xid of a rank with no CUDA error of its own is a group of its own, named after the event.
            .with_columns(key=pl.coalesce("key", "_rk", "alt_key", pl.lit(default)))
            .drop("_rk")
        )
    rows = rows.with_columns(
        key=pl.when(pl.col("key").str.contains(OOM.pattern))
        .then(pl.lit("out of memory"))
        .otherwise(pl.col("key"))
    )
    return rows


def _watchdog_cuda_rows(job: Job) -> pl.DataFrame:
    """CUDA errors the ProcessGroupNCCL watchdog died of (``[PG 0 Rank 3] Process group watchdog thread
    terminated with exception: CUDA error: unknown error``): a GPU fault found while polling the work's
    events, with no NCCL line and no timeout before it. The PG rank is global in the default group."""
    torch = job.table("torch")
    if torch.is_empty() or "detail" not in torch.columns:
        return pl.DataFrame()
    rows = (
        torch.filter(pl.col("event") == "watchdog_terminated")
        .with_columns(cuda_error=pl.col("detail").str.extract(CUDA_WHAT, 1))
        .filter(pl.col("cuda_error").is_not_null() & ~pl.col("cuda_error").is_in(BENIGN_CUDA))
    )
    if rows.is_empty():
        return pl.DataFrame()
    default_pg = pl.col("pg_id").fill_null(0) == 0 if "pg_id" in rows.columns else pl.lit(True)
    return rows.with_columns(
        torch_rank=pl.coalesce("torch_rank", pl.when(default_pg).then(pl.col("pg_rank"))).cast(pl.Int64),
        origin=pl.lit("torch"),
        message=pl.col("cuda_error"),
        key=pl.col("cuda_error"),
    )


def _xid_rows(job: Job, apps: pl.DataFrame) -> pl.DataFrame:
    """NVRM Xid lines, given the rank of the process on that GPU: the PCI address is the busId NCCL printed
    (``0000:3b:00`` is 3b000), on the line's host when known, else wherever that busId is unique in the job.
    """
    if "xid_pci" not in apps.columns:
        return pl.DataFrame()
    rows = apps.filter(pl.col("event") == "gpu_xid")
    if rows.is_empty():
        return pl.DataFrame()
    what = pl.concat_str([pl.lit("Xid "), pl.col("xid").cast(pl.String), pl.lit(": ")]).fill_null(pl.lit(""))
    rows = rows.with_columns(
        gpu_bus=(pl.col("xid_pci").str.replace_all(r"[:.]", "") + "0").str.to_integer(base=16, strict=False),
        host=pl.coalesce("xid_host", "host") if "host" in rows.columns else pl.col("xid_host"),
        origin=pl.lit("xid"),
        message=what + pl.col("detail").fill_null("").str.strip_chars(" :"),
        key=pl.lit(None, pl.String),
    ).with_columns(alt_key=pl.format("GPU fault ({})", pl.col("message").str.strip_chars_end(".")))
    gpus = process_gpus(job)
    if gpus.is_empty():
        return rows.rename({"gpu_bus": "xid_bus"})
    # The pid the driver blamed is the process's own (when printed); else the GPU, on the line's host or
    # wherever in the job that busId is unique.
    by_pid = gpus.unique("pid", keep="none").select(_pid="pid", _by_pid="global_rank", _pid_host="host")
    on_host = gpus.unique(["host", "gpu_bus"], keep="none").select("host", "gpu_bus", _on_host="global_rank")
    unique = gpus.unique("gpu_bus", keep="none").select("gpu_bus", pl.col("global_rank").alias("_anywhere"))
    rows = (
        rows.with_columns(_pid=pl.col("xid_pid").str.strip_chars("'").str.to_integer(strict=False))
        .join(by_pid, on="_pid", how="left", maintain_order="left")
        .with_columns(host=pl.coalesce("host", "_pid_host"))
        .join(on_host, on=["host", "gpu_bus"], how="left", maintain_order="left")
        .join(unique, on="gpu_bus", how="left", maintain_order="left")
    )
    rank = pl.coalesce("_by_pid", "_on_host", pl.when(pl.col("host").is_null()).then(pl.col("_anywhere")))
    return (
        rows.with_columns(global_rank=rank.cast(pl.Int64))
        .drop("_pid", "_by_pid", "_pid_host", "_on_host", "_anywhere")
        .rename({"gpu_bus": "xid_bus"})
    )


def _xid_of_failed_gpu(job: Job, rows: pl.DataFrame) -> pl.DataFrame:
    """An Xid nothing else placed belongs to the rank with a CUDA error whose GPU has that busId (the same
    busId on another host of a multi-node job is the only other candidate, and it reported nothing). With
    no busIds in the log (NCCL_DEBUG unset), it belongs to the one rank that reported a CUDA error, if any."""
    loose = (pl.col("origin") == "xid") & pl.col("job_rank").is_null()
    if rows.filter(loose).is_empty():
        return rows
    failed = rows.filter(pl.col("key").is_not_null() & pl.col("job_rank").is_not_null()).select("job_rank")
    gpus = process_gpus(job)
    if gpus.is_empty():
        only = failed["job_rank"].unique()
        return rows.with_columns(
            job_rank=pl.when(loose)
            .then(pl.lit(only[0]) if only.len() == 1 else None)
            .otherwise(pl.col("job_rank"))
        )
    gpu_of = gpus.select("gpu_bus", "host", job_rank="global_rank")
    suspects = failed.unique().join(gpu_of, on="job_rank", how="inner")
    suspects = suspects.unique("gpu_bus", keep="none")
    suspects = suspects.select(xid_bus="gpu_bus", _suspect="job_rank", _suspect_host="host")
    return (
        rows.join(suspects, on="xid_bus", how="left", maintain_order="left")
        .with_columns(
            job_rank=pl.when(loose).then(pl.col("_suspect")).otherwise(pl.col("job_rank")),
            host=pl.when(loose).then(pl.coalesce("host", "_suspect_host")).otherwise(pl.col("host")),
        )
        .drop("_suspect", "_suspect_host")
    )


def _error_of_faulted_gpu(rows: pl.DataFrame) -> pl.DataFrame:
    """A CUDA error no label places (std::terminate's ``what():`` line on a shared stream) belongs to the GPU
    the driver reported, when the Xid lines name exactly one rank."""
    faulted = rows.filter((pl.col("origin") == "xid") & pl.col("job_rank").is_not_null())["job_rank"].unique()
    if faulted.len() != 1:
        return rows
    loose = (pl.col("origin") == "torch") & pl.col("job_rank").is_null() & pl.col("host").is_null()
    return rows.with_columns(job_rank=pl.when(loose).then(pl.lit(faulted[0])).otherwise(pl.col("job_rank")))


def process_gpus(job: Job) -> pl.DataFrame:
    """host, pid, global_rank and the busId NCCL printed, as a number (``0000:3b:00.0`` is 3b000)."""
    procs = job.processes
    if procs.is_empty() or "bus_id" not in procs.columns:
        return pl.DataFrame()
    return procs.select(
        "host",
        "pid",
        "global_rank",
        gpu_bus=pl.col("bus_id").str.replace_all(r"[:.]", "").str.to_integer(base=16, strict=False),
    ).drop_nulls("gpu_bus")


def _local_rank_to_rank(job: Job, rows: pl.DataFrame) -> pl.Expr:
    """A launcher's local-rank tag ([default3]:) names a global rank only when one process carries it."""
    lines = job.lines
    if lines.is_empty() or "local_rank" not in lines.columns or "local_rank" not in rows.columns:
        return pl.lit(None, pl.Int64)
    tagged = (
        lines.select("local_rank", *PROC)
        .filter(pl.col("local_rank").is_not_null() & pl.col("host").is_not_null())
        .unique()
    )
    if tagged.is_empty():
        return pl.lit(None, pl.Int64)
    ranks = known_ranks(job)
    single = (
        tagged.group_by("local_rank")
        .agg(pl.len(), pl.col("host").first(), pl.col("pid").first())
        .filter(pl.col("len") == 1)
    )
    mapping = single.join(ranks, on=PROC, how="inner")
    if mapping.is_empty():
        return pl.lit(None, pl.Int64)
    table = dict(zip(mapping["local_rank"].to_list(), mapping["rank"].to_list()))
    return pl.col("local_rank").replace_strict(table, default=None, return_dtype=pl.Int64)
