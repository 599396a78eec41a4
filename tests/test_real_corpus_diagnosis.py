"""logsift analyze on every real log: it runs, healthy production runs get no error, real failures are named.

The expectations restate what ../shared/corpus/real/SOURCES.md says about each log; skipped when absent.
"""

from __future__ import annotations

import functools

import pytest
from conftest import CORPUS, CORPUS_ABSENT, corpus_files

from nccl_logsift.pipeline import analyze
from nccl_logsift.render.json import to_dict

FILES = corpus_files()
pytestmark = pytest.mark.skipif(not FILES, reason=CORPUS_ABSENT)

HEALTHY = [
    "KeitaW__p5-nccl-test-2024-07-19__nccl-test-output-v2.22.3-1.log",
    "aws-samples__awsome-distributed-training",
    "bigscience-workshop__bigscience__experiments__bandwidth__all_reduce_bench-a100-n4",
    "bigscience-workshop__bigscience__experiments__bandwidth__n16_32gb",
    "bigscience-workshop__bigscience__experiments__gpt2-meg-ds-3d-old",
    "mlcommons__training_results_v1.1__Dell",
    "mlcommons__training_results_v2.0__Azure__results__ND96amsr_A100_v4_n16",
    "mlcommons__training_results_v2.0__Azure__results__ND96amsr_A100_v4_n8",
    "mlcommons__training_results_v2.0__Dell",
    "mlcommons__training_results_v3.1__Dell__results__2xXE8640",
    "mlcommons__training_results_v3.1__Dell__results__XE9640",
    "mlcommons__training_results_v4.1__Clemson",
    "mlcommons__training_results_v4.1__Oracle",
    "mlcommons__training_results_v5.1__Dell__results__1xXE9680",
    "mlcommons__training_results_v5.1__Dell__results__2xXE9685Lx8B200-SXM-180GB__llama31_8b",
    "mlcommons__training_results_v5.1__Dell__results__2xXE9685Lx8B200-SXM-180GB__retinanet",
    "sparticlesteve__podman-nccl-testing__logs__shifter",
    "thomaslie210__NCCL_Test_Results__NCCL_Benchmarks__GDR_On",
    "Timez-zx__nccl-tests__nccl.log",
    # Runs that completed on a slower or reduced path: degraded, not failed (SOURCES.md #3, 10, 13, 17, 29,
    # 30, 31, 36, 40, 42); the severity policy gives them warnings at most and no root cause.
    "argonne-lcf__alcf-nccl-tests__pytests__resnet50__results__2025-01-15",  # OFI without GDR
    "boeschf__nccl-benchmark-on-alps-2025",  # OFI RDMA protocol unavailable, SENDRECV used
    "KeitaW__p5-nccl-test-2024-07-19__nccl-test-output-v2.22.3-1-with-tuner",
    "mlcommons__training_results_v0.7__Alibaba",  # IB devices that cannot be opened on a single node
    "mlcommons__training_results_v5.1__MangoBoost",  # sockets set up on purpose (MI300X), GDR mix (MI325X)
    "phoenix23513__Mycroft-NCCL-reproduction",
    # sockets over IPoIB; every rank printed a result
    "sparticlesteve__pytorch-nccl-test__slurm-nccl-shifter",
    "Timez-zx__nccl-tests__nccl-fault.log",  # one channel, slow: a silent performance fault
    "Z-Y00__ROCM-sdma-rccl-test",
]
# file prefix → (kind of the primary finding, its culprit ranks or None when not stated)
FAILURES = {
    "argonne-lcf__alcf-nccl-tests__pytests__VAE__results__2025-01-15": ("rank_behind", None),  # desync hang
    "argonne-lcf__alcf-nccl-tests__pytests__resnet50__results__2025-06-27": (
        "watchdog_timeout",
        None,
    ),  # all ranks time out at #1
    "sparticlesteve__pytorch-nccl-test__slurm-nccl-416593": (
        "net_error",
        [10],
    ),  # IB status 12, vendor err 129
    "sparticlesteve__podman-nccl-testing__logs__podman": (
        "net_error",
        None,
    ),  # OFI memory registration failure
    "LambdaLabsML__training_results_v4.0": ("process_exit", None),  # OOM kill, then watchdog timeouts
}


def matching(prefix: str):
    found = [p for p in FILES if p.name.startswith(prefix)]
    assert found, f"{prefix}: not in {CORPUS}"
    return found


@functools.cache
def report(path):
    return to_dict(analyze([str(path)]))


@pytest.mark.parametrize("path", FILES, ids=[p.name[:60] for p in FILES])
def test_analyze_runs_on_every_real_log(path):
    result = report(path)
    assert result["verdict"] and result["schema"] == "nccl-logsift/findings/v1"


@pytest.mark.parametrize("prefix", HEALTHY)
def test_healthy_production_run_has_no_error_finding(prefix):
    for path in matching(prefix):
        serious = [
            (f["code"], f["title"])
            for f in report(path)["findings"]
            if f["severity"] in ("error", "critical")
        ]
        assert serious == [], path.name


@pytest.mark.parametrize("prefix", HEALTHY)
def test_healthy_production_run_has_no_root_cause(prefix):
    """Severity policy: a job that completed has no root cause, and its verdict says it looks healthy."""
    for path in matching(prefix):
        result = report(path)
        assert [f["code"] for f in result["findings"] if f["primary"]] == [], path.name
        assert "Root cause" not in result["verdict"] and "looks healthy" in result["verdict"], path.name


@pytest.mark.parametrize("prefix", sorted(FAILURES))
def test_real_failure_is_named(prefix):
    kind, ranks = FAILURES[prefix]
    for path in matching(prefix):
        primaries = [f for f in report(path)["findings"] if f["primary"]]
        assert any(f["kind"] == kind and (ranks is None or f["ranks"] == ranks) for f in primaries), (
            path.name,
            [(f["kind"], f["ranks"]) for f in primaries],
        )
