"""Number the collectives of each communicator instance, batch by batch, with counts carried across batches.

``ordinal`` is the 0-based position of a COLL line among the calls one process made on one communicator
instance. It is the position to compare across ranks: opCount does not count calls in 2.8, and stays 0
on single-node P2P communicators from 2.27 (grammar §5.2, §9.7).

A call belongs to the latest instance of its (host, pid, comm) whose init started before it (a comm
address is reused after ncclCommDestroy); calls of a comm whose init was never logged form one instance
per (host, pid, comm) with a null generation. The per-call work is one compiled loop over the batch
(``calls_number`` in ``accel/csrc/calls.c``) over the calls' (host, pid, comm) group slots (one
:meth:`KeyMap.ids` pass): a group remembers the instance of its last call and the span of lines where that
instance holds, and each instance keeps a running count. The instance starts are searched only when a call
leaves that span (a new init of the same address) or the starts changed.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from nccl_logsift import accel
from nccl_logsift.accel import keymap
from nccl_logsift.accel.keymap import KeyMap
from nccl_logsift.memory import detached
from nccl_logsift.parse.calls import (
    NO_GENERATION,
    NO_RANK,
    NUMBERED,
    Calls,
    Names,
    instance_keys,
    process_keys,
)
from nccl_logsift.resolve.communicators import (
    COMMS_SCHEMA,
    INSTANCE,
    INSTANCE_COLUMNS,
    INSTANCE_ROWS,
    LiveInstances,
    ends_once,
    instances,
)

# What numbering remembers per (host, pid, comm) group between batches (accel/csrc/calls.c: the instance of
# its last call and where it was found, and the span of lines where that instance holds).
_GROUP_FIELDS = 6
# Rows of Init/Destroy/Abort lines observed before they are merged and their repeated ends dropped.
COMPACT_ROWS = 1 << 16


class CollectiveNumbering:
    """Resolves each COLL call to its communicator instance, comm rank and ordinal."""

    def __init__(self) -> None:
        self._comms: list[pl.DataFrame] = []
        self._instances: pl.DataFrame | None = None
        self._starts: _Starts | None = None
        self._epoch = 0  # how many times the starts were rebuilt: what a group's cached instance was found in
        self._groups = KeyMap()  # (host, pid, comm) → group slot
        self._group = np.zeros((16, _GROUP_FIELDS), dtype=np.int64)  # per group slot
        self._counts = KeyMap()  # instance → the dense instance slot
        self._next = np.zeros(16, dtype=np.int64)  # per instance slot: its next ordinal
        self.uids = Names()
        self._compacted = 0  # rows of the comms merged last
        self._pending = 0  # rows observed since
        # The instances calls can still belong to, fed the Init rows observed since the starts were built;
        # None once rows came out of line order (the starts are then built from every row).
        self._live: LiveInstances | None = LiveInstances()
        self._inits: list[pl.DataFrame] = []

    def observe(self, comms: pl.DataFrame) -> None:
        if comms.is_empty():  # most batches of a COLL-heavy log: no query (~0.5 ms, and the GIL twice)
            return
        # Only the rows an instance is made of, and their columns (resolve/communicators.py): a log that
        # repeats the per-comm summary line held every such row until the end.
        comms = comms.filter(pl.col("what").is_in(INSTANCE_ROWS)).select(
            c for c in comms.columns if c in INSTANCE_COLUMNS
        )
        if comms.height:
            self._comms.append(detached(comms))
            self._instances = None
            self._pending += comms.height
            if self._pending > max(COMPACT_ROWS, self._compacted):
                self._merge()
            # Instances start at Init lines only: Destroy and Summary lines (all of a job's last batch: 16k
            # for a 4096-rank job) change the table, not the starts calls are numbered by.
            inits = comms.filter(pl.col("what") == "Init")
            if inits.height:
                self._inits.append(inits)
                self._starts = None

    def _merge(self) -> pl.DataFrame | None:
        """The rows observed so far as one frame, less the ends that end no instance (see ``ends_once``)."""
        if not self._comms:
            return None
        merged = ends_once(pl.concat(self._comms, how="vertical_relaxed"))
        self._comms = [merged]
        self._compacted, self._pending = merged.height, 0
        return merged

    @property
    def instances(self) -> pl.DataFrame:
        if self._instances is None:
            merged = self._merge()
            self._instances = instances(merged) if merged is not None else instances(_no_comms())
        return self._instances

    def _current(self) -> pl.DataFrame:
        """The instances the calls of the batch being numbered can belong to."""
        inits, self._inits = self._inits, []
        if self._live is not None:
            new = pl.concat(inits, how="vertical_relaxed") if inits else _no_comms()
            try:
                return self._live.update(new)
            except ValueError:  # rows out of line order: number by every instance, as from now on
                self._live = None
        return self.instances

    def number(self, calls: Calls) -> None:
        """Add ``NUMBERED`` to ``calls``: each call's instance, ordinal, generation, comm rank and uid."""
        if not len(calls):  # the batches of a job's init: the instances are found when calls come
            calls.columns.update(_numbered_columns(0))
            calls.uids = self.uids
            return
        if self._starts is None:
            self._starts = _Starts(self._current(), self.uids)
            self._epoch += 1
        starts = self._starts
        seq = calls["seq"]
        # Batches come in line order, so this is usually the identity.
        order = np.arange(len(seq)) if accel.calls_ascending(seq) else np.argsort(seq, kind="stable")
        keys = instance_keys(calls["process"], calls["comm"])
        group = self._groups.ids(keys)
        self._group = keymap.grown(self._group, self._groups.count)  # new groups: epoch 0, never searched
        # A batch adds at most one instance per start and one per group without a start.
        counts = self._counts
        counts.reserve(len(starts.seq) + self._groups.count)
        self._next = keymap.grown(self._next, counts.count + len(starts.seq) + self._groups.count)
        numbered = _numbered_columns(len(seq))
        counts.count = accel.calls_number(
            keys,
            group,
            seq,
            order,
            self._epoch,
            starts.map.keys,
            starts.map.slots,
            starts.lo,
            starts.hi,
            starts.seq,
            starts.instance,
            starts.generation,
            starts.rank,
            starts.uid,
            counts.keys,
            counts.slots,
            counts.count,
            self._next,
            self._group,
            *numbered.values(),
        )
        calls.columns.update(numbered)
        calls.uids = self.uids


