"""Turn one source into bounded chunks of lines: decompression, line splitting, UTF-8 repair.

Nothing is dropped: every byte sequence between two newlines becomes one line with its 1-based line
number and the byte offset where it starts (in the decompressed stream). ``\\r\\n`` endings lose the
``\\r``; invalid UTF-8 is replaced by U+FFFD and counted.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

import numpy as np
import polars as pl
import pyarrow as pa

from nccl_logsift.io.sources import Source

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 4 << 20

# Magic numbers of the compressed formats read transparently (files and stdin alike).
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bz2"))
COMPRESSED_MAGIC = tuple(magic for magic, _ in _MAGIC)
BINARY_SNIFF_BYTES = 64 << 10
_BINARY_CONTROL_RATIO = 0.05
_LIVE_READ_BYTES = 1 << 20  # what a pipe holds has arrived: read it in one go


@dataclass(frozen=True, slots=True)
class LineChunk:
    """Consecutive lines of one source, as columns."""

    source_id: int
    line_no: pl.Series  # UInt32, 1-based
    byte_offset: pl.Series  # UInt64, start of the line in the decompressed stream
    text: pl.Series  # String, without the line terminator

    def __len__(self) -> int:
        return len(self.text)

    @staticmethod
    def concat(chunks: list["LineChunk"]) -> "LineChunk":
        """Consecutive chunks of one source as one."""
        return LineChunk(
            source_id=chunks[0].source_id,
            line_no=pl.concat([c.line_no for c in chunks]),
            byte_offset=pl.concat([c.byte_offset for c in chunks]),
            text=pl.concat([c.text for c in chunks]),
        )


@dataclass(frozen=True, slots=True)
class RawChunk:
    """Consecutive lines of one source as bytes and line bounds, before any column is built.

    The fast paths read ``data`` through ``starts``/``ends`` directly; :meth:`lines` builds the text
    column as zero-copy string views for the general parser.
    """

    source_id: int
    first_line_no: int
    view: "ByteView"  # the bytes, valid UTF-8 (invalid sequences already replaced)
    starts: np.ndarray  # int64: where each line starts in data
    ends: np.ndarray  # int64: where its text ends (before "\n" or "\r\n")
    byte_offset: np.ndarray  # uint64: where each line starts in the decompressed stream

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def data(self) -> bytes:
        return self.view.data

    def lines(self, index: np.ndarray | None = None) -> LineChunk:
        """All lines, or those at ``index`` (sorted positions), as a :class:`LineChunk`."""
        numbers = np.arange(len(self)) if index is None else index
        pick = slice(None) if index is None else index
        starts, ends = self.starts[pick], self.ends[pick]
        return LineChunk(
            source_id=self.source_id,
            line_no=pl.Series("line_no", (numbers + self.first_line_no).astype(np.uint32)),
            byte_offset=pl.Series("byte_offset", self.byte_offset[pick]),
            text=self.view.strings(starts, ends - starts, "text"),
        )


class ByteView:
    """A chunk's bytes, readable 8 at a time at any position: the base of the vectorised fast paths."""

    def __init__(self, data: bytes):
        self.data = data
        padded = np.frombuffer(data + b"\0" * 16, dtype=np.uint8)
        self.raw = padded[: len(data)]
        # A strided view (stride 1 byte over 8-byte items): the little-endian word at every position.
        self.words = np.ndarray(shape=(len(data) + 8,), dtype="<u8", buffer=padded, strides=(1,))

    def strings(self, starts: np.ndarray, lengths: np.ndarray, name: str) -> pl.Series:
        """A polars String column of the byte ranges ``data[start:start+length]``, without copying them.

        Arrow's string-view layout (16 bytes per value: the length, then the bytes themselves when they
        fit in 12, else a 4-byte prefix, a buffer index and an offset) is built with numpy; polars keeps
        strings in the same layout, so the import is zero-copy. Every range must be valid UTF-8.
        """
        count = len(starts)
        lengths = lengths.astype(np.int64)
        low, high = self.words[starts], self.words[starts + 8]
        inline = lengths <= 12
        low = np.where(inline, low & _byte_mask(lengths), low)
        high = np.where(inline, high & _byte_mask(lengths - 8), 0)
        views = np.empty((count, 4), dtype=np.uint32)
        views[:, 0] = lengths
        views[:, 1] = low & 0xFFFFFFFF
        views[:, 2] = np.where(inline, low >> np.uint64(32), 0)
        views[:, 3] = np.where(inline, high & 0xFFFFFFFF, starts)
        array = pa.Array.from_buffers(pa.string_view(), count, [None, pa.py_buffer(views), pa.py_buffer(self.data)])
        return pl.Series(name, array)


