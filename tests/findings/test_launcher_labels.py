"""A launcher's label names a rank only where the logs prove it: an srun task that drives several GPUs is a
process, and its task number is not the rank of that number (which may live on another host)."""

from __future__ import annotations

from pathlib import Path

from nccl_logsift.pipeline import analyze, load_job
from nccl_logsift.resolve.ranks import label_maps
from tests.simulate.simhelp import run as simulate


def two_gpus_a_task(path: Path) -> Path:
    """srun -l of 2 tasks on 2 nodes, each driving 2 GPUs (ranks 0-1 in task 0 on nodeA, 2-3 in task 1 on
    nodeB); task 1 dies of an uncaught CUDA error."""
    hosts = {0: ("nodeA", 5100), 1: ("nodeB", 6100)}
    lines = []
    for phase in ("START", "COMPLETE"):
        for task, (host, pid) in hosts.items():
            for dev in (0, 1):
                lines.append(
                    f"{task}: {host}:{pid}:{pid + 10 + dev} [{dev}] NCCL INFO ncclCommInitRank comm "
                    f"0x55d0000{task}{dev}0 rank {2 * task + dev} nranks 4 cudaDev {dev} nvmlDev {dev} "
                    f"busId {dev + 1}000 commId 0x1234abcd - Init {phase}"
                )
    lines += [
        "0: step 1 loss 2.5",
        "1: Traceback (most recent call last):",
        '1:   File "/workspace/train.py", line 88, in <module>',
        "1:     main()",
        "1: RuntimeError: CUDA error: an illegal memory access was encountered",
        "srun: error: nodeB: task 1: Exited with exit code 1",
        "srun: error: nodeA: task 0: Terminated",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_task_that_drives_several_gpus_is_its_process_not_the_rank_of_its_number(tmp_path):
    log = two_gpus_a_task(tmp_path / "job.log")
    assert label_maps(load_job([str(log)]))["task"] == {0: 0, 1: 2}
    report = analyze([str(log)], views=False)
    blamed = [f for f in report.findings if f.primary]
    # Before: "rank 1 (nodeA, pid 5100, GPU 1) hit a CUDA error" -- task 1's number, on the other host.
    assert blamed and all(f.hosts == ("nodeB",) and f.ranks == (2,) for f in blamed)
    assert "nodeA" not in report.verdict


def test_a_task_per_gpu_is_its_rank(tmp_path):
    log, _ = simulate(tmp_path, scenario="rank-stall", layout="srun", ranks=8, nodes=2)
    assert label_maps(load_job([str(log)]))["task"] is None  # proven equal on every process
