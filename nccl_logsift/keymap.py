"""Dense slots for 64-bit keys, for the compiled per-call loops (numbering, the collective digest).

A log of millions of calls is reduced by loops compiled with numba; each loop needs "which instance,
which communicator, which position is this key" once per call, which a polars join per batch answers
at ~50 ns a row and a Python dict cannot be used for inside compiled code. :class:`KeyMap` is an
open-addressing table (linear probing, power-of-two capacity, at most half full) held in numpy arrays,
so it lives across batches and is passed to the kernels as plain arrays. Keys are hashes already
(polars ``hash``); they are mixed once more (SplitMix64's finaliser) because polars' integer hashes
are not guaranteed to spread over the low bits.

The loops take a batch's slots from :meth:`KeyMap.ids`, one compiled pass over the batch's keys, rather
than probing the table themselves: inside a large loop a lookup helper costs ~13 ns a call (numba keeps
the table's arrays in no register and counts references around it), against ~4 ns in a loop of its own;
and a loop that grows the table it probes (reassigning its arrays) ran at 45-67 ns a lookup.
"""

from __future__ import annotations

import numpy as np

from nccl_logsift.compiled import njit

EMPTY = -1


@njit(inline="always")
def _home(key: np.uint64, mask: np.uint64) -> np.int64:
    z = key + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return np.int64(z & mask)


@njit(inline="always")
def mix(a: np.uint64, b: np.uint64) -> np.uint64:
    """A 64-bit hash of the pair (a, b): a key made of two keys (SplitMix64's finaliser over both)."""
    z = a * np.uint64(0xBF58476D1CE4E5B9) ^ (b + np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(inline="always")
def _probe(keys: np.ndarray, slots: np.ndarray, key: np.uint64) -> np.int64:
    """Where ``key`` is in the table, or the empty place where it would go."""
    mask = np.uint64(len(keys) - 1)
    at = _home(key, mask)
    while slots[at] != EMPTY and keys[at] != key:
        at = (at + 1) & np.int64(mask)
    return at


@njit(inline="always")
def find(keys: np.ndarray, slots: np.ndarray, key: np.uint64) -> np.int64:
    """The slot of ``key``, or EMPTY."""
    return slots[_probe(keys, slots, key)]


@njit(inline="always")
def find_or_add(keys: np.ndarray, slots: np.ndarray, key: np.uint64, new_slot: np.int64) -> np.int64:
    """The slot of ``key``; if absent it is added with ``new_slot`` (the caller checks ``== new_slot``, and
    has made room: :meth:`KeyMap.reserve`)."""
    at = _probe(keys, slots, key)
    if slots[at] == EMPTY:
        keys[at] = key
        slots[at] = new_slot
    return slots[at]


@njit()
def _rehash(old_keys: np.ndarray, old_slots: np.ndarray, keys: np.ndarray, slots: np.ndarray) -> None:
    for i in range(len(old_keys)):
        if old_slots[i] != EMPTY:
            find_or_add(keys, slots, old_keys[i], old_slots[i])


@njit(inline="always")
def full(keys: np.ndarray, count: np.int64) -> bool:
    """Whether a table holding ``count`` keys must grow before one more is added."""
    return 2 * (count + 1) > len(keys)


class KeyMap:
    """Keys to slots 0, 1, 2, … in order of first sight."""

    def __init__(self, capacity: int = 512):
        """Room for ``capacity`` keys before the table grows."""
        size = 1 << max(4, (2 * capacity - 1).bit_length())
        self.keys = np.zeros(size, dtype=np.uint64)
        self.slots = np.full(size, EMPTY, dtype=np.int64)
        self.count = 0

    def ids(self, keys: np.ndarray) -> np.ndarray:
        """The slot of each of ``keys`` (uint64); keys not held yet are added as slots ``count``,
        ``count + 1``, … in order of first sight. The table doubles whenever it fills, so it stays sized
        by the keys it holds (a table much larger than its keys costs a cache miss per lookup)."""
        out = np.empty(len(keys), dtype=np.int64)
        done = 0
        while True:
            done, self.count = _ids(self.keys, self.slots, keys, self.count, out, done)
            if done == len(keys):
                return out
            self.reserve(1)

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


@njit()
def _ids(keys, slots, batch, count, out, done):
    """Fill ``out`` from the ``done``-th key; stop before a new key that a full table cannot take.
    Returns how many keys are done and how many the table holds."""
    i = done
    while i < len(batch):
        at = _probe(keys, slots, batch[i])
        if slots[at] == EMPTY:
            if full(keys, count):
                break
            keys[at] = batch[i]
            slots[at] = count
            count += 1
        out[i] = slots[at]
        i += 1
    return i, count


def grown(values: np.ndarray, length: int) -> np.ndarray:
    """``values`` (per slot, along the first axis) at least ``length`` long: doubled as often as needed,
    zeros after the old values."""
    size = max(len(values), 1)
    while size < length:
        size *= 2
    if size == len(values):
        return values
    out = np.zeros((size,) + values.shape[1:], dtype=values.dtype)
    out[: len(values)] = values
    return out
