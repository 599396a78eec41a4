"""The collectives of a job in bounded memory: what the diagnosis needs of a log of any size.

A COLL-heavy log holds millions of calls; the rules need far less of them: where each rank stopped
(the last calls of every communicator instance), the first position where ranks disagree, and whether
opCount counts every call (``positioned``). :class:`CollectiveDigest` keeps

* the most recent ``final`` calls of the log and, whatever the layout, the last ``min_window`` calls of
  every instance (with per-rank files the recent calls are all one rank's; the window still holds every
  rank's last calls);
* per communicator position still awaiting some member, a summary of the calls seen there (how many,
  whether their signatures agree); a position is dropped once every member has called it, and the rows
  of the first divergent position of each communicator (and of the one before it) are kept for good;
* per (communicator, rank) running opCount statistics, so ``positioned`` judges the whole run.

Every call goes through one compiled loop (:func:`_fold`), which updates the statistics and the open
positions and says which rows of the batch the window keeps; polars only ever holds the window. The rows
of a divergence are those still in the window when it is found; with per-rank files larger than the
window the earlier side's line may be gone (the divergence is still reported, from the side that is left).
"""

from __future__ import annotations

import numba
import numpy as np
import polars as pl

from nccl_logsift import keymap
from nccl_logsift.keymap import KeyMap
from nccl_logsift.findings.progress import P2P_OPS, SIGNATURE, positioned
from nccl_logsift.resolve.progress import INSTANCE_KEY

BUDGET_ROWS = 200_000  # the window is trimmed when it holds more than twice this
FINAL_ROWS = 100_000  # the most recent calls kept, whatever the instance
MIN_WINDOW = 16  # the last calls kept per instance, whatever the budget
OPEN_POSITIONS = 500_000  # positions awaiting members; the lowest are forgotten beyond this
STATS_KEY = ["comm_uid", "rank"]
LOCATION = ["source_id", "line_no", "part"]
# Columns no rule reads; dropping them keeps the window small.
UNUSED = ("sendbuff", "recvbuff", "stream", "size", "src_file", "src_line", "logger", "severity", "func", "rccl_task")
_ROW = "__row"  # the call's number in the whole log, to tell which rows of the window are still kept
_POSITION_BITS = 44  # open positions are keyed by (communicator slot, position) packed into 64 bits
_MAX_COMMS = 1 << (64 - _POSITION_BITS)


