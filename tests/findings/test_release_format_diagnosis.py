"""Diagnosis on the line shapes of NCCL 2.29.2 → 2.32: the rules that read a reworded or new line still
fire, and a notice is not read as a failure."""

from __future__ import annotations

import pytest
from builders import job_of, serious, simulate

from nccl_logsift.findings import run_rules
from nccl_logsift.findings.process import ProcessExit
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
    from nccl_logsift.findings.context import load_job

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
