"""The collectives of a job in bounded memory: what the diagnosis needs of a log of any size.

A COLL-heavy log holds millions of calls; the rules need far less of them: where each rank stopped
(the last calls of every communicator instance), the first position where ranks disagree, and whether
opCount counts every call (``positioned``). :class:`CollectiveDigest` keeps

* a window of the most recent calls of every instance (``budget`` rows over all instances, at least
  ``min_window`` per instance), trimmed as calls arrive;
* per communicator position still awaiting some member, a summary of the calls seen there (how many,
  whether their signatures agree); a position is dropped once every member has called it, and the rows
  of the first divergent position of each communicator (and of the one before it) are kept for good;
* per (communicator, rank) running opCount statistics, so ``positioned`` judges the whole run.

Each call goes through one hash aggregation, once. The rows of a divergence are those still in the
window when it is found; with per-rank files larger than the window the earlier side's line may be gone
(the divergence is still reported, from the side that is left).
"""

from __future__ import annotations

import polars as pl

from nccl_logsift.findings.progress import P2P_OPS, SIGNATURE, positioned
from nccl_logsift.resolve.progress import INSTANCE_KEY

BUDGET_ROWS = 200_000  # calls held while reading
FINAL_ROWS = 100_000  # calls handed to the rules
MIN_WINDOW = 16  # recent calls kept per instance, whatever the budget
OPEN_POSITIONS = 500_000  # positions awaiting members; the oldest are forgotten beyond this
STATS_KEY = ["comm_uid", "rank"]
LOCATION = ["source_id", "line_no", "part"]
# Columns no rule reads; dropping them keeps the window small.
UNUSED = ("sendbuff", "recvbuff", "stream", "size", "src_file", "src_line", "logger", "severity", "func", "rccl_task")


