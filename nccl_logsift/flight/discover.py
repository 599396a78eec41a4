"""Where a job's Flight Recorder dumps are: among the inputs, named by its log lines, or at the default path.

Dumps are told from logs by their content (:func:`~nccl_logsift.flight.dump.sniff_path`), not their name:
fr_trace's name-based guess fails on names such as ``nccl_trace_rank_container-node02_5`` (pytorch#140879).
PyTorch says where each rank wrote its dump (``ProcessGroupNCCL dumping nccl trace to <path>``, INFO, and
``Finished writing NCCLPG debug info to <path>`` in older releases; grammars/torch/heartbeat.toml); those
paths are read too when they exist on this machine and were not given.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from nccl_logsift.flight import dump as fr_dump
from nccl_logsift.flight.table import NAMED_SCHEMA
from nccl_logsift.flight.table import tables as flight_tables
from nccl_logsift.io.sources import Source

# torch-table events that name the file a rank dumped to (its ``detail``).
WRITING_EVENTS = ("dump_writing", "dump_written")
# Events that say a rank was asked to dump (a timeout on this rank, or a peer's signal through the store).
SIGNAL_EVENTS = ("dump_signal", "dump_prepare", "dump_observed", "dump_first_pg", *WRITING_EVENTS)
SUCCESS_TEXT = "Flight Recorder trace successfully dumped"


def default_prefix() -> str:
    """``$XDG_CACHE_HOME`` (or ``~/.cache``) + ``/torch/comm_lib_trace_rank_``: where PyTorch 2.6+ dumps by
    default (FlightRecorder.cpp ``defaultLocation``, PR #143446)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "torch", "comm_lib_trace_rank_")


def partition(sources: list[Source]) -> tuple[list[Source], list[str]]:
    """Split expanded inputs into log sources (renumbered in order) and the paths of Flight Recorder dumps."""
    logs: list[Source] = []
    dumps: list[str] = []
    for source in sources:
        # A stream (stdin, a FIFO, <(zcat …)) is read once: a sniff here would eat the log's first bytes.
        if not source.is_stream and fr_dump.sniff_path(source.path) is not None:
            dumps.append(source.path)
        else:
            logs.append(replace(source, source_id=len(logs)))
    return logs, dumps


@dataclass(slots=True)
class DumpCollector:
    """Gathers the dumps of one job while its logs are parsed, then loads them into tables.

    ``given`` are the dump paths among the inputs; :meth:`observe` takes each batch's ``torch`` table, keeps
    the rows naming a dump file (a vectorised filter, a few rows per rank).
    """

    given: list[str] = field(default_factory=list)
    look_at_default: bool = True
    _named: list[pl.DataFrame] = field(default_factory=list)
    signalled: bool = False  # some log line says a rank was asked to dump

    def observe(self, torch: pl.DataFrame | None, lines: pl.DataFrame | None = None) -> None:
        """Keep the rows of a batch naming a dump file (``torch``) or saying one was written (``lines``)."""
        if lines is not None and not lines.is_empty() and "text" in lines.columns:
            # "Flight Recorder trace successfully dumped." names no path and no family parses it
            # (ProcessGroupNCCL.cpp ``dumpDebuggingInfo``): found in the text, a literal search per batch.
            # PyTorch's C++ lines only: a COLL-heavy log's other text is most of its bytes (parse keeps it).
            found = pl.col("text").str.contains(SUCCESS_TEXT, literal=True)
            if "producer" in lines.columns:
                found = (pl.col("producer") == "torch_cpp") & found
            done = lines.filter(found)  # one query a batch
            if not done.is_empty():
                self.signalled = True
                has_rank = "torch_rank" in done.columns
                rank = pl.col("torch_rank").cast(pl.Int64) if has_rank else pl.lit(None, pl.Int64)
                self._named.append(
                    done.select(
                        rank=rank,
                        path=pl.lit(None, pl.String),
                        source_id=pl.col("source_id").cast(pl.UInt16),
                        line_no=pl.col("line_no").cast(pl.UInt32),
                        event=pl.lit("dump_succeeded"),
                    )
                )
        if torch is None or torch.is_empty() or "event" not in torch.columns or "detail" not in torch.columns:
            return
        self.signalled = self.signalled or bool(torch["event"].is_in(SIGNAL_EVENTS).any())
        rows = torch.filter(pl.col("event").is_in(WRITING_EVENTS) & pl.col("detail").is_not_null())
        if rows.is_empty():
            return
        rank = [pl.col(c).cast(pl.Int64) for c in ("torch_rank", "pg_rank") if c in rows.columns]
        self._named.append(
            rows.select(
                rank=pl.coalesce(*rank) if rank else pl.lit(None, pl.Int64),
                path=pl.col("detail").str.strip_chars().str.strip_chars_end("."),
                source_id=pl.col("source_id").cast(pl.UInt16),
                line_no=pl.col("line_no").cast(pl.UInt32),
                event=pl.col("event"),
            )
        )

    def named(self) -> pl.DataFrame:
        """Log lines that name a dump path: rank, path, source_id, line_no, event (one row per line)."""
        if not self._named:
            return pl.DataFrame(schema=NAMED_SCHEMA)
        return pl.concat(self._named, how="vertical_relaxed").unique(maintain_order=True)

    def tables(self, ranks_seen: set[int] | None = None) -> dict[str, pl.DataFrame]:
        """Load every dump found: given, named by a log line (and present here), or at the default prefix for
        ranks whose logs were read; files that fail to load become ``problem`` rows of ``flight_dumps``."""
        named = self.named()
        wanted: dict[str, int | None] = {os.path.abspath(p): None for p in self.given}
        order = list(self.given)
        paths = named.filter(pl.col("path").is_not_null()).select("rank", "path").unique(maintain_order=True)
        for rank, path in paths.iter_rows():
            key = os.path.abspath(path)
            if key not in wanted and os.path.isfile(path):
                wanted[key] = rank
                order.append(path)
            elif key in wanted and wanted[key] is None:
                wanted[key] = rank
        # The default prefix is on this machine: only worth a look when the logs say the job dumped, and no
        # dump was given or found where the logs said.
        if self.look_at_default and self.signalled and not order and ranks_seen:
            prefix = default_prefix()
            for rank in sorted(ranks_seen):
                path = f"{prefix}{rank}"
                if os.path.isfile(path):
                    wanted[os.path.abspath(path)] = rank
                    order.append(path)
        loaded, problems = [], []
        for path in order:
            rank = wanted[os.path.abspath(path)]
            try:
                loaded.append(fr_dump.load(path, rank))
            except fr_dump.DumpError as exc:
                problems.append((path, rank if rank is not None else fr_dump.rank_from_name(path), str(exc)))
        found = flight_tables(loaded, problems)
        found["flight_named"] = named
        return found


def named_paths_exist(named: pl.DataFrame) -> pl.Series:
    """Whether each named path exists on this machine (a handful of stat calls, one per rank)."""
    return pl.Series("exists", [Path(p).is_file() for p in named["path"].to_list()], dtype=pl.Boolean)
