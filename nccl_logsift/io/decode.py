"""Compressed input (gzip, zstd, bz2) as a stream of its decoded bytes that keeps everything up to a break.

A job killed while it wrote its compressed log leaves a stream that ends early, and the end is the part the
diagnosis needs most. Every byte the format lets a decoder recover before the break is handed out; the
break itself is raised as :class:`BrokenStream` (with the decoded bytes handed out before it) by the read
after the last good one.

gzip and bz2 go through zlib's and bz2's incremental decoders, which give all they decode from the input
they were fed. zstd goes through Arrow's stream, read 64 KiB at a time; a failing Arrow read discards what
it had decoded, so a file is decoded again up to that read and then one byte at a time, which keeps all
that ``zstdcat`` keeps. A zstd pipe cannot be read again: it loses up to the 64 KiB of that last read,
and the offset reported says how far it went.
"""

from __future__ import annotations

import bz2
import zlib
from collections.abc import Callable
from typing import BinaryIO

import numpy as np
import pyarrow as pa

_INPUT_BYTES = 1 << 20  # compressed bytes fed to the decoder at a time
_OUTPUT_BYTES = 1 << 20  # decoded bytes asked of the decoder at a time
_ARROW_READ_BYTES = 64 << 10
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class BrokenStream(OSError):
    """The compressed stream broke off after ``offset`` decoded bytes; ``truncated`` when it just ends."""

    def __init__(self, offset: int, truncated: bool, reason: str):
        super().__init__(reason)
        self.offset = offset
        self.truncated = truncated
        self.reason = reason


class DecodedStream:
    """The decoded bytes of a compressed stream, with the ``readinto``/``read``/``read1`` a reader uses."""

    def __init__(self, raw: BinaryIO, codec: str, reopen: Callable[[], BinaryIO] | None = None):
        self.codec = codec
        self._raw = raw
        self._decoder = _ArrowDecoder(raw, codec, reopen) if codec == "zstd" else _MemberDecoder(raw, codec)
        self._out = memoryview(b"")  # decoded, not handed out yet
        self._error: BrokenStream | None = None
        self._done = False
        self.offset = 0  # decoded bytes handed out

    def readinto(self, buffer) -> int:
        """Fill ``buffer`` as far as the stream goes; 0 at its end. The read after the last good one raises
        the break, if there was one."""
        target = np.frombuffer(buffer, dtype=np.uint8) if not isinstance(buffer, np.ndarray) else buffer
        filled = 0
        while filled < len(target) and self._fill():
            take = min(len(self._out), len(target) - filled)
            target[filled : filled + take] = np.frombuffer(self._out[:take], dtype=np.uint8)
            self._out = self._out[take:]
            filled += take
        self.offset += filled
        if not filled and self._error is not None:
            self._error.offset = self.offset
            raise self._error
        return filled

    def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes (fewer only at the end or before a break)."""
        buffer = np.empty(size if size >= 0 else _OUTPUT_BYTES, dtype=np.uint8)
        return buffer[: self.readinto(buffer)].tobytes()

    def read1(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes of what one read of the input decodes to: a live pipe's lines as they come."""
        if not self._fill():
            if self._error is not None:
                self._error.offset = self.offset
                raise self._error
            return b""
        take = len(self._out) if size < 0 else min(size, len(self._out))
        piece, self._out = self._out[:take].tobytes(), self._out[take:]
        self.offset += take
        return piece

    def close(self) -> None:
        self._raw.close()

    def _fill(self) -> bool:
        """Whether decoded bytes are waiting (decoding more when none are)."""
        while not self._out and not self._done:
            try:
                piece = self._decoder.decode()
            except BrokenStream as exc:
                self._error, self._done = exc, True
                break
            if piece is None:
                self._done = True
            else:
                self._out = memoryview(piece)
        return bool(self._out)