class CollectiveDigest:
    """Feed numbered ``collectives`` batches with :meth:`add`; :meth:`table` and :meth:`stats` at the end."""

    def __init__(self, budget: int = BUDGET_ROWS, final: int = FINAL_ROWS, min_window: int = MIN_WINDOW):
        self.budget = budget
        self.final = final
        self.min_window = min_window
        self._window: list[pl.DataFrame] = []
        self._rows = 0
        self._kept: list[pl.DataFrame] = []
        self._diverged: set[str] = set()
        self._open: pl.DataFrame | None = None
        self._stats: pl.DataFrame | None = None
        self.calls = 0

    def add(self, coll: pl.DataFrame) -> None:
        if coll.is_empty():
            return
        coll = coll.drop([c for c in UNUSED if c in coll.columns])
        if INSTANCE_KEY not in coll.columns:
            coll = coll.with_columns(pl.struct("source_id", "host", "pid", "comm", "generation").hash().alias(INSTANCE_KEY))
        self.calls += coll.height
        self._update_stats(coll)
        self._window.append(coll)
        self._rows += coll.height
        self._compare(coll)
        if self._rows > 2 * self.budget:
            self._trim(self.budget)

    def table(self) -> pl.DataFrame:
        """The kept calls: the most recent ones and the divergent positions, in log order."""
        if self._rows > self.final:
            self._trim(self.final)
        frames = self._kept + self._window
        if not frames:
            return pl.DataFrame()
        merged = pl.concat(frames, how="diagonal_relaxed").drop(INSTANCE_KEY)
        return merged.unique(LOCATION, keep="first").sort(LOCATION)

    def stats(self) -> pl.DataFrame:
        """Per (comm_uid, rank): calls, whether opCount grew on every call, and its smallest value."""
        if self._stats is None:
            return pl.DataFrame(schema={"comm_uid": pl.String, "rank": pl.Int64, "calls": pl.UInt32,
                                        "steady": pl.Boolean, "min_opcount": pl.Int64})
        return self._stats.select(*STATS_KEY, "calls", "steady", "min_opcount")

    # ------------------------------------------------------------------ opCount statistics
    def _update_stats(self, coll: pl.DataFrame) -> None:
        batch = (
            coll.filter(pl.col("comm_uid").is_not_null())
            .group_by(STATS_KEY)
            .agg(
                first=pl.col("opcount").first(), last=pl.col("opcount").last(), min_opcount=pl.col("opcount").min(),
                calls=pl.len(), steady=(pl.col("opcount").diff().drop_nulls() > 0).all(),
            )
        )
        if self._stats is None:
            self._stats = batch.drop("first")
            return
        both = self._stats.join(batch, on=STATS_KEY, how="full", coalesce=True, suffix="_new")
        self._stats = both.select(
            *STATS_KEY,
            last=pl.coalesce("last_new", "last"),
            min_opcount=pl.min_horizontal("min_opcount", "min_opcount_new"),
            calls=pl.col("calls").fill_null(0) + pl.col("calls_new").fill_null(0),
            steady=pl.col("steady").fill_null(True) & pl.col("steady_new").fill_null(True)
            & (pl.col("first") > pl.col("last")).fill_null(True),
        )

    def _positions(self, coll: pl.DataFrame) -> pl.DataFrame:
        """Calls with ``position`` as the rules will see it, judged on the statistics so far."""
        return positioned(coll.filter(pl.col("comm_uid").is_not_null()), self.stats())

    # ------------------------------------------------------------------ divergences
    def _compare(self, coll: pl.DataFrame) -> None:
        """Fold the batch into the open positions; keep the first divergence of each communicator.

        The same test as ``CollectiveMismatch`` (``per_position``), as one hash aggregation: a position
        diverges when its calls' signatures differ (collectives), or when both calls of a point-to-point
        pair are the same op (both send, or both receive).
        """
        calls = self._positions(coll).select(
            "comm_uid", "position", "nranks",
            key=pl.struct("comm_uid", "position").hash(), sig=pl.struct(SIGNATURE).hash(),
            op=pl.col("op").hash(), p2p=pl.col("op").is_in(P2P_OPS),
        )
        batch = calls.group_by("key").agg(
            pl.col("comm_uid").first(), pl.col("position").first(), pl.col("nranks").max(), n=pl.len(),
            p2p=pl.col("p2p").all(), sig_min=pl.col("sig").min(), sig_max=pl.col("sig").max(),
            op_min=pl.col("op").min(), op_max=pl.col("op").max(),
        )
        if self._open is not None:
            batch = pl.concat([self._open, batch]).group_by("key").agg(
                pl.col("comm_uid").first(), pl.col("position").first(), pl.col("nranks").max(), pl.col("n").sum(),
                pl.col("p2p").all(), pl.col("sig_min").min(), pl.col("sig_max").max(),
                pl.col("op_min").min(), pl.col("op_max").max(),
            )
        diverged = (~pl.col("p2p") & (pl.col("sig_min") != pl.col("sig_max"))) | (
            pl.col("p2p") & (pl.col("n") == 2) & (pl.col("op_min") == pl.col("op_max"))
        )
        batch = batch.with_columns(diverged=diverged)
        found = batch.filter(pl.col("diverged") & ~pl.col("comm_uid").is_in(list(self._diverged)))
        if found.height:
            self._keep_rows(found.group_by("comm_uid").agg(pl.col("position").min()))
        still_open = ~pl.col("diverged") & (pl.col("n") < pl.col("nranks").fill_null(0))
        self._open = batch.filter(still_open).drop("diverged")
        if self._open.height > OPEN_POSITIONS:
            self._open = self._open.sort("position").tail(OPEN_POSITIONS)

    def _keep_rows(self, first: pl.DataFrame) -> None:
        """Keep the window's rows at each newly divergent position and the position before it."""
        self._diverged |= set(first["comm_uid"].to_list())
        around = pl.concat([first, first.with_columns(pl.col("position") - 1)])
        window = pl.concat(self._window, how="diagonal_relaxed")
        rows = self._positions(window).join(around, on=["comm_uid", "position"], how="semi").drop("position")
        self._kept.append(rows)

    # ------------------------------------------------------------------ the window
    def _trim(self, budget: int) -> None:
        """Keep the last ``budget / instances`` calls of every instance."""
        window = pl.concat(self._window, how="diagonal_relaxed")
        instances = window[INSTANCE_KEY].n_unique()
        width = max(self.min_window, budget // max(instances, 1))
        kept = window.filter(pl.col("ordinal") > pl.col("ordinal").max().over(INSTANCE_KEY) - width)
        self._window = [kept]
        self._rows = kept.height
