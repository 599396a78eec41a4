"""Diagnosis on the line shapes of NCCL 2.29.2 → 2.32: the rules that read a reworded or new line still
fire, and a notice is not read as a failure."""

from __future__ import annotations

import pytest
from builders import job_of, serious, simulate

from nccl_logsift.findings import run_rules
from nccl_logsift.findings.process.process_exit import ProcessExit
from nccl_logsift.model import Kind


def test_a_node_failure_names_the_ranks_of_a_host_nccl_prints_with_percent_and_slash_rewritten(tmp_path):
    """From 2.29.2 NCCL logs a host "gpu%07" as "gpu-07" (src/debug.cc getHostNameForLog); Slurm prints the
    name as it is."""
    lines = []
    for node, host in enumerate(("gpu-07", "rack-2-gpu-08")):
        for dev in range(2):
            rank, pid = 2 * node + dev, 700 + 10 * node + dev
            lines += [
                f"{host}:{pid}:{pid} [{dev}] NCCL INFO NCCL version 2.29.2+cuda12.9",
                f"{host}:{pid}:{pid} [{dev}] NCCL INFO ncclCommInitRankConfig comm 0x55{pid}0 rank {rank} "
                f"nranks 4 cudaDev {dev} nvmlDev {dev} busId {dev + 1}8000 commId 0xabc - Init COMPLETE",
            ]
    lines += ["srun: error: Node failure on gpu%07", "srun: error: Node failure on rack/2/gpu-08.cluster"]
    found = sorted((f.ranks, f.hosts) for f in ProcessExit().check(job_of(tmp_path, lines)))
    assert found == [((0, 1, 2, 3), ("gpu-07", "rack-2-gpu-08"))]


def with_attn_lines(path, texts: list[str]) -> None:
    """Add, after each process's first NCCL line, ATTN notices in the form after 2.30.7 (a blank line, a
    timestamp, file:line (func))."""
    out, seen = [], set()
    for line in path.read_text().splitlines():
        out.append(line)
        head = line.split(" NCCL INFO ", 1)[0] if " NCCL INFO " in line else None
        if head and head not in seen and "[" in head:
            seen.add(head)
            label, _, envelope = head.rpartition(": ") if ": " in head else ("", "", head)
            prefix = f"{label}: " if label else ""
            for text in texts:
                out += [
                    prefix,
                    f"{prefix}[2026-08-03 10:15:42] {envelope} transport/net_ib/init.cc:611 (ncclIbInit) "
                    f"NCCL ATTN {text}",
                ]
    path.write_text("\n".join(out) + "\n")


# Notices worded like failures: an ATTN line is "noteworthy, not an error" whatever it says.
NOTICES = [
    "NET/IB : Call to ibv_open_device failed for mlx5_4, skipping this NIC",
    "Connection closed by remote peer 10.1.2.3<4444> during the topology probe; retrying",
]


@pytest.mark.parametrize("layout", ["srun", "per-rank"])
def test_attn_notices_worded_like_failures_leave_a_healthy_job_healthy(tmp_path, layout):
    from nccl_logsift.simulate import Options, write

    out, truth = tmp_path / "healthy", tmp_path / "healthy.json"
    write(Options(scenario="healthy", layout=layout, nccl_version="2.30", noise=False), str(out), str(truth))
    for path in [out] if out.is_file() else sorted(p for p in out.rglob("*") if p.is_file()):
        with_attn_lines(path, NOTICES)
    from nccl_logsift.pipeline import load_job

    paths = [str(out)] if out.is_file() else [str(p) for p in sorted(out.rglob("*")) if p.is_file()]
    job = load_job(paths)
    assert job.table("notes").filter(job.table("notes")["level"] == "ATTN").height > 0
    assert serious(run_rules(job)) == []


