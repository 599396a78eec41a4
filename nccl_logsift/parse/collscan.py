"""The compiled loop of the COLL fast path (which lines of a chunk are canonical COLL lines, and their
fields) and the table of distinct strings it numbers prefixes and op names in.

One pass per line, forwards: the loop finds `` NCCL INFO `` and reads the message of ``INFO(NCCL_COLL,
"%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d] stream
%p", ...)`` (grammar §5.1) from there, literal by literal and value by value, to the line's end. The
prefix before `` NCCL INFO`` and the op name are looked up in :class:`ByteTable` s (the caller adds the
new ones).

Bytes are read eight at a time through a words view (``ByteView.words``: the little-endian word at every
byte, the data followed by padding). Every word is read at a position inside the line or string; it may
run up to seven bytes past its end, into the next line or the padding, and those bytes are masked off.
(numba declares these loads 8-byte aligned; x86-64 and arm64 load unaligned words alike.)

A line is taken only when every token has exactly the shape for which the general parser's ``coll``
pattern (grammars/nccl/coll.toml) gives the same typed value; anything else is left to that parser.

:class:`ByteTable` numbers distinct byte strings 0, 1, 2, ... in order of first sight. The strings live
end to end in one uint8 array (with their offsets and hashes); an open-addressing table of slots (linear
probing, at most half full) maps a hash to the ids that have it. A lookup that finds an equal hash
compares the bytes too, so two strings whose hashes collide keep their own ids. Everything is a numpy
array, so the loop looks strings up (:func:`find`) without calling back into Python; the strings it
missed are added afterwards (:meth:`ByteTable.add`, compiled too), and Python reads the new ones
(:meth:`ByteTable.strings`).

The table's compiled functions live in this file with the loop that inlines them: numba's on-disk cache
of a function is invalidated by changes to its own file only, not to the files of what it calls.

The loop allocates nothing and is compiled without numba's reference counting (``_nrt=False``): with it,
every array handed to an inlined helper was counted up and down on every line, which made the loop three
to four times slower. Helpers are few and called from one place each: numba inlines a helper by
compiling it again wherever it is called, and a helper per field took a minute to compile.
"""

from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from nccl_logsift.compiled import njit

# Rows of the integer outputs (int64: the line, its fields, where its prefix ends and where its op name
# is) and of the addresses (uint64).
LINE, OPCOUNT, COUNT, DATATYPE, REDOP, ROOT, NRANKS, PREFIX_STOP, OP_START, OP_STOP = range(10)
COMM, SENDBUFF, RECVBUFF, STREAM = range(4)
# Rows of the id outputs (int32, -1 for a string not in the table yet); the nil flags have the rows of
# the addresses (comm is never nil).
OP_ID, PREFIX_ID = range(2)

