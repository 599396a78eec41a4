"""LS501 process-exit: simulated scenarios, composed launcher output, the real corpus."""

from __future__ import annotations

import json

import pytest
from builders import job_of, only
from conftest import FIXTURES

from nccl_logsift.findings.process.process_exit import ProcessExit
from nccl_logsift.model import Kind, Severity
from nccl_logsift.pipeline import load_job
from nccl_logsift.simulate import Options, write


def check(job):
    return list(ProcessExit().check(job))


def watchdog(rank: int, seq: int = 8) -> str:
    return (
        f"{rank}: [rank{rank}]:[E1003 18:37:01.832146912 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog "
        f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=6553600, "
        f"NumelOut=6553600, Timeout(ms)=600000) ran for 600064 milliseconds before timing out."
    )


SUMMARY = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "train.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2025-02-03_17:40:12",
    "  host      : gpu-a17.example.internal",
    "  rank      : 5 (local_rank: 1)",
    "  exitcode  : -15 (pid: 40113)",
    "  error_file: <N/A>",
    "  traceback : Signal 15 (SIGTERM) received by PID 40113",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2025-02-03_17:40:09",
    "  host      : gpu-a17.example.internal",
    "  rank      : 4 (local_rank: 0)",
    "  exitcode  : 1 (pid: 40112)",
    "  error_file: <N/A>",
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
    "============================================================",
]


# ---------------------------------------------------------------------------------------------- fixtures
def test_ls501_segfault_fixture_names_the_crashed_rank_as_critical():
    job = load_job([str(FIXTURES / "segfault_4ranks.log")])
    finding = only(check(job))
    truth = json.loads((FIXTURES / "segfault_4ranks.truth.json").read_text())
    assert finding.kind == Kind.PROCESS_EXIT and finding.severity == Severity.CRITICAL
    assert list(finding.ranks) == truth["faults"][0]["ranks"] == [2]
    assert "SIGSEGV" in finding.title and "gpu-node-036" in finding.title
    # the elastic agent's line and the summary entry are one process, not two
    assert len(finding.evidence) == 2


def test_ls501_cuda_oom_exit_is_the_consequence_of_the_nccl_exception():
    job = load_job([str(FIXTURES / "cuda_oom_4ranks.log")])
    finding = only(check(job))
    assert finding.ranks == (0,) and finding.severity == Severity.ERROR
    assert "exited with code 1 after raising" in finding.title and "DistBackendError" in finding.title


def test_ls501_duplicate_gpu_processes_that_died_of_an_uncaught_exception_are_reported():
    job = load_job([str(FIXTURES / "duplicate_gpu_4ranks_per_rank")])
    finding = only(check(job))
    assert (
        finding.kind == Kind.PROCESS_EXIT
        and "uncaught" in finding.title
        and "DistBackendError" in finding.title
    )


def test_ls501_rank_stall_teardown_aborts_are_consequences_below_error():
    job = load_job([str(FIXTURES / "rank_stall_8ranks.log")])
    finding = only(check(job))
    assert finding.severity == Severity.WARNING and "watchdog" in finding.title
    assert finding.ranks == (0, 2, 3, 4, 5, 6, 7)


def test_ls501_healthy_fixture_has_no_exit():
    assert check(load_job([str(FIXTURES / "healthy_8ranks.log")])) == []


@pytest.mark.parametrize("layout", ["torchrun", "srun"])
def test_ls501_simulated_segfault_names_the_crashed_rank(tmp_path, layout):
    out, truth = tmp_path / "seg.log", tmp_path / "seg.json"
    write(Options(scenario="segfault", ranks=8, nccl_version="2.27", layout=layout), str(out), str(truth))
    fault = next(
        f for f in json.loads(truth.read_text())["faults"] if f["kind"] == "process_exit" and f["primary"]
    )
    crit = [f for f in check(load_job([str(out)])) if f.severity == Severity.CRITICAL]
    assert len(crit) == 1 and list(crit[0].ranks) == fault["ranks"]


