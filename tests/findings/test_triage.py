"""triage.verdict: the paragraph that leads the report, and the counts it gives."""

from __future__ import annotations

from nccl_logsift.findings.triage import CAUSAL_TIER, triage, verdict
from nccl_logsift.model import Finding, Kind, Severity


def socket_warning() -> Finding:
    return Finding(
        code="LS301", name="transport-fallback", kind=Kind.TRANSPORT_FALLBACK, severity=Severity.WARNING,
        title="All inter-node traffic of this 2-node job (these logs show 1 of its nodes) runs over TCP sockets",
        ranks=tuple(range(8)), hosts=("mi300x-01",), first_seen=0,
    )


def test_verdict_of_warnings_counts_the_ranks_and_hosts_of_these_logs():
    """The logs may hold one node's output of a larger job; the scope says it counts the logs."""
    text = verdict(triage([socket_warning()]), ranks_seen=8, hosts=1)
    assert text == (
        "No hang or failure found in these logs (8 rank(s) on 1 host(s)), but worth a look: All inter-node "
        "traffic of this 2-node job (these logs show 1 of its nodes) runs over TCP sockets."
    )


def test_verdict_without_findings_counts_the_ranks_and_hosts_of_these_logs():
    assert verdict([], ranks_seen=16, hosts=2) == "No sign of a hang or failure in these logs (16 rank(s) on 2 host(s))."


def test_verdict_without_known_ranks_gives_no_counts():
    assert verdict([], ranks_seen=0, hosts=0) == "No sign of a hang or failure in these logs."
    assert verdict(triage([socket_warning()]), ranks_seen=0, hosts=0).startswith(
        "No hang or failure found in these logs, but worth a look: All inter-node traffic")


def test_every_kind_has_a_causal_tier():
    # A kind without a tier passes its rule's tests and then fails the first analyze that triages it.
    assert [kind for kind in Kind if kind not in CAUSAL_TIER] == []
