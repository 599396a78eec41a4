"""The read-only view of a parsed job that rules work on: tables, resolved ranks, evidence lines."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np
import polars as pl

from nccl_logsift.io.lines import COMPRESSED_MAGIC, MAX_LINE_BYTES
from nccl_logsift.model import Evidence
from nccl_logsift.resolve.cache import cached as cached  # re-exported: the rules import it from here
from nccl_logsift.resolve.cache import per_job as per_job
from nccl_logsift.resolve.communicators import MAX_RANKS, with_seq
from nccl_logsift.resolve.ranks import default_group, identity, with_job_rank

TORCH_PRODUCERS = ("torch_cpp", "torch_py")


def rank_range(size: int | None) -> range:
    """The ranks 0 .. size-1 of a size read from a log; none when the size is unknown or beyond MAX_RANKS."""
    return range(size) if size is not None and 0 < size <= MAX_RANKS else range(0)


@dataclass(frozen=True)
class Job:
    """Tables of one job (as returned by the memory sink) and the paths of its sources by source_id."""

    tables: dict[str, pl.DataFrame]
    paths: tuple[str, ...]

    def table(self, name: str) -> pl.DataFrame:
        """The table. A parsed job holds every table with its columns, also those no line
        filled (``pipeline.Analysis.job``); a job built by hand may leave tables out: they read as empty."""
        return self.tables.get(name, pl.DataFrame())

    # ------------------------------------------------------------------ evidence
    def evidence(self, rows: pl.DataFrame, limit: int = 6) -> tuple[Evidence, ...]:
        """The text of the first ``limit`` lines named by ``rows`` (columns source_id, line_no[, part])."""
        if rows.is_empty() or "line_no" not in rows.columns:
            return ()
        keys = (
            rows.select(
                pl.col("source_id").cast(pl.UInt16),
                pl.col("line_no").cast(pl.UInt32),
                (pl.col("part") if "part" in rows.columns else pl.lit(0)).cast(pl.UInt8).alias("part"),
            )
            .unique()
            .sort("source_id", "line_no", "part")
            .head(limit)
        )
        found = keys.join(_named(self.lines, keys, "text"), on=["source_id", "line_no", "part"], how="left")
        found = self._read_back(found).sort("source_id", "line_no", "part")
        # By columns, not a tuple per row: a 4096-rank report quotes ~16k lines.
        paths, known = self.paths, len(self.paths)
        return tuple(
            Evidence(paths[s] if s < known else "?", n, t or "")
            for s, n, t in zip(*(found.get_column(c).to_list() for c in ("source_id", "line_no", "text")))
        )

    def _read_back(self, found: pl.DataFrame) -> pl.DataFrame:
        """Text of COLL calls, which the diagnosis keeps out of ``lines``: read again from the file at the
        call's byte offset, or kept with the calls when the input cannot be read again (a pipe, a compressed
        file; calls a worker process parsed are quoted from the segment bytes this process read and sent)."""
        coll = self.table("collectives")
        if coll.is_empty() or "byte_offset" not in coll.columns or found["text"].null_count() == 0:
            return found
        keys = ["source_id", "line_no", "part"]
        if "text" in coll.columns:  # kept with the calls of an input that cannot be read again
            kept = _named(coll, found, "text").unique(keys).rename({"text": "kept_text"})
            found = (
                found.join(kept, on=keys, how="left")
                .with_columns(text=pl.coalesce("text", "kept_text"))
                .drop("kept_text")
            )
        found = found.join(_named(coll, found, "byte_offset").unique(keys), on=keys, how="left")
        wanted = (
            found.filter(pl.col("text").is_null() & pl.col("byte_offset").is_not_null())
            .select("source_id", "byte_offset")
            .unique()
            .sort("source_id")
        )
        if wanted.is_empty():
            return found.drop("byte_offset")
        # Each source's lines read in one opening of its file; the texts made one frame (a frame per source
        # cost a directory of 4096 per-rank files ~1.6 s).
        source_ids, offsets = wanted["source_id"].to_numpy(), wanted["byte_offset"].to_list()
        starts = np.flatnonzero(np.r_[True, source_ids[1:] != source_ids[:-1]]).tolist()
        texts: list[str | None] = []
        for start, stop in zip(starts, [*starts[1:], len(offsets)]):
            source = int(source_ids[start])
            texts += read_lines(self.paths[source] if source < len(self.paths) else None, offsets[start:stop])
        # Joined back by (source, offset), not looked up row by row (a 4096-rank report quotes ~16k lines).
        read_back = wanted.with_columns(pl.Series("read_text", texts, dtype=pl.String))
        return (
            found.join(read_back, on=["source_id", "byte_offset"], how="left", maintain_order="left")
            .with_columns(text=pl.coalesce("text", "read_text"))
            .drop("byte_offset", "read_text")
        )

    def first_seen(self, rows: pl.DataFrame) -> int | None:
        if rows.is_empty() or "line_no" not in rows.columns:
            return None
        if "part" not in rows.columns:
            rows = rows.with_columns(part=pl.lit(0, pl.UInt8))
        return with_seq(rows.select("source_id", "line_no", "part"))["seq"].min()

    def first_time(self, rows: pl.DataFrame) -> float | None:
        """Epoch seconds of the earliest of ``rows``' lines that carries a time, or None."""
        stamped = self._stamped
        if rows.is_empty() or stamped.is_empty() or "line_no" not in rows.columns:
            return None
        keys = rows.select(pl.col("source_id").cast(pl.UInt16), pl.col("line_no").cast(pl.UInt32)).unique()
        found = stamped.join(keys, on=["source_id", "line_no"], how="semi")["t"].min()
        return float(found) if found is not None else None

    @functools.cached_property
    def _stamped(self) -> pl.DataFrame:
        """(source_id, line_no, t) of the lines with a time: NCCL's timestamps (``2025-06-02
        16:02:42.558901``, NCCL_DEBUG_TIMESTAMP_FORMAT, WARN lines from 2.26), PyTorch's glog prefix
        (``1126 06:20:29.136163139``: month and day, no year) and a collector's ISO time. A glog time takes
        the year of the job's full dates when there are any, so the two compare."""
        lines = self.lines
        cols = [c for c in ("ts", "collector_ts") if c in lines.columns]
        if lines.is_empty() or not cols:
            return pl.DataFrame(schema={"source_id": pl.UInt16, "line_no": pl.UInt32, "t": pl.Float64})
        rows = lines.select("source_id", "line_no", *[pl.col(c).cast(pl.String) for c in cols]).filter(
            pl.any_horizontal(pl.col(c).is_not_null() for c in cols)
        )
        ts = pl.col("ts") if "ts" in cols else pl.lit(None, pl.String)
        full = ts.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False)
        year = rows.select(full.dt.year().drop_nulls().first()).item() if rows.height else None
        # PyTorch's c10 prefix may print the month unpadded (E602 for 2 June): pad month-day to four digits.
        day, clock = ts.str.extract(r"^(\d{3,4}) "), ts.str.extract(r"^\d{3,4} (\S+)$")
        glog = pl.concat_str(pl.lit(str(year or 2000)), day.str.zfill(4), pl.lit(" "), clock).str.to_datetime(
            "%Y%m%d %H:%M:%S%.f", strict=False
        )
        collector = (
            pl.col("collector_ts").str.to_datetime(time_zone="UTC", strict=False).dt.replace_time_zone(None)
            if "collector_ts" in cols
            else pl.lit(None, pl.Datetime("us"))
        )
        when = pl.coalesce(*(c.cast(pl.Datetime("us")) for c in (full, glog, collector)))
        return rows.select(
            pl.col("source_id").cast(pl.UInt16),
            pl.col("line_no").cast(pl.UInt32),
            t=when.dt.epoch("us").cast(pl.Float64) / 1e6,
        ).drop_nulls("t")

    @functools.cached_property
    def lines(self) -> pl.DataFrame:
        return self.table("lines")

    # ------------------------------------------------------------------ ranks and processes
    @functools.cached_property
    def processes(self) -> pl.DataFrame:
        return self.table("processes")

    @functools.cached_property
    def world_size(self) -> int | None:
        sizes = [
            self.processes["world_size"].max() if not self.processes.is_empty() else None,
            self.torch_ranks.height and self.torch_ranks["rank"].max() + 1,
        ]
        sizes = [s for s in sizes if s and s <= MAX_RANKS]
        return int(max(sizes)) if sizes else None

    @functools.cached_property
    def torch_ranks(self) -> pl.DataFrame:
        """Global ranks PyTorch printed ([rankN]: prefixes and [Rank N] / PG prefixes), with their hosts if
        known."""
        frames = []
        lines = self.lines
        if not lines.is_empty() and "torch_rank" in lines.columns:
            frames.append(lines.select(pl.col("torch_rank").alias("rank")).drop_nulls())
        torch = self.table("torch")
        if not torch.is_empty() and "pg_rank" in torch.columns:
            frames.append(torch.filter(default_group()).select(pl.col("pg_rank").alias("rank")).drop_nulls())
        if not frames:
            return pl.DataFrame(schema={"rank": pl.Int64})
        return pl.concat([f.cast(pl.Int64) for f in frames]).unique().sort("rank")

    def hosts_of(self, ranks) -> tuple[str, ...]:
        if self.processes.is_empty() or not ranks:
            return ()
        found = self.processes.filter(pl.col("global_rank").is_in(list(ranks)))["host"].drop_nulls()
        return tuple(sorted(set(found.to_list())))

    def process_of(self, rank: int) -> dict | None:
        if self.processes.is_empty():
            return None
        match = self.processes.filter(pl.col("global_rank") == rank)
        return match.row(0, named=True) if match.height else None

    def ranked(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Add ``job_rank``: the world rank of each row (:func:`nccl_logsift.resolve.ranks.with_job_rank`)."""
        return with_job_rank(self, frame)

    @property
    def ranks(self) -> pl.DataFrame:
        """Who is who: the rank-identity table (:func:`nccl_logsift.resolve.ranks.identity`)."""
        return identity(self)


def read_lines(path: str | None, offsets: list[int]) -> list[str | None]:
    """The lines starting at these offsets of a plain (uncompressed) file (None each when it cannot be read),
    read in one opening of the file and in file order (a 4096-rank report reads ~16k of them)."""
    # A pipe was read once: opening it again would wait for a writer.
    if not path or path == "-" or not os.path.isfile(path):
        return [None] * len(offsets)
    found: dict[int, str] = {}
    try:
        with open(path, "rb") as handle:
            if any(handle.read(4).startswith(magic) for magic in COMPRESSED_MAGIC):
                return [None] * len(offsets)
            for offset in sorted(set(offsets)):
                handle.seek(offset)
                # A line is read no further than the parser kept of it (io/lines.py MAX_LINE_BYTES).
                line = handle.readline(MAX_LINE_BYTES)
                found[offset] = line.decode("utf-8", errors="replace").rstrip(" \t\r\n\0")
    except OSError:
        return [None] * len(offsets)
    return [found[offset] for offset in offsets]


def _named(table: pl.DataFrame, keys: pl.DataFrame, column: str) -> pl.DataFrame:
    """The key columns and ``column`` of the rows of ``table`` whose line number ``keys`` names: what a join
    on ``keys`` can match, without hashing every row of a large table (590k lines on 4096 ranks)."""
    named = table.select("source_id", "line_no", "part", column)
    return named.filter(pl.col("line_no").is_in(keys["line_no"].unique().implode()))
