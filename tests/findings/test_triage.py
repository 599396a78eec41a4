"""triage.verdict: the paragraph that leads the report, and the counts it gives."""

from __future__ import annotations

from nccl_logsift.findings.triage import triage, verdict
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
        "No hang or failure found in these logs (8 rank(s) on 1 host(s)): the job looks healthy, no root cause. "
        "Warnings (it works, degraded): "
        "All inter-node traffic of this 2-node job (these logs show 1 of its nodes) runs over TCP sockets."
    )


def test_verdict_without_findings_counts_the_ranks_and_hosts_of_these_logs():
    assert verdict([], ranks_seen=16, hosts=2) == (
        "No sign of a hang or failure in these logs (16 rank(s) on 2 host(s)): the job looks healthy.")


def test_verdict_without_known_ranks_gives_no_counts():
    assert verdict([], ranks_seen=0, hosts=0) == "No sign of a hang or failure in these logs: the job looks healthy."
    assert verdict(triage([socket_warning()]), ranks_seen=0, hosts=0).startswith(
        "No hang or failure found in these logs: the job looks healthy, no root cause. Warnings (it works, degraded): "
        "All inter-node traffic")


def info_note() -> Finding:
    return Finding(
        code="LS301", name="transport-fallback", kind=Kind.TRANSPORT_FALLBACK, severity=Severity.INFO,
        title="NCCL_P2P_DISABLE=1 is set", ranks=(0, 1), hosts=("dgx1",), first_seen=5,
    )


def error_finding(kind: Kind, first_seen: int, severity: Severity = Severity.ERROR) -> Finding:
    return Finding(code="LS103", name="x", kind=kind, severity=severity, title=f"{kind.value} here", ranks=(1,),
                   hosts=("h",), first_seen=first_seen)


def test_warnings_and_notes_of_a_working_job_name_no_root_cause_and_are_listed_apart():
    """Severity policy: a job whose worst finding is a warning is healthy; nothing is primary."""
    found = triage([info_note(), socket_warning()])
    assert not any(f.primary for f in found)
    text = verdict(found, ranks_seen=8, hosts=1)
    assert "Root cause" not in text and "the job looks healthy, no root cause" in text
    assert text.index("Warnings (it works, degraded): All inter-node") < text.index("Worth knowing: NCCL_P2P_DISABLE")


def test_a_warning_is_never_primary_next_to_an_error():
    found = triage([socket_warning(), error_finding(Kind.WATCHDOG_TIMEOUT, 10)])
    assert [(f.kind, f.primary) for f in found] == [(Kind.WATCHDOG_TIMEOUT, True), (Kind.TRANSPORT_FALLBACK, False)]
    assert verdict(found, 8, 1).startswith("Root cause: Watchdog_timeout here.")