class CollectiveDigest:
    """Feed numbered ``collectives`` batches with :meth:`add`; :meth:`table` and :meth:`stats` at the end."""

    def __init__(self, budget: int = BUDGET_ROWS, final: int = FINAL_ROWS, min_window: int = MIN_WINDOW):
        self.budget = budget
        self.final = final
        self.min_window = min_window
        self.calls = 0
        self._window: list[pl.DataFrame] = []
        self._rows = 0
        self._kept: list[pl.DataFrame] = []
        self._state = _State(min_window)
        self._members: list[pl.DataFrame] = []  # per instance slot: comm_uid, rank

    def add(self, coll: pl.DataFrame) -> None:
        if coll.is_empty():
            return
        coll = coll.drop([c for c in UNUSED if c in coll.columns])
        if INSTANCE_KEY not in coll.columns:
            coll = coll.with_columns(pl.struct("source_id", "host", "pid", "comm", "generation").hash().alias(INSTANCE_KEY))
        coll = coll.with_columns(pl.int_range(self.calls, self.calls + coll.height, dtype=pl.Int64).alias(_ROW))
        self.calls += coll.height
        inputs = coll.select(
            pl.col(INSTANCE_KEY),
            pl.when(pl.col("comm_uid").is_null()).then(pl.lit(0, pl.UInt64)).otherwise(pl.col("comm_uid").hash()).alias("comm"),
            pl.col("comm_uid").is_not_null().alias("in_comm"),
            pl.col("opcount").fill_null(0).cast(pl.Int64),
            pl.col("opcount").is_not_null().alias("has_opcount"),
            pl.col("ordinal").cast(pl.Int64),
            pl.col("nranks").fill_null(0).cast(pl.Int64),
            pl.struct(SIGNATURE).hash().alias("sig"),
            pl.col("op").hash().alias("op"),
            pl.col("op").is_in(P2P_OPS).fill_null(False).alias("p2p"),
        )
        state = self._state
        state.reserve(inputs[INSTANCE_KEY].n_unique(), inputs["comm"].n_unique(), coll.height)
        # Signatures and op names are compared as int64 (the aggregates are int64; mixing in uint64 would
        # make numba compare floats).
        arrays = {c: inputs[c].to_numpy() for c in inputs.columns}
        arrays["sig"], arrays["op"] = arrays["sig"].view(np.int64), arrays["op"].view(np.int64)
        window, keep, new_members, diverged = state.fold(*arrays.values(), self.calls, self.final)
        if len(new_members):
            self._members.append(coll[new_members].select(*STATS_KEY))
        if keep.any():
            self._kept.append(coll.filter(pl.Series(keep)))
        if len(diverged):
            self._keep_window_rows(diverged)
        self._window.append(coll.filter(pl.Series(window)))
        self._rows += self._window[-1].height
        if self._rows > 2 * self.budget:
            self._trim()

    def table(self) -> pl.DataFrame:
        """The kept calls: the most recent ones and the divergent positions, in log order."""
        self._trim()
        frames = self._kept + self._window
        if not frames:
            return pl.DataFrame()
        merged = pl.concat(frames, how="diagonal_relaxed").drop(INSTANCE_KEY, _ROW)
        return merged.unique(LOCATION, keep="first").sort(LOCATION)

    def stats(self) -> pl.DataFrame:
        """Per (comm_uid, rank): calls, whether opCount grew on every call, and its smallest value."""
        schema = {"comm_uid": pl.String, "rank": pl.Int64, "calls": pl.UInt32, "steady": pl.Boolean, "min_opcount": pl.Int64}
        state = self._state
        used = state.comm_of[: state.instances.count] >= 0
        if not self._members or not used.any():
            return pl.DataFrame(schema=schema)
        count = state.instances.count
        per_instance = pl.concat(self._members).with_columns(
            calls=pl.Series(state.calls[:count]),
            steady=pl.Series(state.steady[:count]),
            min_opcount=pl.Series(state.min_opcount[:count]),
            has_opcount=pl.Series(state.has_opcount[:count]),
        ).filter(pl.Series(used))
        return (
            per_instance.group_by(STATS_KEY, maintain_order=True)
            .agg(
                pl.col("calls").sum().cast(pl.UInt32),
                pl.col("steady").all(),
                pl.col("min_opcount").filter(pl.col("has_opcount")).min(),
            )
            .cast(schema)
        )

    # ------------------------------------------------------------------ the window
    def _trim(self) -> None:
        """Keep the rows still among the most recent ``final`` calls or an instance's last ``min_window``."""
        if not self._window:
            return
        window = pl.concat(self._window, how="diagonal_relaxed")
        alive = self._state.alive(window[INSTANCE_KEY].to_numpy(), window[_ROW].to_numpy(), self.calls, self.final)
        self._window = [window.filter(pl.Series(alive))]
        self._rows = self._window[0].height

    def _keep_window_rows(self, diverged: np.ndarray) -> None:
        """Keep the rows of earlier batches at each newly divergent position and the one before it."""
        if not self._window:
            return
        window = pl.concat(self._window, how="diagonal_relaxed")
        self._window = [window]
        first = pl.DataFrame({"comm": diverged[:, 0], "position": diverged[:, 1].astype(np.int64)})
        around = pl.concat([first, first.with_columns(pl.col("position") - 1)])
        rows = (
            positioned(window.filter(pl.col("comm_uid").is_not_null()), self.stats())
            .with_columns(pl.col("comm_uid").hash().alias("comm"))
            .join(around, on=["comm", "position"], how="semi")
            .drop("position", "comm")
        )
        self._kept.append(rows)


