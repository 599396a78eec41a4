"""Parse a large input in worker processes: segments parsed side by side, their tables handed back in order.

The parse of a chunk depends on nothing before it but the hosts already seen (a glued line is cut where
a known host's envelope starts, grammar §9.2), so a source can be cut into line-aligned segments of a
few tens of MB and each segment parsed by any process. Everything that depends on order stays in the
calling process: line numbers (a worker counts from 1 at its segment's first line; the caller adds the
lines of the segments before), the collective numbering and the diagnosis, which see the segments'
tables in input order.

Workers read byte ranges of a plain file themselves; for standard input and compressed files the caller
reads (and decompresses) and sends each segment's bytes.

Hosts: a worker starts with the hosts the caller had seen when the segment was sent, and reports the
hosts that glued lines named while unknown. When the caller learned one of those (or a name it ends
with) from a segment finished meanwhile, the segment is parsed again in the caller, so the tables are
the same as those of one process reading the input in order.
"""

from __future__ import annotations

import functools
import os
import pickle
import queue
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import count
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc

from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.io.lines import (
    BINARY_SNIFF_BYTES,
    COMPRESSED_MAGIC,
    ReadStats,
    looks_binary,
    padded,
    split_lines,
    trailing_nul_bytes,
)
from nccl_logsift.io.sources import Source
from nccl_logsift.io.split import last_newline, next_newline
from nccl_logsift.parse.chunks import ChunkParser
from nccl_logsift.parse.lineparser import HOST_CHARS, LineParser, ParseState

SEGMENT_BYTES = 16 << 20
# Inputs smaller than this are parsed in the calling process: starting workers costs more than it saves.
MIN_PARALLEL_BYTES = 6 * SEGMENT_BYTES
MAX_AUTO_WORKERS = 3
_NEWLINE_SCAN = 1 << 16
_SHARED_MEMORY = "/dev/shm"
# Free space /dev/shm must have: the tables of the segments in flight, and every non-COLL table, which the
# diagnosis keeps (mapped) until the end — a few hundred MB for a 4096-rank job.
_SHARED_MEMORY_NEEDED = 1 << 30
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True, slots=True)
class Segment:
    """Consecutive whole lines of one source: a byte range of a plain file, or the bytes themselves."""

    source_id: int
    offset: int  # decompressed byte offset of the first line
    length: int | None  # bytes; None: to the end of the file
    path: str | None  # the file a worker reads the range from; None when ``data`` is given
    data: np.ndarray | None = None  # a block of ``LineReader.texts`` (uint8)
    known_hosts: frozenset[str] = frozenset()
    spilled: bool = False  # ``path`` holds just this segment's bytes (from offset 0); the worker removes it


@dataclass(slots=True)
class SegmentTables:
    """What a segment parsed into; ``line_no`` counts from 1 at the segment's first line."""

    batches: list[dict[str, pl.DataFrame]]
    lines: int
    bytes: int
    invalid_utf8_lines: int
    state: ParseState
    problem: str | None = None  # why the segment could not be read
    nul_bytes: int = 0


def worker_count(requested: int | None, sources: list[Source], live: bool, cores: int | None = None) -> int:
    """How many processes parse: ``requested``, or automatically.

    Automatically, worker processes are used only where a core is left for this process, which numbers
    the calls and runs the diagnosis while they parse: with 3 or more cores, ``cores - 1`` workers, at
    most ``MAX_AUTO_WORKERS`` (each holds 150-250 MB), for large inputs (files of ``MIN_PARALLEL_BYTES``
    or more in total, standard input, compressed files); otherwise 1 (this process). On 2 cores the
    workers measured slower than one process: parsing elsewhere costs a third more CPU (the tables are
    written and mapped back), and the diagnosis already fills a core (benchmarks/README.md).
    """
    if requested is not None:
        return max(1, requested)
    if live:
        return 1
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 3:
        return 1
    large = any(s.is_stdin or s.size is None or _compressed(s) for s in sources)
    if not large and sum(s.size or 0 for s in sources) < MIN_PARALLEL_BYTES:
        return 1
    return min(cores - 1, MAX_AUTO_WORKERS)