def _byte_mask(lengths: np.ndarray) -> np.ndarray:
    """A uint64 keeping the first ``length`` bytes (0 to 8) of a little-endian word."""
    bits = np.clip(lengths, 0, 8).astype(np.uint64) * np.uint64(8)
    full = bits == 64
    return np.where(full, np.uint64(0xFFFFFFFFFFFFFFFF), (np.uint64(1) << np.where(full, np.uint64(0), bits)) - np.uint64(1))


@dataclass(slots=True)
class ReadStats:
    """What reading one source found; filled in while its chunks are consumed."""

    compression: str | None = None
    bytes: int = 0
    lines: int = 0
    invalid_utf8_lines: int = 0
    problem: str | None = None  # set when the source was skipped or cut short
    notes: list[str] = field(default_factory=list)


class LineReader:
    """Iterate over the :class:`LineChunk` s of one source; ``stats`` is complete after iteration.

    With ``max_wait`` (seconds) the reader is live: a chunk is also handed out when that much time has
    passed since the previous one and some complete lines are waiting, so a slow pipe is parsed as it
    arrives instead of when ``chunk_bytes`` have accumulated.
    """

    def __init__(self, source: Source, chunk_bytes: int = DEFAULT_CHUNK_BYTES, max_wait: float | None = None):
        self.source = source
        self.chunk_bytes = chunk_bytes
        self.max_wait = max_wait
        self.stats = ReadStats()

    def __iter__(self) -> Iterator[RawChunk]:
        line_no = 1
        for offset, data in self.texts():
            chunk = split_lines(data, self.source.source_id, line_no, offset, self.stats)
            line_no += len(chunk)
            self.stats.lines += len(chunk)
            yield chunk

    def _blocks(self, stream) -> Iterator[bytes | OSError | pa.ArrowException | EOFError]:
        """Blocks of bytes as read; a read error is yielded (once, last) instead of raised."""
        if self.max_wait is None:
            while True:
                try:
                    block = stream.read(self.chunk_bytes)
                except (OSError, pa.ArrowException, EOFError) as exc:
                    yield exc
                    return
                yield block
                if not block:
                    return
        yield from _timed_blocks(stream, self.chunk_bytes, self.max_wait)

    def texts(self) -> Iterator[tuple[int, bytes]]:
        """The source as line-aligned blocks of about ``chunk_bytes``, each with its decompressed offset.

        What :meth:`__iter__` splits into lines; the parallel parser hands these blocks to worker
        processes whole. ``stats.lines`` and ``invalid_utf8_lines`` are left to whoever splits them.
        """
        try:
            raw = self.source.open()
        except OSError as exc:
            self.stats.problem = f"cannot open: {exc.strerror or exc}"
            return
        try:
            yield from self._texts(raw)
        finally:
            if not self.source.is_stdin:
                raw.close()

    def _texts(self, raw: BinaryIO) -> Iterator[tuple[int, bytes]]:
        stream = self._decompressing(raw)
        pending = b""
        offset = 0
        first = True
        for block in self._blocks(stream):
            if isinstance(block, BaseException):
                what = f"{self.stats.compression} stream" if self.stats.compression else "file"
                self.stats.problem = f"{what} is truncated or corrupt after {self.stats.bytes + len(pending)} bytes ({block})"
                block = b""
            eof = not block
            if first:
                first = False
                if block and looks_binary(block[:BINARY_SNIFF_BYTES]):
                    self.stats.problem = "looks like binary data, not a text log"
                    return
            if eof:
                data, pending = pending, b""
            else:
                # pending holds no newline, so the block's last one ends the data: one copy of the block
                # (joined to what was pending), not two (joined, then cut).
                cut = block.rfind(b"\n") + 1
                if cut == 0:  # one huge line (or a live block without a newline): keep reading until it ends
                    pending += block
                    continue
                data = block if not pending and cut == len(block) else b"".join((pending, memoryview(block)[:cut]))
                pending = block[cut:]
            if data:
                self.stats.bytes += len(data)
                yield offset, data
                offset += len(data)
            if eof:
                return

    def _decompressing(self, raw: BinaryIO):
        head = raw.peek(4)[:4] if hasattr(raw, "peek") else b""
        for magic, codec in _MAGIC:
            if head.startswith(magic):
                self.stats.compression = codec
                return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), codec)
        return raw


