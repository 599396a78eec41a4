"""Small builders the finding tests share: a job from composed lines, from a simulated scenario, from a
fixture."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from conftest import FIXTURES

from nccl_logsift.pipeline import load_job
from nccl_logsift.resolve.job import Job
from nccl_logsift.simulate import Options, write


def job_of(tmp_path: Path, lines: list[str], name: str = "job.log") -> Job:
    """A job parsed from log lines written by the test."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return load_job([str(path)])


def simulate(tmp_path: Path, scenario: str, **options) -> tuple[Job, dict]:
    """A simulated scenario parsed as a job, with its ground truth (noise off unless asked for)."""
    options.setdefault("noise", False)
    out, truth = tmp_path / f"{scenario}.log", tmp_path / f"{scenario}.json"
    write(Options(scenario=scenario, **options), str(out), str(truth))
    return load_job([str(out)]), json.loads(truth.read_text())


@functools.cache
def fixture_job(name: str) -> Job:
    return load_job([str(FIXTURES / name)])


def only(findings, **attrs):
    """The one finding whose attributes equal ``attrs`` (fails, listing them all, when not exactly one)."""
    found = [f for f in findings if all(getattr(f, k) == v for k, v in attrs.items())]
    assert len(found) == 1, [(f.severity, f.ranks, f.title) for f in findings]
    return found[0]


def run(rule, job) -> list:
    """The findings of one rule class on a job."""
    return list(rule().check(job))


def serious(findings) -> list:
    """Findings at error or critical."""
    from nccl_logsift.model import Severity

    return [f for f in findings if f.severity >= Severity.ERROR]


def fixture_truth(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.truth.json").read_text())


def two_gpu_processes(stalled_rank: int | None = None, calls: int = 6) -> list[str]:
    """The lines of two processes on two nodes, each driving two GPUs from one thread (nccl-tests -g 2):
    world ranks 0, 1 in pid 10 on n0 and 2, 3 in pid 20 on n1 (NCCL 2.27 lines). A thread that drives
    several GPUs logs every call of a group with the device it set last, so every COLL line says [1].
    ``stalled_rank`` stops calling halfway."""
    lines, comms = [], {}
    for node, pid in ((0, 10), (1, 20)):
        host = f"n{node}"
        for dev in range(2):
            rank, comm = 2 * node + dev, f"0x{pid}{dev}0"
            comms[rank] = (host, pid, comm)
            for phase in ("START", "COMPLETE"):
                lines.append(
                    f"{host}:{pid}:{pid} [{dev}] NCCL INFO ncclCommInitRankConfig comm {comm} rank {rank} "
                    f"nranks 4 cudaDev {dev} nvmlDev {dev} busId {dev + 1}7000 commId 0xfeed - Init {phase}"
                )
    for n in range(calls):
        for rank, (host, pid, comm) in comms.items():
            if rank != stalled_rank or n < calls // 2:
                lines.append(
                    f"{host}:{pid}:{pid} [1] NCCL INFO AllReduce: opCount {n:x} sendbuff 0x7f00 recvbuff "
                    f"0x7f00 count 1024 datatype 7 op 0 root 0 comm {comm} [nranks=4] stream 0x5500"
                )
    return lines