# The types of the NUMBERED columns, in its order (generation and uid as _Starts holds them).
_NUMBERED_TYPES = (np.uint64, np.int64, np.int64, np.int32, np.int64, np.int32)


def _numbered_columns(n: int) -> dict[str, np.ndarray]:
    """The NUMBERED columns of ``n`` calls, to be filled, in the order calls_number takes them."""
    return {name: np.empty(n, dtype=dtype) for name, dtype in zip(NUMBERED, _NUMBERED_TYPES)}


class _Starts:
    """The instances' starts grouped by (host, pid, comm), sorted by start within a group, as arrays."""

    def __init__(self, instance_table: pl.DataFrame, uids: Names):
        table = instance_table.with_columns(
            pl.Series(
                "key",
                instance_keys(
                    process_keys(instance_table),
                    instance_table["comm"].cast(pl.UInt64).fill_null(0).to_numpy(),
                ),
            ),
            pl.struct(INSTANCE).hash().alias("instance"),
        ).sort("key", "start_seq")
        key = table["key"].to_numpy()
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, dtype=np.int64)
        self.lo = first.astype(np.int64)
        self.hi = np.r_[first[1:], len(key)][: len(first)].astype(np.int64)
        self.map = KeyMap(len(first))
        accel.keymap_fill(
            self.map.keys, self.map.slots, key[first] if len(key) else np.zeros(0, dtype=np.uint64)
        )
        self.map.count = len(first)
        self.seq = table["start_seq"].to_numpy().astype(np.int64)
        self.instance = table["instance"].to_numpy()
        # What a call gets from its instance (sentinels for null); one more entry, read for a call of no
        # start.
        self.generation = np.r_[
            table["generation"].cast(pl.Int32).fill_null(NO_GENERATION).to_numpy(), NO_GENERATION
        ].astype(np.int32)
        self.rank = np.r_[table["rank"].cast(pl.Int64).fill_null(NO_RANK).to_numpy(), NO_RANK]
        self.uid = np.r_[uids.of(table["comm_uid"].cast(pl.String)), -1].astype(np.int32)


def _no_comms() -> pl.DataFrame:
    return pl.DataFrame(schema=COMMS_SCHEMA)
