"""Which log lines a finding quotes: the (source_id, line_no, part) of table rows."""

from __future__ import annotations

import polars as pl

# The columns that name a line in every table (``part`` numbers the pieces of a glued line).
EVIDENCE = ["source_id", "line_no", "part"]
_NONE = {"source_id": pl.UInt16, "line_no": pl.UInt32, "part": pl.UInt8}


def rows_of(frame: pl.DataFrame) -> pl.DataFrame:
    """The evidence columns of a frame's rows that name a line (an empty frame when it has none)."""
    if frame.is_empty() or not set(EVIDENCE[:2]) <= set(frame.columns):
        return pl.DataFrame(schema=_NONE)
    part = pl.col("part") if "part" in frame.columns else pl.lit(0)
    return frame.select(
        pl.col("source_id").cast(pl.UInt16),
        pl.col("line_no").cast(pl.UInt32),
        part.cast(pl.UInt8).alias("part"),
    ).filter(pl.col("line_no").is_not_null())


def evidence(*frames: pl.DataFrame) -> pl.DataFrame:
    """The evidence rows of several frames, in order."""
    return pl.concat([rows_of(f) for f in frames], how="vertical")
