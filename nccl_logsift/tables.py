"""Where parsed tables go: kept in memory (for analysis) or streamed to Parquet files (``logsift parse -o``).

Both sinks receive the same per-chunk frames and apply the same final step, ranks attached from the whole
run's communicator map, which therefore happens once at the end: in memory the rank column is looked up and
added beside the kept columns, on disk a streaming ``scan_parquet → join → sink_parquet`` keeps memory bounded
by the small maps.

An analysis keeps in memory only the columns the diagnosis reads (:data:`DIAGNOSIS_COLUMNS`), and a column
that is null on every row of a chunk is kept as a null literal, which takes no memory: most columns of the
wide message tables are null on most lines.
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import polars as pl

from nccl_logsift.accel.keymap import KeyMap, earlier, grown
from nccl_logsift.errors import OutputError
from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.memory import detached
from nccl_logsift.parse import schema
from nccl_logsift.parse.calls import ADDED
from nccl_logsift.resolve.communicators import INSTANCE, INSTANCE_SCHEMA, PROCESS, PROCESS_SCHEMA

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# Tables whose rows belong to a process get its global rank; rows of the comms table get their comm_uid.
RANKED_BY_PROCESS = "global_rank"
RANK_SLICE_ROWS = 1 << 16  # rows of a table whose ranks are looked up at once
COMPACT_ROWS = 1 << 12  # rows from which a frame's all-null columns are made null literals (compact)

# The envelope and launcher columns every message table starts with (parse/schema.py).
_KEYS = (
    "source_id",
    "line_no",
    "part",
    "byte_offset",
    "collector_ts",
    "host",
    "pid",
    "tid",
    "dev",
    "level",
    "severity",
    "ts",
    "torch_rank",
    "task",
    "local_rank",
    "mpi_rank",
    "pattern",
)
# Per parsed table, the columns that findings, views, the report and the resolvers read; the others are
# parsed for ``logsift parse`` only. Tables not named here (collectives, which the digest already trims, and
# the resolved communicators and processes) are kept whole. tests/test_tables.py checks that every column
# name the diagnosis code mentions is here.
DIAGNOSIS_COLUMNS: dict[str, tuple[str, ...]] = {
    "lines": (
        "source_id",
        "line_no",
        "part",
        "byte_offset",
        "collector_ts",
        "mpi_rank",
        "task",
        "local_rank",
        "torch_rank",
        "ts",
        "host",
        "pid",
        "tid",
        "dev",
        "tms",
        "func",
        "level",
        "severity",
        "producer",
        "pattern",
        "text",
        "launcher_host",
    ),
    "app_errors": (
        *_KEYS,
        "error_class",
        "detail",
        "oom_alloc",
        "gpu_index",
        "cuda_error",
        "nccl_error",
        "nccl_error_code",
        "barrier_rank",
        "barrier_key",
        "world_size",
        "worker_count",
        "clients_joined",
        "clients_expected",
        "spawn_index",
        "signal_name",
        "exit_code",
        "event",
        "fp_rank",
        "fp_seq",
        "fp_op",
        "fp_shape",
        "fp_dtypes",
        "peer_rank",
        "peer_seq",
        "peer_op",
        "peer_shape",
        "peer_dtypes",
        "xid",
        "xid_pci",
        "xid_pid",
        "xid_host",
    ),
    "calls": (
        *_KEYS,
        "op",
        "count",
        "datatype",
        "redop",
        "root",
        "comm",
        "nranks",
        "comm_id",
        "rank",
        "cuda_dev",
        "parent",
        "color",
        "key",
    ),
    "comms": (
        *_KEYS,
        "phase",
        "what",
        "func",
        "comm",
        "rank",
        "nranks",
        "cuda_dev",
        "nvml_dev",
        "bus_id",
        "parent",
        "split_count",
        "color",
        "key",
        "comm_id",
        "result",
        "n_nodes",
        "local_ranks",
    ),
    "errors": (
        *_KEYS,
        "error_text",
        "peer",
        "peer_ip",
        "status",
        "status_name",
        "vendor_err",
        "req_type",
        "hca",
        "ib_port",
        "event_text",
        "call",
        "errno_text",
        "retry_max",
        "rank",
        "peer_rank",
        "cuda_error",
        "bytes",
        "device",
        "expected",
        "received",
        "comm",
        "result_code",
        "chain_file",
        "chain_line",
        "op",
        "channel",
        "direction",
        "gpu",
        "nranks",
        "error_kind",
    ),
    "exits": (
        *_KEYS,
        "exit_time",
        "exit_host",
        "exit_rank",
        "exit_local_rank",
        "exit_code",
        "exit_pid",
        "signal_num",
        "signal_name",
        "error_file",
        "entry_index",
        "script",
        "exit_tasks",
        "exit_reason",
        "cancel_time",
        "cancel_reason",
        "detail",
        "event",
    ),
    "nccltests": (
        *_KEYS,
        "test_name",
        "rank",
        "test_pid",
        "test_host",
        "device",
        "size",
        "count",
        "dtype",
        "redop",
        "root",
        "oop_busbw",
        "ip_busbw",
        "status",
        "test_error",
        "test_src",
        "last_error",
        "detail",
        "event",
    ),
    "network": (
        *_KEYS,
        "net_name",
        "interfaces",
        "ifname",
        "address",
        "gdr",
        "gdr_gpu",
        "hca",
        "distance",
        "distance_op",
        "distance_limit",
        "gdr_reason",
        "gpu",
        "plugin_type",
        "plugin_name",
        "plugin_lib",
        "plugin_text",
        "net_dev",
        "ib_port",
        "event",
    ),
    "notes": (
        *_KEYS,
        "direction",
        "transport",
        "op_type",
        "result",
        "bytes",
        "gpu",
        "comm",
        "rank",
        "nranks",
        "func",
        "parent",
        "color",
        "key",
    ),
    "ras": (*_KEYS, "peer", "peer_ip", "event"),
    "settings": (*_KEYS, "name", "value", "origin"),
    "topology": (
        *_KEYS,
        "channel",
        "ring_order",
        "trees",
        "gpu",
        "comm",
        "nranks",
        "bus_id",
        "nvml_dev",
        "event",
    ),
    "torch": (
        *_KEYS,
        "pg_rank",
        "op_type",
        "seq",
        "next_seq",
        "ranks",
        "event",
        "store_host",
        "store_port",
        "detail",
        "pg_id",
        "pg_guid",
        "pg_desc",
        "rdzv_host",
        "rdzv_run",
        "rdzv_world",
        "config_key",
        "config_value",
        "last_enqueued",
        "last_completed",
        "timeout_ms",
        "work_rank",
        "numel_in",
    ),
    "transports": (
        *_KEYS,
        "channel",
        "from_rank",
        "to_rank",
        "from_dev",
        "to_dev",
        "direction",
        "transport",
        "path",
        "net_name",
        "net_dev",
        "gdr",
        "comm",
        "nranks",
    ),
    "tuning": (*_KEYS, "op", "bytes", "count", "opcount", "comm", "event"),
    "versions": (*_KEYS, "version", "cuda", "product"),
}

# Of the lines no family claims and no envelope carries (plain ``text`` and ``blank``: most of a training
# log), an analysis keeps only those a rule reads: the first frame of a traceback at the script's top level
# (resolve/failures.py), and the first line of each combination of launcher labels (the ranks a log names:
# Job.torch_ranks; the hosts pdsh names: resolve/processes.py launcher_hosts). The others are counted (parse
# summary) but not kept: 10M lines of training output held 2 GB.
MODULE_FRAME = r"in <module>\s*$"
LINE_LABELS = ("torch_rank", "mpi_rank", "task", "local_rank", "launcher_host")


class PlainLines:
    """Drops the plain lines of each ``lines`` frame that no rule reads (see MODULE_FRAME); remembers the
    launcher labels seen so far, so that a label's first line is kept once per run."""

    def __init__(self) -> None:
        self._seen: pl.DataFrame | None = None
        self._unlabeled_seen = False  # the first plain line without a launcher label was kept

    def known(self, plain: pl.DataFrame) -> pl.Series:
        """Which of these plain lines (rows of the ``lines`` table, every one plain) :meth:`needed` drops
        whatever batch they come in: none that a rule reads, and only those whose launcher labels had their
        first line kept already (all of them when the table has no label column). The general parser
        leaves them out as it parses (``LineParser.plain_filter``)."""
        labels = _labels(plain)
        if "text" not in plain.columns or (labels and self._seen is None):  # needed keeps them (or a first)
            return pl.Series("known", [False] * plain.height, dtype=pl.Boolean)
        unread = plain.select(~_READ).to_series()
        if not labels:
            return unread
        seen = self._seen.with_columns(__seen=pl.lit(True))
        looked_up = plain.select(labels).join(
            seen, on=labels, how="left", nulls_equal=True, maintain_order="left"
        )
        return unread & looked_up.get_column("__seen").fill_null(False)

    def needed(self, lines: pl.DataFrame) -> pl.DataFrame:
        if lines.is_empty() or "family" not in lines.columns or "text" not in lines.columns:
            return lines
        plain = pl.col("family").is_in(["text", "blank"]) & pl.col("producer").is_null()
        read = plain & _READ
        labels = _labels(lines)
        kept = lines.filter(~plain | read)
        if not labels:
            return kept
        first = lines.filter(plain & ~read).unique(labels, keep="first", maintain_order=True)
        if self._seen is not None:
            first = first.join(self._seen, on=labels, how="anti", nulls_equal=True)
        if first.is_empty():
            return kept
        seen = first.select(labels)
        self._seen = seen if self._seen is None else pl.concat([self._seen, seen])
        if not self._unlabeled_seen:
            self._unlabeled_seen = seen.select(pl.all_horizontal(pl.all().is_null()).any()).item()
        return pl.concat([kept, first]).sort("source_id", "line_no", "part")

    def unlabeled_known(self) -> bool:
        """Whether :meth:`known` now drops every plain line without a launcher label that no rule reads
        (the first such line was kept): true for the rest of the run once it is."""
        return self._unlabeled_seen

    @staticmethod
    def read_pattern() -> str:
        """The regex of the texts of plain lines a rule reads."""
        return MODULE_FRAME