def parse_segment(chunks: ChunkParser, segment: Segment, chunk_bytes: int) -> SegmentTables:
    """Split a segment into chunks and parse them with ``chunks`` (whose parser state collects the counts)."""
    stats = ReadStats()
    try:
        data = segment.data if segment.data is not None else _read_range(segment)
    except OSError as exc:
        return SegmentTables([], 0, 0, 0, ParseState(), problem=exc.strerror or str(exc))
    if not isinstance(data, np.ndarray):
        data = np.frombuffer(data, dtype=np.uint8)
    padding = trailing_nul_bytes(data) if segment.path is not None and segment.length is None else 0
    stats.nul_bytes = padding  # the file's end: its NUL padding is no line (as LineReader reads it)
    read = len(data)
    data = data[: read - padding]
    batches = []
    line_no = 1
    # The pieces are views of the segment's buffer, which has the padding the line splitter needs behind
    # it (a text column kept from one piece keeps the whole buffer).
    for start, stop in _pieces(data, chunk_bytes):
        chunk = split_lines(data[start:stop], segment.source_id, line_no, segment.offset + start, stats)
        line_no += len(chunk)
        chunks.add(chunk)
        if chunks.ready:
            batches.append(chunks.flush())
    tables = chunks.flush()
    if tables is not None:
        batches.append(tables)
    return SegmentTables(
        batches, line_no - 1, read, stats.invalid_utf8_lines, chunks.parser.state, nul_bytes=stats.nul_bytes
    )


class SegmentPool:
    """Worker processes parsing segments; :meth:`map` yields each segment's tables in input order.

    Each worker runs ``nccl_logsift.parse.worker``, fed pickled segments on its stdin and
    answering on its stdout (``parse/worker.py``). A process of our own rather than ``multiprocessing``:
    nothing of the caller is imported again in the worker (an unguarded ``__main__`` would run twice), and
    nothing is forked after polars has started its threads. A thread per worker drains its answers, so
    a worker that finished early is not held up while the caller digests the segment before.
    """

    def __init__(
        self, workers: int, grammars: GrammarSet, keep_text: bool, every_line: bool, chunk_bytes: int
    ):
        self.workers = workers
        self._setup = (grammars, keep_text, every_line, chunk_bytes)
        self._procs: list[_Worker] = []
        self._directory: str | None = None

    def map(self, segments: Iterator[Segment]) -> Iterator[tuple[Segment, SegmentTables]]:
        """Keep every worker busy, one segment ahead; results come back in order."""
        if not self._procs:
            self._directory = tempfile.mkdtemp(prefix="logsift-", dir=scratch_directory())
            self._procs = [_Worker((*self._setup, self._directory)) for _ in range(self.workers)]
        pending: deque[tuple[Segment, _Worker]] = deque()
        names = (os.path.join(self._directory, f"segment-{n}") for n in count())
        for segment in segments:
            worker = min(self._procs, key=lambda w: w.outstanding)
            worker.send(_spilled(segment, names) if segment.data is not None else segment)
            pending.append((segment, worker))
            if len(pending) > self.workers:
                first, owner = pending.popleft()
                yield first, owner.receive()
        while pending:
            first, owner = pending.popleft()
            yield first, owner.receive()

    def close(self) -> None:
        for worker in self._procs:
            worker.close()
        self._procs = []
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None


class _Worker:
    """One worker process and the thread that reads its answers."""

    def __init__(self, setup: tuple):
        # One polars thread per worker: the workers already fill the cores, and idle polars threads
        # spin before they sleep, taking turns from the processes that have work.
        environment = {**os.environ, "POLARS_MAX_THREADS": "1"}
        # The worker imports this very copy of nccl_logsift, not whichever one its working directory or
        # the installed packages would give.
        start = (
            f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
            "from nccl_logsift.parse.worker import main; main()"
        )
        self.process = subprocess.Popen(
            [sys.executable, "-c", start], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environment
        )
        self.outstanding = 0
        self._answers: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._drain, name="logsift-worker-reader", daemon=True)
        self._reader.start()
        write_frame(self.process.stdin, setup)

    def send(self, segment: Segment) -> None:
        self.outstanding += 1
        write_frame(self.process.stdin, segment)

    def receive(self) -> SegmentTables:
        answer = self._answers.get()
        self.outstanding -= 1
        if answer is None:
            raise RuntimeError(f"a parsing worker exited with status {self.process.wait()}")
        return unpacked(pickle.loads(answer))

    def close(self) -> None:
        try:
            self.process.stdin.close()
        except OSError:
            pass
        if self.process.wait(timeout=60) is None:
            self.process.kill()

    def _drain(self) -> None:
        stream = self.process.stdout
        while (frame := read_frame(stream)) is not None:
            self._answers.put(frame)
        self._answers.put(None)