class _State:
    """What the compiled loop carries from batch to batch, as numpy arrays (grown by :meth:`reserve`)."""

    def __init__(self, min_window: int):
        self.min_window = min_window
        self.instances = KeyMap()
        self.comms = KeyMap()
        self.open = KeyMap()
        size = 16
        self.comm_of = np.full(size, -1, dtype=np.int64)  # per instance slot
        self.calls = np.zeros(size, dtype=np.int64)
        self.last_opcount = np.zeros(size, dtype=np.int64)
        self.min_opcount = np.zeros(size, dtype=np.int64)
        self.has_opcount = np.zeros(size, dtype=np.bool_)
        self.steady = np.ones(size, dtype=np.bool_)
        self.ring = np.zeros((size, min_window), dtype=np.int64)  # the last rows of each instance
        self.pushed = np.zeros(size, dtype=np.int64)
        self.diverged = np.zeros(16, dtype=np.bool_)  # per communicator slot
        self.comm_hash = np.zeros(16, dtype=np.uint64)
        # Open positions: key (comm slot, position) → slot, with the summary of the calls seen there.
        self.position = np.zeros(16, dtype=np.int64)
        self.aggregate = np.zeros((16, _AGGREGATES), dtype=np.int64)

    def reserve(self, instances: int, comms: int, rows: int) -> None:
        """Room for a batch of ``rows`` calls on that many distinct instances and communicators."""
        self.instances.reserve(instances)
        self.comms.reserve(comms)
        self.open.reserve(rows)
        need = self.instances.count + instances
        if need > len(self.calls):
            size = max(need, 2 * len(self.calls))
            for name, fill in (("comm_of", -1), ("calls", 0), ("last_opcount", 0), ("min_opcount", 0),
                               ("has_opcount", False), ("steady", True), ("pushed", 0)):
                old = getattr(self, name)
                grown = np.full(size, fill, dtype=old.dtype)
                grown[: len(old)] = old
                setattr(self, name, grown)
            ring = np.zeros((size, self.min_window), dtype=np.int64)
            ring[: len(self.ring)] = self.ring
            self.ring = ring
        if self.comms.count + comms > len(self.diverged):
            size = max(self.comms.count + comms, 2 * len(self.diverged))
            self.diverged, self.comm_hash = np.resize(self.diverged, size), np.resize(self.comm_hash, size)
        if self.open.count + rows > len(self.position):
            size = max(self.open.count + rows, 2 * len(self.position))
            self.position = np.resize(self.position, size)
            self.aggregate = np.resize(self.aggregate, (size, _AGGREGATES))

    def fold(self, instance, comm, in_comm, opcount, has_opcount, ordinal, nranks, sig, op, p2p, total, recent):
        """One batch: returns (rows the window keeps, rows kept for good, first row of each new instance,
        [comm hash, position] of each newly divergent communicator)."""
        counts = np.array([self.instances.count, self.comms.count, self.open.count], dtype=np.int64)
        window, keep, new_members, diverged, still_open = _fold(
            instance, comm, in_comm, opcount, has_opcount, ordinal, nranks, sig, op, p2p, total, recent, counts,
            self.instances.keys, self.instances.slots, self.comms.keys, self.comms.slots, self.open.keys, self.open.slots,
            self.comm_of, self.calls, self.last_opcount, self.min_opcount, self.has_opcount, self.steady,
            self.ring, self.pushed, self.diverged, self.comm_hash, self.position, self.aggregate,
        )
        self.instances.count, self.comms.count = int(counts[0]), int(counts[1])
        if still_open > OPEN_POSITIONS:
            still_open = _keep_highest(self.position, self.aggregate, self.open.keys, self.open.slots, still_open, OPEN_POSITIONS)
        self.open.count = still_open
        return window, keep, new_members, diverged

    def alive(self, instance: np.ndarray, row: np.ndarray, total: int, recent: int) -> np.ndarray:
        return _alive(instance, row, total, recent, self.instances.keys, self.instances.slots, self.ring, self.pushed)


