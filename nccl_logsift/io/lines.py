"""Turn one source into bounded chunks of lines: decompression, line splitting, UTF-8 repair.

Nothing is dropped in silence: every byte sequence between two newlines becomes one line with its 1-based
line number and the byte offset where it starts (in the decompressed stream). Its text leaves out trailing
blanks (``\\r\\n``, ``\\r\\r\\n``, spaces, tabs) and NUL padding (counted); a file whose lines end
in a lone ``\\r`` is read as if they ended in ``\\n``; invalid UTF-8 is replaced by U+FFFD and counted.
A compressed stream that breaks off keeps every byte decoded before the break (``io/decode.py``). What
went wrong is listed in ``ReadStats.problems``.

The bytes are read once, into a fresh buffer per block with ``PADDING`` bytes to spare behind the data,
so the words view of the fast paths (:class:`ByteView`) is built over them without a copy; the lines are
found by one compiled pass (``io/split.py``), which also tells whether the UTF-8 check can be skipped.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import polars as pl
import pyarrow as pa

from nccl_logsift import accel
from nccl_logsift.io import split
from nccl_logsift.io.decode import BrokenStream, DecodedStream
from nccl_logsift.io.sources import Source
from nccl_logsift.model import InputProblem, ProblemKind

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 4 << 20

# Magic numbers of the compressed formats read transparently (files and stdin alike).
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"BZh", "bz2"))
COMPRESSED_MAGIC = tuple(magic for magic, _ in _MAGIC)
BINARY_SNIFF_BYTES = 64 << 10
# A sample is text when at least this share of its bytes (NUL bytes aside) lies in lines free of control
# bytes: a binary block near the start of a log costs its own lines, not the log.
_TEXT_SHARE = 0.5
_CONTROL_SHARE_OF_BINARY_LINE = 16  # a line with 1 control byte in 16 or more is binary data
_TEXT_CONTROLS = np.array([8, 9, 10, 11, 12, 13, 27], dtype=np.uint8)  # BS, TAB, LF, VT, FF, CR, ESC
# By byte value: a control byte that text does not carry (a table lookup: np.isin sorted every sample, ~0.1 ms
# of every file read, and a directory of per-rank files is thousands).
_BINARY_CONTROL = np.zeros(256, dtype=bool)
_BINARY_CONTROL[:32] = True
_BINARY_CONTROL[_TEXT_CONTROLS] = False
_LIVE_READ_BYTES = 1 << 20  # what a pipe holds has arrived: read it in one go
# Bytes of memory a ByteView needs behind the data: a word read at its last byte, rounded up.
PADDING = 16
# Longer lines are cut to this many bytes (parse/chunks.py counts them); the reader holds at most a few
# bytes more of a line (_LINE_HEAD), so a line of gigabytes without a newline costs the memory of a chunk.
MAX_LINE_BYTES = 1 << 20


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
    def concat(chunks: list[LineChunk]) -> LineChunk:
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
    view: ByteView  # the bytes, valid UTF-8 (invalid sequences already replaced)
    starts: np.ndarray  # int64: where each line starts in data (``view.raw``)
    ends: np.ndarray  # int64: where its text ends (before "\n" and the blanks ahead of it)
    byte_offset: np.ndarray  # uint64: where each line starts in the decompressed stream

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def data(self) -> memoryview:
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
    """A chunk's bytes, readable 8 at a time at any position: the base of the vectorised fast paths.

    ``raw`` is the bytes as a uint8 array, ``data`` the same memory as a memoryview (equal to the
    ``bytes``), and ``words`` the little-endian word at every position, which reads up to 15 bytes
    past the data. Those must be memory of the same buffer: a block of :meth:`LineReader.texts` (or a
    slice of one) has them and is viewed as it is; other bytes are copied once into a :func:`padded` array.
    """

    def __init__(self, data: bytes | np.ndarray):
        raw = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        words = _words(raw)
        if words is None:
            copy = padded(len(raw))
            copy[:] = raw
            raw, words = copy, _words(copy)
        self.raw = raw
        self.data = memoryview(raw)
        self.words = words

    def strings(self, starts: np.ndarray, lengths: np.ndarray, name: str) -> pl.Series:
        """A polars String column of the byte ranges ``data[start:start+length]``, without copying them.

        Arrow's string-view layout (16 bytes per value: the length, then the bytes themselves when they
        fit in 12, else a 4-byte prefix, a buffer index and an offset) is filled by a compiled loop
        (``accel.split_views``: ~10 ns a value, where a dozen numpy passes took ~75); polars keeps strings
        in the same layout, so the import is zero-copy. Every range must be valid UTF-8.
        """
        return _series(self._views(starts, lengths), name)

    def copied(self, starts: np.ndarray, lengths: np.ndarray, name: str) -> pl.Series:
        """As :meth:`strings`, but the bytes are copied out: the column keeps nothing of this buffer alive."""
        return _series(self._views(starts, lengths).cast(pa.large_string()), name)

    def _views(self, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        count = len(starts)
        views = np.empty((count, 4), dtype=np.uint32)
        # Any integer arrays, strided or not (a row of the scans' outputs): the loop reads C-contiguous int64.
        starts, lengths = (np.ascontiguousarray(a, dtype=np.int64) for a in (starts, lengths))
        accel.split_views(self.raw, starts, lengths, views)
        return pa.Array.from_buffers(
            pa.string_view(), count, [None, pa.py_buffer(views), pa.py_buffer(self.raw)]
        )


def _series(array: pa.Array, name: str) -> pl.Series:
    # polars' Series constructor takes the buffers as they are (~9 µs, where a one-column table took ~40:
    # a per-rank file's leftovers are a few dozen lines). It imports pyarrow.compute for an Arrow array,
    # which the parser imports in any case (parse/lineparser.py).
    return pl.Series(name, array)


def padded(size: int) -> np.ndarray:
    """A fresh uint8 array of ``size`` bytes (not initialised) with ``PADDING`` zero bytes of its buffer
    behind it."""
    buffer = np.empty(size + PADDING, dtype=np.uint8)
    buffer[size:] = 0
    return buffer[:size]


def _words(raw: np.ndarray) -> np.ndarray | None:
    """A strided view (stride 1 byte over 8-byte items) of the little-endian word at every byte of ``raw``
    and 8 past it, or None when the buffer ``raw`` is a view of does not hold ``PADDING`` bytes after it."""
    owner = raw.base
    if not isinstance(owner, np.ndarray) or not (owner.flags.c_contiguous and raw.flags.c_contiguous):
        return None
    at = raw.ctypes.data - owner.ctypes.data
    if raw.dtype != np.uint8 or at < 0 or at + len(raw) + PADDING > owner.nbytes:
        return None
    return np.ndarray(shape=(len(raw) + 8,), dtype="<u8", buffer=owner, offset=at, strides=(1,))


@dataclass(slots=True)
class ReadStats:
    """What reading one source found; filled in while its chunks are consumed."""

    compression: str | None = None
    bytes: int = 0
    lines: int = 0
    invalid_utf8_lines: int = 0
    nul_bytes: int = 0  # NUL bytes left out of the lines: padding at their ends, holes inside them
    problems: list[InputProblem] = field(default_factory=list)  # what cut the source short or skipped it

    def all_problems(self) -> tuple[InputProblem, ...]:
        """Every problem, the counted ones (NUL padding, invalid UTF-8) included."""
        counted = []
        if self.nul_bytes:
            counted.append(InputProblem(ProblemKind.NUL_PADDED, bytes=self.nul_bytes))
        if self.invalid_utf8_lines:
            counted.append(InputProblem(ProblemKind.INVALID_UTF8, lines=self.invalid_utf8_lines))
        return (*self.problems, *counted)

    @property
    def problem(self) -> str | None:
        """The problems that cut the source short or skipped it, in words (None when it was read whole)."""
        return "; ".join(p.describe() for p in self.problems if p.cuts_input) or None


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

    def texts(self) -> Iterator[tuple[int, np.ndarray]]:
        """The source as line-aligned blocks of about ``chunk_bytes``, each with its decompressed offset.

        A block is a uint8 array, the start of a buffer of its own (never written again once handed
        out) with at least ``PADDING`` bytes behind it, which :class:`ByteView` reads without a copy.
        What :meth:`__iter__` splits into lines; the parallel parser hands these blocks to worker
        processes whole. ``stats.lines`` and ``invalid_utf8_lines`` are left to whoever splits them.
        """
        try:
            raw = self.source.open()
        except OSError as exc:
            self.stats.problems.append(InputProblem(ProblemKind.UNREADABLE, reason=exc.strerror or str(exc)))
            return
        try:
            yield from self._texts(raw)
        finally:
            if not self.source.is_stdin:
                raw.close()

    def _texts(self, raw: BinaryIO) -> Iterator[tuple[int, np.ndarray]]:
        stream = self._decompressing(raw)
        live = None if self.max_wait is None else _timed_blocks(stream, self.chunk_bytes, self.max_wait)
        pending = padded(0)  # the start of a line whose end has not been read yet
        offset = 0
        skipped = 0  # bytes of the pending line dropped after its head (_line_head)
        first = True
        cr_only = False
        while True:
            buffer, filled, error = self._read(stream, live, pending)
            if error is not None:
                self.stats.problems.append(_broken(error, self.stats.bytes + len(pending)))
            eof = filled == len(pending)
            fresh = buffer[len(pending) : filled]
            if first and not eof:
                first = False
                binary = binary_reason(bytes(fresh[:BINARY_SNIFF_BYTES]), whole=len(fresh) < self.chunk_bytes)
                if binary:
                    self.stats.problems.append(InputProblem(ProblemKind.BINARY, reason=binary))
                    return
                # Lines that end in a lone "\r" (old Mac files, progress output redrawn in place): read
                # as "\n", which keeps every offset.
                cr_only = split.next_newline(fresh, 0) < 0 and bool((fresh == 13).any())
            if cr_only:
                fresh[fresh == 13] = 10
            if eof:
                data = self._without_padding(pending)
                self.stats.bytes += skipped
            else:
                newline = split.last_newline(buffer, len(pending), filled)  # pending holds none
                if (
                    newline < 0
                ):  # one huge line (or a live block without a newline): keep reading until it ends
                    pending = buffer[:filled]
                    if filled > _LINE_HEAD:
                        pending = _line_head(buffer, filled)
                        skipped += filled - len(pending)
                    continue
                if skipped:  # the cut line ends at the first newline: its head is a block of its own
                    end = split.next_newline(buffer, len(pending))
                    head = padded(len(pending) + 1)
                    head[:-1] = pending
                    head[-1] = ord("\n")
                    self.stats.bytes += end + 1 + skipped
                    yield offset, head
                    offset += end + 1 + skipped
                    skipped = 0
                    buffer, filled, newline = buffer[end + 1 :], filled - end - 1, newline - end - 1
                    if newline < 0:
                        pending = buffer[:filled]
                        continue
                data, pending = buffer[: newline + 1], buffer[newline + 1 : filled]
            if len(data):
                self.stats.bytes += len(data)
                yield offset, data
                offset += len(data)
            if eof:
                return

    def _without_padding(self, data: np.ndarray) -> np.ndarray:
        """The stream's last bytes less the NUL bytes that end it (counted): a crash's padding is no line."""
        padding = trailing_nul_bytes(data)
        self.stats.nul_bytes += padding
        self.stats.bytes += padding
        return data[: len(data) - padding]

    def _read(
        self, stream, live: Iterator | None, pending: np.ndarray
    ) -> tuple[np.ndarray, int, BaseException | None]:
        """A fresh :func:`padded` buffer starting with ``pending`` and continuing with what was read next,
        how many bytes of it were filled, and the error that ended the input (None if none did).

        The stream reads straight into the buffer: the block's one copy is the read itself. A read asks
        for ``chunk_bytes``, or for as much as is pending if that is more (a line longer than a chunk
        is then copied a logarithmic number of times, not once per chunk). Live input comes in blocks
        of the reader thread, copied in after ``pending``.
        """
        error = None
        if live is None:
            buffer = padded(len(pending) + max(self.chunk_bytes, len(pending)))
            try:
                got = stream.readinto(buffer[len(pending) :]) or 0
            except (OSError, pa.ArrowException, EOFError) as exc:
                got, error = 0, exc
        else:
            block = next(live, b"")
            if isinstance(block, BaseException):
                block, error = b"", block
            got = len(block)
            buffer = padded(len(pending) + got)
            buffer[len(pending) :] = np.frombuffer(block, dtype=np.uint8)
        buffer[: len(pending)] = pending
        return buffer, len(pending) + got, error

    def _decompressing(self, raw: BinaryIO):
        head = raw.peek(4)[:4] if hasattr(raw, "peek") else b""
        for magic, codec in _MAGIC:
            if head.startswith(magic):
                self.stats.compression = codec
                return DecodedStream(raw, codec, None if self.source.is_stream else self.source.open)
        return raw


def trailing_nul_bytes(data: np.ndarray) -> int:
    """How many NUL bytes end ``data`` (the last bytes of an input)."""
    if not len(data) or data[-1] != 0:
        return 0
    text = np.flatnonzero(data)
    return len(data) - (int(text[-1]) + 1 if len(text) else 0)


def _broken(error: BaseException, offset: int) -> InputProblem:
    """The problem an error that ended the input is, ``offset`` decoded bytes into it."""
    if isinstance(error, BrokenStream):
        kind = ProblemKind.TRUNCATED if error.truncated else ProblemKind.CORRUPT
        return InputProblem(kind, offset=offset, reason=error.reason)
    reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
    return InputProblem(ProblemKind.UNREADABLE, offset=offset, reason=reason)


# Bytes of a line too long kept by the reader: more than MAX_LINE_BYTES, so that the parser sees it is
# too long, and room to end on a whole UTF-8 character.
_LINE_HEAD = MAX_LINE_BYTES + 4


def _line_head(buffer: np.ndarray, filled: int) -> np.ndarray:
    """The first bytes of a line too long (buffer[:filled], no newline), copied out of its buffer: about
    _LINE_HEAD of them, ending before a UTF-8 continuation byte so that no character is cut in two."""
    keep = min(filled, _LINE_HEAD)
    while keep > MAX_LINE_BYTES + 1 and keep < filled and buffer[keep] & 0xC0 == 0x80:
        keep -= 1
    head = padded(keep)
    head[:] = buffer[:keep]
    return head


def split_lines(
    data: np.ndarray | bytes, source_id: int, first_line_no: int, first_offset: int, stats: ReadStats
) -> RawChunk:
    """Find every line of ``data`` with one compiled pass; check UTF-8 only when a byte is not ASCII,
    and repair invalid UTF-8 (rare).

    ``data`` is best a block of :meth:`LineReader.texts` or a slice of one, which :class:`ByteView`
    reads without a copy. Lines whose bytes were repaired are counted in ``stats.invalid_utf8_lines``.
    """
    view = ByteView(data)
    starts, ends, ascii, nul_bytes, has_nul = split.find_lines(view.raw)
    byte_offset = starts.astype(np.uint64) + np.uint64(first_offset)
    if not ascii and not _is_utf8(view.raw):
        view, starts, ends, nul_bytes = _repaired(view, starts, stats)  # NUL is valid UTF-8: it stays
    # NUL bytes inside lines (counted only when the split saw a NUL byte).
    inside = int(np.count_nonzero(view.raw == 0)) - nul_bytes if has_nul else 0
    if inside > 0:
        view, starts, ends = _without_nul(view, starts, ends)
    stats.nul_bytes += nul_bytes + max(inside, 0)
    return RawChunk(
        source_id=source_id,
        first_line_no=first_line_no,
        view=view,
        starts=starts,
        ends=ends,
        byte_offset=byte_offset,
    )


def _without_nul(
    view: ByteView, starts: np.ndarray, ends: np.ndarray
) -> tuple[ByteView, np.ndarray, np.ndarray]:
    """The chunk without the NUL bytes inside its lines, and its line bounds (rare: a file a crash left a hole
    in, NULs up to where writing resumed). The line keeps its number; what was written after the hole joins
    what came before it, and a line of another process that starts there is cut off as a glued line would be
    (parse/lineparser.py). Bytes before each position that are kept give its place in the new chunk."""
    kept = view.raw != 0
    place = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(kept, out=place[1:])
    return ByteView(view.raw[kept]), place[starts].astype(starts.dtype), place[ends].astype(ends.dtype)


def _is_utf8(raw: np.ndarray) -> bool:
    """Whether the bytes are valid UTF-8 (checked by Arrow as one string: a newline, being ASCII, can
    neither start nor end a sequence, so the whole is valid exactly when every line is)."""
    try:
        _binary_lines(raw, np.array([0, len(raw)], dtype=np.int64)).view(pa.large_string()).validate(
            full=True
        )
    except pa.ArrowInvalid:
        return False
    return True


def _repaired(
    view: ByteView, starts: np.ndarray, stats: ReadStats
) -> tuple[ByteView, np.ndarray, np.ndarray, int]:
    """The chunk with invalid UTF-8 replaced by U+FFFD, its line bounds and the NUL bytes they leave out; the
    lines that changed are counted.

    A newline is never part of an invalid sequence, so the chunk keeps its lines.
    """
    fixed = ByteView(str(view.data, "utf-8", errors="replace").encode("utf-8"))
    fixed_starts, fixed_ends, _, nul_bytes, _ = split.find_lines(fixed.raw)
    before = pl.Series(_binary_lines(view.raw, np.append(starts, len(view.raw))))
    after = pl.Series(_binary_lines(fixed.raw, np.append(fixed_starts, len(fixed.raw))))
    stats.invalid_utf8_lines += int((before != after).sum())
    return fixed, fixed_starts, fixed_ends, nul_bytes


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


def _binary_lines(data: np.ndarray, offsets: np.ndarray) -> pa.LargeBinaryArray:
    """Zero-copy view of ``data`` as one binary value per line (terminators included)."""
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def binary_reason(sample: bytes, whole: bool = False) -> str | None:
    """Why the first bytes of an input say it is no text log, or None when they are text (``whole``: the
    sample is the entire input).

    NUL bytes are set aside first (a crashed node pads a file with them; the lines drop them). What is left
    is text when most of it lies in lines without control bytes, so a binary block near the start of a log
    costs its own lines only. A sample of NUL bytes alone is an empty log when it is the whole input.
    """
    raw = np.frombuffer(sample, dtype=np.uint8)
    if not len(raw):
        return None
    nonzero = raw != 0
    # UTF-16 is a byte-order mark or NUL in every other byte: a sample without NUL is told by its mark alone.
    if _utf16(raw) if not nonzero.all() else raw[:2].tobytes() in _UTF16_MARKS:
        return "UTF-16 text: convert it first, e.g. iconv -f UTF-16 -t UTF-8"
    text = raw[nonzero]
    if not len(text):
        return None if whole else f"starts with {len(raw):,} NUL bytes"
    control = _BINARY_CONTROL[text]
    if not control.any():
        return None
    line = np.cumsum(text == 10)
    # A line is binary when control bytes are a sizeable part of it: a message that carries a bell or a
    # terminal title is still a line of text, a block of binary data is control bytes throughout.
    controls = np.bincount(line[control], minlength=int(line[-1]) + 1)
    dirty = controls * _CONTROL_SHARE_OF_BINARY_LINE >= np.bincount(line)
    clean = np.count_nonzero(~dirty[line])
    return None if clean >= _TEXT_SHARE * len(text) else "mostly control bytes"


def looks_binary(sample: bytes) -> bool:
    return binary_reason(sample) is not None


_UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")


def _utf16(raw: np.ndarray) -> bool:
    """Whether the bytes read as UTF-16: a byte-order mark, or NUL in every other byte (ASCII text)."""
    if raw[:2].tobytes() in _UTF16_MARKS:
        return True
    pairs = raw[: len(raw) // 2 * 2].reshape(-1, 2)
    if len(pairs) < 8:
        return False
    nul = pairs == 0
    return any(nul[:, k].mean() > 0.9 and not nul[:, 1 - k].mean() > 0.1 for k in (0, 1))