def test_an_ib_error_of_2_30_7_among_attn_notices_is_still_the_root_cause(tmp_path):
    out = tmp_path / "ib.log"
    from nccl_logsift.simulate import Options, write

    write(
        Options(scenario="ib-error", ranks=8, layout="srun", nccl_version="2.30", noise=False),
        str(out),
        str(tmp_path / "ib.json"),
    )
    with_attn_lines(out, NOTICES)
    from nccl_logsift.pipeline import analyze

    report = analyze([str(out)])
    lead = next(f for f in report.findings if f.primary)
    assert lead.kind is Kind.NET_ERROR and lead.ranks == (3,) and "IB completion error" in lead.title
    assert "(ncclIbLogCompletionWithError)" in out.read_text()


@pytest.mark.parametrize("seed", [200, 201, 203])
def test_a_healthy_interleaved_job_of_2_30_without_teardown_lines_has_nothing_serious(tmp_path, seed):
    """2.30.3+ prints no Destroy line by default; with a COLL line torn in the shared stream, the calls that
    end right after the shifted position are the normal end of the run, not a hang."""
    job, _ = simulate(tmp_path, "healthy", ranks=8, layout="interleaved", nccl_version="2.30", seed=seed)
    assert serious(run_rules(job)) == []


# ------------------------------------------------------------------------------------------ PyTorch 2.13
def findings_of(tmp_path, scenario: str, ranks: int, layout: str, torch: str) -> list[tuple]:
    from nccl_logsift.pipeline import analyze
    from nccl_logsift.simulate import Options, write

    out = tmp_path / f"{scenario}-{torch}"
    options = Options(
        scenario=scenario, ranks=ranks, layout=layout, nccl_version="2.27", torch_version=torch, seed=7
    )
    write(options, str(out), str(tmp_path / f"{scenario}-{torch}.json"))
    report = analyze([str(out)])
    return [(f.code, f.severity, f.primary, f.ranks, f.title) for f in report.findings]


@pytest.mark.parametrize(
    "scenario, ranks, layout",
    [
        ("rank-stall", 32, "torchrun"),  # tensor, pipeline and data parallel groups
        ("pp-deadlock", 16, "srun"),
        ("collective-mismatch", 8, "torchrun"),
        ("ib-error", 8, "srun"),
    ],
)
def test_watchdog_lines_of_pytorch_2_13_give_the_verdict_of_the_2_8_form(tmp_path, scenario, ranks, layout):
    """PyTorch 2.13 prefixes WorkNCCL's timeout and take-down lines with "[PG GUID g(desc) Rank N]" instead of
    "[Rank N]" (PR #191440): the same job logged by 2.8 and by 2.13 gets the same findings, its timeouts
    grouped under the same process groups."""
    old = findings_of(tmp_path, scenario, ranks, layout, "2.8")
    new = findings_of(tmp_path, scenario, ranks, layout, "2.13")
    assert new == old
    assert any(code == "LS103" for code, *_ in new)


def test_a_2_13_timeout_line_is_read_with_its_guid_and_grouped_by_the_pg_id_of_the_next_line(tmp_path):
    from nccl_logsift.findings.progress.watchdog_timeout import WatchdogTimeout

    lines = []
    for rank, pg_rank in ((4, 0), (5, 1)):
        stamp = f"[rank{rank}]:[E0812 04:51:07.31055291{rank} ProcessGroupNCCL.cpp"
        group = f"PG GUID 9(TENSOR_MODEL_PARALLEL_GROUP) Rank {pg_rank}"
        lines += [
            f"{stamp}:684] [{group}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12, "
            "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600071 "
            "milliseconds before timing out.",
            f"{stamp}:1771] [PG ID 3 {group}]  failure detected by watchdog at work sequence id: 12 "
            "PG status: last enqueued work: 12, last completed work: 11",
        ]
    (finding,) = WatchdogTimeout().check(job_of(tmp_path, lines))
    assert finding.ranks == (4, 5)
    assert finding.title.startswith("2 rank(s) of process group 3 (TENSOR_MODEL_PARALLEL_GROUP) hit")