def unpacked(result: SegmentTables) -> SegmentTables:
    """A worker's answer with its tables opened (see :class:`Packed`)."""
    result.batches = [{name: packed.open() for name, packed in tables.items()} for tables in result.batches]
    return result


def write_frame(stream, value) -> None:
    """One pickled value, preceded by its length."""
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)
    stream.flush()


def read_frame(stream) -> bytes | None:
    """The bytes of the next frame written by :func:`write_frame`, or None at the end of the stream."""
    head = stream.read(8)
    if len(head) < 8:
        return None
    (length,) = struct.unpack("<Q", head)
    data = stream.read(length)
    return data if len(data) == length else None


def scratch_directory() -> str | None:
    """Where workers hand over tables: shared memory when it has room (a container's /dev/shm is often
    64 MB), else the temporary directory (None), whose files the page cache mostly keeps in memory too."""
    try:
        free = os.statvfs(_SHARED_MEMORY)
    except OSError:
        return None
    return _SHARED_MEMORY if free.f_bavail * free.f_frsize >= _SHARED_MEMORY_NEEDED else None


def file_segments(source: Source, segment_bytes: int | None = None) -> Iterator[tuple[int, int | None]]:
    """(offset, length) of line-aligned byte ranges of a plain file; the last one runs to the end of the
    file."""
    segment_bytes = segment_bytes or SEGMENT_BYTES
    size = source.size or 0
    start = 0
    with open(source.path, "rb") as handle:
        while start + segment_bytes < size:
            cut = _next_line_start(handle, start + segment_bytes)
            if cut is None or cut >= size:
                break
            yield start, cut - start
            start = cut
    yield start, None


def sniff(source: Source) -> str | None:
    """Why a file cannot be read by byte ranges ("compressed", "binary"), or None for a plain text file."""
    with open(source.path, "rb") as handle:
        head = handle.read(BINARY_SNIFF_BYTES)
    if any(head.startswith(magic) for magic in COMPRESSED_MAGIC):
        return "compressed"
    if looks_binary(head):
        return "binary"
    return None


def missed_hosts(result: SegmentTables, segment: Segment, known: set[str]) -> bool:
    """Whether a glued line of the segment named a host that the caller knew by then and the worker did
    not."""
    missed = known - segment.known_hosts
    if not missed or not result.state.unknown_glued_hosts:
        return False
    return any(
        host[k:] in missed
        for host in result.state.unknown_glued_hosts
        for k in range(max(0, len(host) - HOST_CHARS), len(host))
    )


def shift_lines(tables: dict[str, pl.DataFrame], before: int) -> dict[str, pl.DataFrame]:
    """Line numbers counted from the source's first line, given ``before`` lines ahead of the segment."""
    if not before:
        return tables
    return {
        name: frame.with_columns(pl.col("line_no") + pl.lit(before, pl.UInt32))
        if "line_no" in frame.columns
        else frame
        for name, frame in tables.items()
    }


# ---------------------------------------------------------------------- in the worker process
def serve(setup: tuple, segments: Iterator[Segment]) -> Iterator[SegmentTables]:
    """A worker's loop: the tables of each segment, parsed with one parser kept across segments and
    packed into files of ``directory`` (see :class:`Packed`)."""
    grammars, keep_text, every_line, chunk_bytes, directory = setup
    chunks = ChunkParser(LineParser(grammars, keep_text=keep_text), every_line)
    names = (os.path.join(directory, f"{os.getpid()}-{n}.arrow") for n in count())
    for segment in segments:
        chunks.parser.state = ParseState(known_hosts=set(segment.known_hosts))
        result = parse_segment(chunks, segment, chunk_bytes)
        result.state.known_hosts -= segment.known_hosts  # only what the caller may not know yet
        result.batches = [
            {name: Packed.of(frame, names) for name, frame in tables.items()} for tables in result.batches
        ]
        yield result


