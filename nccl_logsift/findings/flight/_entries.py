"""Flight Recorder entries as the LS7xx rules quote and compare them."""

from __future__ import annotations

from collections import Counter

import polars as pl

from nccl_logsift.model import Evidence
from nccl_logsift.resolve.job import Job, per_job

FR_EVIDENCE = 4  # dump entries a finding quotes per side


def entry_evidence(job: Job, rows: pl.DataFrame, limit: int = FR_EVIDENCE) -> tuple[Evidence, ...]:
    """Dump entries as evidence: the dump's path, the entry's index, and the entry in one line."""
    if rows.is_empty():
        return ()
    paths = dict(job.table("flight_dumps").select("dump_id", "path").iter_rows())
    return tuple(
        Evidence(paths.get(row["dump_id"], "?"), int(row["entry"]), describe_entry(row))
        for row in rows.head(limit).iter_rows(named=True)
    )


def describe_entry(row: dict) -> str:
    shapes = lambda sizes, dtypes: (
        ", ".join(f"{list(s)} {d}" for s, d in zip(sizes or [], dtypes or [None] * len(sizes or []))) or "-"
    )
    where = f" at {row['call_site']}" if row.get("call_site") else ""
    into = shapes(row["input_sizes"], row["input_dtypes"])
    out = shapes(row["output_sizes"], row["output_dtypes"])
    return (
        f"Flight Recorder entry {row['entry']} of rank {row['rank']}: process group {pg_of(row)} collective "
        f"#{row['collective_seq_id']} {row['profiling_name']} in {into} out {out}, {row['state']}{where}"
    )


def pg_of(row: dict) -> str:
    return f"{row['pg_name']} ({row['pg_desc']})" if row.get("pg_desc") else str(row["pg_name"])


def _signature(row: dict) -> tuple:
    return (
        row["op"],
        _frozen(row["input_sizes"]),
        _frozen(row["input_dtypes"]),
        _frozen(row["output_sizes"]),
        _frozen(row["output_dtypes"]),
    )


def _frozen(value):
    if isinstance(value, (list, tuple, pl.Series)):
        return tuple(_frozen(v) for v in value)
    return value


@per_job
def collectives(job: Job) -> pl.DataFrame:
    """Collective entries, one per rank, process group and SeqNum (coalesced groups, which share a SeqNum
    on one rank, are left out: their ops are compared as a group by fr_trace, not here)."""
    fr = job.table("flight_recorder")
    if fr.is_empty():
        return fr
    fr = fr.filter(
        ~pl.col("is_p2p").fill_null(False)
        & pl.col("collective_seq_id").is_not_null()
        & (pl.col("collective_seq_id") > 0)
        & pl.col("rank").is_not_null()
        & pl.col("pg_name").is_not_null()
    )
    return fr.filter(pl.len().over("rank", "pg_name", "collective_seq_id") == 1).sort(
        "pg_name", "collective_seq_id", "rank"
    )


@per_job
def mismatches(job: Job) -> list[dict]:
    """Per process group, the first SeqNum where the ranks' entries disagree: the majority's, the others'."""
    found = []
    coll = collectives(job)
    if coll.is_empty():
        return found
    shared = coll.filter(pl.len().over("pg_name", "collective_seq_id") > 1)
    for (pg_name,), group in shared.group_by("pg_name", maintain_order=True):
        for (seq,), at in group.group_by("collective_seq_id", maintain_order=True):
            rows = at.to_dicts()
            counts = Counter(_signature(r) for r in rows)
            if len(counts) < 2:
                continue
            # The majority is what most ranks called; on a tie, what the lowest rank called.
            major = max(
                counts, key=lambda s: (counts[s], -min(r["rank"] for r in rows if _signature(r) == s))
            )
            found.append(
                {
                    "pg_name": pg_name,
                    "seq": seq,
                    "major": [r for r in rows if _signature(r) == major],
                    "minor": [r for r in rows if _signature(r) != major],
                }
            )
            break
    return sorted(found, key=lambda m: m["major"][0]["time_created_ns"] or 0)
