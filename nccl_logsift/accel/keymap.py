"""Dense slots for 64-bit keys, for the compiled per-call loops (numbering, the collective digest).

A log of millions of calls is reduced by compiled loops (``csrc/``); each needs "which instance, which
communicator, which position is this key" once per call, which a polars join per batch answers at ~50 ns
a row and a Python dict cannot be used for inside compiled code. :class:`KeyMap` is an open-addressing
table (linear probing, power-of-two capacity, at most half full) held in numpy arrays, so it lives across
batches and is passed to the loops as plain arrays (``csrc/keymap.h`` probes it). Keys are hashes already
(polars ``hash``); they are mixed once more (SplitMix64's finaliser) because polars' integer hashes are
not guaranteed to spread over the low bits.

The loops take a batch's slots from :meth:`KeyMap.ids`, one compiled pass over the batch's keys, rather
than probing the table themselves, where the table's own pass is short and tight.
"""

from __future__ import annotations

import numpy as np

from nccl_logsift import accel

EMPTY = -1


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
        keys = np.ascontiguousarray(keys)
        out = np.empty(len(keys), dtype=np.int64)
        done = 0
        while True:
            done, self.count = accel.keymap_ids(self.keys, self.slots, keys, self.count, out, done)
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
        accel.keymap_rehash(self.keys, self.slots, keys, slots)
        self.keys, self.slots = keys, slots

    def clear(self) -> None:
        self.slots.fill(EMPTY)
        self.count = 0


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


def earlier(slots: np.ndarray) -> np.ndarray:
    """For each of ``slots``, how many entries before it hold the same slot: a stable sort groups equal slots
    in order (a fourth of the time of polars' window ``int_range().over(slot)``)."""
    order = np.argsort(slots, kind="stable")
    ordered = slots[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    count = np.empty(len(slots), dtype=np.int64)
    count[order] = np.arange(len(slots)) - np.repeat(starts, np.diff(np.r_[starts, len(slots)]))
    return count