def split_lines(data: bytes, source_id: int, first_line_no: int, first_offset: int, stats: ReadStats) -> RawChunk:
    """Find every line of ``data`` with one vectorised newline scan; repair invalid UTF-8 (rare) first.

    Lines whose bytes were repaired are counted in ``stats.invalid_utf8_lines``.
    """
    offsets = _line_offsets(data)
    text = data
    try:
        _binary_lines(data, offsets).view(pa.large_string()).validate(full=True)
    except pa.ArrowInvalid:
        # Invalid UTF-8 somewhere in the chunk: replace it (U+FFFD) and count the lines that changed.
        text = data.decode("utf-8", errors="replace").encode("utf-8")
        repaired = _line_offsets(text)
        before, after = pl.Series(_binary_lines(data, offsets)), pl.Series(_binary_lines(text, repaired))
        stats.invalid_utf8_lines += int((before != after).sum())
        offsets_in_text = repaired
    else:
        offsets_in_text = offsets
    starts = offsets_in_text[:-1]
    ends = offsets_in_text[1:].copy()
    raw = np.frombuffer(text, dtype=np.uint8)
    if len(ends):
        newline = raw[ends - 1] == 10
        ends -= newline
        ends -= (ends > starts) & (raw[np.maximum(ends - 1, 0)] == 13) & newline
    return RawChunk(
        source_id=source_id,
        first_line_no=first_line_no,
        view=ByteView(text),
        starts=starts,
        ends=ends,
        byte_offset=(offsets[:-1] + first_offset).astype(np.uint64),
    )


def _timed_blocks(stream, size: int, max_wait: float) -> Iterator[bytes | BaseException]:
    """Blocks of at most ``size`` bytes, each handed out no later than ``max_wait`` s after its first byte.

    A thread reads what the stream has (``read1``: a pipe returns what is waiting instead of blocking for
    ``size`` bytes) into a bounded queue; the consumer joins pieces until the block is full or late.
    """
    pieces: queue.Queue = queue.Queue(maxsize=64)

    def pump() -> None:
        read = getattr(stream, "read1", stream.read)
        try:
            while True:
                piece = read(_LIVE_READ_BYTES)
                pieces.put(piece)
                if not piece:
                    return
        except (OSError, ValueError, pa.ArrowException, EOFError) as exc:
            pieces.put(exc)

    threading.Thread(target=pump, name="logsift-reader", daemon=True).start()
    block: list[bytes] = []
    held = 0
    deadline = None
    while True:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            piece = pieces.get(timeout=timeout)
        except queue.Empty:
            piece = None
        if isinstance(piece, bytes) and piece:
            block.append(piece)
            held += len(piece)
            if deadline is None:
                deadline = time.monotonic() + max_wait
            if held < size:
                continue
        if block:
            yield b"".join(block)
            block, held, deadline = [], 0, None
        if piece is None:
            continue
        if not isinstance(piece, bytes):
            yield piece if isinstance(piece, BaseException) else b""
            return
        if not piece:
            yield b""
            return


def _line_offsets(data: bytes) -> np.ndarray:
    """Start of every line, plus the end of the data: one vectorised scan for newlines."""
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10) + 1
    if not data.endswith(b"\n"):  # the last line of the stream has no terminator
        ends = np.append(ends, len(data))
    offsets = np.empty(len(ends) + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1:] = ends
    return offsets


def _binary_lines(data: bytes, offsets: np.ndarray) -> pa.LargeBinaryArray:
    """Zero-copy view of ``data`` as one binary value per line (terminators included)."""
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def looks_binary(sample: bytes) -> bool:
    if not sample:
        return False
    if b"\x00" not in sample:
        return False
    control = sum(sample.count(bytes([b])) for b in range(32) if b not in (9, 10, 13, 27))
    return control / len(sample) > _BINARY_CONTROL_RATIO
