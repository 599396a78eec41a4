"""LS101 rank-behind's screen of communicators, and the members' last calls it reads."""

from __future__ import annotations

import pytest

from conftest import FIXTURES
from builders import job_of, simulate, two_gpu_processes
from nccl_logsift.findings.context import load_job
from nccl_logsift.findings.progress import RankBehind, comm_progress, members_last_calls


def jobs(tmp_path):
    yield from (load_job([str(path)]) for path in sorted(FIXTURES.glob("*.log")))
    for scenario in ("rank-stall", "healthy"):
        yield simulate(tmp_path, scenario, ranks=8, nodes=2)[0]


@pytest.mark.parametrize("failing", [False, True])
def test_rank_behind_screens_in_exactly_the_communicators_it_reports(tmp_path, failing):
    reported = screened = 0
    for job in jobs(tmp_path):
        rule = RankBehind()
        lagging = rule._lagging(job, failing)
        found = {p.uid for p in comm_progress(job) if rule._from_collectives(job, p, failing) is not None}
        assert lagging == found
        reported, screened = reported + len(found), screened + len(comm_progress(job))
    assert 0 < reported < screened


def test_comm_progress_holds_the_members_last_calls_by_communicator(tmp_path):
    job = load_job([str(FIXTURES / "rank_stall_8ranks.log")])
    progress = comm_progress(job)
    last = members_last_calls(job)
    assert [p.uid for p in progress] == last["comm_uid"].unique(maintain_order=True).to_list()
    assert sum(p.last.height for p in progress) == last.height


def test_rank_behind_names_the_gpu_of_a_process_that_drives_several(tmp_path):
    # Rank 3 is pid 20's second GPU; its calls are logged with the device its thread set last, like rank 2's.
    job = job_of(tmp_path, two_gpu_processes(stalled_rank=3, calls=40))
    (finding,) = RankBehind().check(job)
    assert finding.ranks == (3,) and finding.hosts == ("n1",)
    assert "rank 3 (n1, pid 20, GPU 1)" in finding.title
