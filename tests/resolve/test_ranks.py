"""Who is who: one rank-identity table, each rank with the evidence it came from, the strongest source
winning where sources disagree."""

from __future__ import annotations

import polars as pl
from builders import job_of

from nccl_logsift.resolve.ranks import RANK_SOURCES, identity, with_job_rank

INIT = (
    "{host}:{pid}:{pid}1 [{dev}] NCCL INFO comm 0x7f00{rank}0 rank {rank} nranks 4 cudaDev {dev} "
    "nvmlDev {dev} busId {dev}1000 commId 0xabc123 - Init COMPLETE"
)
TIMEOUT = (
    "[rank{label}]:[E1126 10:00:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) "
    "Rank {pg_rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8, OpType=ALLREDUCE, "
    "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600064 milliseconds before timing out."
)


def procs(ranks=range(4)):
    """Two hosts, two GPUs each; ranks 0-1 on nodeA, 2-3 on nodeB."""
    return [INIT.format(host="nodeA" if r < 2 else "nodeB", pid=100 + r, dev=r % 2, rank=r) for r in ranks]


def test_every_gpu_of_the_init_lines_has_a_row_with_its_communicators(tmp_path):
    table = identity(job_of(tmp_path, procs()))
    assert table["rank"].to_list() == [0, 1, 2, 3]
    assert set(table["rank_source"]) == {"nccl_init"}
    row = table.row(2, named=True)
    assert (row["host"], row["pid"], row["cuda_dev"]) == ("nodeB", 102, 0)
    assert row["communicators"] == [
        {"comm_uid": row["communicators"][0]["comm_uid"], "comm_id": "0xabc123", "rank": 2, "nranks": 4}
    ]


def test_ranks_only_pytorch_names_get_rows_with_their_groups_and_labels(tmp_path):
    # rank 3 never printed its Init line; its PyTorch timeout names it.
    job = job_of(tmp_path, [*procs(range(3)), TIMEOUT.format(label=3, pg_rank=3)])
    table = identity(job)
    three = table.filter(pl.col("rank") == 3).row(0, named=True)
    assert three["rank_source"] == "pg_prefix"
    assert three["host"] is None
    assert three["groups"] == [{"pg_id": 0, "pg_guid": "0", "pg_desc": "default_pg", "pg_rank": 3}]
    assert three["labels"] == [{"label": "torch_rank", "value": "3"}]


def test_the_strongest_source_wins_where_they_disagree(tmp_path):
    # A (made-up) line whose torchrun label says 2 but whose default-group prefix says 3: the prefix wins.
    job = job_of(tmp_path, [*procs(), TIMEOUT.format(label=2, pg_rank=3)])
    rows = with_job_rank(job, job.table("torch"), provenance=True)
    assert rows.select("job_rank", "rank_source").row(0) == (3, "pg_prefix")


def test_a_group_rank_of_another_group_is_not_a_world_rank(tmp_path):
    line = (
        TIMEOUT.format(label=5, pg_rank=1)
        .replace("[rank5]:", "")
        .replace("PG ID 0 PG GUID 0(default_pg)", "PG ID 2 PG GUID 7(PIPELINE_MODEL_PARALLEL_GROUP)")
    )
    job = job_of(tmp_path, [*procs(), line])
    rows = with_job_rank(job, job.table("torch"), provenance=True)
    assert rows.select("job_rank", "rank_source").row(0) == (None, None)


def test_sources_are_named_from_one_vocabulary(tmp_path):
    job = job_of(tmp_path, [*procs(range(3)), TIMEOUT.format(label=3, pg_rank=3)])
    assert set(identity(job)["rank_source"].drop_nulls()) <= set(RANK_SOURCES)
