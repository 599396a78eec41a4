"""Logs with no NCCL line at all (NCCL_DEBUG unset): PyTorch's, Python's and the launcher's lines alone
diagnose."""

from __future__ import annotations

import pytest

from nccl_logsift.pipeline import analyze, load_job
from nccl_logsift.render.html import render_html
from nccl_logsift.render.json import to_dict
from nccl_logsift.resolve.exits import assemble_exits
from nccl_logsift.simulate import Options, write
from tests.render.dom import parse

WATCHDOG = (
    "[rank{r}]:[E602 14:30:00.{r}23456789 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
    "Timeout(ms)=1800000) ran for 18000{r}2 milliseconds before timing out."
)
SIGKILL = (
    "[2025-06-02 14:{m}:01,002] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3', '-u', "
    "'train.py', '--local_rank={l}', '--deepspeed', 'ds.json'] exits with return code = {c}"
)


def deepspeed_log(tmp_path):
    """DeepSpeed over pdsh, 2 nodes x 2 GPUs: rank 2 (gpu-b, local rank 0) raises a CUDA error, ranks 0 and 1
    time out waiting for it, each node's launcher reports its first failed worker."""
    lines = [
        (
            "gpu-a: [2025-06-02 14:00:01,123] [INFO] [launch.py:146:main] WORLD INFO DICT: {'gpu-a': [0, 1], "
            "'gpu-b': [0, 1]}"
        ),
        "gpu-b: [rank2]: Traceback (most recent call last):",
        'gpu-b: [rank2]:   File "/workspace/train.py", line 88, in <module>',
        "gpu-b: [rank2]:     loss.backward()",
        "gpu-b: [rank2]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "gpu-b: [2025-06-02 14:00:59,000] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 4242",
        "gpu-b: " + SIGKILL.format(m="00", l=0, c=1),
        "gpu-a: " + WATCHDOG.format(r=0),
        "gpu-a: " + WATCHDOG.format(r=1),
        "gpu-a: " + SIGKILL.format(m="30", l=1, c=-6),
    ]
    log = tmp_path / "deepspeed.log"
    log.write_text("\n".join(lines) + "\n")
    return str(log)


def test_the_rank_that_raised_is_the_root_cause_and_the_timeouts_follow(tmp_path):
    report = to_dict(analyze([deepspeed_log(tmp_path)]))
    assert [(f["code"], f["ranks"]) for f in report["findings"] if f["primary"]] == [("LS401", [2])]
    timeouts = [f for f in report["findings"] if f["code"] == "LS103" or f["kind"] == "watchdog_timeout"]
    assert all(not f["primary"] for f in timeouts)


def test_deepspeeds_sigkill_handler_reports_the_failed_worker_by_local_rank(tmp_path):
    exits = assemble_exits(load_job([deepspeed_log(tmp_path)]).table("exits"))
    ds = exits.filter(exits["origin"] == "deepspeed").sort("line_no")
    assert ds.select("local_rank", "exit_code", "signal", "script").rows() == [
        (0, 1, None, "train.py"),
        (1, -6, "SIGABRT", "train.py"),
    ]


# Simulated jobs run without NCCL_DEBUG: only PyTorch's watchdog and tracebacks, Python's exceptions and the
# launcher's exit reports are left, across launchers and releases.
@pytest.mark.parametrize(
    "scenario,layout,nccl",
    [
        ("gpu-fault", "srun", "2.18"),
        ("gpu-fault", "torchrun", "2.27"),
        ("debug-mismatch", "interleaved", "2.21"),
        ("debug-mismatch", "srun", "2.14"),
        ("segfault", "torchrun", "2.14"),
        ("collective-mismatch", "srun", "2.21"),
        ("rank-stall", "torchrun", "2.27"),
        ("init-hang", "srun", "2.18"),
    ],
)
def test_simulated_jobs_without_nccl_lines_are_diagnosed_per_their_truth(tmp_path, scenario, layout, nccl):
    out, truth = tmp_path / "job.log", tmp_path / "truth.json"
    options = Options(scenario=scenario, layout=layout, nccl_version=nccl, nccl_debug=False, seed=2)
    sim = write(options, str(out), str(truth))
    assert " NCCL INFO " not in out.read_text()
    report = to_dict(analyze([str(out)]))
    primaries = [(f["kind"], f["ranks"]) for f in report["findings"] if f["primary"]]
    wanted = [(f["kind"], f["ranks"]) for f in sim.truth["faults"] if f["primary"]]
    assert primaries == wanted


