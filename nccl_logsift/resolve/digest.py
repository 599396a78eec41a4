"""The collectives of a job in bounded memory: what the diagnosis needs of a log of any size.

A COLL-heavy log holds millions of calls; the rules need far less of them: where each rank stopped
(the last calls of every communicator instance), the first position where ranks disagree, and whether
opCount counts every call (``positioned``). :class:`CollectiveDigest` keeps

* the most recent ``final`` calls of the log and, whatever the layout, the last ``min_window`` calls of
  every instance (with per-rank files the recent calls are all one rank's; the window still holds every
  rank's last calls);
* per communicator position still awaiting some member, a summary of the calls seen there (how many,
  whether their signatures agree); a position is dropped once every member has called it (of the rest,
  the ``OPEN_POSITIONS`` highest stay: per-rank files open one rank's whole run at once), and the rows
  of the first divergent position of each communicator (and of the one before it) are kept for good;
* per (communicator, rank) running opCount statistics, so ``positioned`` judges the whole run.

Calls arrive as arrays (:class:`~nccl_logsift.parse.calls.Calls`, numbered, with a dense instance
``slot``). Every call goes through two compiled loops (``accel/csrc/digest.c``): ``digest_fold_calls`` updates
the statistics and finds each call's position, and ``digest_fold_positions`` (with the positions' slots
from a :class:`~nccl_logsift.keymap.KeyMap`) updates the open positions and says which calls of the batch
the window keeps; the window holds those calls as arrays too, and their polars rows are built once, by
:meth:`CollectiveDigest.table`. The rows of a divergence are those still in the window when it is found;
with per-rank files larger than the window the earlier side's line may be gone (the divergence is still
reported, from the side that is left).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from nccl_logsift import accel
from nccl_logsift.accel import keymap
from nccl_logsift.accel.keymap import KeyMap
from nccl_logsift.parse.calls import LOCATION, NO_RANK, Calls, nullable
from nccl_logsift.resolve.positions import P2P_OPS, positioned

BUDGET_ROWS = 200_000  # the window is trimmed when it holds more than twice this
FINAL_ROWS = 100_000  # the most recent calls kept, whatever the instance
MIN_WINDOW = 16  # the last calls kept per instance, whatever the budget
# Positions awaiting members; the fold forgets the lowest beyond this. It cuts them as it drops the closed
# ones, rebuilding the open table once (and not at all when none goes): as a step of its own, after the
# fold, a second rebuild cost a directory of four 250 MB per-rank files 1.1 of its 6.6 s.
OPEN_POSITIONS = 500_000
STATS_KEY = ["comm_uid", "rank"]
# Columns no rule reads.
UNUSED = (
    "sendbuff",
    "recvbuff",
    "stream",
    "size",
    "src_file",
    "src_line",
    "logger",
    "severity",
    "func",
    "rccl_task",
)
# What the window keeps of a call besides its row: the call's number in the whole log ("serial", to tell
# which rows are still kept), its instance, and numbering's columns.
_WINDOW = ("serial", "slot", "ordinal", "generation", "rank", "uid")
# Open positions are keyed by (communicator slot, position) packed into 64 bits (accel/csrc/digest.c's
# POSITION_BITS is the same): only the first 2**20 communicators have positions.
_POSITION_BITS = 44


class CollectiveDigest:
    """Feed numbered ``collectives`` batches with :meth:`add`; :meth:`table` and :meth:`stats` at the end."""

    def __init__(self, budget: int = BUDGET_ROWS, final: int = FINAL_ROWS, min_window: int = MIN_WINDOW):
        self.budget = budget
        self.final = final
        self.min_window = min_window
        self.calls = 0
        self._window: list[Calls] = []
        self._rows = 0
        # The last batch and which of its calls the window holds, taken into the window (copied) once the
        # next batch is folded, and then only the calls still kept: most of a batch's recent calls are
        # no longer among the most recent a batch later.
        self._last: tuple[Calls, np.ndarray] | None = None
        self._kept: list[pl.DataFrame] = []
        self._empty: pl.DataFrame | None = None  # no call yet: the table's columns
        self._state = _State(min_window)
        # The uid and comm rank of each instance slot's first call, in slot order.
        self._members: list[tuple[np.ndarray, np.ndarray]] = []
        self._uids = None

    def add(self, calls: Calls) -> None:
        """Fold in a batch of numbered calls (in line order)."""
        n = len(calls)
        if not n:
            if self._empty is None:  # the table's columns, for a log without a COLL line
                self._empty = calls.frame().drop(UNUSED, strict=False)
            return
        # The call's number in the whole log, on a copy: the caller may still read the batch's calls.
        calls = replace(
            calls, columns={**calls.columns, "serial": np.arange(self.calls, self.calls + n, dtype=np.int64)}
        )
        c = calls.columns
        self.calls += n
        uid = c["uid"]
        state = self._state
        state.reserve(int(c["slot"].max()) + 1, len(calls.uids.names))
        # Op ids are widened to int64, the type of the aggregates they are folded into (signatures are
        # int64 already); communicator uids become uint64 keys of the communicator table.
        window, keep, new_members, diverged = state.fold(
            c["slot"],
            uid.astype(np.uint64),
            uid >= 0,
            c["opcount"],
            c["has_opcount"],
            c["ordinal"],
            c["nranks"],
            c["sig"],
            c["op"].astype(np.int64),
            np.isin(c["op"], calls.ops.ids(P2P_OPS)),
            self.calls,
            self.final,
        )
        if len(new_members):
            self._members.append((uid[new_members], c["rank"][new_members]))
            self._uids = calls.uids
        if keep.any():
            self._kept.append(calls.take(keep, _WINDOW).frame())
        if len(diverged):
            self._keep_window_rows(diverged, calls)
        self._settle()
        if window.any():
            self._last = (calls, window)
        if self._rows > 2 * self.budget:
            self._trim()

    def table(self) -> pl.DataFrame:
        """The kept calls: the most recent ones and the divergent positions, in log order."""
        self._settle()
        self._trim()  # (leaves the window as one Calls)
        frames = [*self._kept, *(calls.frame() for calls in self._window)]
        frames = [frame.drop(UNUSED, strict=False) for frame in frames if frame.height]
        if len(frames) <= 1:  # the window alone: already in line order, one row per call
            return frames[0] if frames else self._empty if self._empty is not None else pl.DataFrame()
        merged = pl.concat(frames, how="diagonal_relaxed")
        return merged.unique(LOCATION, keep="first").sort(LOCATION)

    def stats(self) -> pl.DataFrame:
        """Per (comm_uid, rank): calls, whether opCount grew on every call, and its smallest value."""
        schema = {
            "comm_uid": pl.String,
            "rank": pl.Int64,
            "calls": pl.UInt32,
            "steady": pl.Boolean,
            "min_opcount": pl.Int64,
        }
        state = self._state
        used = state.comm_of[: state.instances] >= 0
        if not self._members or not used.any():
            return pl.DataFrame(schema=schema)
        count = state.instances
        uid = np.concatenate([uid for uid, _ in self._members])
        rank = np.concatenate([rank for _, rank in self._members])
        per_instance = pl.DataFrame(
            [
                self._uids.series("comm_uid", uid),
                nullable("rank", rank, rank == NO_RANK),
                pl.Series("calls", state.calls[:count]),
                pl.Series("steady", state.steady[:count]),
                pl.Series("min_opcount", state.min_opcount[:count]),
                pl.Series("has_opcount", state.has_opcount[:count]),
            ]
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
    def _settle(self) -> None:
        """Take the last batch's calls that are still kept into the window."""
        if self._last is None:
            return
        calls, window = self._last
        self._last = None
        alive = window & self._state.alive(calls["slot"], calls["serial"], self.calls, self.final)
        if alive.any():
            self._window.append(calls.take(alive, _WINDOW))
            self._rows += len(self._window[-1])

    def _trim(self) -> None:
        """Keep the rows still among the most recent ``final`` calls or an instance's last ``min_window``."""
        if not self._window:
            return
        window = Calls.concat(self._window)
        alive = self._state.alive(window["slot"], window["serial"], self.calls, self.final)
        self._window = [window.take(alive)] if alive.any() else []
        self._rows = len(self._window[0]) if self._window else 0

    def _keep_window_rows(self, diverged: np.ndarray, calls: Calls) -> None:
        """Keep the rows of earlier batches at each newly divergent position and the one before it (those of
        the window, and every row of the last batch the window holds)."""
        earlier = list(self._window)
        if self._last is not None:
            earlier.append(self._last[0].take(self._last[1], _WINDOW))
        if not earlier:
            return
        window = Calls.concat(earlier).frame()
        uid = calls.uids.series("comm_uid", diverged[:, 0].astype(np.int64))
        first = pl.DataFrame([uid, pl.Series("position", diverged[:, 1].astype(np.int64))])
        around = pl.concat([first, first.with_columns(pl.col("position") - 1)])
        rows = (
            positioned(window.filter(pl.col("comm_uid").is_not_null()), self.stats())
            .join(around, on=["comm_uid", "position"], how="semi")
            .drop("position")
        )
        self._kept.append(rows)


