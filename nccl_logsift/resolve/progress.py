"""Number the collectives of each communicator instance, batch by batch, with counts carried across batches.

``ordinal`` is the 0-based position of a COLL line among the calls one process made on one communicator
instance. It is the position to compare across ranks: opCount does not count calls in 2.8, and stays 0
on single-node P2P communicators from 2.27 (grammar §5.2, §9.7).

A call belongs to the latest instance of its (host, pid, comm) whose init started before it (a comm
address is reused after ncclCommDestroy); calls of a comm whose init was never logged form one instance
per (host, pid, comm) with a null generation. The per-call work is one compiled loop over the batch
(:func:`_number`): a hash lookup of the call's (host, pid, comm) among the instance starts and a running
count per instance.
"""

from __future__ import annotations

import numba
import numpy as np
import polars as pl

from nccl_logsift import keymap
from nccl_logsift.keymap import KeyMap
from nccl_logsift.parse.calls import NO_GENERATION, NO_RANK, Calls, Names, instance_keys, process_keys
from nccl_logsift.resolve.communicators import INSTANCE, instances

_ORPHAN = np.uint64(0x6A09E667F3BCC909)  # mixed into the (host, pid, comm) key of calls without an init


class CollectiveNumbering:
    """Resolves each COLL call to its communicator instance, comm rank and ordinal."""

    def __init__(self) -> None:
        self._comms: list[pl.DataFrame] = []
        self._instances: pl.DataFrame | None = None
        self._starts: _Starts | None = None
        self._counts = KeyMap()
        self._next = np.zeros(len(self._counts.keys), dtype=np.int64)
        self.uids = Names()

    def observe(self, comms: pl.DataFrame) -> None:
        if comms.height:
            self._comms.append(comms)
            self._instances = None
            self._starts = None

    @property
    def instances(self) -> pl.DataFrame:
        if self._instances is None:
            merged = pl.concat(self._comms, how="vertical_relaxed") if self._comms else None
            self._comms = [merged] if merged is not None else []
            self._instances = instances(merged) if merged is not None else instances(_no_comms())
        return self._instances

    def number(self, calls: Calls) -> None:
        """Add ``NUMBERED`` to ``calls``: each call's instance, ordinal, generation, comm rank and uid."""
        if self._starts is None:
            self._starts = _Starts(self.instances, self.uids)
        starts = self._starts
        keys = instance_keys(calls["process"], calls["comm"])
        seq = calls["seq"]
        # Batches come in line order, so this is usually the identity.
        order = np.arange(len(seq)) if _ascending(seq) else np.argsort(seq, kind="stable")
        counts = self._counts
        found, instance, slot, ordinal, counts.count, counts.keys, counts.slots, self._next = _number(
            keys, seq, order, starts.map.keys, starts.map.slots, starts.lo, starts.hi, starts.seq, starts.instance,
            counts.keys, counts.slots, self._next, counts.count,
        )
        calls.columns.update(
            instance=instance,
            slot=slot,
            ordinal=ordinal,
            generation=starts.generation[found],
            rank=starts.rank[found],
            uid=starts.uid[found],
        )
        calls.uids = self.uids


class _Starts:
    """The instances' starts grouped by (host, pid, comm), sorted by start within a group, as arrays."""

    def __init__(self, instance_table: pl.DataFrame, uids: Names):
        table = instance_table.with_columns(
            pl.Series("key", instance_keys(process_keys(instance_table), instance_table["comm"].cast(pl.UInt64).fill_null(0).to_numpy())),
            pl.struct(INSTANCE).hash().alias("instance"),
        ).sort("key", "start_seq")
        key = table["key"].to_numpy()
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, dtype=np.int64)
        self.lo = first.astype(np.int64)
        self.hi = np.r_[first[1:], len(key)].astype(np.int64)
        self.map = KeyMap(len(first))
        _fill(self.map.keys, self.map.slots, key[first] if len(key) else np.zeros(0, dtype=np.uint64))
        self.map.count = len(first)
        self.seq = table["start_seq"].to_numpy().astype(np.int64)
        self.instance = table["instance"].to_numpy()
        # What a call gets from its instance (sentinels for null); one more entry so that found = -1 reads it.
        self.generation = np.r_[table["generation"].cast(pl.Int32).fill_null(NO_GENERATION).to_numpy(), NO_GENERATION]
        self.rank = np.r_[table["rank"].cast(pl.Int64).fill_null(NO_RANK).to_numpy(), NO_RANK]
        self.uid = np.r_[uids.of(table["comm_uid"].cast(pl.String)), -1]


@numba.njit(cache=True, nogil=True)
def _fill(keys, slots, group_keys):
    for g in range(len(group_keys)):
        keymap.find_or_add(keys, slots, group_keys[g], g)


@numba.njit(cache=True, nogil=True)
def _number(keys, seq, order, start_keys, start_slots, lo, hi, start_seq, start_instance,
            count_keys, count_slots, next_ordinal, counted):
    n = len(keys)
    found = np.full(n, -1, dtype=np.int64)
    instance = np.empty(n, dtype=np.uint64)
    dense = np.empty(n, dtype=np.int64)
    ordinal = np.empty(n, dtype=np.int64)
    for i in order:
        group = keymap.find(start_keys, start_slots, keys[i])
        at = -1
        if group >= 0:
            # The latest start at or before the call (usually the only one).
            j = hi[group] - 1
            while j >= lo[group] and start_seq[j] > seq[i]:
                j -= 1
            if j >= lo[group]:
                at = j
        if at >= 0:
            found[i] = at
            instance[i] = start_instance[at]
        else:
            instance[i] = keys[i] ^ _ORPHAN
        if keymap.full(count_keys, counted):
            count_keys, count_slots = keymap.room(count_keys, count_slots, counted)
        slot = keymap.find_or_add(count_keys, count_slots, instance[i], counted)
        if slot == counted:
            if counted == len(next_ordinal):
                next_ordinal = keymap.longer(next_ordinal, counted)
            next_ordinal[slot] = 0
            counted += 1
        dense[i] = slot
        ordinal[i] = next_ordinal[slot]
        next_ordinal[slot] += 1
    return found, instance, dense, ordinal, counted, count_keys, count_slots, next_ordinal


@numba.njit(cache=True, nogil=True)
def _ascending(seq) -> bool:
    for i in range(1, len(seq)):
        if seq[i] < seq[i - 1]:
            return False
    return True


def _no_comms() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "source_id": pl.UInt16, "line_no": pl.UInt32, "part": pl.UInt8, "host": pl.String,
            "pid": pl.Int64, "what": pl.String, "phase": pl.String, "comm": pl.UInt64, "rank": pl.Int64,
            "nranks": pl.Int64, "cuda_dev": pl.Int64, "nvml_dev": pl.Int64, "bus_id": pl.String,
            "comm_id": pl.String, "func": pl.String, "parent": pl.UInt64, "color": pl.Int64,
            "split_count": pl.Int64,
        }
    )