_MAX_HEX_DIGITS = 16  # what a 64-bit %p / %lx prints; longer values do not fit the columns
_SHORT_DIGITS = 18  # up to 18 decimal digits are below 10**18, far from the int64 limit
_INT64_MAX = np.uint64((1 << 63) - 1)
_SAFE = np.uint64(((1 << 63) - 1 - 9) // 10)  # below this, one more digit cannot pass int64

_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_SPACES = np.uint64(0x2020202020202020)
_ESCAPES = np.uint64(0x1B1B1B1B1B1B1B1B)  # ESC starts an ANSI colour: left to the general parser
_ZEROS = np.uint64(0x3030303030303030)  # "00000000"
_NS = np.uint64(0x4E4E4E4E4E4E4E4E)  # "NNNNNNNN": where " NCCL INFO " may start


def _word(text: bytes) -> np.uint64:
    return np.uint64(int.from_bytes(text, "little"))


# The message after the op name, as (literal, value) pairs: each literal starts at the space that ended
# the token before it and is at most 16 bytes (as little-endian words: its first eight bytes and the rest);
# each value runs to the next space, the last one to the end of the line.
_NCCL_INFO, _INFO_TAIL = _word(b" NCCL IN"), _word(b"FO ")  # the space before NCCL starts the message
_HEX, _POINTER, _DECIMAL, _SIGNED, _BRACKETED = range(5)  # kinds of value; _BRACKETED: "16]"
_TEMPLATE = (
    (b" opCount ", _HEX, OPCOUNT), (b" sendbuff ", _POINTER, SENDBUFF), (b" recvbuff ", _POINTER, RECVBUFF),
    (b" count ", _DECIMAL, COUNT), (b" datatype ", _DECIMAL, DATATYPE), (b" op ", _DECIMAL, REDOP),
    (b" root ", _SIGNED, ROOT), (b" comm ", _POINTER, COMM), (b" [nranks=", _BRACKETED, NRANKS),
    (b" stream ", _POINTER, STREAM),
)
_LITERAL_HEAD = np.array([_word(text[:8]) for text, _, _ in _TEMPLATE], dtype=np.uint64)
_LITERAL_TAIL = np.array([_word(text[8:]) for text, _, _ in _TEMPLATE], dtype=np.uint64)
_LITERAL_LENGTH = np.array([len(text) for text, _, _ in _TEMPLATE], dtype=np.int64)
_KIND = np.array([kind for _, kind, _ in _TEMPLATE], dtype=np.int64)
_ROW = np.array([row for _, _, row in _TEMPLATE], dtype=np.int64)
_MASKS = np.array([0] + [(1 << (8 * n)) - 1 for n in range(1, 9)], dtype=np.uint64)  # the first n bytes
_NIL, _0X = _word(b"(nil)"), _word(b"0x")
_COLON, _CLOSE = 58, 93


def outputs(lines: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrays for :func:`scan` to fill for a chunk of ``lines`` lines: integers, addresses, nil flags, ids."""
    return (
        np.empty((10, lines), dtype=np.int64),
        np.empty((4, lines), dtype=np.uint64),
        np.empty((4, lines), dtype=np.bool_),
        np.empty((2, lines), dtype=np.int32),
    )


@njit(_nrt=False)
def scan(data, words, starts, ends, prefixes, ops, integers, addresses, nil, ids) -> int:
    """Fill the outputs for each canonical COLL line of ``data``; return how many lines were taken.

    ``words`` is the words view of ``data`` (``ByteView.words``); ``prefixes`` and ``ops`` are
    ``ByteTable.arrays``. Column ``j`` of every output describes the ``j``-th line taken;
    ``integers[LINE]`` is its index.
    """
    if len(words) < len(data) + 8:  # not a words view with its padding: nothing is read
        return 0
    prefix_slots, prefix_hashes, prefix_offsets, _, prefix_words, prefix_state = prefixes
    op_slots, op_hashes, op_offsets, _, op_words, op_state = ops
    taken = 0
    for line in range(len(starts)):
        start, end = starts[line], ends[line]
        if start < 0 or end > len(data):
            continue
        message = _message(data, words, start, end, integers, addresses, nil, taken)
        # Every byte of the message has been checked, so it holds no ESC; the prefix may.
        if message < 0 or _has_escape(words, start, message):
            continue
        op_start = message + 11
        op_stop = integers[OP_STOP, taken]
        ids[PREFIX_ID, taken] = find(prefix_slots, prefix_hashes, prefix_offsets, prefix_words, prefix_state, words, start, message)
        ids[OP_ID, taken] = find(op_slots, op_hashes, op_offsets, op_words, op_state, words, op_start, op_stop)
        integers[PREFIX_STOP, taken] = message
        integers[OP_START, taken] = op_start
        integers[LINE, taken] = line
        taken += 1
    return taken


@njit(inline="always")
def _message(data, words, start, end, integers, addresses, nil, column) -> int:
    """Where the space before ``NCCL INFO`` is when the line from there to its end is one COLL message
    in its exact form, its values read into ``column`` of the outputs (overwritten by the next line if
    this one is not taken); -1 otherwise.

    The message is read forwards from each " NCCL INFO " of the line in turn: if one is followed by the
    message to the end of the line, the line's tokens from there are those of the format, so no other
    can be (the message ends the line).
    """
    at = start + 1  # "N" of NCCL, with a space before it in the line
    while at + 10 < end:
        found = _zero_bytes(words[at] ^ _NS)
        while found:
            n = at + (np.int64(trailing_zeros(found)) >> 3)
            if n + 10 >= end:
                return -1
            if words[n - 1] == _NCCL_INFO and words[n + 7] & _mask(3) == _INFO_TAIL:
                if _read_message(data, words, n + 10, end, integers, addresses, nil, column):
                    return n - 1
            found &= found - np.uint64(1)
        at += 8
    return -1


@njit(inline="always")
def _read_message(data, words, at, end, integers, addresses, nil, column) -> bool:
    """Read ``AllReduce: opCount ... stream 0x...`` from ``at`` to exactly ``end``; False when any literal
    or value is not in its exact form.

    One loop over the template rather than a helper per field: numba inlines a helper by compiling it
    again at every place it is called, which made this function take a minute to compile.
    """
    # "AllReduce:": letters, then the colon.
    stop = _space(words, at, end)
    colon = stop - 1
    if colon <= at or data[colon] != _COLON or not _letters(data, at, colon):
        return False
    integers[OP_STOP, column] = colon
    at = stop
    for k in range(len(_TEMPLATE)):
        length = _LITERAL_LENGTH[k]
        if words[at] & _MASKS[min(length, 8)] != _LITERAL_HEAD[k]:
            return False
        if length > 8 and words[at + 8] & _MASKS[length - 8] != _LITERAL_TAIL[k]:
            return False
        start = at + length
        at = _space(words, start, end)
        kind, row = _KIND[k], _ROW[k]
        if kind == _HEX or kind == _POINTER:
            digits, is_nil = start, False
            if kind == _POINTER:
                if at - start == 5 and words[start] & _MASKS[5] == _NIL:
                    is_nil = True
                elif at - start >= 3 and words[start] & _MASKS[2] == _0X:
                    digits = start + 2
                else:
                    return False
            value, ok = np.uint64(0), True
            if not is_nil:
                value, ok = _hex(words, digits, at)
            if not ok:
                return False
            if kind == _HEX:
                if value > _INT64_MAX:  # %lx of a value beyond int64: the general parser makes it null
                    return False
                integers[row, column] = np.int64(value)
            else:
                if is_nil and row == COMM:  # comm is never (nil)
                    return False
                addresses[row, column] = value
                nil[row, column] = is_nil
        else:
            stop = at
            if kind == _BRACKETED:
                stop -= 1
                if stop <= start or data[stop] != _CLOSE:
                    return False
            number, ok = _decimal(data, words, start, stop, kind == _SIGNED)
            if not ok:
                return False
            integers[row, column] = number
    return at == end


@njit(inline="always")
def _space(words, at, end) -> int:
    """Where the first space in ``[at, end)`` is, or ``end``."""
    while at < end:
        spaces = _zero_bytes(words[at] ^ _SPACES)
        if spaces:
            return min(at + (np.int64(trailing_zeros(spaces)) >> 3), end)
        at += 8
    return end


@njit(inline="always")
def _zero_bytes(word: np.uint64) -> np.uint64:
    """The high bit of every byte of ``word`` that is zero (exactly those: no borrow between bytes)."""
    return ~(((word & _LOW7) + _LOW7) | word | _LOW7)


@njit(inline="always")
def _has_escape(words, start, stop) -> bool:
    for at in range(start, stop, 8):
        other = words[at] ^ _ESCAPES
        if stop - at < 8:
            other |= ~_mask(stop - at)
        if _zero_bytes(other):
            return True
    return False


@njit(inline="always")
def _letters(data, start, stop) -> bool:
    for at in range(start, stop):
        byte = data[at] | 32  # lowercase
        if byte < 97 or byte > 122:
            return False
    return True


@njit(inline="always")
def _hex(words, start, stop):
    """Lowercase hex digits (1 to 16) as a uint64, and whether they were well formed."""
    length = stop - start
    if length < 1 or length > _MAX_HEX_DIGITS:
        return np.uint64(0), False
    if length <= 8:
        return _hex8(words[start], length)
    high, high_ok = _hex8(words[start], length - 8)
    low, low_ok = _hex8(words[start + length - 8], 8)
    return (high << np.uint64(32)) | low, high_ok and low_ok


@njit(inline="always")
def _hex8(word, length):
    """The first ``length`` (1 to 8) bytes of ``word`` as hex digits, all eight at once (SWAR)."""
    # Move the digits to the top (the last digit, least significant, into the last byte) and fill the
    # bytes freed at the start with leading "0"s.
    shift = np.uint64(8 * (8 - length))
    word = ((word & _mask(length)) << shift) | (_ZEROS & ((np.uint64(1) << shift) - np.uint64(1)))
    # Bytes below 0x80 in [0-9] or [a-f]: x + (0x80 - lo) has its high bit set iff x >= lo, and
    # x + (0x7f - hi) iff x > hi; neither carries into the next byte.
    digit = (word + _ONES * np.uint64(0x80 - 0x30)) & ~(word + _ONES * np.uint64(0x7F - 0x39))
    letter = (word + _ONES * np.uint64(0x80 - 0x61)) & ~(word + _ONES * np.uint64(0x7F - 0x66))
    ok = (word & _HIGH) == 0 and ((digit | letter) & _HIGH) == _HIGH
    # "0"-"9" → 0-9 and "a"-"f" → 1-6 + 9; then digits fold pairwise: 16·a + b, 256·ab + cd, ...
    value = (word & np.uint64(0x0F0F0F0F0F0F0F0F)) + np.uint64(9) * ((word >> np.uint64(6)) & _ONES)
    value = (value * np.uint64(16) + (value >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    value = (value * np.uint64(256) + (value >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    value = (value * np.uint64(65536) + (value >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    return value, ok


@njit(inline="always")
def _decimal(data, words, start, stop, signed):
    """``-?[0-9]+`` (the sign only when ``signed``) as an int64, and whether it was well formed.

    Any number of digits (leading zeros) is fine; a value beyond int64 is not (the general parser makes
    it null). ASCII digits only: ``\\d`` also matches other scripts' digits, which do not convert.
    """
    negative = signed and stop - start >= 1 and data[start] == 45  # "-"
    if negative:
        start += 1
    length = stop - start
    if length < 1:
        return np.int64(0), False
    if length <= _SHORT_DIGITS:
        value, ok = _short_decimal(data, words, start, stop)
    else:
        value, ok = _long_decimal(data, start, stop, _INT64_MAX + np.uint64(negative))
    if not ok:
        return np.int64(0), False
    if negative:
        return -np.int64(value - np.uint64(1)) - np.int64(1), True  # -2**63 has no positive int64
    return np.int64(value), True


@njit(inline="always")
def _short_decimal(data, words, start, stop):
    """1 to 18 digits: up to 16 eight at a time (SWAR), more one at a time."""
    length = stop - start
    if length <= 8:
        return _decimal8(words[start], length)
    if length <= 16:
        high, high_ok = _decimal8(words[start], length - 8)
        low, low_ok = _decimal8(words[start + length - 8], 8)
        return high * np.uint64(100_000_000) + low, high_ok and low_ok
    value = np.uint64(0)
    for at in range(start, stop):
        digit = np.uint64(data[at]) - np.uint64(48)  # bytes below "0" wrap around to large values
        if digit > np.uint64(9):
            return value, False
        value = value * np.uint64(10) + digit
    return value, True


@njit(inline="always")
def _decimal8(word, length):
    """The first ``length`` (1 to 8) bytes of ``word`` as decimal digits, all eight at once (SWAR, as
    :func:`_hex8`)."""
    shift = np.uint64(8 * (8 - length))
    word = ((word & _mask(length)) << shift) | (_ZEROS & ((np.uint64(1) << shift) - np.uint64(1)))
    digit = (word + _ONES * np.uint64(0x80 - 0x30)) & ~(word + _ONES * np.uint64(0x7F - 0x39))
    ok = (word & _HIGH) == 0 and (digit & _HIGH) == _HIGH
    value = word - _ZEROS
    value = (value * np.uint64(10) + (value >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    value = (value * np.uint64(100) + (value >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    value = (value * np.uint64(10000) + (value >> np.uint64(32))) & np.uint64(0xFFFFFFFF)
    return value, ok


@njit(inline="always")
def _long_decimal(data, start, stop, limit):
    """More than 18 digits (leading zeros, or a value near the int64 limit): one at a time, up to ``limit``."""
    value = np.uint64(0)
    for at in range(start, stop):
        byte = data[at]
        if byte < 48 or byte > 57:
            return value, False
        digit = np.uint64(byte - 48)
        if value > _SAFE and value > (limit - digit) // np.uint64(10):
            return value, False
        value = value * np.uint64(10) + digit
    return value, True


# ---------------------------------------------------------------------- the table of distinct strings
_EMPTY = -1
_PAD = 8
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_SEED = np.uint64(0x243F6A8885A308D3)
_MULTIPLY = np.uint64(0x9E3779B97F4A7C15)
_FINISH = np.uint64(0xFF51AFD7ED558CCD)  # murmur3's fmix64: every bit of the hash depends on every input bit

# What kernels receive as a table: (slots, hashes, offsets, store, store words, state). state holds the
# number of strings, the bytes they use and the mask applied to every hash (all ones, except in tests
# that force collisions).
_STRINGS, _USED, _HASH_MASK = 0, 1, 2


class ByteTable:
    """Byte strings ↔ dense ids, bounded: emptied when more than ``max_ids`` strings or ``max_bytes`` are held.

    ``slots`` is the first size of the slot table (a power of two); ``hash_mask`` keeps only some bits
    of every hash (tests set it to 0 to make every pair of strings collide).
    """

    def __init__(self, max_ids: int = 1 << 16, max_bytes: int = 16 << 20, slots: int = 1 << 10, hash_mask: int = (1 << 64) - 1):
        if slots < 2 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, not {slots}")
        self.max_ids = max_ids
        self.max_bytes = max_bytes
        self._first_slots = slots
        self.state = np.array([0, 0, np.uint64(hash_mask).view(np.int64)], dtype=np.int64)
        self._empty()

    def _empty(self) -> None:
        slots = self._first_slots
        self.slots = np.full(slots, _EMPTY, dtype=np.int32)
        self.hashes = np.zeros(slots // 2, dtype=np.uint64)
        self.offsets = np.zeros(slots // 2 + 1, dtype=np.int64)
        # Room for a few strings from the start: a words view of one word would count as contiguous to
        # numba, a second type of the compiled loops.
        self._set_store(np.zeros(64 + _PAD, dtype=np.uint8))
        self.state[_STRINGS] = self.state[_USED] = 0

    def _set_store(self, store: np.ndarray) -> None:
        self.store = store
        self.store_words = np.ndarray(shape=(len(store) - _PAD + 1,), dtype="<u8", buffer=store, strides=(1,))

    def __len__(self) -> int:
        return int(self.state[_STRINGS])

    @property
    def arrays(self) -> tuple:
        return self.slots, self.hashes, self.offsets, self.store, self.store_words, self.state

    def trim(self) -> bool:
        """Empty the table if it holds more than its bounds; True when it did (every id is forgotten).

        Called between chunks, never between a lookup and the use of its ids.
        """
        if len(self) <= self.max_ids and int(self.state[_USED]) <= self.max_bytes:
            return False
        self._empty()
        return True

    def add(self, data: np.ndarray, words: np.ndarray, starts: np.ndarray, stops: np.ndarray, ids: np.ndarray) -> None:
        """Number the strings ``data[start:stop]`` of the rows whose id is -1 (a kernel's misses), in place.

        ``words`` is the words view of ``data``; ``ids`` is int32.
        """
        missing = ids < 0
        if not missing.any():
            return
        self._reserve(int(missing.sum()), int((stops - starts)[missing].sum()))
        _add(*self.arrays, data, words, starts.astype(np.int64), stops.astype(np.int64), ids)

    def _reserve(self, strings: int, nbytes: int) -> None:
        """Room for ``strings`` more strings of ``nbytes`` in all."""
        count, used = len(self), int(self.state[_USED])
        slots = len(self.slots)
        while slots < 2 * (count + strings):
            slots *= 2
        if slots > len(self.slots):
            self.slots = np.full(slots, _EMPTY, dtype=np.int32)
            self.hashes = _grown(self.hashes, slots // 2)
            self.offsets = _grown(self.offsets, slots // 2 + 1)
            _rehash(self.slots, self.hashes, count)
        if len(self.store) - _PAD < used + nbytes:
            self._set_store(_grown(self.store, max(used + nbytes, 2 * (len(self.store) - _PAD)) + _PAD))

    def strings(self, first: int, last: int) -> list[bytes]:
        """The strings with ids ``first`` to ``last - 1``."""
        offsets, store = self.offsets, self.store
        return [store[offsets[i]: offsets[i + 1]].tobytes() for i in range(first, last)]


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    grown = np.zeros(size, dtype=array.dtype)
    grown[: len(array)] = array
    return grown


@njit()
def _rehash(slots: np.ndarray, hashes: np.ndarray, count: int) -> None:
    for i in range(count):
        slot = _slot(hashes[i], len(slots))
        while slots[slot] != _EMPTY:
            slot = (slot + 1) & (len(slots) - 1)
        slots[slot] = i


@njit(inline="always")
def _slot(hash_: np.uint64, size: int) -> int:
    return int(hash_ >> np.uint64(32)) & (size - 1)


@njit(inline="always")
def _mask(length: int) -> np.uint64:
    """A word keeping its first ``length`` bytes (1 to 8)."""
    return _ALL >> np.uint64(64 - 8 * length)


@njit(inline="always")
def _hash_of(words: np.ndarray, start: int, stop: int) -> np.uint64:
    """A 64-bit hash of the bytes ``[start, stop)`` read through ``words``."""
    hash_ = _SEED ^ np.uint64(stop - start)
    at = start
    while at < stop:
        word = words[at]
        if stop - at < 8:
            word &= _mask(stop - at)
        hash_ = (hash_ ^ word) * _MULTIPLY
        hash_ ^= hash_ >> np.uint64(32)
        at += 8
    hash_ ^= hash_ >> np.uint64(33)
    hash_ *= _FINISH
    return hash_ ^ (hash_ >> np.uint64(33))


@njit(inline="always")
def _same(words: np.ndarray, start: int, other: np.ndarray, other_start: int, length: int) -> bool:
    for i in range(0, length, 8):
        differ = words[start + i] ^ other[other_start + i]
        if length - i < 8:
            differ &= _mask(length - i)
        if differ:
            return False
    return True


@njit(inline="always")
def find(slots, hashes, offsets, store_words, state, words, start: int, stop: int) -> int:
    """The id of the bytes ``[start, stop)`` read through ``words``, or -1 when the table lacks them.

    Kernels look up in their loop and leave misses to :meth:`ByteTable.add`: a loop that may also
    insert compiles to code several times slower on every lookup (reference counts of the arrays).
    """
    hash_ = _hash_of(words, start, stop) & np.uint64(state[_HASH_MASK])
    length = stop - start
    slot = _slot(hash_, len(slots))
    while True:
        known = np.int64(slots[slot])
        if known == _EMPTY:
            return -1
        if hashes[known] == hash_ and offsets[known + 1] - offsets[known] == length:
            if _same(words, start, store_words, offsets[known], length):
                return known
        slot = (slot + 1) & (len(slots) - 1)


@njit()
def _add(slots, hashes, offsets, store, store_words, state, data, words, starts, stops, ids) -> None:
    for row in range(len(ids)):
        if ids[row] >= 0:
            continue
        start, stop = starts[row], stops[row]
        hash_ = _hash_of(words, start, stop) & np.uint64(state[_HASH_MASK])
        length = stop - start
        slot = _slot(hash_, len(slots))
        while True:  # the string, added for an earlier row, or the empty slot where it goes
            known = np.int64(slots[slot])
            if known == _EMPTY:
                break
            if hashes[known] == hash_ and offsets[known + 1] - offsets[known] == length:
                if _same(words, start, store_words, offsets[known], length):
                    break
            slot = (slot + 1) & (len(slots) - 1)
        if known == _EMPTY:
            known, at = state[_STRINGS], state[_USED]
            store[at: at + length] = data[start:stop]
            hashes[known] = hash_
            offsets[known + 1] = at + length
            slots[slot] = known
            state[_STRINGS] = known + 1
            state[_USED] = at + length
        ids[row] = known