# ---------------------------------------------------------------------------------------------- composed
def test_ls501_sigabrt_after_a_watchdog_timeout_is_a_teardown_consequence(tmp_path):
    lines = [
        watchdog(0),
        watchdog(1),
        "srun: error: node-a: task 0: Aborted (core dumped)",
        "srun: error: node-a: task 1: Aborted (core dumped)",
    ]
    finding = only(check(job_of(tmp_path, lines)))
    assert finding.ranks == (0, 1) and finding.severity == Severity.WARNING
    assert "SIGABRT" in finding.title and "consequence" in finding.title


def test_ls501_segfault_first_then_aborts_keeps_the_crash_critical(tmp_path):
    lines = [
        "srun: error: node-a: task 2: Segmentation fault (core dumped)",
        "srun: error: node-a: tasks 0-1,3: Aborted (core dumped)",
    ]
    findings = check(job_of(tmp_path, lines))
    crash = only(findings, severity=Severity.CRITICAL)
    aborts = only(findings, severity=Severity.ERROR)
    assert crash.ranks == (2,) and "crashed" in crash.title
    assert aborts.ranks == (0, 1, 3) and "after rank 2 died from SIGSEGV" in aborts.title


def test_ls501_oom_killer_is_critical_with_the_slurm_evidence(tmp_path):
    lines = [
        (
            "0: slurmstepd: error: Detected 1 oom_kill event in StepId=4.46. Some of the step tasks have "
            "been OOM Killed."
        ),
        "srun: error: node-a: task 5: Out Of Memory",
        "srun: error: node-a: task 3: Terminated",
    ]
    findings = check(job_of(tmp_path, lines))
    oom = only(findings, severity=Severity.CRITICAL)
    assert oom.ranks == (5,) and "out-of-memory killer" in oom.title
    assert any("oom_kill event" in e.text for e in oom.evidence)
    stopped = only(findings, severity=Severity.WARNING)
    assert stopped.ranks == (3,) and "SIGTERM" in stopped.title


def test_ls501_torchrun_root_cause_exit_code_is_the_first_failure(tmp_path):
    findings = check(job_of(tmp_path, SUMMARY))
    first = only(findings, severity=Severity.CRITICAL)
    assert (
        first.ranks == (4,) and "exited with code 1" in first.title and "first process to fail" in first.title
    )
    assert first.hosts == ("gpu-a17",)
    other = only(findings, severity=Severity.WARNING)
    assert other.ranks == (5,) and "SIGTERM" in other.title


def test_ls501_the_same_pid_on_two_hosts_is_two_processes(tmp_path):
    # Containers number their processes from 1: equal pids on two hosts are different processes.
    def entry(i, host, rank, code, signal):
        return [
            f"[{i}]:",
            "  time      : 2025-02-03_17:40:09",
            f"  host      : {host}",
            f"  rank      : {rank} (local_rank: 0)",
            f"  exitcode  : {code} (pid: 7)",
            "  error_file: <N/A>",
            f"  traceback : Signal {-code} ({signal}) received by PID 7",
        ]

    lines = (
        SUMMARY[:5]
        + entry(1, "node-b", 4, -6, "SIGABRT")
        + SUMMARY[12:14]
        + entry(0, "node-a", 0, -11, "SIGSEGV")
        + SUMMARY[-1:]
    )
    findings = check(job_of(tmp_path, lines))
    assert sorted(f.ranks for f in findings) == [(0,), (4,)]
    assert only(findings, severity=Severity.CRITICAL).ranks == (0,)


def test_ls501_mpirun_sigkill_is_a_hard_kill(tmp_path):
    lines = ["mpirun noticed that process rank 3 with PID 40211 on node gpu-c02 exited on signal 9 (Killed)."]
    finding = only(check(job_of(tmp_path, lines)))
    assert finding.ranks == (3,) and finding.severity == Severity.CRITICAL and "SIGKILL" in finding.title


