"""LS902 nccl-tests-failure: the benchmark's own failure line names the rank and the error; exits are
fallout."""

from __future__ import annotations

import pytest
from builders import run

from nccl_logsift.findings.nccl.nccl_tests_failure import NcclTestsFailure
from nccl_logsift.pipeline import analyze, load_job
from nccl_logsift.render.json import to_dict

HEAD = [
    "# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703",
    "# Collective test starting: all_reduce_perf",
    "# Using devices",
    "#  Rank  0 Group  0 Pid 402110 on    gpu-e07 device  0 [0x18] NVIDIA H100 80GB HBM3",
    "#  Rank  1 Group  0 Pid 402111 on    gpu-e07 device  1 [0x2a] NVIDIA H100 80GB HBM3",
    "#  Rank  2 Group  0 Pid  77120 on    gpu-e08 device  0 [0x18] NVIDIA H100 80GB HBM3",
    "#  Rank  3 Group  0 Pid  77121 on    gpu-e08 device  1 [0x2a] NVIDIA H100 80GB HBM3",
]
FAILURE = (
    "gpu-e08: Test NCCL failure common.cu:1012 'unhandled system error (run with NCCL_DEBUG=INFO for "
    "details) / socketPollConnect: Connect to 10.4.0.7<50313> returned 113(No route to host)'"
)
TRACE = [
    " .. gpu-e08 pid 77120: Test failure common.cu:1159",
    " .. gpu-e08 pid 77120: Test failure common.cu:1455",
]
OMPI = [
    "-" * 74,
    "Primary job  terminated normally, but 1 process returned",
    "a non-zero exit code. Per user-direction, the job has been aborted.",
    "-" * 74,
    "-" * 74,
    "mpirun detected that one or more processes exited with non-zero status, thus causing",
    "the job to be terminated. The first process to do so was:",
    "",
    "  Process name: [[41233,1],2]",
    "  Exit code:    3",
    "-" * 74,
]
PRRTE = [
    "-" * 74,
    "prterun detected that one or more processes exited with non-zero status,",
    "thus causing the job to be terminated. The first process to do so was:",
    "",
    "   Process name: [prterun-gpu-e07-1839021@1,2]",
    "   Exit code:    3",
    "-" * 74,
]


def write(tmp_path, lines):
    log = tmp_path / "nccl-tests.log"
    log.write_text("\n".join(lines) + "\n")
    return str(log)


@pytest.mark.parametrize("layout", ["bare", "tag-output", "pdsh"])
@pytest.mark.parametrize("block", [OMPI, PRRTE], ids=["openmpi4", "prrte"])
def test_the_failing_rank_and_its_nccl_error_are_the_root_cause(tmp_path, layout, block):
    body = [*HEAD, FAILURE, *TRACE]
    if layout == "tag-output":  # mpirun --tag-output: the failing process is rank 2
        body = [f"[1,{2 if 'gpu-e08' in line else 0}]<stdout>:{line}" for line in body]
    elif layout == "pdsh":
        body = [f"gpu-e08: {line}" if "gpu-e08" in line else line for line in body]
    report = to_dict(analyze([write(tmp_path, body + block)]))
    primary = [(f["code"], f["ranks"]) for f in report["findings"] if f["primary"]]
    assert primary == [("LS902", [2])]
    found = next(f for f in report["findings"] if f["code"] == "LS902")
    assert (
        "gpu-e08" in found["title"]
        and "No route to host" in found["title"]
        and "unhandled system error" in found["title"]
    )
    assert [f["severity"] for f in report["findings"] if f["code"] == "LS501"] == ["error"]


def test_the_exit_block_alone_places_the_failure_when_no_trace_names_a_pid(tmp_path):
    found = run(NcclTestsFailure, load_job([write(tmp_path, [*HEAD, FAILURE, *OMPI])]))
    assert [f.ranks for f in found] == [(2,)]


def test_a_host_is_named_when_no_rank_can_be(tmp_path):
    (found,) = run(
        NcclTestsFailure,
        load_job([write(tmp_path, ["node07: Test CUDA failure common.cu:962 'out of memory'"])]),
    )
    assert found.ranks == () and found.hosts == ("node07",) and "CUDA error" in found.title


def test_a_clean_run_has_no_failure(tmp_path):
    assert (
        run(
            NcclTestsFailure,
            load_job(
                [write(tmp_path, [*HEAD, "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 88.2 "])]
            ),
        )
        == []
    )


# Simulated runs: NCCL before 2.13 (no last error after " / ") and after; mpirun's block, srun's task errors,
# torchrun labels and a bare stream.
@pytest.mark.parametrize(
    "layout,nccl", [("mpirun", "2.10"), ("srun", "2.18"), ("interleaved", "2.27"), ("torchrun", "2.14")]
)
def test_simulated_nccl_tests_failures_name_the_rank_that_failed(tmp_path, layout, nccl):
    from nccl_logsift.simulate import Options
    from nccl_logsift.simulate import write as simulate_to

    out, truth = tmp_path / "job.log", tmp_path / "truth.json"
    sim = simulate_to(
        Options(scenario="nccl-tests-failure", ranks=16, layout=layout, nccl_version=nccl, seed=4),
        str(out),
        str(truth),
    )
    culprit = next(f["ranks"] for f in sim.truth["faults"] if f["primary"])
    report = to_dict(analyze([str(out)]))
    assert [(f["code"], f["ranks"]) for f in report["findings"] if f["primary"]] == [("LS902", culprit)]
    found = next(f for f in report["findings"] if f["code"] == "LS902")
    assert sim.job.notes["error"].split(" / ")[0] in found["title"]
    assert (" / " in sim.job.notes["error"]) == (nccl >= "2.13")
