"""The instances numbering keeps as Init rows arrive batch by batch are those built from every row so far:
same generation, rank and uid, whatever re-creates, splits or late commIds the batches bring."""

from __future__ import annotations

import random

import polars as pl
import pytest

from nccl_logsift.resolve.communicators import COMMS_SCHEMA, INSTANCE, LiveInstances, instances

# What numbering reads of an instance, and what the uid is built from.
COMPARED = [*INSTANCE, "start_seq", "rank", "nranks", "comm_id", "parent", "color", "comm_uid", "uid_exact"]


def init_rows(seed: int, lines: int) -> pl.DataFrame:
    """Init rows of 4 processes (2 hosts, 2 pids) that create, split and re-create 4 comm pointers, with a
    commId on some START lines, on some COMPLETE lines only, or on none (the fallback and split uids)."""
    rng = random.Random(seed)
    rows = []
    for line_no in range(lines):
        comm = rng.randrange(1, 5)
        phase = rng.choice(["START", "COMPLETE", "COMPLETE"])
        split = rng.random() < 0.4
        id_on = rng.choice(["both", "complete", "none"])
        rows.append(
            {
                "source_id": 0,
                "line_no": line_no,
                "part": 0,
                "host": "node" + str(rng.randrange(2)),
                "pid": 10 + rng.randrange(2),
                "what": "Init",
                "phase": phase,
                "comm": comm,
                "rank": rng.randrange(4),
                "nranks": rng.choice([2, 4]),
                "comm_id": None
                if id_on == "none" or (id_on == "complete" and phase == "START")
                else f"0x{comm:x}{rng.randrange(3)}",
                "parent": rng.randrange(1, 5) if split else None,
                "color": rng.randrange(2) if split else None,
                "split_count": rng.randrange(2) if split else None,
            }
        )
    return pl.DataFrame(rows, schema=COMMS_SCHEMA)


@pytest.mark.parametrize("seed", range(6))
def test_what_is_kept_batch_by_batch_is_what_every_row_builds(seed):
    rows = init_rows(seed, 120)
    live = LiveInstances()
    cuts = sorted(random.Random(seed).sample(range(1, 120), 9))
    for start, end in zip([0, *cuts], [*cuts, 120]):
        got = live.update(rows.slice(start, end - start)).select(COMPARED)
        whole = instances(rows.slice(0, end)).select(COMPARED)
        expected = whole.join(got.select(INSTANCE), on=INSTANCE, how="semi", nulls_equal=True)
        assert got.sort("start_seq").equals(expected.sort("start_seq"))
        # Every key's latest instance is there: the one the next calls belong to.
        latest = whole.group_by("host", "pid", "comm").agg(pl.col("generation").max())
        assert latest.join(got, on=["host", "pid", "comm", "generation"], how="anti").is_empty()


def test_rows_out_of_line_order_are_refused():
    rows = init_rows(0, 20)
    live = LiveInstances()
    live.update(rows.slice(10, 10))
    with pytest.raises(ValueError):
        live.update(rows.slice(0, 10))