def test_ls501_slurm_node_failure_and_time_limit(tmp_path):
    lines = [
        "srun: error: Node failure on gpu-b05",
        "slurmstepd: error: *** JOB 88123 ON gpu-b03 CANCELLED AT 2024-06-11T02:11:45 DUE TO TIME LIMIT ***",
    ]
    findings = check(job_of(tmp_path, lines))
    node = only(findings, severity=Severity.CRITICAL)
    assert node.hosts == ("gpu-b05",) and "node failure" in node.title
    limit = only(findings, severity=Severity.ERROR)
    assert "time limit" in limit.title


# ---------------------------------------------------------------------------------------------- real corpus


LAMBDA = (
    "LambdaLabsML__training_results_v4.0__Lambda__benchmarks__llama2_70b_lora__"
    "implementations__nemo__results_old__"
)


@pytest.mark.parametrize(
    "name,oom_rank",
    [
        (LAMBDA + "1cc_1x8x4xtp4pp1cp1_1008_24-10-09_06-04-18__241009060420237035816_10.log", 5),
        (LAMBDA + "1cc_1x8x4xtp4pp1cp1_24-09-28_18-41-54__240928184157637375208_2.log", 0),
    ],
)
def test_corpus_lambda_oom_kill_is_critical_and_the_aborts_follow(corpus_job, name, oom_rank):
    findings = check(corpus_job(name))
    oom = only(findings, severity=Severity.CRITICAL)
    assert oom.ranks == (oom_rank,) and "out-of-memory" in oom.title
    aborts = only(findings, severity=Severity.WARNING)
    assert len(aborts.ranks) == 7 and oom_rank not in aborts.ranks


def test_corpus_podman_exits_follow_the_nccl_tests_error(corpus_job):
    findings = check(corpus_job("sparticlesteve__podman-nccl-testing__logs__podman-nccl-tests-30743802.out"))
    exits = only(findings, severity=Severity.ERROR)
    assert exits.ranks == (3, 7) and "nccl-tests" in exits.title
    assert only(findings, severity=Severity.WARNING).ranks == (0, 1, 2, 4, 5, 6)


def test_corpus_alcf_watchdog_abort_is_a_consequence(corpus_job):
    findings = check(
        corpus_job("argonne-lcf__alcf-nccl-tests__pytests__VAE__results__2025-01-15-10-27-37__with_aws.log")
    )
    finding = only(findings)
    assert finding.ranks == (1,) and finding.severity == Severity.WARNING


def test_corpus_silent_hang_killed_at_the_time_limit(corpus_job):
    finding = only(check(corpus_job("sparticlesteve__pytorch-nccl-hang__slurm-8384637.out")))
    assert finding.severity == Severity.ERROR and "time limit" in finding.title


@pytest.mark.parametrize(
    "name",
    [
        "mlcommons__training_results_v4.1__Oracle__results__512xBM.GPU.H100.8__llama2_70b_lora__result_2.txt",
        "mlcommons__training_results_v5.1__Dell__results__2xXE9685Lx8B200-SXM-180GB__llama31_8b__result_0.txt",
        "mlcommons__training_results_v4.1__Clemson__results__6x8xH100-SXM5-80GB__bert__result_0.txt",
        "aws-samples__awsome-distributed-training__3.test_cases__0.nccl-tests__slurm-104.out",
    ],
    ids=lambda n: n[:50],
)
def test_corpus_healthy_production_runs_have_no_process_exit(corpus_job, name):
    assert check(corpus_job(name)) == []


# ------------------------------------------------------------------------------------------- LS501: NCCL RAS
def simulated(tmp_path, scenario: str, **options):
    out, truth = tmp_path / f"{scenario}.log", tmp_path / f"{scenario}.json"
    write(Options(scenario=scenario, **options), str(out), str(truth))
    return out, json.loads(truth.read_text())


