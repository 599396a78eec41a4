"""LS901 nccl-error: composed WARN lines and return-code chains, PyTorch NCCL errors, fixtures, corpus."""

from __future__ import annotations

import pytest
from builders import job_of, only
from conftest import FIXTURES

from nccl_logsift.findings.nccl.nccl_error import NcclError
from nccl_logsift.model import Kind, Severity
from nccl_logsift.pipeline import load_job

COMM_ID = "0x2c3d4e5f60718293"


def init(host: str, pid: int, rank: int, nranks: int = 2) -> list[str]:
    tid, dev = pid + 90, rank
    line = (
        f"{host}:{pid}:{tid} [{dev}] NCCL INFO ncclCommInitRank comm 0x55{rank}0 rank {rank} nranks {nranks} "
        f"cudaDev {dev} nvmlDev {dev} busId {dev + 1}b000 commId {COMM_ID}"
    )
    return [f"{line} - Init START", f"{line} - Init COMPLETE"]


BASE = init("dgx1", 3001, 0) + init("dgx1", 3002, 1)
FAILED = ["srun: error: dgx1: task 0: Aborted (core dumped)"]


def check(job):
    return list(NcclError().check(job))


def warn(host: str, pid: int, dev: int, site: str, text: str) -> list[str]:
    return ["", f"{host}:{pid}:{pid + 95} [{dev}] {site} NCCL WARN {text}"]


def chain(host: str, pid: int, dev: int, *sites_codes: tuple[str, int]) -> list[str]:
    return [f"{host}:{pid}:{pid + 95} [{dev}] NCCL INFO {site} -> {code}" for site, code in sites_codes]


# ---------------------------------------------------------------------------------------------- composed
def test_ls901_proxy_failure_in_a_failed_job_is_an_error_with_its_decoded_return_code(tmp_path):
    lines = (
        BASE
        + warn(
            "dgx1",
            3001,
            0,
            "proxy.cc:1488",
            "[Proxy Service 0] Failed to execute operation Connect from rank 1, retcode 3",
        )
        + chain("dgx1", 3001, 0, ("proxy.cc:1521", 3), ("proxy.cc:1544", 3))
        + FAILED
    )
    finding = only(check(job_of(tmp_path, lines)))
    assert finding.kind == Kind.NCCL_ERROR and finding.severity == Severity.ERROR and finding.ranks == (0,)
    assert "Failed to execute operation Connect" in finding.title and "ncclInternalError (3)" in finding.title
    assert len(finding.evidence) == 3


def test_ls901_the_same_error_on_two_ranks_is_one_finding(tmp_path):
    lines = BASE
    for pid, dev in ((3001, 0), (3002, 1)):
        lines = lines + warn(
            "dgx1", pid, dev, "proxy.cc:1078", f"Proxy Call to rank {1 - dev} failed (Connect)"
        )
        lines = lines + chain("dgx1", pid, dev, ("proxy.cc:1080", 2))
    finding = only(check(job_of(tmp_path, lines + FAILED)))
    assert finding.ranks == (0, 1) and "(2 times)" in finding.title and "ncclSystemError (2)" in finding.title


def test_ls901_async_error_state_is_decoded(tmp_path):
    lines = (
        BASE
        + warn("dgx1", 3002, 1, "init.cc:2147", "ncclCommSetAsyncError: error comm 0x5510 sets state 6")
        + FAILED
    )
    finding = only(check(job_of(tmp_path, lines)))
    assert (
        finding.ranks == (1,)
        and "ncclRemoteError (6)" in finding.title
        and finding.severity == Severity.ERROR
    )


def test_ls901_proxy_teardown_noise_is_info(tmp_path):
    lines = (
        BASE
        + chain("dgx1", 3001, 0, ("misc/socket.cc:47", 3), ("misc/socket.cc:752", 3))
        + warn(
            "dgx1",
            3001,
            0,
            "proxy.cc:1497",
            "[Service thread] Could not receive type from localRank 1, res=3, closed=0",
        )
        + warn(
            "dgx1",
            3001,
            0,
            "proxy.cc:1521",
            "[Proxy Service 1] Failed to execute operation Close from rank 1, retcode 3",
        )
    )
    finding = only(check(job_of(tmp_path, lines)))
    assert finding.severity == Severity.INFO and "torn down" in finding.title