# Columns of _State.aggregate, per open position.
_COMM, _CALLS, _NRANKS, _P2P, _SIG_MIN, _SIG_MAX, _OP_MIN, _OP_MAX = range(8)
_AGGREGATES = 8


@numba.njit(cache=True, nogil=True)
def _fold(instance, comm, in_comm, opcount, has_opcount, ordinal, nranks, sig, op, p2p, total, recent, counts,
          inst_keys, inst_slots, comm_keys, comm_slots, open_keys, open_slots,
          comm_of, calls, last_opcount, min_opcount, opcount_seen, steady, ring, pushed, diverged_comm,
          comm_hash, position, aggregate):
    n = len(instance)
    width = ring.shape[1]
    slot_of = np.empty(n, dtype=np.int64)
    new_members = np.empty(n, dtype=np.int64)
    added = 0
    # 1. Instances, opCount statistics and each instance's last rows.
    for i in range(n):
        s = keymap.find_or_add(inst_keys, inst_slots, np.uint64(instance[i]), counts[0])
        if s == counts[0]:
            counts[0] += 1
            new_members[added] = i
            added += 1
            c = -1
            if in_comm[i]:
                c = keymap.find_or_add(comm_keys, comm_slots, np.uint64(comm[i]), counts[1])
                if c == counts[1]:
                    diverged_comm[c] = False
                    comm_hash[c] = np.uint64(comm[i])
                    counts[1] += 1
            comm_of[s] = c
            calls[s] = 0
            steady[s] = True
            opcount_seen[s] = False
            pushed[s] = 0
        slot_of[i] = s
        ring[s, pushed[s] % width] = total - n + i
        pushed[s] += 1
        if comm_of[s] >= 0:
            calls[s] += 1
            if has_opcount[i]:
                if opcount_seen[s]:
                    if opcount[i] <= last_opcount[s]:
                        steady[s] = False
                    min_opcount[s] = min(min_opcount[s], opcount[i])
                else:
                    min_opcount[s] = opcount[i]
                    opcount_seen[s] = True
                last_opcount[s] = opcount[i]
    # 2. Which communicators count positions by opCount (findings.progress.positioned, on the stats so far).
    communicators = counts[1]
    usable = np.ones(communicators, dtype=np.bool_)
    most = np.zeros(communicators, dtype=np.int64)
    for s in range(counts[0]):
        c = comm_of[s]
        if c >= 0:
            if not steady[s] or (opcount_seen[s] and min_opcount[s] > 1):
                usable[c] = False
            most[c] = max(most[c], calls[s])
    # 3. Fold every call into the open position it sits at.
    where = np.full(n, -1, dtype=np.int64)
    opened = counts[2]
    for i in range(n):
        c = comm_of[slot_of[i]]
        if c < 0 or c >= _MAX_COMMS:
            continue
        pos = opcount[i] if usable[c] and most[c] > 1 and has_opcount[i] else ordinal[i]
        where[i] = pos
        if pos < 0 or pos >= (1 << _POSITION_BITS):
            continue
        p = keymap.find_or_add(open_keys, open_slots, _open_key(c, pos), opened)
        if p == opened:
            opened += 1
            position[p] = pos
            aggregate[p, _COMM] = c
            aggregate[p, _CALLS] = 0
            aggregate[p, _NRANKS] = 0
            aggregate[p, _P2P] = 1
            aggregate[p, _SIG_MIN] = sig[i]
            aggregate[p, _SIG_MAX] = sig[i]
            aggregate[p, _OP_MIN] = op[i]
            aggregate[p, _OP_MAX] = op[i]
        aggregate[p, _CALLS] += 1
        aggregate[p, _NRANKS] = max(aggregate[p, _NRANKS], nranks[i])
        if not p2p[i]:
            aggregate[p, _P2P] = 0
        aggregate[p, _SIG_MIN] = min(aggregate[p, _SIG_MIN], sig[i])
        aggregate[p, _SIG_MAX] = max(aggregate[p, _SIG_MAX], sig[i])
        aggregate[p, _OP_MIN] = min(aggregate[p, _OP_MIN], op[i])
        aggregate[p, _OP_MAX] = max(aggregate[p, _OP_MAX], op[i])
    # 4. Divergent positions (findings.progress.first_divergences: signatures differ, or both sides of a
    # point-to-point pair are the same op); positions every member has called are closed.
    first = np.full(communicators, -1, dtype=np.int64)
    kept = 0
    open_slots.fill(keymap.EMPTY)
    for p in range(opened):
        c = aggregate[p, _COMM]
        if aggregate[p, _P2P]:
            split = aggregate[p, _CALLS] == 2 and aggregate[p, _OP_MIN] == aggregate[p, _OP_MAX]
        else:
            split = aggregate[p, _SIG_MIN] != aggregate[p, _SIG_MAX]
        if split:
            if not diverged_comm[c] and (first[c] < 0 or position[p] < first[c]):
                first[c] = position[p]
        elif aggregate[p, _CALLS] < aggregate[p, _NRANKS]:
            position[kept] = position[p]
            for k in range(_AGGREGATES):
                aggregate[kept, k] = aggregate[p, k]
            keymap.find_or_add(open_keys, open_slots, _open_key(c, position[p]), kept)
            kept += 1
    counts[2] = kept
    found = 0
    for c in range(communicators):
        if first[c] >= 0:
            found += 1
    diverged = np.empty((found, 2), dtype=np.uint64)
    found = 0
    for c in range(communicators):
        if first[c] >= 0:
            diverged_comm[c] = True
            diverged[found, 0] = comm_hash[c]
            diverged[found, 1] = np.uint64(first[c])
            found += 1
    # 5. What is kept: this batch's rows at a new divergence (and the position before it), and the rows
    # still among the most recent or their instance's last.
    keep = np.zeros(n, dtype=np.bool_)
    window = np.zeros(n, dtype=np.bool_)
    for i in range(n):
        s = slot_of[i]
        c = comm_of[s]
        if c >= 0 and first[c] >= 0 and (where[i] == first[c] or where[i] == first[c] - 1):
            keep[i] = True
        row = total - n + i
        window[i] = _still_kept(row, s, total, recent, ring, pushed)
    return window, keep, new_members[:added], diverged, kept


