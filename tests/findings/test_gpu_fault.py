"""LS401 cuda-error for GPU faults that only the watchdog (and the driver's Xid line) report."""

from __future__ import annotations

import pytest
from builders import run, simulate

from nccl_logsift.findings.placement.cuda_error import CudaError
from nccl_logsift.model import Severity
from nccl_logsift.pipeline import analyze, load_job
from nccl_logsift.render.json import to_dict
from nccl_logsift.simulate import Options, write


# Watchdog generations: "what():" only (<= 2.1), "[Rank N] NCCL watchdog thread terminated" (2.2), "[PG … Rank
# N] Process group watchdog thread terminated" (2.3+); layouts with and without launcher labels.
@pytest.mark.parametrize(
    "layout,nccl,torch,ranks",
    [
        ("srun", "2.18", "2.1", 8),
        ("torchrun", "2.14", "2.0", 8),
        ("interleaved", "2.21", "2.2", 8),
        ("mpirun", "2.21", "2.5", 16),
        ("interleaved", "2.27", "2.8", 16),
        ("per-rank", "2.26", "2.7", 8),
    ],
)
def test_the_rank_whose_gpu_failed_outranks_the_peers_that_time_out(tmp_path, layout, nccl, torch, ranks):
    out, truth = tmp_path / "job", tmp_path / "truth.json"
    sim = write(
        Options(
            scenario="gpu-fault", layout=layout, nccl_version=nccl, torch_version=torch, ranks=ranks, seed=2
        ),
        str(out),
        str(truth),
    )
    culprit = next(f["ranks"] for f in sim.truth["faults"] if f["primary"])
    report = to_dict(analyze([str(out)]))
    primaries = [(f["code"], f["ranks"]) for f in report["findings"] if f["primary"]]
    assert primaries == [("LS401", culprit)]
    for fault in (f for f in sim.truth["faults"] if not f["primary"]):
        assert any(f["kind"] == fault["kind"] and not f["primary"] for f in report["findings"])


def test_an_xid_names_the_rank_on_that_gpu_and_joins_its_cuda_error(tmp_path):
    job, truth = simulate(tmp_path, "gpu-fault", ranks=16, layout="mpirun", nccl_version="2.21", seed=1)
    (found,) = run(CudaError, job)
    assert list(found.ranks) == truth["faults"][0]["ranks"]
    assert "Xid 48" in found.title and "drain" in found.advice
    assert any("NVRM: Xid" in e.text for e in found.evidence)


def test_an_xid_alone_is_a_gpu_fault_of_the_rank_on_that_gpu(tmp_path):
    # No CUDA error printed (the process was stuck in a kernel): the peers time out, the driver names the GPU.
    job, _ = simulate(tmp_path, "rank-stall", ranks=8, seed=3, layout="srun", nccl_version="2.18")
    stalled = [r for r in range(8) if r not in {int(x) for x in job.table("torch")["pg_rank"].drop_nulls()}]
    proc = job.processes.filter(job.processes["global_rank"] == stalled[0]).row(0, named=True)
    v = int(proc["bus_id"].replace(":", "").replace(".", ""), 16)
    log = tmp_path / "rank-stall.log"
    log.write_text(
        log.read_text()
        + f"[ 8841.203311] NVRM: Xid (PCI:{v >> 20:04x}:{(v >> 12) & 0xFF:02x}:{(v >> 4) & 0xFF:02x}): 79, "
        "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )
    (found,) = run(CudaError, load_job([str(log)]))
    assert found.ranks == tuple(stalled) and found.severity is Severity.CRITICAL
    assert "GPU fault (Xid 79: GPU has fallen off the bus)" in found.title


def test_driver_shutting_down_in_the_watchdog_is_not_a_gpu_fault(tmp_path):
    log = tmp_path / "exit.log"
    log.write_text(
        "[PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with exception: "
        "CUDA error: driver shutting down\n"
    )
    assert run(CudaError, load_job([str(log)])) == []


def test_an_unlabelled_what_line_takes_the_rank_of_the_gpu_the_driver_names(tmp_path):
    # PyTorch 2.0 on a bare stream: "what():  CUDA error: …" carries no rank; the Xid line's pid names it.
    job, truth = simulate(tmp_path, "gpu-fault", layout="interleaved", nccl_version="2.14", seed=5)
    assert "NVRM: Xid" in (tmp_path / "gpu-fault.log").read_text()
    (found,) = run(CudaError, job)
    assert (
        list(found.ranks) == truth["faults"][0]["ranks"]
        and "CUDA error: an illegal memory access" in found.title
    )