class _MemberDecoder:
    """gzip or bz2 through Python's decoders, one per member (``cat a.gz b.gz`` is one valid stream)."""

    def __init__(self, raw: BinaryIO, codec: str):
        self._raw = raw
        self._codec = codec
        self._state = self._new()
        self._input = b""
        self._broken: BrokenStream | None = None

    def _new(self):
        return zlib.decompressobj(_GZIP_WBITS) if self._codec == "gzip" else bz2.BZ2Decompressor()

    def decode(self) -> bytes | None:
        """The next decoded piece (never empty), or None at a clean end; raises :class:`BrokenStream`."""
        if self._broken is not None:
            raise self._broken
        while True:
            state = self._state
            if state.eof:
                rest = state.unused_data or self._read()
                if not rest:
                    return None
                self._state, self._input = self._new(), rest
                continue
            if not self._input and self._needs_input():
                self._input = self._read()
                if not self._input:
                    raise BrokenStream(0, True, f"the {self._codec} stream ends in the middle of a member")
            saved = state.copy() if self._codec == "gzip" else None
            try:
                if self._codec == "gzip":
                    piece = state.decompress(self._input, _OUTPUT_BYTES)
                    self._input = state.unconsumed_tail
                else:
                    piece = state.decompress(self._input, max_length=_OUTPUT_BYTES)
                    self._input = b""  # the bz2 decoder keeps what it did not use
            except (zlib.error, OSError, EOFError) as exc:
                self._broken = BrokenStream(0, False, str(exc))
                piece = _salvaged(saved, self._input) if saved is not None else b""
                return piece or self.decode()
            if piece:
                return piece

    def _read(self) -> bytes:
        # read1: what a pipe holds now, not a wait for a full read (``watch`` of a compressed pipe)
        return getattr(self._raw, "read1", self._raw.read)(_INPUT_BYTES)

    def _needs_input(self) -> bool:
        return self._codec == "gzip" or self._state.needs_input


def _salvaged(state, data: bytes) -> bytes:
    """What a zlib decoder in ``state`` decodes from ``data`` before the error ``data`` leads it to (a failing
    call returns nothing): fed in ever smaller pieces, each tried on a copy, to the last byte that decodes."""
    out = bytearray()
    at, step = 0, 1 << 12
    while at < len(data) and step:
        trial = state.copy()
        try:
            out += trial.decompress(data[at : at + step])
        except zlib.error:
            step //= 8
            continue
        state, at = trial, at + step
    return bytes(out)


class _ArrowDecoder:
    """zstd through Arrow; ``reopen`` opens the input again from its start (None for a pipe)."""

    def __init__(self, raw: BinaryIO, codec: str, reopen: Callable[[], BinaryIO] | None):
        self._codec = codec
        self._stream = _arrow(raw, codec)
        self._reopen = reopen
        self._decoded = 0
        self._broken: BrokenStream | None = None

    def decode(self) -> bytes | None:
        if self._broken is not None:
            raise self._broken
        try:
            piece = self._stream.read(_ARROW_READ_BYTES)
        except (OSError, pa.ArrowException, EOFError) as exc:
            self._broken = BrokenStream(0, "truncated" in str(exc).lower(), str(exc))
            return self._rest() or self.decode()
        self._decoded += len(piece)
        return piece or None

    def _rest(self) -> bytes:
        """What the failed read had decoded: the file decoded again to where it was, then byte by byte."""
        if self._reopen is None:
            return b""
        try:
            raw = self._reopen()
        except OSError:
            return b""
        rest = bytearray()
        try:
            stream = _arrow(raw, self._codec)
            skipped = 0
            while skipped < self._decoded:  # what the reads that succeeded handed out already
                piece = stream.read(min(_ARROW_READ_BYTES, self._decoded - skipped))
                if not piece:
                    return b""
                skipped += len(piece)
            while byte := stream.read(1):
                rest += byte
        except (OSError, pa.ArrowException, EOFError):
            pass
        finally:
            raw.close()
        return bytes(rest)


def _arrow(raw: BinaryIO, codec: str) -> pa.CompressedInputStream:
    return pa.CompressedInputStream(pa.PythonFile(raw, mode="r"), codec)
