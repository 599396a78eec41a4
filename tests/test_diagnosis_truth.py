"""Every simulated scenario is diagnosed right: the findings JSON agrees with the scenario's ground truth.

For each fault the truth marks primary, a primary finding of the same kind names exactly its culprit ranks;
every consequence the truth lists is reported with its kind; nothing else is called a root cause; a run
that works (healthy or degraded) has no finding at error or critical; a fault the truth grades is reported at
that severity.
"""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, fixture_truths

from nccl_logsift.pipeline import analyze
from nccl_logsift.render.json import to_dict

TRUTHS = fixture_truths()


def fixture_input(truth_path):
    stem = truth_path.parent / truth_path.name.removesuffix(".truth.json")
    log = stem.with_name(f"{stem.name}.log")
    return log if log.exists() else stem


def _case_id(truth_path) -> str:
    return str(truth_path.relative_to(FIXTURES)).removesuffix(".truth.json")


@pytest.fixture(scope="module", params=TRUTHS, ids=[_case_id(t) for t in TRUTHS])
def case(request):
    truth = json.loads(request.param.read_text())
    report = to_dict(analyze([str(fixture_input(request.param))]))
    return truth, report


def test_primary_faults_are_named_with_their_culprit_ranks(case):
    truth, report = case
    primaries = [f for f in report["findings"] if f["primary"]]
    for fault in (f for f in truth["faults"] if f["primary"]):
        match = [f for f in primaries if f["kind"] == fault["kind"]]
        assert match, (
            f"{truth['scenario']}: no primary {fault['kind']}; primaries: "
            f"{[(f['kind'], f['ranks']) for f in primaries]}"
        )
        assert any(f["ranks"] == sorted(fault["ranks"]) for f in match), (
            f"{truth['scenario']}: {fault['kind']} culprits {fault['ranks']}, found "
            f"{[f['ranks'] for f in match]}"
        )


def test_nothing_else_is_called_a_root_cause(case):
    truth, report = case
    allowed = {f["kind"] for f in truth["faults"] if f["primary"]}
    wrong = [
        (f["code"], f["kind"], f["ranks"])
        for f in report["findings"]
        if f["primary"] and f["kind"] not in allowed
    ]
    assert not wrong, f"{truth['scenario']}: unexpected root causes {wrong}"


def test_consequences_are_reported(case):
    truth, report = case
    kinds = {f["kind"] for f in report["findings"]}
    missing = {f["kind"] for f in truth["faults"] if not f["primary"]} - kinds
    assert not missing, f"{truth['scenario']}: consequences not reported: {missing}"


def test_healthy_runs_have_no_error_findings(case):
    """Healthy or degraded (no primary fault in the truth): the job works, so nothing is at error or worse
    and nothing is a root cause (severity policy)."""
    truth, report = case
    if any(f["primary"] for f in truth["faults"]):
        pytest.skip("not a working scenario")
    assert [f for f in report["findings"] if f["severity"] in ("error", "critical")] == []
    assert [f for f in report["findings"] if f["primary"]] == [] and "Root cause" not in report["verdict"]


def test_faults_are_graded_as_the_truth_says(case):
    truth, report = case
    stated = [f for f in truth["faults"] if f.get("severity")]
    if not stated:
        pytest.skip("the truth states no severity")
    order = ["info", "warning", "error", "critical"]
    for fault in stated:
        graded = [f["severity"] for f in report["findings"] if f["kind"] == fault["kind"]]
        assert graded and max(graded, key=order.index) == fault["severity"], (fault["kind"], graded)