# A rank stuck outside NCCL in a job of tensor/pipeline/data-parallel groups: its group's peers time out in
# their group, the other groups' ranks later in theirs, and no group holds most of the world. The silent
# member is the rank of the world that timed out nowhere (it was named in none of these before).
@pytest.mark.parametrize(
    "layout,nccl,seed",
    [("interleaved", "2.21", 1), ("interleaved", "2.27", 3), ("srun", "2.27", 2), ("torchrun", "2.27", 5)],
)
def test_the_silent_member_of_a_stuck_sub_group_is_the_root_cause(tmp_path, layout, nccl, seed):
    out, truth = tmp_path / "job.log", tmp_path / "truth.json"
    options = Options(
        scenario="rank-stall",
        layout=layout,
        nccl_version=nccl,
        ranks=16,
        nodes=2,
        nccl_debug=False,
        seed=seed,
    )
    sim = write(options, str(out), str(truth))
    report = to_dict(analyze([str(out)]))
    primaries = [(f["kind"], f["ranks"]) for f in report["findings"] if f["primary"]]
    assert primaries == [(f["kind"], f["ranks"]) for f in sim.truth["faults"] if f["primary"]]
    # Its peers' timeouts are still reported, as consequences.
    assert any(f["code"] == "LS103" and not f["primary"] for f in report["findings"])


# Without NCCL lines no Init line ties a process to its host: the hosts are those the launcher names, in its
# exit reports (srun -l, torchrun's failure summary, mpirun) or its line prefixes (pdsh), cut to the short
# name NCCL would print.
@pytest.mark.parametrize(
    "scenario,layout,named",
    [
        ("rank-stall", "srun", 2),  # srun reports the aborted tasks of both nodes
        ("rank-stall", "torchrun", 2),  # each node's agent writes a failure summary
        ("segfault", "mpirun", 1),  # mpirun reports the first process that died, on one node
    ],
)
def test_the_job_summary_counts_the_hosts_the_launcher_names(tmp_path, scenario, layout, named):
    out, truth = tmp_path / "job.log", tmp_path / "truth.json"
    options = Options(scenario=scenario, layout=layout, ranks=16, nccl_debug=False, seed=0)
    sim = write(options, str(out), str(truth))
    report = analyze([str(out)])
    assert len(report.job.hosts) == named and set(report.job.hosts) <= set(sim.truth["hosts"])
    facts = parse(render_html(report)).by_id("facts")
    assert f"{named} host(s)" in " ".join(facts.text.split())


def test_pdsh_prefixes_name_the_hosts_of_a_deepspeed_job(tmp_path):
    report = analyze([deepspeed_log(tmp_path)])
    assert report.job.hosts == ("gpu-a", "gpu-b")
    assert "3 rank(s) on 2 host(s)" not in report.verdict  # a failed job's verdict gives no counts
    assert report.diagnosis.cause.ranks == (2,)


def test_an_address_in_an_exit_report_is_not_counted_as_a_host(tmp_path):
    log = tmp_path / "mpirun.log"
    log.write_text(
        "mpirun noticed that process rank 3 with PID 55120 on node 10.0.4.17 exited on signal 9 (Killed).\n"
        "srun: error: gpu-d02.cluster.local: task 1: Exited with exit code 1\n"
    )
    assert analyze([str(log)]).job.hosts == ("gpu-d02",)