@pytest.mark.parametrize("version, layout", [("2.26", "srun"), ("2.27", "mpirun")])
def test_ls501_node_declared_dead_by_ras_is_the_culprit_not_the_ranks_reporting_it(tmp_path, version, layout):
    out, truth = simulated(
        tmp_path, "node-death", ranks=8, nodes=2, nccl_version=version, layout=layout, seed=4
    )
    job = load_job([str(out)])
    finding = only([f for f in ProcessExit().check(job) if "RAS" in f.title])
    dead = next(f for f in truth["faults"] if f["primary"])
    assert list(finding.ranks) == dead["ranks"] and list(finding.hosts) == dead["hosts"]
    assert finding.severity == Severity.CRITICAL and finding.kind == Kind.PROCESS_EXIT
    assert all("RAS" in e.text for e in finding.evidence) and "as DEAD" in finding.evidence[0].text


def test_ls501_ras_dead_peers_that_had_torn_down_their_communicators_are_not_deaths(tmp_path):
    """At the end of a healthy job a process that exits first can be seen as a lost RAS peer: not a death."""
    out, truth = simulated(tmp_path, "healthy", ranks=4, nodes=2, nccl_version="2.27", layout="srun", seed=3)
    other = next(p for p in truth["processes"] if p["host"] != truth["processes"][0]["host"])
    text = out.read_text()
    ip = next(
        line.rsplit(":", 1)[-1].split("<")[0]
        for line in text.splitlines()
        if other["host"] in line and "Bootstrap" in line and "Using" in line
    )
    p0 = truth["processes"][0]
    prefix = f"0: {p0['host']}:{p0['pid']}:{p0['pid'] + 77} [0] NCCL INFO"
    out.write_text(text + f"{prefix} RAS declaring peer {ip}<41234> as DEAD; rasDeadPeersHash 0x1f\n")
    assert [f for f in ProcessExit().check(load_job([str(out)])) if "RAS" in f.title] == []


# ------------------------------------------------------------------------ a rank named by its absence
@pytest.mark.parametrize("layout", ["interleaved", "per-rank"])
@pytest.mark.parametrize("nodes,seed", [(1, 1), (2, 0), (2, 3)])
def test_an_unlabelled_top_level_exception_belongs_to_the_world_ranks_missing_from_init(
    tmp_path, layout, nodes, seed
):
    """No launcher report, no rank label: k processes died of an ImportError before NCCL init and k world
    ranks never logged an Init line, so those ranks are the ones that died (the root cause), not merely
    absent."""
    from nccl_logsift.pipeline import analyze
    from nccl_logsift.render.json import to_dict

    out, truth = tmp_path / "job", tmp_path / "truth.json"
    options = Options(scenario="import-error", layout=layout, nccl_version="2.27", nodes=nodes, seed=seed)
    write(options, str(out), str(truth))
    wanted = [
        (f["kind"], sorted(f["ranks"])) for f in json.loads(truth.read_text())["faults"] if f["primary"]
    ]
    report = to_dict(analyze([str(out)]))
    assert [(f["kind"], f["ranks"]) for f in report["findings"] if f["primary"]] == wanted


def test_unlabelled_exceptions_are_not_given_ranks_when_the_counts_disagree(tmp_path):
    init = (
        "n0:{pid}:{pid} [{r}] NCCL INFO ncclCommInitRankConfig comm 0x55{pid}0 rank {r} nranks 4 cudaDev {r} "
        "nvmlDev {r} busId {r}8000 commId 0xabc - Init START"
    )
    traceback = [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 12, in <module>',
        "    import apex",
        "ModuleNotFoundError: No module named 'apex'",
    ]
    lines = [init.format(pid=700 + r, r=r) for r in range(3)] + traceback + traceback
    deaths = [f for f in ProcessExit().check(job_of(tmp_path, lines)) if "ModuleNotFoundError" in f.title]
    assert deaths and all(f.ranks == () for f in deaths)
