"""Derived tables that several rules and views read are computed once per Job."""

from __future__ import annotations

from conftest import FIXTURES
from nccl_logsift.findings.context import load_job, per_job
from nccl_logsift.findings.progress import timeouts, work_states


def test_timeouts_and_work_states_are_computed_once_per_job():
    job = load_job([str(FIXTURES / "collective_mismatch_4ranks.log")])
    assert timeouts(job) is timeouts(job) and not timeouts(job).is_empty()
    assert work_states(job) is work_states(job)
    other = load_job([str(FIXTURES / "collective_mismatch_4ranks.log")])
    assert timeouts(other) is not timeouts(job) and timeouts(other).equals(timeouts(job))


def test_helpers_of_the_same_name_in_two_modules_are_kept_apart():
    def helper(job):
        return "first"

    def twin(job):
        return "second"

    twin.__qualname__ = helper.__qualname__
    twin.__module__ = "nccl_logsift.findings.elsewhere"
    job = load_job([str(FIXTURES / "collective_mismatch_4ranks.log")])
    assert (per_job(helper)(job), per_job(twin)(job)) == ("first", "second")