def test_ls901_leaves_ib_errors_and_their_chains_to_ls302(tmp_path):
    lines = (
        BASE
        + warn(
            "dgx1",
            3001,
            0,
            "transport/net_ib.cc:1696",
            "NET/IB : Got completion from peer 10.0.0.2<43211> "
            "with status=12 opcode=0 len=0 vendor err 129 (Send)",
        )
        + chain("dgx1", 3001, 0, ("transport/net_ib.cc:1715", 6), ("transport/net.cc:1134", 6))
        + FAILED
    )
    assert check(job_of(tmp_path, lines)) == []


def test_ls901_chain_without_a_warn_in_a_running_job_is_a_warning(tmp_path):
    lines = BASE + chain("dgx1", 3002, 1, ("transport/net_ib.cc:708", 2))
    finding = only(check(job_of(tmp_path, lines)))
    assert (
        finding.severity == Severity.WARNING
        and "no WARN" in finding.title
        and "ncclSystemError (2)" in finding.title
    )


def test_ls901_unknown_warn_of_a_job_that_did_not_fail_is_a_warning(tmp_path):
    lines = BASE + warn(
        "dgx1", 3001, 0, "msccl.cc:63", "MSCCL++: Cannot enable MSCCL++; environment is not MSCCL compatible"
    )
    finding = only(check(job_of(tmp_path, lines)))
    assert finding.severity == Severity.WARNING and "no other sign of failure" in finding.title


def test_ls901_pytorch_nccl_error_is_reported_per_error_with_its_code(tmp_path):
    lines = BASE + [
        "[rank1]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version "
        "2.21.5",
        "[rank1]: ncclInvalidArgument: Invalid value for an argument.",
    ]
    finding = only(check(job_of(tmp_path, lines)))
    assert finding.ranks == (1,) and finding.severity == Severity.ERROR
    assert "'invalid argument'" in finding.title and "ncclInvalidArgument" in finding.title


# ---------------------------------------------------------------------------------------------- fixtures
def test_ls901_cuda_oom_fixture_reports_pytorch_errors_as_consequences():
    findings = check(load_job([str(FIXTURES / "cuda_oom_4ranks.log")]))
    assert {f.ranks for f in findings} == {(0,), (1, 3)}
    assert all(f.severity == Severity.WARNING for f in findings)


def test_ls901_duplicate_gpu_invalid_usage_is_reported():
    finding = only(check(load_job([str(FIXTURES / "duplicate_gpu_4ranks_per_rank")])))
    assert "invalid usage" in finding.title and "ncclInvalidUsage" in finding.title


def test_ls901_healthy_fixture_has_no_nccl_error():
    assert check(load_job([str(FIXTURES / "healthy_8ranks.log")])) == []


# ---------------------------------------------------------------------------------------------- real corpus


def test_corpus_oracle_teardown_warns_at_512_ranks_are_one_info_finding(corpus_job):
    finding = only(
        check(
            corpus_job(
                "mlcommons__training_results_v4.1__Oracle__results__512xBM.GPU.H100.8__llama2_70b_lora__result_2.txt"
            )
        )
    )
    assert finding.severity == Severity.INFO and len(finding.ranks) == 512


@pytest.mark.parametrize(
    "name",
    [
        "mlcommons__training_results_v5.1__Dell__results__1xXE9680x8H200-SXM-141GB__retinanet__result_0.txt",
        "mlcommons__training_results_v5.1__Dell__results__2xXE9685Lx8B200-SXM-180GB__retinanet__result_1.txt",
        "mlcommons__training_results_v2.0__Azure__results__ND96amsr_A100_v4_n8_pytorch__bert__result_7.txt",
        "mlcommons__training_results_v5.1__MangoBoost__results__MI300X-LLMBoost-GPUBoost-2node__llama2_70b_lora__result_5.txt",
        "mlcommons__training_results_v5.1__MangoBoost__results__MI325X-LLMBoost-GPUBoost-2node__llama2_70b_lora__result_0.txt",
        "mlcommons__training_results_v5.1__Dell__results__2xXE9685Lx8B200-SXM-180GB__llama31_8b__result_0.txt",
        "Z-Y00__ROCM-sdma-rccl-test__bench__blog_results__rccl_tests_ag_size_128m_4g.log",
    ],
    ids=lambda n: n[:55],
)
def test_corpus_healthy_runs_get_no_nccl_error_above_warning(corpus_job, name):
    assert [f.title for f in check(corpus_job(name)) if f.severity >= Severity.ERROR] == []


def test_corpus_podman_ofi_failure_chains_are_left_to_ls302(corpus_job):
    assert (
        check(corpus_job("sparticlesteve__podman-nccl-testing__logs__podman-nccl-tests-30743802.out")) == []
    )
