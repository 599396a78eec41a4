"""Where parsed tables go: kept in memory (for analysis) or streamed to Parquet files (``logsift parse -o``).

Both sinks receive the same per-chunk frames and apply the same final step, :func:`attach_ranks`, which
needs the whole run's communicator map and therefore happens once at the end: in memory it is a join, on
disk a streaming ``scan_parquet → join → sink_parquet`` so that memory stays bounded by the small maps.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import polars as pl
import pyarrow.parquet as pq

from nccl_logsift.resolve.communicators import PROCESS

# Tables whose rows belong to a process get its global rank; rows of the comms table get their comm_uid.
RANKED_BY_PROCESS = "global_rank"


@dataclass(frozen=True, slots=True)
class RankMaps:
    """The small tables the final step joins onto the large ones."""

    processes: pl.DataFrame  # host, pid, global_rank, world_size
    instances: pl.DataFrame  # one row per communicator instance


def attach_ranks(name: str, frame: pl.LazyFrame, maps: RankMaps) -> pl.LazyFrame:
    """Add the process's global rank (and, for lines, the best rank known from any label)."""
    columns = frame.collect_schema().names()
    if not set(PROCESS) <= set(columns):
        return frame
    ranks = maps.processes.lazy().select(*PROCESS, RANKED_BY_PROCESS)
    frame = frame.join(ranks, on=PROCESS, how="left")
    if name == "lines":
        labels = [c for c in ("torch_rank", "mpi_rank") if c in columns]
        frame = frame.with_columns(rank=pl.coalesce(RANKED_BY_PROCESS, *labels)).drop(RANKED_BY_PROCESS)
    return frame


class TableSink(Protocol):
    def write(self, name: str, frame: pl.DataFrame) -> None: ...

    def finish(self, maps: RankMaps, extra: dict[str, pl.DataFrame]) -> dict[str, int]: ...


class MemorySink:
    """Keeps every table in memory; ``tables`` is filled by ``finish``."""

    def __init__(self) -> None:
        self._parts: dict[str, list[pl.DataFrame]] = {}
        self.tables: dict[str, pl.DataFrame] = {}

    def write(self, name: str, frame: pl.DataFrame) -> None:
        self._parts.setdefault(name, []).append(frame)

    def finish(self, maps: RankMaps, extra: dict[str, pl.DataFrame]) -> dict[str, int]:
        # One table at a time, its parts released as soon as it is joined (not every table's parts,
        # concatenated copy and joined copy alive at once); the join writes new contiguous columns
        # anyway, so the parts are not rechunked first.
        while self._parts:
            name = next(iter(self._parts))
            merged = pl.concat(self._parts.pop(name), how="vertical_relaxed", rechunk=False)
            self.tables[name] = attach_ranks(name, merged.lazy(), maps).collect()
            del merged
        self.tables.update(extra)
        return {name: frame.height for name, frame in self.tables.items()}


class ParquetSink:
    """Streams each table's chunks into a Parquet part file, then writes ``<dir>/<table>.parquet``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._staging = directory / ".staging"
        self._writers: dict[str, pq.ParquetWriter] = {}
        self.files: dict[str, Path] = {}

    def write(self, name: str, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        writer = self._writers.get(name)
        if writer is None:
            self._staging.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(self._staging / f"{name}.parquet", table.schema, compression="zstd")
            self._writers[name] = writer
        writer.write_table(table.cast(writer.schema))

    def finish(self, maps: RankMaps, extra: dict[str, pl.DataFrame]) -> dict[str, int]:
        for writer in self._writers.values():
            writer.close()
        rows = {}
        for name in self._writers:
            target = self.directory / f"{name}.parquet"
            attach_ranks(name, pl.scan_parquet(self._staging / f"{name}.parquet"), maps).sink_parquet(
                target, compression="zstd"
            )
            rows[name] = pq.ParquetFile(target).metadata.num_rows
            self.files[name] = target
        for name, frame in extra.items():
            target = self.directory / f"{name}.parquet"
            frame.write_parquet(target, compression="zstd")
            rows[name] = frame.height
            self.files[name] = target
        shutil.rmtree(self._staging, ignore_errors=True)
        return rows
