"""Dense slots for 64-bit keys, for the compiled per-call loops (numbering, the collective digest).

A log of millions of calls is reduced by loops compiled with numba; each loop needs "which instance,
which communicator, which position is this key" once per call, which a polars join per batch answers
at ~50 ns a row and a Python dict cannot be used for inside compiled code. :class:`KeyMap` is an
open-addressing table (linear probing, power-of-two capacity, at most half full) held in numpy arrays,
so it lives across batches and is passed to the kernels as plain arrays. Keys are hashes already
(polars ``hash``); they are mixed once more (SplitMix64's finaliser) because polars' integer hashes
are not guaranteed to spread over the low bits. Lookups are inlined into the kernels' loops (a call per
lookup, with its reference counting, cost 23 ns against 4).
"""

from __future__ import annotations

import numba
import numpy as np

EMPTY = -1


@numba.njit(cache=True, nogil=True, inline="always")
def _home(key: np.uint64, mask: np.uint64) -> np.int64:
    z = key + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z & mask)


@numba.njit(cache=True, nogil=True, inline="always")
def mix(a: np.uint64, b: np.uint64) -> np.uint64:
    """A 64-bit hash of the pair (a, b): a key made of two keys (SplitMix64's finaliser over both)."""
    z = a * np.uint64(0xBF58476D1CE4E5B9) ^ (b + np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@numba.njit(cache=True, nogil=True, inline="always")
def _probe(keys: np.ndarray, slots: np.ndarray, key: np.uint64) -> np.int64:
    """Where ``key`` is in the table, or the empty place where it would go."""
    mask = np.uint64(len(keys) - 1)
    at = _home(key, mask)
    while slots[at] != EMPTY and keys[at] != key:
        at = (at + 1) & np.int64(mask)
    return at


@numba.njit(cache=True, nogil=True, inline="always")
def find(keys: np.ndarray, slots: np.ndarray, key: np.uint64) -> np.int64:
    """The slot of ``key``, or EMPTY."""
    return slots[_probe(keys, slots, key)]


@numba.njit(cache=True, nogil=True, inline="always")
def find_or_add(keys: np.ndarray, slots: np.ndarray, key: np.uint64, new_slot: np.int64) -> np.int64:
    """The slot of ``key``; if absent it is added with ``new_slot`` (the caller checks ``== new_slot``)."""
    at = _probe(keys, slots, key)
    if slots[at] == EMPTY:
        keys[at] = key
        slots[at] = new_slot
    return slots[at]


@numba.njit(cache=True, nogil=True)
def _rehash(old_keys: np.ndarray, old_slots: np.ndarray, keys: np.ndarray, slots: np.ndarray) -> None:
    for i in range(len(old_keys)):
        if old_slots[i] != EMPTY:
            find_or_add(keys, slots, old_keys[i], old_slots[i])


@numba.njit(cache=True, nogil=True, inline="always")
def full(keys: np.ndarray, count: np.int64) -> bool:
    """Whether a table holding ``count`` keys needs :func:`room` before one more is added."""
    return 2 * (count + 1) > len(keys)


@numba.njit(cache=True, nogil=True)
def room(keys: np.ndarray, slots: np.ndarray, count: np.int64):
    """``keys, slots`` with room for one more key beside the ``count`` held: a table twice as large.

    Tables grow when they fill, so a table is sized by the keys it holds, not by how many a batch might
    add (a table much larger than its keys costs a cache miss per lookup). Never inside the loop that
    probes the table: a loop that reassigns the arrays it probes keeps them in no register and counts
    references at every step (measured: 45-67 ns a lookup instead of 4). The loop stops when
    :func:`full` and returns where it stopped; its caller grows the table with this and resumes.
    """
    grown_keys = np.zeros(2 * len(keys), dtype=np.uint64)
    grown_slots = np.full(2 * len(keys), EMPTY, dtype=np.int64)
    _rehash(keys, slots, grown_keys, grown_slots)
    return grown_keys, grown_slots


@numba.njit(cache=True, nogil=True)
def longer(values: np.ndarray, count: np.int64) -> np.ndarray:
    """``values`` (per slot, along the first axis) twice as long, for slot ``count`` past its end."""
    grown = np.zeros((2 * len(values),) + values.shape[1:], dtype=values.dtype)
    grown[: len(values)] = values
    return grown


class KeyMap:
    """Keys to slots 0, 1, 2, … in order of first sight. ``reserve`` before a kernel may add keys."""

    def __init__(self, capacity: int = 512):
        """Room for ``capacity`` keys before the table grows."""
        size = 1 << max(4, (2 * capacity - 1).bit_length())
        self.keys = np.zeros(size, dtype=np.uint64)
        self.slots = np.full(size, EMPTY, dtype=np.int64)
        self.count = 0

    def reserve(self, more: int) -> None:
        """Make room for ``more`` new keys while staying at most half full."""
        need = 2 * (self.count + more)
        if need <= len(self.keys):
            return
        size = 1 << (need - 1).bit_length()
        keys, slots = np.zeros(size, dtype=np.uint64), np.full(size, EMPTY, dtype=np.int64)
        _rehash(self.keys, self.slots, keys, slots)
        self.keys, self.slots = keys, slots

    def clear(self) -> None:
        self.slots.fill(EMPTY)
        self.count = 0
