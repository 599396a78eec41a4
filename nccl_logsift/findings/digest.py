"""The collectives of a job in bounded memory: what the diagnosis needs of a log of any size.

A COLL-heavy log holds millions of calls; the rules need far less of them: where each rank stopped
(the last calls of every communicator instance), the first position where ranks disagree, and whether
opCount counts every call (``positioned``). :class:`CollectiveDigest` keeps

* a window of the most recent calls of every instance (``budget`` rows over all instances, at least
  ``MIN_WINDOW`` per instance), trimmed as calls arrive;
* the rows of the first divergent position of every communicator (and the position before it), found
  in the window before older calls leave it;
* per (communicator, rank) running opCount statistics, so ``positioned`` judges the whole run.

A divergence is only seen while the calls of both sides are in the window together: always for a job
whose calls fit the budget, and for interleaved logs of any size; per-rank files larger than the budget
are compared over their most recent calls.
"""

from __future__ import annotations

import polars as pl

from nccl_logsift.findings.progress import P2P_OPS, SIGNATURE

BUDGET_ROWS = 500_000  # calls held while reading
FINAL_ROWS = 100_000  # calls handed to the rules
MIN_WINDOW = 256  # recent calls kept per instance, whatever the budget
INSTANCE = ["source_id", "host", "pid", "comm", "generation"]
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
        self._stats: pl.DataFrame | None = None
        self.calls = 0

    def add(self, coll: pl.DataFrame) -> None:
        if coll.is_empty():
            return
        coll = coll.drop([c for c in UNUSED if c in coll.columns])
        self.calls += coll.height
        self._update_stats(coll)
        self._window.append(coll)
        self._rows += coll.height
        if self._rows > 2 * self.budget:
            self._trim(self.budget)

    def table(self) -> pl.DataFrame:
        """The kept calls: the most recent ones and the divergent positions, in log order."""
        if self._rows > self.final:
            self._trim(self.final)
        frames = self._kept + self._window
        if not frames:
            return pl.DataFrame()
        merged = pl.concat(frames, how="diagonal_relaxed")
        return merged.unique(LOCATION, keep="first").sort(LOCATION)

    def stats(self) -> pl.DataFrame:
        """Per (comm_uid, rank): calls, whether opCount grew on every call, and its smallest value."""
        if self._stats is None:
            return pl.DataFrame(schema={"comm_uid": pl.String, "rank": pl.Int64, "calls": pl.UInt32,
                                        "steady": pl.Boolean, "min_opcount": pl.Int64})
        return self._stats.select(*STATS_KEY, "calls", "steady", "min_opcount")

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

    def _trim(self, budget: int) -> None:
        """Keep the last ``budget / instances`` calls of every instance; look for divergences first."""
        window = pl.concat(self._window, how="diagonal_relaxed").with_columns(__instance=pl.struct(INSTANCE).hash())
        instances = window["__instance"].n_unique()
        width = max(self.min_window, budget // max(instances, 1))
        recent = pl.col("ordinal") > pl.col("ordinal").max().over("__instance") - width
        window = window.with_columns(__recent=recent)
        if not window["__recent"].all():
            self._keep_divergences(window)
        kept = window.filter(pl.col("__recent")).drop("__instance", "__recent")
        self._window = [kept]
        self._rows = kept.height

    def _keep_divergences(self, window: pl.DataFrame) -> None:
        """Rows of the first divergent position of each communicator among the calls about to leave.

        The same test as ``CollectiveMismatch`` (see ``per_position``), reduced to one hash aggregation
        because it runs over every call of the log: a position diverges when its calls' signatures differ
        (collectives), or when both calls of a point-to-point pair are the same op (both send or receive).
        """
        steady = self.stats().group_by("comm_uid").agg(
            use=(pl.col("steady") & (pl.col("min_opcount") <= 1)).all() & (pl.col("calls").max() > 1)
        )
        by_opcount = steady.filter(pl.col("use"))["comm_uid"].to_list()
        position = pl.when(pl.col("comm_uid").is_in(by_opcount)).then(pl.col("opcount")).otherwise(pl.col("ordinal"))
        coll = window.filter(pl.col("comm_uid").is_not_null()).select(
            *LOCATION, "comm_uid", "__recent", position.alias("position"),
            sig=pl.struct(SIGNATURE).hash(), op=pl.col("op").hash(), p2p=pl.col("op").is_in(P2P_OPS),
        ).with_columns(key=pl.struct("comm_uid", "position").hash())
        per_key = coll.group_by("key").agg(
            leaving=(~pl.col("__recent")).any(), n=pl.len(), p2p=pl.col("p2p").all(),
            mixed=pl.col("sig").min() != pl.col("sig").max(), one_op=pl.col("op").min() == pl.col("op").max(),
        )
        diverged = per_key.filter(
            pl.col("leaving") & ((~pl.col("p2p") & pl.col("mixed")) | (pl.col("p2p") & (pl.col("n") == 2) & pl.col("one_op")))
        )
        if diverged.is_empty():
            return
        at = coll.join(diverged.select("key"), on="key", how="semi")
        first = at.group_by("comm_uid").agg(pl.col("position").min()).filter(~pl.col("comm_uid").is_in(list(self._diverged)))
        if first.is_empty():
            return
        self._diverged |= set(first["comm_uid"].to_list())
        around = pl.concat([first, first.with_columns(pl.col("position") - 1)])
        rows = coll.join(around, on=["comm_uid", "position"], how="semi").select(LOCATION)
        self._kept.append(window.join(rows, on=LOCATION, how="semi").drop("__instance", "__recent"))
