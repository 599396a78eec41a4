"""When each rank logged its collectives, and when warnings, timeouts and exits came, on one time axis.

Times come from the same clocks the latency rule uses (resolve/timing.py): NCCL 2.26+ line
timestamps, the collector's prefix, or TRACE ``tms`` aligned per process. Collectives are counted per time
bin, so the view has the same size for 100 calls or 10 million; a lane that goes quiet before the others
is the rank that stopped. Without timestamps there is no timeline (NCCL before 2.26 prints none unless a
collector adds them), and the report says so.
"""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl

from nccl_logsift.model import Finding, Kind, Timeline, TimelineEvent, TimelineLane
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.timing import arrival_times, collector_ms, line_ms

BINS = 120
MAX_EVENTS_PER_LANE = 12
NODE_LANES_ABOVE = 64
EVENT_KINDS = {"warn": "NCCL WARN", "timeout": "watchdog timeout", "exit": "process exit", "error": "error"}


def timeline(job: Job, findings: list[Finding], culprits: frozenset[int]) -> tuple[Timeline | None, str]:
    """The timeline, or None and why not."""
    calls = arrival_times(job)
    if calls.is_empty():
        return (
            None,
            "No timeline: the collective lines carry no timestamps (NCCL 2.26+ prints them; "
            "a collector such as kubectl --timestamps can add them).",
        )
    clock = calls["clock"].first()
    calls = calls.filter(pl.col("job_rank").is_not_null()).select("job_rank", "host", "t_ms")
    if calls.is_empty():  # every rank unknown: a rank too large for its column is null (parse/kinds.py)
        return None, "No timeline: no timed collective line could be placed on a rank."
    events = _events(job, clock)
    by_node = calls["job_rank"].n_unique() > NODE_LANES_ABOVE
    lane = pl.col("host").fill_null("?") if by_node else pl.col("job_rank").cast(pl.String)
    t0 = float(calls["t_ms"].min())
    t1 = float(max(calls["t_ms"].max(), events["t_ms"].max() if events.height else t0))
    if events.height:  # events long before the first call kept (init, or another clock) would squash the view
        events = events.filter(pl.col("t_ms").is_between(t0 - (t1 - t0) * 0.05, t1))
    span = max(t1 - t0, 1.0)
    binned = calls.with_columns(
        lane=lane,
        bin=((pl.col("t_ms") - t0) / span * BINS).floor().cast(pl.Int64).clip(0, BINS - 1),
    )
    counts = binned.group_by("lane", "bin").len()
    per_lane = (
        binned.group_by("lane")
        .agg(
            last=pl.col("t_ms").max(),
            rank=pl.col("job_rank").min(),
            host=pl.col("host").drop_nulls().first(),
            ranks=pl.col("job_rank").unique(),
        )
        .join(counts.group_by("lane").agg(pl.col("bin"), pl.col("len")), on="lane")
        .sort("rank")
    )
    late = {r for f in findings if f.kind is Kind.LATENCY_OUTLIER for r in f.ranks}
    lanes = []
    for row in per_lane.iter_rows(named=True):
        bins = [0] * BINS
        for b, n in zip(row["bin"], row["len"]):
            bins[b] = n
        ranks = set(row["ranks"])
        mine = events.filter(pl.col("job_rank").is_in(list(ranks))) if events.height else events
        marks = (
            [
                TimelineEvent(t=(t - t0) / 1000.0, kind=k, label=text)
                for t, k, text in mine.head(MAX_EVENTS_PER_LANE).iter_rows()
            ]
            if mine.height
            else []
        )
        if ranks & late:
            marks.append(
                TimelineEvent(
                    t=(row["last"] - t0) / 1000.0,
                    kind="outlier",
                    label="late to its collectives (latency finding)",
                )
            )
        label = f"{row['lane']} ({len(ranks)} ranks)" if by_node else f"rank {row['lane']}"
        lanes.append(
            TimelineLane(
                label=label,
                host=row["host"],
                culprit=bool(ranks & culprits),
                bins=tuple(bins),
                last=(row["last"] - t0) / 1000.0,
                events=tuple(sorted(marks, key=lambda e: e.t)),
            )
        )
    start = datetime.fromtimestamp(t0 / 1000.0, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if clock == "tms":
        start = "the first call every rank shares (per-process clocks)"
    note = (
        f"Collectives per {span / BINS / 1000.0:.3g} s bin; only the calls kept for the diagnosis (the most "
        "recent of each communicator in large logs) are drawn."
    )
    peak = int(counts["len"].max()) if counts.height else 0
    return Timeline(
        start=start,
        span=span / 1000.0,
        clock=clock,
        lanes=tuple(lanes),
        peak=peak,
        by_node=by_node,
        note=note,
    ), ""


def _events(job: Job, clock: str) -> pl.DataFrame:
    """job_rank, t_ms, kind, label of the WARN lines, watchdog timeouts and exits, on the calls' clock."""
    frames = []
    lines = job.lines
    if not lines.is_empty() and "level" in lines.columns:
        warn = job.ranked(lines.filter((pl.col("level") == "WARN") & (pl.col("producer") == "nccl")))
        frames.append(
            _timed(
                warn,
                clock,
                "warn",
                pl.col("text").str.slice(0, 160) if "text" in warn.columns else pl.lit("NCCL WARN"),
            )
        )
    torch = job.table("torch")
    if not torch.is_empty() and "event" in torch.columns:
        rows = job.ranked(torch.filter(pl.col("event").is_in(["watchdog_timeout", "blocking_wait_timeout"])))
        if "job_rank" in rows.columns and "pg_rank" in rows.columns:
            rows = rows.with_columns(job_rank=pl.coalesce("job_rank", "pg_rank"))
        label = pl.format(
            "watchdog timeout in {} #{}", pl.col("op_type").fill_null("?"), pl.col("seq").fill_null(-1)
        )
        frames.append(_timed(rows, clock, "timeout", label))
    exits = job.table("exits")
    if not exits.is_empty() and "exit_code" in exits.columns:
        rows = job.ranked(exits)
        frames.append(
            _timed(rows, clock, "exit", pl.format("exit code {}", pl.col("exit_code").fill_null(-1)))
        )
    frames = [f for f in frames if f.height]
    if not frames:
        return pl.DataFrame(
            schema={"job_rank": pl.Int64, "t_ms": pl.Float64, "kind": pl.String, "label": pl.String}
        )
    return (
        pl.concat(frames)
        .drop_nulls(["job_rank", "t_ms"])
        .sort("t_ms")
        .select("t_ms", "kind", "label", "job_rank")
    )


def _timed(frame: pl.DataFrame, clock: str, kind: str, label: pl.Expr) -> pl.DataFrame:
    if frame.is_empty() or "job_rank" not in frame.columns:
        return pl.DataFrame()
    t = (
        line_ms(frame)
        if clock == "timestamp"
        else collector_ms(frame)
        if clock == "collector"
        else pl.lit(None, pl.Float64)
    )
    return frame.select(
        pl.col("job_rank").cast(pl.Int64), t_ms=t, kind=pl.lit(kind), label=label.cast(pl.String)
    )
