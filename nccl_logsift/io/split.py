"""The lines of a chunk: where each starts and ends, and whether it is ASCII (``accel/csrc/split.c``).

The compiled pass reads the chunk eight bytes at a time and finds the newlines of a 200-byte line in about
one step of four words; it also tells whether every byte is below 128, in which case the chunk is valid
UTF-8 and its check is skipped. The newline positions go into an array grown here as they come (the pass
stops at a block it might not have room for), and become line bounds in a second, short pass.
"""

from __future__ import annotations

import numpy as np

from nccl_logsift import accel

# Bytes the pass scans between checks that the positions have room (accel/csrc/split.c BLOCK).
_BLOCK = 1 << 14
_HIGH = 0x8080808080808080


def find_lines(data: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, int, bool]:
    """``(starts, ends, ascii, nul_bytes, has_nul)`` of the lines of ``data`` (a uint8 array).

    ``starts`` and ``ends`` are int64 arrays, one entry per line (none for empty data), a last line without
    "\\n" included. A line's text leaves out what trails it ("\\r", spaces, tabs, NUL bytes, U+FFFD) and
    the NUL bytes it starts with, so every line ending and crash padding reads as a clean line; ``nul_bytes``
    counts the NUL bytes left out. ``ascii`` says that no byte is 128 or more, ``has_nul`` that some byte is
    NUL (inside a line or left out).
    """
    newlines = np.empty(len(data) // 64 + _BLOCK, dtype=np.int64)
    at = count = high = 0
    nul = False
    while True:
        at, count, high, nul = accel.split_newlines(data, newlines, at, count, high, nul)
        if at == len(data):
            break
        bigger = np.empty(2 * len(newlines), dtype=np.int64)
        bigger[:count] = newlines[:count]
        newlines = bigger
    after_last = newlines[count - 1] + 1 if count else 0
    lines = count + (1 if after_last < len(data) else 0)  # a last line without "\n"
    starts, ends = np.empty(lines, dtype=np.int64), np.empty(lines, dtype=np.int64)
    nul_bytes = accel.split_bounds(data, newlines, count, starts, ends)
    return starts, ends, not high & _HIGH, nul_bytes, nul


def last_newline(data, start: int, stop: int) -> int:
    """Where the last "\\n" of ``data[start:stop]`` is, or -1."""
    return accel.split_last_newline(data, start, stop)


def next_newline(data, start: int) -> int:
    """Where the first "\\n" at or after ``start`` is, or -1."""
    return accel.split_next_newline(data, start)
