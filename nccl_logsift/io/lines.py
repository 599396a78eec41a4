"""Turn one source into bounded chunks of lines: decompression, line splitting, UTF-8 repair.

Nothing is dropped: every byte sequence between two newlines becomes one line with its 1-based line
number and the byte offset where it starts (in the decompressed stream). ``\\r\\n`` endings lose the
``\\r``; invalid UTF-8 is replaced by U+FFFD and counted.
"""

from __future__ import annotations

import logging
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
_BINARY_SNIFF_BYTES = 64 << 10
_BINARY_CONTROL_RATIO = 0.05


@dataclass(frozen=True, slots=True)
class LineChunk:
    """Consecutive lines of one source, as columns."""

    source_id: int
    line_no: pl.Series  # UInt32, 1-based
    byte_offset: pl.Series  # UInt64, start of the line in the decompressed stream
    text: pl.Series  # String, without the line terminator

    def __len__(self) -> int:
        return len(self.text)


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
    """Iterate over the :class:`LineChunk` s of one source; ``stats`` is complete after iteration."""

    def __init__(self, source: Source, chunk_bytes: int = DEFAULT_CHUNK_BYTES):
        self.source = source
        self.chunk_bytes = chunk_bytes
        self.stats = ReadStats()

    def __iter__(self) -> Iterator[LineChunk]:
        try:
            raw = self.source.open()
        except OSError as exc:
            self.stats.problem = f"cannot open: {exc.strerror or exc}"
            return
        try:
            yield from self._chunks(raw)
        finally:
            if not self.source.is_stdin:
                raw.close()

    def _chunks(self, raw: BinaryIO) -> Iterator[LineChunk]:
        stream = self._decompressing(raw)
        pending = b""
        line_no = 1
        offset = 0
        first = True
        while True:
            try:
                block = stream.read(self.chunk_bytes)
            except (OSError, pa.ArrowException, EOFError) as exc:
                what = f"{self.stats.compression} stream" if self.stats.compression else "file"
                self.stats.problem = f"{what} is truncated or corrupt after {self.stats.bytes + len(pending)} bytes ({exc})"
                block = b""
                eof = True
            else:
                eof = not block
            if first:
                first = False
                if block and _looks_binary(block[:_BINARY_SNIFF_BYTES]):
                    self.stats.problem = "looks like binary data, not a text log"
                    return
            data = pending + block
            if eof:
                pending = b""
            else:
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # one huge line: keep reading until it ends
                    pending = data
                    continue
                data, pending = data[:cut], data[cut:]
            if data:
                chunk = self._split(data, line_no, offset)
                line_no += len(chunk)
                offset += len(data)
                self.stats.bytes += len(data)
                self.stats.lines += len(chunk)
                yield chunk
            if eof:
                return

    def _decompressing(self, raw: BinaryIO):
        head = raw.peek(4)[:4] if hasattr(raw, "peek") else b""
        for magic, codec in _MAGIC:
            if head.startswith(magic):
                self.stats.compression = codec
                return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), codec)
        return raw

    def _split(self, data: bytes, first_line_no: int, first_offset: int) -> LineChunk:
        """Split at every newline with numpy (no Python loop per line) and decode to UTF-8."""
        offsets = _line_offsets(data)
        binary = _binary_lines(data, offsets)
        text = binary.view(pa.large_string())
        try:
            text.validate(full=True)
        except pa.ArrowInvalid:
            # Invalid UTF-8 somewhere in the chunk: replace it (U+FFFD) and count the lines that changed.
            repaired = data.decode("utf-8", errors="replace").encode("utf-8")
            fixed = _binary_lines(repaired, _line_offsets(repaired))
            self.stats.invalid_utf8_lines += int((pl.Series(binary) != pl.Series(fixed)).sum())
            text = fixed.view(pa.large_string())
        count = len(offsets) - 1
        return LineChunk(
            source_id=self.source.source_id,
            line_no=pl.int_range(first_line_no, first_line_no + count, dtype=pl.UInt32, eager=True),
            byte_offset=pl.Series("byte_offset", offsets[:-1] + first_offset, dtype=pl.UInt64),
            text=pl.Series("text", text).str.strip_suffix("\n").str.strip_suffix("\r"),
        )


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


def _looks_binary(sample: bytes) -> bool:
    if not sample:
        return False
    if b"\x00" not in sample:
        return False
    control = sum(sample.count(bytes([b])) for b in range(32) if b not in (9, 10, 13, 27))
    return control / len(sample) > _BINARY_CONTROL_RATIO
