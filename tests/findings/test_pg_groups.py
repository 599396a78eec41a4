"""Process groups are told apart by their GUID, never by the PG ID alone: the ID counts the groups each
process created, so the tensor-parallel group of ranks 0-3 and that of ranks 8-11 both print ``PG ID 1``."""

from __future__ import annotations

import pytest
from builders import run, simulate

from nccl_logsift.findings.progress.watchdog_timeout import WatchdogTimeout
from nccl_logsift.resolve.work import pg_groups


@pytest.fixture(scope="module")
def stalled(tmp_path_factory):
    """Rank 8 of 16 stalls (TP groups of 4, PyTorch 2.5 prefixes): its TP group times out at #9, the
    other TP groups later, the data-parallel groups all at #6."""
    job, truth = simulate(
        tmp_path_factory.mktemp("pg"), "rank-stall", ranks=16, nodes=2, torch_version="2.5.1", seed=3
    )
    assert truth["faults"][0]["ranks"] == [8]
    return job


def test_groups_that_share_a_pg_id_stay_apart(stalled):
    timeouts = run(WatchdogTimeout, stalled)
    tensor = [f for f in timeouts if "TENSOR" in (f.pg or "")]
    assert {tuple(f.ranks) for f in tensor} == {(9, 10, 11), (0, 1, 2, 3)}
    # one call each: before, the two groups made one with "#9–#11"
    assert all(f.seq is not None for f in tensor)
    assert all("GUID" in f.pg for f in tensor)


def test_groups_of_one_family_that_timed_out_alike_read_as_one(stalled):
    timeouts = run(WatchdogTimeout, stalled)
    data = [f for f in timeouts if "DATA_PARALLEL" in (f.pg or "")]
    assert len(data) == 1
    assert data[0].pg == "2 (DATA_PARALLEL_GROUP)"
    assert data[0].title.startswith("8 rank(s) of 8 process groups 2 (DATA_PARALLEL_GROUP)")


def test_the_default_group_keeps_its_label(stalled):
    labels = dict(pg_groups(stalled).select("key", "label").iter_rows())
    assert labels["0"] == "0 (default_pg)"