class _State:
    """What the compiled loops carry from batch to batch, as numpy arrays (grown by :meth:`reserve`) that
    the loops update in place."""

    def __init__(self, min_window: int):
        if min_window < 1 or min_window & (min_window - 1):  # the ring's place is a mask, not a division
            raise ValueError(f"min_window must be a power of two, not {min_window}")
        self.min_window = min_window
        self.instances = 0  # instance slots seen (numbering's dense ids, 0 to instances - 1)
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

    def reserve(self, instances: int, comms: int) -> None:
        """Room for instance slots below ``instances`` and for that many communicators more (open
        positions grow as they are numbered)."""
        self.comms.reserve(comms)
        need = instances
        if need > len(self.calls):
            size = max(need, 2 * len(self.calls))
            for name, fill in (
                ("comm_of", -1),
                ("calls", 0),
                ("last_opcount", 0),
                ("min_opcount", 0),
                ("has_opcount", False),
                ("steady", True),
                ("pushed", 0),
            ):
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

    def fold(self, slot, comm, in_comm, opcount, has_opcount, ordinal, nranks, sig, op, p2p, total, recent):
        """One batch: returns (rows the window keeps, rows kept for good, first row of each new instance,
        [comm hash, position] of each newly divergent communicator)."""
        n = len(slot)
        new_members, where = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        added, self.instances, self.comms.count = accel.digest_fold_calls(
            slot,
            comm,
            in_comm,
            opcount,
            has_opcount,
            ordinal,
            total,
            self.instances,
            self.comms.count,
            self.comms.keys,
            self.comms.slots,
            self.comm_of,
            self.calls,
            self.last_opcount,
            self.min_opcount,
            self.has_opcount,
            self.steady,
            self.ring,
            self.pushed,
            self.diverged,
            self.comm_hash,
            new_members,
            where,
        )
        # Each call's open position: (communicator, position) → slot, new positions numbered from opened.
        opened = self.open.count
        placed = (where >= 0) & (where < 1 << _POSITION_BITS)
        at = np.full(n, -1, dtype=np.int64)
        comm_of, position = self.comm_of[slot[placed]].astype(np.uint64), where[placed].astype(np.uint64)
        at[placed] = self.open.ids((comm_of << np.uint64(_POSITION_BITS)) | position)  # the C loops' open_key
        self.position, self.aggregate = (
            keymap.grown(self.position, self.open.count),
            keymap.grown(self.aggregate, self.open.count),
        )
        window, keep = np.empty(n, dtype=np.bool_), np.empty(n, dtype=np.bool_)
        diverged = np.empty((self.comms.count, 2), dtype=np.uint64)  # at most one row per communicator
        found, still_open = accel.digest_fold_positions(
            slot,
            at,
            where,
            opened,
            self.open.count,
            nranks,
            sig,
            op,
            p2p,
            self.comms.count,
            total,
            recent,
            OPEN_POSITIONS,
            self.open.keys,
            self.open.slots,
            self.position,
            self.aggregate,
            self.comm_of,
            self.ring,
            self.pushed,
            self.diverged,
            self.comm_hash,
            window,
            keep,
            diverged,
        )
        self.open.count = still_open
        return window, keep, new_members[:added], diverged[:found]

    def alive(self, slot: np.ndarray, row: np.ndarray, total: int, recent: int) -> np.ndarray:
        """Whether each call ``row`` (of instance ``slot``) is among the log's ``recent`` last calls or its
        instance's last ``min_window``."""
        alive = np.empty(len(row), dtype=np.bool_)
        accel.digest_alive(slot, row, total, recent, self.ring, self.pushed, alive)
        return alive


# Columns of _State.aggregate, per open position; accel/csrc/digest.c names them: COMM, CALLS, NRANKS, P2P,
# SIG_MIN, SIG_MAX, OP_MIN, OP_MAX.
_AGGREGATES = 8
