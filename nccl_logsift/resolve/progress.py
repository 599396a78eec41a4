"""Number the collectives of each communicator instance, chunk by chunk, with counts carried across chunks.

``ordinal`` is the 0-based position of a COLL line among the calls one process made on one communicator
instance. It is the position to compare across ranks: opCount does not count calls in 2.8, and stays 0
on single-node P2P communicators from 2.27 (grammar §5.2, §9.7).
"""

from __future__ import annotations

import polars as pl

from nccl_logsift.resolve.communicators import INSTANCE, SEQ, instances, with_seq

ADDED = {"generation": pl.Int32, "rank": pl.Int64, "comm_uid": pl.String, "ordinal": pl.Int64}
# A hash of the instance (host, pid, comm, generation) for grouping in memory; dropped before tables are written.
INSTANCE_KEY = "__instance"
_KEY = "__process_comm"
_PROCESS_COMM = ["host", "pid", "comm"]


class CollectiveNumbering:
    """Resolves each COLL line to its communicator instance, comm rank and ordinal."""

    def __init__(self) -> None:
        self._comms: list[pl.DataFrame] = []
        self._instances: pl.DataFrame | None = None
        self._start_table: pl.DataFrame | None = None
        self._counts = pl.DataFrame(schema={INSTANCE_KEY: pl.UInt64, "next": pl.Int64})

    def observe(self, comms: pl.DataFrame) -> None:
        if comms.height:
            self._comms.append(comms)
            self._instances = None
            self._start_table = None

    @property
    def instances(self) -> pl.DataFrame:
        if self._instances is None:
            merged = pl.concat(self._comms, how="vertical_relaxed") if self._comms else None
            self._instances = instances(merged) if merged is not None else instances(_no_comms())
        return self._instances

    def number(self, coll: pl.DataFrame) -> pl.DataFrame:
        if coll.is_empty():
            return coll.with_columns([pl.lit(None, dtype=t).alias(n) for n, t in {**ADDED, INSTANCE_KEY: pl.UInt64}.items()])
        starts = self._starts()
        # Work on the key columns only (a batch can hold hundreds of thousands of calls with dozens of
        # columns), with (host, pid, comm) hashed once into one integer to match on; batches come in line
        # order, so the sort is usually a no-op check.
        keys = with_seq(coll.select("source_id", "line_no", "part", "host", "pid", "comm")).select(
            SEQ, pl.struct(_PROCESS_COMM).hash().alias(_KEY)
        ).with_row_index("__row")
        in_order = keys[SEQ].is_sorted()
        if not in_order:
            keys = keys.sort(SEQ)
        joined = keys.join_asof(
            starts, left_on=SEQ, right_on="start_seq", by=_KEY, strategy="backward", check_sortedness=False
        )
        if joined[INSTANCE_KEY].null_count():
            # Calls of a comm whose init was never logged: one instance per (host, pid, comm), generation null.
            orphan = coll.select(*_PROCESS_COMM, generation=pl.lit(None, pl.Int32)).select(pl.struct(INSTANCE).hash())
            if not in_order:
                orphan = orphan[joined["__row"]]
            joined = joined.with_columns(pl.col(INSTANCE_KEY).fill_null(orphan.to_series()))
        joined = joined.join(self._counts, on=INSTANCE_KEY, how="left")
        local = pl.int_range(pl.len(), dtype=pl.Int64).over(INSTANCE_KEY)
        joined = joined.with_columns(ordinal=pl.col("next").fill_null(0) + local)
        seen = joined.group_by(INSTANCE_KEY).agg(next=pl.col("ordinal").max() + 1)
        self._counts = pl.concat([self._counts, seen]).group_by(INSTANCE_KEY).agg(pl.col("next").max())
        if not in_order:
            joined = joined.sort("__row")
        return coll.with_columns(joined.select(*ADDED, INSTANCE_KEY).get_columns())

    def _starts(self) -> pl.DataFrame:
        """Where each instance starts, keyed by its hashed (host, pid, comm), with its instance hash: the
        calls of a batch look their instance up here (a few thousand rows, rebuilt when comms arrive)."""
        if self._start_table is None:
            # The instance hash is taken here, per instance, not per call.
            self._start_table = self.instances.select(
                pl.struct(_PROCESS_COMM).hash().alias(_KEY), "start_seq", "generation", "rank", "comm_uid",
                pl.struct(INSTANCE).hash().alias(INSTANCE_KEY),
            ).sort("start_seq")
        return self._start_table

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
