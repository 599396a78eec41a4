"""Number the collectives of each communicator instance, chunk by chunk, with counts carried across chunks.

``ordinal`` is the 0-based position of a COLL line among the calls one process made on one communicator
instance. It is the position to compare across ranks: opCount does not count calls in 2.8, and stays 0
on single-node P2P communicators from 2.27 (grammar §5.2, §9.7).
"""

from __future__ import annotations

import polars as pl

from nccl_logsift.resolve.communicators import INSTANCE, SEQ, instances, with_seq

ADDED = {"generation": pl.Int32, "rank": pl.Int64, "comm_uid": pl.String, "ordinal": pl.Int64}


class CollectiveNumbering:
    """Resolves each COLL line to its communicator instance, comm rank and ordinal."""

    def __init__(self) -> None:
        self._comms: list[pl.DataFrame] = []
        self._instances: pl.DataFrame | None = None
        self._counts = pl.DataFrame(schema={**{k: v for k, v in _instance_schema().items()}, "next": pl.Int64})

    def observe(self, comms: pl.DataFrame) -> None:
        if comms.height:
            self._comms.append(comms)
            self._instances = None

    @property
    def instances(self) -> pl.DataFrame:
        if self._instances is None:
            merged = pl.concat(self._comms, how="vertical_relaxed") if self._comms else None
            self._instances = instances(merged) if merged is not None else instances(_no_comms())
        return self._instances

    def number(self, coll: pl.DataFrame) -> pl.DataFrame:
        if coll.is_empty():
            return coll.with_columns([pl.lit(None, dtype=t).alias(n) for n, t in ADDED.items()])
        starts = self.instances.select(
            "host", "pid", "comm", "generation", "start_seq", "rank", "comm_uid"
        ).sort("start_seq")
        joined = (
            with_seq(coll)
            .sort(SEQ)
            .join_asof(starts, left_on=SEQ, right_on="start_seq", by=["host", "pid", "comm"], strategy="backward", check_sortedness=False)
            .join(self._counts, on=INSTANCE, how="left", nulls_equal=True)
        )
        local = pl.int_range(pl.len(), dtype=pl.Int64).over(INSTANCE, order_by=SEQ)
        joined = joined.with_columns(ordinal=pl.col("next").fill_null(0) + local)
        seen = joined.group_by(INSTANCE).agg(next=pl.col("ordinal").max() + 1)
        self._counts = (
            pl.concat([self._counts, seen], how="vertical_relaxed")
            .group_by(INSTANCE)
            .agg(pl.col("next").max())
        )
        return joined.drop("start_seq", "next", SEQ).select(*coll.columns, *ADDED)


def _instance_schema() -> dict[str, pl.DataType]:
    return {"host": pl.String, "pid": pl.Int64, "comm": pl.UInt64, "generation": pl.Int32}


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