@dataclass(frozen=True, slots=True)
class Packed:
    """A table on its way from a worker: its rows in an Arrow IPC file, constant columns left out.

    The file is written once and memory-mapped by the caller, so a segment's hundreds of thousands of
    rows cross between processes without being copied through a pipe or pickled. Columns with one value
    in every row (null: most launcher and envelope fields of COLL rows; else the source, the level, the
    family and pattern names) would be a third of the file; they travel as that value.
    """

    schema: dict[str, pl.DataType]
    constants: dict[str, object]  # column: the value of every row (None for all-null columns)
    path: str | None  # None: no rows

    @staticmethod
    def of(frame: pl.DataFrame, names: Iterator[str]) -> Packed:
        if frame.is_empty():
            return Packed(dict(frame.schema), {}, None)
        nulls = frame.null_count().row(0)
        same = frame.select((pl.col(c) == pl.col(c).first()).all().alias(c) for c in frame.columns).row(0)
        constants = {}
        for name, null_count, one in zip(frame.columns, nulls, same):
            if null_count == frame.height:
                constants[name] = None
            elif null_count == 0 and one:
                constants[name] = frame[name][0]
        path = next(names)
        frame.drop(list(constants)).write_ipc(
            path, compression="uncompressed", compat_level=pl.CompatLevel.newest()
        )
        return Packed(dict(frame.schema), constants, path)

    def open(self) -> pl.DataFrame:
        """The table, its columns mapped from the file (which is removed: the mapping keeps it readable)."""
        if self.path is None:
            return _empty(tuple(self.schema.items()))
        with pa.memory_map(self.path) as source:
            table = pa.ipc.open_file(source).read_all()
        os.unlink(self.path)
        frame = pl.from_arrow(table)
        constants = [pl.lit(value, self.schema[c]).alias(c) for c, value in self.constants.items()]
        return frame.with_columns(constants).select(list(self.schema))


# ---------------------------------------------------------------------- helpers
@functools.lru_cache(maxsize=256)
def _empty(schema: tuple[tuple[str, pl.DataType], ...]) -> pl.DataFrame:
    """An empty table (most tables of most batches): built once per schema, frames being immutable."""
    return pl.DataFrame(schema=dict(schema))


def _read_range(segment: Segment) -> np.ndarray:
    """The segment's bytes, read into a :func:`padded` buffer (split into lines without another copy)."""
    with open(segment.path, "rb") as handle:
        start = 0 if segment.spilled else segment.offset
        size = os.fstat(handle.fileno()).st_size - start
        if segment.length is not None and not segment.spilled:
            size = min(size, segment.length)
        handle.seek(start)
        data = padded(max(size, 0))
        got = handle.readinto(data)
    if segment.spilled:
        os.unlink(segment.path)
    return data[:got]


def _spilled(segment: Segment, names: Iterator[str]) -> Segment:
    """A segment of bytes read here (stdin, decompressed) written to a file of the pool's directory.

    Sent through the worker's stdin, 32 MB would block this process until the worker, still busy with its
    previous segment, reads them: the diagnosis would wait on the parse instead of running beside it.
    """
    path = next(names)
    with open(path, "wb") as handle:
        handle.write(segment.data)
    return replace(segment, path=path, data=None, spilled=True)


def _pieces(data: np.ndarray, size: int) -> Iterator[tuple[int, int]]:
    """Line-aligned ranges of about ``size`` bytes."""
    start, end = 0, len(data)
    while start < end:
        stop = last_newline(data, start, start + size) + 1 if start + size < end else end
        if stop <= start:  # a line longer than size
            newline = next_newline(data, start + size)
            stop = end if newline < 0 else newline + 1
        yield start, stop
        start = stop


def _next_line_start(handle, position: int) -> int | None:
    """Where the first line starting at or after ``position`` begins, or None at the end of the file."""
    handle.seek(position - 1)
    scanned = position - 1
    while True:
        block = handle.read(_NEWLINE_SCAN)
        if not block:
            return None
        found = block.find(b"\n")
        if found >= 0:
            return scanned + found + 1
        scanned += len(block)


def _compressed(source: Source) -> bool:
    return not source.is_stdin and source.path.endswith((".gz", ".zst", ".bz2"))
