"""LS601 latency-outlier: late ranks from timestamps, slow nccl-tests runs; fixtures, composed logs,
corpus."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from builders import job_of
from conftest import CORPUS, CORPUS_ABSENT, FIXTURES

from nccl_logsift.findings.performance.latency_outlier import LatencyOutlier
from nccl_logsift.model import Kind, Severity
from nccl_logsift.pipeline import load_job
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.timing import arrival_times
from nccl_logsift.simulate import Options, write

COMM_ID = "0x6a5b4c3d2e1f0a9b"


def check(job):
    return list(LatencyOutlier().check(job))


def timed_job(
    tmp_path: Path, hosts: list[str], late: dict[int, list[float]], calls: int = 10, collector: bool = False
):
    """Ranks (2 per host) that init one communicator, then call AllReduce ``calls`` times, 100 ms apart.

    ``late[rank][i]`` is how many ms after the others rank enters call i. NCCL 2.26 prints the time in
    front of the line; with ``collector`` the time is the container runtime's prefix instead.
    """
    ranks = [(h, r) for r, h in enumerate(h for h in hosts for _ in range(2))]
    n = len(ranks)
    lines: list[str] = []

    def stamp(ms: float, text: str) -> str:
        sec, frac = divmod(ms / 1000.0, 1)
        clock = f"14:{12 + int(sec) // 60:02d}:{int(sec) % 60:02d}.{round(frac * 1e6):06d}"
        if collector:
            return f"2025-06-02T{clock}Z stdout F {text}"
        return f"[2025-06-02 {clock}] {text}"

    for host, rank in ranks:
        pid, dev = 5000 + rank, rank % 2
        init = (
            f"{host}:{pid}:{pid + 9} [{dev}] NCCL INFO ncclCommInitRankConfig comm 0x55{rank:02d}00aa rank "
            f"{rank} nranks {n} cudaDev {dev} nvmlDev {dev} busId {dev + 1}b000 commId {COMM_ID}"
        )
        lines += [stamp(0, f"{init} - Init START"), stamp(10, f"{init} - Init COMPLETE")]
    for i in range(calls):
        for host, rank in ranks:
            pid, dev = 5000 + rank, rank % 2
            t = 1000 + 100 * i + late.get(rank, [0.0] * calls)[i]
            lines.append(
                stamp(
                    t,
                    f"{host}:{pid}:{pid} [{dev}] NCCL INFO AllReduce: opCount {i:x} sendbuff 0x7f00 "
                    f"recvbuff 0x7f00 count 1024 datatype 7 op 0 root 0 comm 0x55{rank:02d}00aa "
                    f"[nranks={n}] stream 0x5600",
                )
            )
    return job_of(tmp_path, lines)


# ---------------------------------------------------------------------------------------------- late ranks
def test_ls601_slow_rank_fixture_names_the_late_rank():
    job = load_job([str(FIXTURES / "slow_rank_4ranks.log")])
    finding = check(job)[0]
    truth = json.loads((FIXTURES / "slow_rank_4ranks.truth.json").read_text())
    assert len(check(job)) == 1 and finding.kind == Kind.LATENCY_OUTLIER
    assert list(finding.ranks) == truth["faults"][0]["ranks"] == [3]
    assert (
        finding.severity == Severity.WARNING and "122 ms" in finding.title and "progressing" in finding.title
    )


def test_ls601_simulated_slow_rank_names_the_late_rank(tmp_path):
    out, truth = tmp_path / "slow.log", tmp_path / "slow.json"
    write(Options(scenario="slow-rank", ranks=8, nccl_version="2.27"), str(out), str(truth))
    fault = json.loads(truth.read_text())["faults"][0]
    (finding,) = check(load_job([str(out)]))
    assert list(finding.ranks) == fault["ranks"] and finding.comm == fault["comm"]


def test_ls601_a_rank_late_at_every_call_is_named(tmp_path):
    job = timed_job(tmp_path, ["gpu-a", "gpu-b"], {2: [50.0] * 10})
    (finding,) = check(job)
    assert finding.ranks == (2,) and finding.hosts == ("gpu-b",) and finding.severity == Severity.WARNING
    assert "50 ms" in finding.title and finding.comm == COMM_ID


def test_ls601_one_late_call_is_not_an_outlier(tmp_path):
    job = timed_job(tmp_path, ["gpu-a", "gpu-b"], {2: [0.0] * 9 + [400.0]})
    assert check(job) == []


def test_ls601_a_lag_of_seconds_in_a_job_that_goes_on_is_a_warning(tmp_path):
    # The job completed, slowly: degraded, and a job that completed has no root cause.
    job = timed_job(tmp_path, ["gpu-a", "gpu-b"], {1: [2500.0] * 10}, collector=True)
    (finding,) = check(job)
    assert finding.ranks == (1,) and finding.severity == Severity.WARNING
    assert "collector clock" in finding.title


def test_ls601_a_lag_of_seconds_in_a_job_that_failed_is_an_error(tmp_path, monkeypatch):
    from nccl_logsift.findings.performance import latency_outlier

    monkeypatch.setattr(latency_outlier, "hang_evidence", lambda job: True)
    job = timed_job(tmp_path, ["gpu-a", "gpu-b"], {1: [2500.0] * 10}, collector=True)
    (finding,) = check(job)
    assert finding.ranks == (1,) and finding.severity == Severity.ERROR


def test_ls601_a_whole_late_host_mentions_clock_skew(tmp_path):
    job = timed_job(tmp_path, ["gpu-a", "gpu-b", "gpu-c"], {4: [30.0] * 10, 5: [30.0] * 10})
    (finding,) = check(job)
    assert finding.ranks == (4, 5) and "clock skew" in finding.title and "gpu-c" in finding.title


def test_ls601_trace_tms_clocks_are_aligned_on_the_first_shared_call():
    # Three processes whose TRACE clocks started at different moments; rank 2 is 40 ms late after call 0.
    start = {0: 0.0, 1: 5000.0, 2: 12000.0}
    coll, lines = [], []
    for i in range(10):
        for rank in range(3):
            line = 1 + i * 3 + rank
            tms = start[rank] + 100.0 * i + (40.0 if rank == 2 and i > 0 else 0.0)
            coll.append(
                {
                    "source_id": 0,
                    "line_no": line,
                    "part": 0,
                    "host": "gpu-a",
                    "pid": 10 + rank,
                    "comm_uid": "c1",
                    "ordinal": i,
                    "global_rank": rank,
                    "op": "AllReduce",
                    "ts": None,
                }
            )
            lines.append(
                {"source_id": 0, "line_no": line, "part": 0, "tms": tms, "text": f"call {i} rank {rank}"}
            )
    schema = {"source_id": pl.UInt16, "line_no": pl.UInt32, "part": pl.UInt8}
    job = Job(
        {"collectives": pl.DataFrame(coll).cast(schema), "lines": pl.DataFrame(lines).cast(schema)},
        ("trace.log",),
    )
    (finding,) = check(job)
    assert finding.ranks == (2,) and "tms clock" in finding.title and "40 ms" in finding.title


def test_arrival_times_take_each_calls_tms_from_its_own_line_whatever_the_order_of_lines():
    schema = {"source_id": pl.UInt16, "line_no": pl.UInt32, "part": pl.UInt8}
    coll = pl.DataFrame(
        {
            "source_id": [0, 0, 0],
            "line_no": [3, 5, 9],
            "part": [0, 0, 0],
            "host": ["a"] * 3,
            "pid": [1, 2, 1],
            "comm_uid": ["c1"] * 3,
            "ordinal": [0, 0, 1],
            "global_rank": [0, 1, 0],
            "ts": [None] * 3,
        }
    ).cast(schema)
    lines = pl.DataFrame(
        {
            "source_id": [0, 0, 0, 0],
            "line_no": [9, 1, 5, 3],
            "part": [0, 0, 0, 0],
            "tms": [250.0, 7.0, 120.0, 100.0],
        }
    ).cast(schema)
    rows = arrival_times(Job({"collectives": coll, "lines": lines}, ("trace.log",)))
    assert rows.select("line_no", "tms", "t_ms").rows() == [
        (3, 100.0, 0.0),
        (5, 120.0, 0.0),
        (9, 250.0, 150.0),
    ]


def test_arrival_times_without_any_clock_are_empty():
    schema = {"source_id": pl.UInt16, "line_no": pl.UInt32, "part": pl.UInt8}
    coll = pl.DataFrame(
        {
            "source_id": [0],
            "line_no": [3],
            "part": [0],
            "comm_uid": ["c1"],
            "ordinal": [0],
            "global_rank": [0],
            "ts": [None],
        }
    ).cast(schema)
    lines = pl.DataFrame(
        {"source_id": [0], "line_no": [3], "part": [0], "tms": pl.Series([None], dtype=pl.Float64)}
    ).cast(schema)
    assert arrival_times(Job({"collectives": coll, "lines": lines}, ("plain.log",))).is_empty()


def test_ls601_healthy_fixture_has_no_outlier():
    assert check(load_job([str(FIXTURES / "healthy_8ranks.log")])) == []


# ---------------------------------------------------------------------------------------------- nccl-tests
def nccl_tests_run(busbw: float, host: str, pid: int) -> list[str]:
    rows = []
    for size in (1 << 20, 1 << 21, 1 << 22, 1 << 23):
        time_us = size / (busbw * 1e3)
        rows.append(
            f"  {size:>10}  {size // 4:>12}     float     sum      -1  {time_us:7.1f}  {busbw:6.2f}  "
            f"{busbw:6.2f}      0  {time_us:7.1f}  {busbw:6.2f}  {busbw:6.2f}      0"
        )
    return [
        "# Collective test starting: all_reduce_perf",
        (
            "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 8388608 step: 2(factor) warmup iters: 5 iters: 20 "
            "agg iters: 1 validation: 1 graph: 0"
        ),
        "#",
        "# Using devices",
        f"#  Rank  0 Group  0 Pid {pid} on {host}a device  0 [0x4e] NVIDIA H100 80GB HBM3",
        f"#  Rank  1 Group  0 Pid {pid + 1} on {host}b device  0 [0x4e] NVIDIA H100 80GB HBM3",
        "#",
        (
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   "
            "algbw   busbw #wrong"
        ),
        (
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  "
            "(GB/s)  (GB/s)"
        ),
        *rows,
        "# Out of bounds values : 0 OK",
        f"# Avg bus bandwidth    : {busbw}",
        "#",
        "# Collective test concluded: all_reduce_perf",
    ]


def test_ls601_nccl_tests_run_far_below_its_peer_is_named(tmp_path):
    job = job_of(tmp_path, nccl_tests_run(96.0, "pair1-", 700) + nccl_tests_run(40.0, "pair2-", 800))
    (finding,) = check(job)
    assert finding.severity == Severity.WARNING and "40 GB/s" in finding.title and "42%" in finding.title
    assert all(e.line > 14 for e in finding.evidence)  # the slow run's rows, not its peer's


def test_ls601_nccl_tests_run_at_a_tenth_of_its_peer_is_an_error(tmp_path):
    job = job_of(tmp_path, nccl_tests_run(96.0, "pair1-", 700) + nccl_tests_run(9.0, "pair2-", 800))
    (finding,) = check(job)
    assert finding.severity == Severity.ERROR


def test_ls601_nccl_tests_runs_within_a_factor_of_two_are_fine(tmp_path):
    job = job_of(tmp_path, nccl_tests_run(96.0, "pair1-", 700) + nccl_tests_run(70.0, "pair2-", 800))
    assert check(job) == []


# ---------------------------------------------------------------------------------------------- real corpus
def corpus_paths(*names: str) -> list[str]:
    paths = [CORPUS / n for n in names]
    if not all(p.exists() for p in paths):
        pytest.skip(CORPUS_ABSENT)
    return [str(p) for p in paths]


def test_corpus_degraded_nccl_tests_run_is_named_against_its_baseline():
    job = load_job(corpus_paths("Timez-zx__nccl-tests__nccl.log", "Timez-zx__nccl-tests__nccl-fault.log"))
    (finding,) = check(job)
    assert "nccl-fault.log" in finding.title and finding.severity == Severity.ERROR
    assert all("nccl-fault.log" in e.path for e in finding.evidence)


def test_corpus_gdr_on_and_off_runs_are_not_outliers():
    prefix = "thomaslie210__NCCL_Test_Results__NCCL_Benchmarks__"
    job = load_job(
        corpus_paths(
            prefix + "GDR_Off__n013_n014_GDR_Off_Big__result_big_all_reduce_perf.txt",
            prefix + "GDR_On__n013_n014_GDR_ON_Big2__result_big_all_reduce_perf.txt",
        )
    )
    assert check(job) == []


@pytest.mark.parametrize(
    "name",
    [
        "mlcommons__training_results_v4.1__Clemson__results__6x8xH100-SXM5-80GB__bert__result_0.txt",
        "KeitaW__p5-nccl-test-2024-07-19__nccl-test-output-v2.22.3-1.log",
        "aws-samples__awsome-distributed-training__3.test_cases__0.nccl-tests__slurm-104.out",
        "Timez-zx__nccl-tests__nccl.log",
    ],
    ids=lambda n: n[:50],
)
def test_corpus_healthy_runs_have_no_latency_outlier(name):
    assert check(load_job(corpus_paths(name))) == []
