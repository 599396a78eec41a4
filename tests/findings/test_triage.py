"""triage.verdict and triage.diagnose: the paragraph that leads the report, the counts it gives, and the parts
(cause, consequences, next step) it is written from."""

from __future__ import annotations

import dataclasses

import polars as pl
from builders import job_of

from nccl_logsift.findings.triage import CAUSAL_TIER, diagnose, triage, verdict
from nccl_logsift.model import Finding, Kind, Severity


def socket_warning() -> Finding:
    return Finding(
        code="LS301",
        name="transport-fallback",
        kind=Kind.TRANSPORT_FALLBACK,
        severity=Severity.WARNING,
        title=(
            "All inter-node traffic of this 2-node job (these logs show 1 of its nodes) runs over TCP sockets"
        ),
        ranks=tuple(range(8)),
        hosts=("mi300x-01",),
        first_seen=0,
    )


def test_verdict_of_warnings_counts_the_ranks_and_hosts_of_these_logs():
    """The logs may hold one node's output of a larger job; the scope says it counts the logs."""
    text = verdict(triage([socket_warning()]), ranks_seen=8, hosts=1)
    assert text == (
        "No hang or failure found in these logs (8 rank(s) on 1 host(s)): the job looks healthy, no root "
        "cause. Warnings (it works, degraded): "
        "All inter-node traffic of this 2-node job (these logs show 1 of its nodes) runs over TCP sockets."
    )


def test_verdict_without_findings_counts_the_ranks_and_hosts_of_these_logs():
    assert verdict([], ranks_seen=16, hosts=2) == (
        "No sign of a hang or failure in these logs (16 rank(s) on 2 host(s)): the job looks healthy."
    )


def test_verdict_without_known_ranks_gives_no_counts():
    healthy = "No sign of a hang or failure in these logs: the job looks healthy."
    assert verdict([], ranks_seen=0, hosts=0) == healthy
    assert verdict(triage([socket_warning()]), ranks_seen=0, hosts=0).startswith(
        "No hang or failure found in these logs: the job looks healthy, no root cause. Warnings (it works, "
        "degraded): All inter-node traffic"
    )


def info_note() -> Finding:
    return Finding(
        code="LS301",
        name="transport-fallback",
        kind=Kind.TRANSPORT_FALLBACK,
        severity=Severity.INFO,
        title="NCCL_P2P_DISABLE=1 is set",
        ranks=(0, 1),
        hosts=("dgx1",),
        first_seen=5,
    )


def error_finding(kind: Kind, first_seen: int, severity: Severity = Severity.ERROR) -> Finding:
    return Finding(
        code="LS103",
        name="x",
        kind=kind,
        severity=severity,
        title=f"{kind.value} here",
        ranks=(1,),
        hosts=("h",),
        first_seen=first_seen,
    )


def test_warnings_and_notes_of_a_working_job_name_no_root_cause_and_are_listed_apart():
    """Severity policy: a job whose worst finding is a warning is healthy; nothing is primary."""
    found = triage([info_note(), socket_warning()])
    assert not any(f.primary for f in found)
    text = verdict(found, ranks_seen=8, hosts=1)
    assert "Root cause" not in text and "the job looks healthy, no root cause" in text
    warnings = text.index("Warnings (it works, degraded): All inter-node")
    assert warnings < text.index("Worth knowing: NCCL_P2P_DISABLE")


def test_a_warning_is_never_primary_next_to_an_error():
    found = triage([socket_warning(), error_finding(Kind.WATCHDOG_TIMEOUT, 10)])
    assert [(f.kind, f.primary) for f in found] == [
        (Kind.WATCHDOG_TIMEOUT, True),
        (Kind.TRANSPORT_FALLBACK, False),
    ]
    assert verdict(found, 8, 1).startswith("Root cause: Watchdog_timeout here.")


def net_error(first_seen: int, first_time: float | None, rank: int) -> Finding:
    return Finding(
        code="LS302",
        name="net-error",
        kind=Kind.NET_ERROR,
        severity=Severity.CRITICAL,
        title=f"IB completion error on rank {rank}",
        ranks=(rank,),
        hosts=("h",),
        first_seen=first_seen,
        first_time=first_time,
    )


def test_the_first_failure_in_time_is_primary_though_its_file_comes_later():
    """Per-rank files: rank 5's file is read after rank 0's, but its error was written 4 s earlier."""
    found = triage(
        [
            net_error(first_seen=10, first_time=1_700_000_005.0, rank=0),
            net_error(first_seen=1 << 41, first_time=1_700_000_001.0, rank=5),
        ]
    )
    assert (found[0].ranks, found[0].primary) == ((5,), True)


def test_without_a_time_on_every_contender_the_line_order_decides():
    found = triage(
        [
            net_error(first_seen=10, first_time=None, rank=0),
            net_error(first_seen=1 << 41, first_time=1_700_000_001.0, rank=5),
        ]
    )
    assert found[0].ranks == (0,) and found[0].primary


def test_first_time_reads_nccl_and_pytorch_timestamps(tmp_path):
    """NCCL's WARN timestamp (2.26+) and PyTorch's glog prefix (month and day only) land on one clock."""
    job = job_of(
        tmp_path,
        [
            (
                "[2025-06-02 16:02:42] node-a:100:195 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
                "completion from peer 10.0.0.2<5000> with status=12 opcode=0 len=0 vendor err 129 (Send)"
            ),
            (
                "[rank1]:[E602 16:02:40.500000000 ProcessGroupNCCL.cpp:689] [Rank 1] Watchdog caught "
                "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                "Timeout(ms)=600000) ran for 600010 milliseconds before timing out."
            ),
        ],
    )
    nccl = job.first_time(pl.DataFrame({"source_id": [0], "line_no": [1]}))
    torch = job.first_time(pl.DataFrame({"source_id": [0], "line_no": [2]}))
    assert nccl is not None and torch is not None and nccl - torch == 1.5


def test_every_kind_has_a_causal_tier():
    # A kind without a tier passes its rule's tests and then fails the first analyze that triages it.
    assert [kind for kind in Kind if kind not in CAUSAL_TIER] == []


def test_diagnosis_splits_the_cause_from_its_consequences_and_takes_the_causes_advice():
    cause = dataclasses.replace(net_error(first_seen=5, first_time=None, rank=3), advice="Check the link.")
    timeout = error_finding(Kind.WATCHDOG_TIMEOUT, 9)
    found = triage([timeout, socket_warning(), cause])
    diagnosis = diagnose(found)
    assert not diagnosis.healthy
    assert diagnosis.cause.code == "LS302" and diagnosis.cause.ranks == (3,)
    assert [f.kind for f in diagnosis.consequences] == [Kind.WATCHDOG_TIMEOUT]  # the warning is neither
    assert diagnosis.next_step == "Check the link."
    # The paragraph says what the parts say.
    text = verdict(found, 8, 1)
    assert text.startswith("Root cause: IB completion error on rank 3.")
    assert "Consequences reported after it: watchdog timeout." in text and text.endswith(
        "Next: Check the link."
    )


def test_diagnosis_of_a_working_job_has_no_cause_and_keeps_warnings_apart_from_notes():
    diagnosis = diagnose(triage([info_note(), socket_warning()]))
    assert diagnosis.healthy and diagnosis.cause is None and diagnosis.consequences == ()
    assert [f.severity for f in diagnosis.warnings] == [Severity.WARNING]
    assert [f.severity for f in diagnosis.notes] == [Severity.INFO]
    assert diagnosis.next_step == ""
