"""Distinct byte strings numbered 0, 1, 2, ... in order of first sight, for compiled loops to look up.

The strings live end to end in one uint8 array (with their offsets and hashes); an open-addressing
table of slots (linear probing, at most half full) maps a hash to the ids that have it. A lookup that
finds an equal hash compares the bytes too, so two strings whose hashes collide keep their own ids.
Everything is a numpy array, so a numba kernel looks strings up (:func:`find`) without calling back
into Python; the strings it missed are added afterwards (:meth:`ByteTable.add`, compiled too), and
Python reads the new ones (:meth:`ByteTable.strings`).

Strings are hashed and compared eight bytes at a time, through a "words" view of a byte array: the
little-endian 64-bit word starting at every byte (:class:`~nccl_logsift.io.lines.ByteView`). A word
read at the last bytes of a string runs up to seven bytes past it, so every such array is followed by
eight bytes of padding, and the bytes past the string are masked off.
"""

from __future__ import annotations

import numba
import numpy as np

_EMPTY = -1
_PAD = 8
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_SEED = np.uint64(0x243F6A8885A308D3)
_MULTIPLY = np.uint64(0x9E3779B97F4A7C15)
_FINISH = np.uint64(0xFF51AFD7ED558CCD)  # murmur3's fmix64: every bit of the hash depends on every input bit

# What kernels receive as a table: (slots, hashes, offsets, store, store words, state). state holds the
# number of strings, the bytes they use and the mask applied to every hash (all ones, except in tests
# that force collisions).
COUNT, USED, HASH_MASK = 0, 1, 2


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
        self.state[COUNT] = self.state[USED] = 0

    def _set_store(self, store: np.ndarray) -> None:
        self.store = store
        self.store_words = np.ndarray(shape=(len(store) - _PAD + 1,), dtype="<u8", buffer=store, strides=(1,))

    def __len__(self) -> int:
        return int(self.state[COUNT])

    @property
    def arrays(self) -> tuple:
        return self.slots, self.hashes, self.offsets, self.store, self.store_words, self.state

    def trim(self) -> bool:
        """Empty the table if it holds more than its bounds; True when it did (every id is forgotten).

        Called between chunks, never between a lookup and the use of its ids.
        """
        if len(self) <= self.max_ids and int(self.state[USED]) <= self.max_bytes:
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
        count, used = len(self), int(self.state[USED])
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


@numba.njit(cache=True, nogil=True)
def _rehash(slots: np.ndarray, hashes: np.ndarray, count: int) -> None:
    for i in range(count):
        slot = _slot(hashes[i], len(slots))
        while slots[slot] != _EMPTY:
            slot = (slot + 1) & (len(slots) - 1)
        slots[slot] = i


@numba.njit(cache=True, nogil=True, inline="always")
def _slot(hash_: np.uint64, size: int) -> int:
    return int(hash_ >> np.uint64(32)) & (size - 1)


@numba.njit(cache=True, nogil=True, inline="always")
def mask(length: int) -> np.uint64:
    """A word keeping its first ``length`` bytes (1 to 8)."""
    return _ALL >> np.uint64(64 - 8 * length)


@numba.njit(cache=True, nogil=True, inline="always")
def hash_of(words: np.ndarray, start: int, stop: int) -> np.uint64:
    """A 64-bit hash of the bytes ``[start, stop)`` read through ``words``."""
    hash_ = _SEED ^ np.uint64(stop - start)
    at = start
    while at < stop:
        word = words[at]
        if stop - at < 8:
            word &= mask(stop - at)
        hash_ = (hash_ ^ word) * _MULTIPLY
        hash_ ^= hash_ >> np.uint64(32)
        at += 8
    hash_ ^= hash_ >> np.uint64(33)
    hash_ *= _FINISH
    return hash_ ^ (hash_ >> np.uint64(33))


@numba.njit(cache=True, nogil=True, inline="always")
def _same(words: np.ndarray, start: int, other: np.ndarray, other_start: int, length: int) -> bool:
    for i in range(0, length, 8):
        differ = words[start + i] ^ other[other_start + i]
        if length - i < 8:
            differ &= mask(length - i)
        if differ:
            return False
    return True


@numba.njit(cache=True, nogil=True, inline="always")
def find(slots, hashes, offsets, store_words, state, words, start: int, stop: int) -> int:
    """The id of the bytes ``[start, stop)`` read through ``words``, or -1 when the table lacks them.

    Kernels look up in their loop and leave misses to :meth:`ByteTable.add`: a loop that may also
    insert compiles to code several times slower on every lookup (reference counts of the arrays).
    """
    hash_ = hash_of(words, start, stop) & np.uint64(state[HASH_MASK])
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


@numba.njit(cache=True, nogil=True)
def _add(slots, hashes, offsets, store, store_words, state, data, words, starts, stops, ids) -> None:
    for row in range(len(ids)):
        if ids[row] >= 0:
            continue
        start, stop = starts[row], stops[row]
        known = find(slots, hashes, offsets, store_words, state, words, start, stop)
        if known >= 0:  # added for an earlier row
            ids[row] = known
            continue
        hash_ = hash_of(words, start, stop) & np.uint64(state[HASH_MASK])
        slot = _slot(hash_, len(slots))
        while slots[slot] != _EMPTY:
            slot = (slot + 1) & (len(slots) - 1)
        new, at, length = state[COUNT], state[USED], stop - start
        store[at: at + length] = data[start:stop]
        hashes[new] = hash_
        offsets[new + 1] = at + length
        slots[slot] = new
        state[COUNT] = new + 1
        state[USED] = at + length
        ids[row] = new