# True for the texts of plain lines a rule reads.
_READ = pl.col("text").str.contains(MODULE_FRAME)


def _labels(lines: pl.DataFrame) -> list[str]:
    """The launcher label columns of a ``lines`` frame."""
    return [c for c in LINE_LABELS if c in lines.columns]


# Of the NCCL and PyTorch lines other than COLL calls, an analysis keeps the first REPEATS_KEPT of each
# distinct content and counts the rest (Repeats): a line said again and again (a proxy or NET line by the
# million, a warning in a loop) held ~1.4 KB a row at the peak, without bound. Content is what a row says
# to the rules, not where or when it was written (POSITION), nor a counter that every such line advances
# (COUNTERS).
REPEATS_KEPT = 64
POSITION = ("line_no", "part", "byte_offset", "ts", "collector_ts", "tms")
COUNTERS: dict[str, tuple[str, ...]] = {"tuning": ("opcount",)}
LINE_KEY = ("source_id", "line_no", "part")
# Never folded as a table: COLL calls (the digest reduces them) and ``lines``, whose rows go with their
# family's rows (Repeats._lines). Nor are the Init rows of the comms table, each of which opens a communicator
# instance that the numbering of calls refers to (resolve/communicators.py).
UNFOLDED = frozenset({"calls", "collectives", "lines"})
# Dates and times inside a line's text, which repeats of a line do not share: an enveloped line that no
# family parsed is folded on its text without them.
TIME_IN_TEXT = r"\d{4}-\d\d-\d\d[T ]?|\d\d?:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"


