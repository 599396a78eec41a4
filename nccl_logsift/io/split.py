"""The compiled loop that finds the lines of a chunk: where each starts and ends, and whether it is ASCII.

One pass reads the chunk as 64-bit words, four per step (SWAR: "SIMD within a register"). A word has a
newline where ``t = word ^ 0x0A0A...`` has a zero byte: ``(t - 0x0101...) & ~t & 0x8080...`` is
non-zero exactly when it has one (the borrow may flag bytes above a true zero too, so this says only
whether). The steps that have one (about one in six at ~200 bytes a line) find each newline with
``~(((t & 0x7F7F...) + 0x7F7F...) | t | 0x7F7F...)``, which sets the high bit of exactly the zero bytes.
The words are OR-ed together on the way: a chunk none of whose bytes has its high bit set is ASCII,
hence valid UTF-8, and its check can be skipped. The last ``len % 32`` bytes are read one at a time,
so nothing past the data is read. (The words view starts wherever the chunk does; numba declares its
loads 8-byte aligned, and x86-64 and arm64 load unaligned words alike.)

The newline positions become line bounds in a second, short loop (one pass per line): a line ends
before its "\\n" and before a "\\r" just ahead of it; a last line without "\\n" keeps everything.
"""

from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from nccl_logsift.compiled import njit

_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_NEWLINES = np.uint64(0x0A0A0A0A0A0A0A0A)
_STEP = 32  # bytes read per step of the main loop: four words
_BLOCK = 1 << 14  # bytes scanned between checks that the newline positions have room
_NEWLINE, _RETURN, _ASCII_LIMIT = 10, 13, 128


@njit()
def find_lines(data):
    """``(starts, ends, ascii)`` of the lines of ``data`` (a uint8 array).

    ``starts`` and ``ends`` are int64 arrays, one entry per line (none for empty data); ``ascii`` says
    that no byte is 128 or more.
    """
    size = len(data)
    whole = size - size % _STEP
    words = data[:whole].view(np.uint64)
    newlines = np.empty(size // 64 + _BLOCK, dtype=np.int64)
    count = 0
    high = np.uint64(0)
    for block in range(0, whole, _BLOCK):
        if count + _BLOCK > len(newlines):  # room for every byte of the block being a newline
            newlines = _grown(newlines, count)
        count, high = _scan(words, block // 8, min(block + _BLOCK, whole) // 8, newlines, count, high)
    ascii = (high & _HIGH) == 0
    if count + _STEP > len(newlines):
        newlines = _grown(newlines, count)
    for at in range(whole, size):
        byte = data[at]
        if byte >= _ASCII_LIMIT:
            ascii = False
        elif byte == _NEWLINE:
            newlines[count] = at
            count += 1
    starts, ends = _bounds(data, newlines, count)
    return starts, ends, ascii


@njit()
def last_newline(data, start: int, stop: int) -> int:
    """Where the last "\\n" of ``data[start:stop]`` is, or -1."""
    for at in range(stop - 1, start - 1, -1):
        if data[at] == _NEWLINE:
            return at
    return -1


@njit()
def next_newline(data, start: int) -> int:
    """Where the first "\\n" at or after ``start`` is, or -1."""
    for at in range(start, len(data)):
        if data[at] == _NEWLINE:
            return at
    return -1


@njit()
def _scan(words, first: int, stop: int, newlines, count: int, high: np.uint64):
    """Append the positions of the newlines in ``words[first:stop]`` (a multiple of four words) to
    ``newlines``, which has room for one per byte; return the new count, and ``high`` OR-ed with every word.

    A function of its own: in the loop that may replace ``newlines`` by a bigger array, numba counts
    references to it on every pass. The indices are unsigned: numba checks signed ones for negative
    values (wraparound), which costs a fifth of the loop.
    """
    k, end = np.uint64(first), np.uint64(stop)
    one, two, three, four = np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(4)
    while k < end:
        w0, w1, w2, w3 = words[k], words[k + one], words[k + two], words[k + three]
        high |= w0 | w1 | w2 | w3
        t0, t1, t2, t3 = w0 ^ _NEWLINES, w1 ^ _NEWLINES, w2 ^ _NEWLINES, w3 ^ _NEWLINES
        if ((t0 - _ONES) & ~t0 | (t1 - _ONES) & ~t1 | (t2 - _ONES) & ~t2 | (t3 - _ONES) & ~t3) & _HIGH:
            at = 8 * np.int64(k)
            count = _add_newlines(newlines, count, t0, at)
            count = _add_newlines(newlines, count, t1, at + 8)
            count = _add_newlines(newlines, count, t2, at + 16)
            count = _add_newlines(newlines, count, t3, at + 24)
        k += four
    return count, high


@njit(inline="always")
def _add_newlines(newlines, count: int, flipped: np.uint64, at: int) -> int:
    """Append the position of every zero byte of ``flipped`` (the word at ``at`` XOR-ed with newlines)."""
    zeros = ~(((flipped & _LOW7) + _LOW7) | flipped | _LOW7)
    while zeros:
        newlines[count] = at + (np.int64(trailing_zeros(zeros)) >> 3)
        count += 1
        zeros &= zeros - np.uint64(1)
    return count


@njit()
def _grown(newlines, count: int):
    bigger = np.empty(2 * len(newlines), dtype=np.int64)
    bigger[:count] = newlines[:count]
    return bigger


@njit()
def _bounds(data, newlines, count: int):
    """Line starts and ends from the positions of the newlines."""
    size = len(data)
    last = newlines[count - 1] + 1 if count else 0
    lines = count + (1 if last < size else 0)
    starts = np.empty(lines, dtype=np.int64)
    ends = np.empty(lines, dtype=np.int64)
    start = 0
    for line in range(count):
        end = newlines[line]
        starts[line] = start
        ends[line] = end - 1 if end > start and data[end - 1] == _RETURN else end
        start = end + 1
    if last < size:  # the last line of the stream has no terminator: it keeps a trailing "\r"
        starts[count] = last
        ends[count] = size
    return starts, ends
