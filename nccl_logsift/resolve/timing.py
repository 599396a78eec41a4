"""When each line was written, in milliseconds: NCCL's timestamps, a collector's, and the arrival times
of each rank at each call."""

from __future__ import annotations

import polars as pl

from nccl_logsift.resolve.job import Job


def _time_ms(values: pl.Expr, fmt: str) -> pl.Expr:
    return values.str.to_datetime(fmt, strict=False).dt.epoch("us").cast(pl.Float64) / 1000.0


def line_ms(frame: pl.DataFrame) -> pl.Expr:
    """Milliseconds since the epoch from the line's own timestamp: NCCL 2.26+
    ``[2025-06-02 14:12:55.218200]``, or a glog ``E1003 18:37:01.832146`` (no year: counted from 1970, so
    only differences mean anything)."""
    ts = pl.col("ts").cast(pl.String) if "ts" in frame.columns else pl.lit(None, pl.String)
    return pl.coalesce(
        _time_ms(ts, "%Y-%m-%d %H:%M:%S%.f"), _time_ms(pl.lit("1970") + ts, "%Y%m%d %H:%M:%S%.f")
    )


def collector_ms(frame: pl.DataFrame) -> pl.Expr:
    """Milliseconds since the epoch from the collector's RFC 3339 prefix (docker, kubectl --timestamps)."""
    if "collector_ts" not in frame.columns:
        return pl.lit(None, pl.Float64)
    return (
        pl.col("collector_ts")
        .cast(pl.String)
        .str.to_datetime(time_zone="UTC", strict=False)
        .dt.epoch("us")
        .cast(pl.Float64)
        / 1000.0
    )


def arrival_times(job: Job) -> pl.DataFrame:
    """COLL rows with an absolute arrival time in ms (``t_ms``), the clock it came from and its resolution.

    Sources, best first: the NCCL 2.26+ timestamp of the line (or a glog one), the collector's RFC 3339
    prefix (docker / kubectl), and TRACE ``tms`` (milliseconds since the process's logger started: made
    comparable by aligning every rank on the first call its communicator shares).
    """
    coll = job.table("collectives")
    if coll.is_empty() or "comm_uid" not in coll.columns or "ordinal" not in coll.columns:
        return pl.DataFrame()
    coll = coll.filter(pl.col("comm_uid").is_not_null() & pl.col("ordinal").is_not_null())
    rank = pl.coalesce(*[pl.col(c).cast(pl.Int64) for c in ("global_rank", "rank") if c in coll.columns])
    coll = coll.with_columns(job_rank=rank)
    extra = [c for c in ("collector_ts", "tms") if c in job.lines.columns and c not in coll.columns]
    # Looked up on the key columns alone and attached beside the calls' columns (a join of the calls would
    # copy every one of them); a column null on every line needs no lookup.
    lines = job.lines
    if extra and any(lines[c].null_count() < lines.height for c in extra):
        keys = ["source_id", "line_no", "part"]
        found = coll.select(keys).join(
            lines.select(*keys, *extra), on=keys, how="left", maintain_order="left"
        )
        coll = coll.with_columns(found.select(extra).get_columns())
    elif extra:
        coll = coll.with_columns(pl.lit(None, lines.schema[c]).alias(c) for c in extra)
    ts = pl.col("ts").cast(pl.String) if "ts" in coll.columns else pl.lit(None, pl.String)
    # Digits of the seconds' fraction: the first run after ``HH:MM:SS``, so a UTC offset (``+02:00``) that
    # follows it is not taken for it; none means whole seconds.
    digits = lambda col: col.str.extract(r"\d:\d\d[.,](\d+)", 1).str.len_chars().cast(pl.Int64)
    coll = coll.with_columns(
        t_nccl=line_ms(coll),
        t_collector=collector_ms(coll),
        res_nccl=pl.lit(10.0).pow(3 - digits(ts).fill_null(0)),
        res_collector=(
            pl.lit(10.0).pow(3 - digits(pl.col("collector_ts").cast(pl.String)).fill_null(0))
            if "collector_ts" in coll.columns
            else pl.lit(None, pl.Float64)
        ),
    )
    n_nccl = coll["t_nccl"].drop_nulls().len()
    n_collector = coll["t_collector"].drop_nulls().len()
    # Both clocks on most calls: the finer one (NCCL's default format, ``[%F %T] ``, has whole seconds only,
    # too coarse for a lag of a quarter second that the collector's nanoseconds show).
    finer_collector = n_collector >= coll.height // 2 and (
        coll.filter(pl.col("t_collector").is_not_null())["res_collector"].median() or 0.0
    ) < (coll.filter(pl.col("t_nccl").is_not_null())["res_nccl"].median() or 0.0)
    if n_nccl and n_nccl >= coll.height // 2 and not finer_collector:
        return coll.with_columns(
            t_ms=pl.col("t_nccl"), res_ms=pl.col("res_nccl"), clock=pl.lit("timestamp")
        ).drop_nulls("t_ms")
    if n_collector:
        return coll.with_columns(
            t_ms=pl.col("t_collector"), res_ms=pl.col("res_collector"), clock=pl.lit("collector")
        ).drop_nulls("t_ms")
    if "tms" in coll.columns and coll["tms"].drop_nulls().len():
        rel = coll.drop_nulls("tms")
        # Per-process clocks: subtract each rank's time at the first call every member of the comm logged.
        common = rel.group_by("comm_uid", "ordinal").agg(n=pl.col("job_rank").n_unique())
        full = rel.group_by("comm_uid").agg(members=pl.col("job_rank").n_unique())
        first = (
            common.join(full, on="comm_uid")
            .filter(pl.col("n") == pl.col("members"))
            .group_by("comm_uid")
            .agg(pl.col("ordinal").min().alias("base"))
        )
        # A rank that logged its base call twice takes the first line (maintain_order: rows in line order).
        base = (
            rel.join(first, on="comm_uid", maintain_order="left")
            .filter(pl.col("ordinal") == pl.col("base"))
            .select("comm_uid", "job_rank", pl.col("tms").alias("t0"))
            .unique(["comm_uid", "job_rank"], keep="first", maintain_order=True)
        )
        rel = rel.join(base, on=["comm_uid", "job_rank"], how="inner", maintain_order="left")
        return rel.with_columns(t_ms=pl.col("tms") - pl.col("t0"), res_ms=pl.lit(0.001), clock=pl.lit("tms"))
    return pl.DataFrame()