class Repeats:
    """Folds repeated NCCL/PyTorch lines of each batch before an analysis keeps them: per table, the first
    ``kept`` rows of each distinct content stay, the later ones are dropped with their ``lines`` rows and
    counted in :attr:`folded`. ``columns`` (table → names) are the columns a content is made of, less
    POSITION and COUNTERS (an analysis passes :data:`DIAGNOSIS_COLUMNS`: rows that differ only in what no
    rule reads are the same to the diagnosis).

    The rows seen are counted per content hash in a :class:`~nccl_logsift.keymap.KeyMap` per table (about
    40 bytes a distinct content), so memory grows with what a log says, not with how often it says it."""

    def __init__(self, columns: Mapping[str, Collection[str]], kept: int | None = None) -> None:
        self._columns = columns
        self._kept = REPEATS_KEPT if kept is None else kept
        self.kept = self._kept  # rows kept of each content
        self._seen: dict[str, tuple[KeyMap, np.ndarray]] = {}
        self.folded = 0

    def fold(self, tables: Mapping[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
        out = dict(tables)
        dropped = []
        for name, frame in tables.items():
            if name in UNFOLDED or frame.is_empty():
                continue
            ignored = {*POSITION, *COUNTERS.get(name, ())}
            wanted = self._columns.get(name, frame.columns)
            content = [c for c in frame.columns if c in wanted and c not in ignored]
            keep = self._first(name, frame.select(pl.struct(content).hash(seed=0)).to_series())
            if name == "comms" and "what" in frame.columns:
                keep = keep | (frame.get_column("what") == "Init").fill_null(False)
            if keep.all():
                continue
            dropped.append(frame.filter(~keep).select(LINE_KEY))
            out[name] = frame.filter(keep)
        lines = tables.get("lines")
        if lines is not None and not lines.is_empty():
            out["lines"] = self._lines(lines, dropped)
        return out

    def _lines(self, lines: pl.DataFrame, dropped: list[pl.DataFrame]) -> pl.DataFrame:
        """The ``lines`` rows of the kept rows, and of the first enveloped lines no family parsed."""
        if dropped:
            lines = lines.join(pl.concat(dropped), on=LINE_KEY, how="anti", maintain_order="left")
        if not {"producer", "family", "text"} <= set(lines.columns):
            return lines
        unparsed = lines.select(
            (pl.col("producer").is_not_null() & pl.col("family").is_null()).fill_null(False)
        ).to_series()
        if not unparsed.any():
            return lines
        wanted = self._columns.get("lines", lines.columns)
        content = [c for c in lines.columns if c in wanted and c not in POSITION and c != "text"]
        said = pl.col("text").str.replace_all(TIME_IN_TEXT, "")
        hashes = lines.filter(unparsed).select(pl.struct(*content, said).hash(seed=0)).to_series()
        first = self._first("lines", hashes)
        if first.all():
            return lines
        return lines.filter((~unparsed).scatter(unparsed.arg_true(), first))

    def _first(self, name: str, hashes: pl.Series) -> pl.Series:
        """Whether each row is among the first ``kept`` of its hash, counting the batches before."""
        keys, seen = self._seen.get(name) or (KeyMap(), np.zeros(512, dtype=np.int64))
        known = keys.count
        slots = keys.ids(hashes.to_numpy())
        seen = grown(seen, keys.count)
        # Rows before in this batch with the same hash, plus those of earlier batches. When every row
        # brought a hash of its own (a 4096-rank job's init lines are all distinct), none came before.
        if keys.count - known == len(slots):
            at = np.zeros(len(slots), dtype=np.int64)
        else:
            at = earlier(slots) + seen[slots]
        seen[: keys.count] += np.bincount(slots, minlength=keys.count)
        np.minimum(seen, self._kept, out=seen)  # a count past ``kept`` decides nothing more
        self._seen[name] = (keys, seen)
        keep = at < self._kept
        self.folded += int(len(keep) - keep.sum())
        return pl.Series(keep)


@dataclass(frozen=True, slots=True)
class RankMaps:
    """The small tables the final step joins onto the large ones."""

    processes: pl.DataFrame  # host, pid, global_rank, world_size
    instances: pl.DataFrame  # one row per communicator instance
    # host, pid, dev, global_rank of the processes that hold world ranks on several GPUs (usually none): a
    # row of such a process takes the rank of its line's device
    devices: pl.DataFrame | None = None


# A line's rank: its process's, else the first of these launcher labels it has.
LINE_RANK_LABELS = ("torch_rank", "mpi_rank")
# The columns with_ranks reads.
_RANK_KEYS = {*INSTANCE, "dev", *LINE_RANK_LABELS}


def _by_device(maps: RankMaps, columns) -> tuple[list[str], pl.DataFrame] | None:
    """For a job with processes that hold world ranks on several GPUs: the keys and table that give a row
    its own GPU's rank. A COLL call names its communicator instance, whose rank is exact: a thread that
    drives several GPUs logs every call of a group with the device it set last (nccl-tests -g 2 prints
    both GPUs' calls with ``[1]``). Other lines go by the device in their prefix."""
    if maps.devices is None or maps.devices.is_empty():
        return None
    if set(INSTANCE) <= set(columns):
        return INSTANCE, maps.instances.select(*INSTANCE, RANKED_BY_PROCESS)
    if "dev" in columns:
        return [*PROCESS, "dev"], maps.devices
    return None


def with_ranks(name: str, frame: pl.DataFrame, maps: RankMaps) -> pl.DataFrame:
    """``frame`` with the global rank of each row's process (``global_rank``; for ``lines``, ``rank``: that
    or the best rank any launcher label gives). The rank column is looked up from the process columns alone
    and added to the frame, whose other columns are shared, not copied (a join would gather every column
    anew)."""
    if not set(PROCESS) <= set(frame.columns):
        return frame
    looked_up = _looked_up(frame, PROCESS, maps.processes.select(*PROCESS, RANKED_BY_PROCESS))
    by_device = _by_device(maps, frame.columns)
    if by_device is not None:
        looked_up = _looked_up(frame, *by_device).fill_null(looked_up)
    if name == "lines":
        # From the Series: an expression over the table (coalesce, drop) went through polars' query engine,
        # which held a copy of the ~590k lines of a 4096-rank job (~50 MB).
        for label in LINE_RANK_LABELS:
            if label in frame.columns:
                looked_up = looked_up.fill_null(frame.get_column(label))
        looked_up = looked_up.alias("rank")
    return frame.with_columns(looked_up)


def _looked_up(frame: pl.DataFrame, on: list[str], ranks: pl.DataFrame) -> pl.Series:
    """The rank of each row of ``frame`` in ``ranks`` (by ``on``), looked up slice by slice: one join over the
    ~590k lines of a 4096-rank job held ~80 MB of hash and gathered keys at once (the peak of the whole
    analysis), slices of 64k rows ~25 MB."""
    keys = frame.select(on)
    return pl.concat(
        [
            part.join(ranks, on=on, how="left", maintain_order="left")[RANKED_BY_PROCESS]
            for part in (list(keys.iter_slices(RANK_SLICE_ROWS)) or [keys])
        ]
    )


def compact(frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with every column that is null on all rows replaced by a null literal (no memory). A frame
    of fewer than COMPACT_ROWS rows is kept as it is: its null columns hold little, and a small job's
    analysis spent ~30 ms of ~300 replacing them."""
    if frame.height < COMPACT_ROWS:
        return frame
    nulls = frame.null_count().row(0)
    empty = [
        pl.lit(None, frame.schema[c]).alias(c) for c, n in zip(frame.columns, nulls) if n == frame.height
    ]
    return frame.with_columns(empty) if empty else frame


class TableSink(Protocol):
    def write(self, name: str, frame: pl.DataFrame) -> None: ...

    def finish(self, maps: RankMaps, extra: dict[str, pl.DataFrame]) -> dict[str, int]: ...


class MemorySink:
    """Keeps the tables in memory; ``tables`` is filled by ``finish``.

    ``columns`` (table → names) keeps only those columns of the tables it names, dropping the others as
    each frame is written (an analysis passes :data:`DIAGNOSIS_COLUMNS`).
    """

    def __init__(self, columns: Mapping[str, Collection[str]] | None = None) -> None:
        self._parts: dict[str, list[pl.DataFrame]] = {}
        self._columns = columns or {}
        self.tables: dict[str, pl.DataFrame] = {}

    def write(self, name: str, frame: pl.DataFrame) -> None:
        parts = self._parts.setdefault(name, [])
        if (
            parts and frame.is_empty()
        ):  # the first frame keeps the schema; most batches of most tables are empty
            return
        parts.append(self._kept(name, frame))

    def _kept(self, name: str, frame: pl.DataFrame) -> pl.DataFrame:
        wanted = self._columns.get(name)
        if wanted is not None:
            # A frame of the kept Series: DataFrame.select would run polars' query engine, ~0.1 ms a frame.
            frame = pl.DataFrame([frame.get_column(c) for c in frame.columns if c in wanted])
        return detached(compact(frame))

    def finish(self, maps: RankMaps, extra: dict[str, pl.DataFrame]) -> dict[str, int]:
        # One table at a time, its parts released as soon as it is built. The parts stay chunks of the
        # table (no concatenated copy), and the rank column is added beside them (no joined copy).
        while self._parts:
            name = next(iter(self._parts))
            merged = compact(pl.concat(self._parts.pop(name), how="vertical_relaxed", rechunk=False))
            self.tables[name] = with_ranks(name, merged, maps)
            del merged
        self.tables.update(extra)
        return {name: frame.height for name, frame in self.tables.items()}


# pyarrow's Parquet options. No dictionary for the columns unique to each row (line numbers, offsets,
# text): one is tried, abandoned and written anyway, and the files were ~45% larger than polars' own
# writer's, and slower to write. The staged files are read once, so they are compressed faster.
_UNIQUE = {"line_no", "byte_offset", "text"}
_STAGED = {"compression": "zstd", "compression_level": 1}
_WRITTEN = {"compression": "zstd", "compression_level": 3}


def _parquet_writer(path: Path, schema: pa.Schema, options: dict) -> pq.ParquetWriter:
    # Imported here, not at the top: analyze keeps its tables in memory, and pyarrow's Parquet module (with
    # its filesystems) was ~45 ms of every run's start-up.
    import pyarrow.parquet as pq

    dictionary = [name for name in schema.names if name not in _UNIQUE]
    return pq.ParquetWriter(path, schema, use_dictionary=dictionary, **options)


class ParquetSink:
    """Streams each table's chunks into a Parquet part file, then writes ``<dir>/<table>.parquet``.

    A file that cannot be written (a full disk) raises OutputError. ``<dir>`` holds a run's files as they
    are made, whole or not: ``logsift parse`` points it at a directory of its own and moves the files into
    place when all are written.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._staging = directory / ".staging"
        self._writers: dict[str, pq.ParquetWriter] = {}
        self.files: dict[str, Path] = {}

    def write(self, name: str, frame: pl.DataFrame) -> None:
        with _writing(self.directory):
            self._write(name, frame)

    def _write(self, name: str, frame: pl.DataFrame) -> None:
        table = frame.to_arrow()
        writer = self._writers.get(name)
        if writer is None:
            self._staging.mkdir(parents=True, exist_ok=True)
            writer = _parquet_writer(self._staging / f"{name}.parquet", table.schema, _STAGED)
            self._writers[name] = writer
        writer.write_table(table.cast(writer.schema))

    def finish(self, maps: RankMaps, extra: dict[str, pl.DataFrame]) -> dict[str, int]:
        with _writing(self.directory):
            return self._finish(maps, extra)

    def _finish(self, maps: RankMaps, extra: dict[str, pl.DataFrame]) -> dict[str, int]:
        for writer in self._writers.values():
            writer.close()
        rows = {}
        for name in self._writers:
            target = self.directory / f"{name}.parquet"
            rows[name] = self._ranked(name, self._staging / f"{name}.parquet", target, maps)
            self.files[name] = target
        for name, frame in extra.items():
            target = self.directory / f"{name}.parquet"
            frame.write_parquet(target, compression="zstd")
            rows[name] = frame.height
            self.files[name] = target
        shutil.rmtree(self._staging, ignore_errors=True)
        return rows

    @staticmethod
    def _ranked(name: str, staged: Path, target: Path, maps: RankMaps) -> int:
        """Copy a staged table to ``target`` with its rank column, one row group (one written batch) at a
        time, the rank looked up from the key columns alone: a query over the whole staged file (a join,
        then ``sink_parquet``) held the ~5M lines of a 1 GB log at once (3.3 GB), and lost their order."""
        import pyarrow.parquet as pq

        source = pq.ParquetFile(staged)
        groups = _read_ahead(source.read_row_group, source.num_row_groups)
        rank = "rank" if name == "lines" else RANKED_BY_PROCESS
        writer, rows = None, 0
        empty = [] if source.num_row_groups else [source.schema_arrow.empty_table()]  # the schema, no rows
        for group in itertools.chain(groups, empty):
            keys = [c for c in group.column_names if c in _RANK_KEYS]
            ranked = with_ranks(name, pl.from_arrow(group.select(keys)), maps)
            if rank in ranked.columns:
                column = ranked[rank].to_arrow()
                at = group.column_names.index(rank) if rank in group.column_names else None
                group = (
                    group.append_column(rank, column) if at is None else group.set_column(at, rank, column)
                )
            if writer is None:
                writer = _parquet_writer(target, group.schema, _WRITTEN)
            writer.write_table(group.cast(writer.schema))
            rows += group.num_rows
        writer.close()
        return rows


@contextmanager
def _writing(directory: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:  # pyarrow's and polars' write errors are OSErrors, the disk's errno in the text
        raise OutputError(f"cannot write the tables into {directory}: {exc.strerror or exc}") from exc


def _read_ahead(read: Callable[[int], pa.Table], count: int) -> Iterator[pa.Table]:
    """``read(0)``, ``read(1)``, ... ``read(count - 1)``, each read in a thread while the one before is used:
    decoding a row group and encoding the one before (both without the GIL) take the two cores."""
    from concurrent.futures import ThreadPoolExecutor

    if not count:
        return
    with ThreadPoolExecutor(1, thread_name_prefix="logsift-parquet") as pool:
        ahead = pool.submit(read, 0)
        for index in range(1, count + 1):
            current = ahead.result()
            if index < count:
                ahead = pool.submit(read, index)
            yield current


# The tables resolution writes beside the parsed ones: what a row is, and its columns.
RESOLVED_TABLES = {
    "communicators": (
        "one row per communicator instance per process, resolved from the comms table",
        INSTANCE_SCHEMA,
    ),
    "processes": (
        "one row per process that initialised a communicator (per GPU, for a process that holds a rank "
        "of the "
        "world on several): host, pid, global rank, world size",
        PROCESS_SCHEMA,
    ),
}


def table_docs(grammars: GrammarSet) -> str:
    """Markdown of every table and column ``logsift parse`` writes: the parsed tables with the columns the
    sinks add (a rank on every row of a process; the numbering of collectives), then the resolved tables."""
    parsed = schema.TableSchemas.from_grammars(grammars, keep_text=True)
    added: dict[str, dict[str, pl.DataType]] = {"lines": {"rank": pl.Int64()}}
    for name, columns in parsed.tables.items():
        if set(PROCESS) <= set(columns):
            added[name] = {**(ADDED if name == "collectives" else {}), "global_rank": pl.Int64()}
    from nccl_logsift.flight.table import table_docs as flight_docs  # the dumps' tables, beside the logs'

    return "\n".join([schema.table_docs(grammars, added, RESOLVED_TABLES), *flight_docs()])
