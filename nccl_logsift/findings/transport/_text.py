"""The message and ranks of NCCL lines, as the transport rules (LS301, LS302) quote them."""

from __future__ import annotations

import re

import polars as pl

from nccl_logsift.resolve.job import Job


def first_message(job: Job, rows: pl.DataFrame) -> str:
    """The message text of the first row (the line without its prefix)."""
    if rows.is_empty():
        return ""
    first = (
        rows.sort("source_id", "line_no")
        .head(1)
        .select("source_id", "line_no", *(["part"] if "part" in rows.columns else []))
    )
    text = (
        job.lines.join(first, on=first.columns, how="inner")["text"]
        if not job.lines.is_empty()
        else pl.Series([])
    )
    if not text.len():
        return ""
    return re.sub(r"^.*?NCCL (?:WARN|ATTN|INFO|TRACE) ", "", text[0]).strip()


def ranks_in(frame: pl.DataFrame, column: str = "job_rank") -> list[int]:
    if frame.is_empty() or column not in frame.columns:
        return []
    return sorted({int(r) for r in frame[column].drop_nulls()})