@numba.njit(cache=True, nogil=True, inline="always")
def _open_key(comm, position):
    return (np.uint64(comm) << np.uint64(_POSITION_BITS)) | np.uint64(position)


@numba.njit(cache=True, nogil=True)
def _keep_highest(position, aggregate, open_keys, open_slots, count, limit):
    """Keep the ``limit`` highest open positions (per-rank files: one rank's whole run is open at once)."""
    order = np.argsort(position[:count])[count - limit:]
    order.sort()  # the kept slots move down, never onto a slot still to be read
    open_slots.fill(keymap.EMPTY)
    for kept in range(limit):
        p = order[kept]
        position[kept] = position[p]
        for k in range(_AGGREGATES):
            aggregate[kept, k] = aggregate[p, k]
        keymap.find_or_add(open_keys, open_slots, _open_key(aggregate[kept, _COMM], position[kept]), kept)
    return limit


@numba.njit(cache=True, nogil=True)
def _alive(instance, row, total, recent, inst_keys, inst_slots, ring, pushed):
    alive = np.zeros(len(row), dtype=np.bool_)
    for i in range(len(row)):
        s = keymap.find(inst_keys, inst_slots, np.uint64(instance[i]))
        alive[i] = _still_kept(row[i], s, total, recent, ring, pushed)
    return alive


@numba.njit(cache=True, nogil=True)
def _still_kept(row, s, total, recent, ring, pushed):
    """Whether call ``row`` of instance slot ``s`` is among the log's ``recent`` last calls or its instance's
    last ``ring.shape[1]`` (the ring's oldest entry is the earliest of those)."""
    width = ring.shape[1]
    return row >= total - recent or pushed[s] <= width or row >= ring[s, pushed[s] % width]
