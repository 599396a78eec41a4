"""LS201 init-incomplete, LS202 bootstrap-failure, LS203 interface-misconfig.

Simulated scenarios (fixtures and logs generated into tmp_path) must yield their truth's ranks; composed
logs in the NCCL formats of nccl-log-grammar.md cover the edge cases; healthy logs, simulated and real,
must yield nothing at error level.
"""

from __future__ import annotations

import functools

import pytest
from builders import fixture_job, fixture_truth, job_of, run, serious, simulate
from conftest import CORPUS_ABSENT, corpus_files

from nccl_logsift.findings.base import HEADINGS
from nccl_logsift.findings.startup import RULES
from nccl_logsift.findings.startup.bootstrap_failure import BootstrapFailure
from nccl_logsift.findings.startup.init_incomplete import InitIncomplete
from nccl_logsift.findings.startup.interface_misconfig import InterfaceMisconfig
from nccl_logsift.model import Kind, Severity
from nccl_logsift.pipeline import load_job
from nccl_logsift.resolve.inits import stalled_inits

COMM_ID = "0x7bbff3add302d34a"


# ---------------------------------------------------------------------------------------------- helpers
def info(host, pid, dev, text, tid=None):
    return f"{host}:{pid}:{tid or pid + 100} [{dev}] NCCL INFO {text}"


def warn(host, pid, dev, site, text, tid=None):
    return f"{host}:{pid}:{tid or pid + 100} [{dev}] {site} NCCL WARN {text}"


def init_line(rank, nranks, dev, comm, phase, comm_id=COMM_ID, bus=None):
    return (
        f"ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
        f"busId {bus or f'{dev + 1}b000'} commId {comm_id} - Init {phase}"
    )


def rank_lines(
    host, pid, rank, nranks, dev, ip, *, ifname="ens1f0np0", complete=True, comm_id=COMM_ID, summary=True
):
    """What NCCL 2.21 prints for one rank's world communicator (grammar §2.1, §2.2, §4.2)."""
    comm = f"0x55{pid:010x}"
    lines = [
        info(host, pid, dev, f"Bootstrap : Using {ifname}:{ip}<0>", tid=pid),
        info(host, pid, dev, f"NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB {ifname}:{ip}<0>"),
        info(host, pid, dev, "Using network IB"),
        info(host, pid, dev, init_line(rank, nranks, dev, comm, "START", comm_id)),
    ]
    if summary:
        lines.append(
            info(
                host,
                pid,
                dev,
                f"comm {comm} rank {rank} nRanks {nranks} nNodes 2 localRanks 2 localRank {dev} MNNVL 0",
            )
        )
    if complete:
        lines.append(info(host, pid, dev, init_line(rank, nranks, dev, comm, "COMPLETE", comm_id)))
    return lines


def truth_ranks(truth: dict, kind: str, primary: bool | None = None) -> list[list[int]]:
    return [
        sorted(f["ranks"])
        for f in truth["faults"]
        if f["kind"] == kind and (primary is None or f["primary"] == primary)
    ]


def all_findings(job):
    return [f for rule in RULES for f in rule().check(job)]


# ---------------------------------------------------------------------------------------------- catalogue
@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_ls2xx_docstrings_have_every_heading_in_order(rule):
    doc = rule.doc()
    positions = [doc.find(f"\n{h}:\n") for h in HEADINGS]
    assert all(p > 0 for p in positions) and positions == sorted(positions), rule.code
    assert rule.summary() and "\n" not in rule.summary()


def test_ls2xx_codes_kinds_and_severities():
    assert [(r.code, r.name, r.kind) for r in RULES] == [
        ("LS201", "init-incomplete", Kind.INIT_INCOMPLETE),
        ("LS202", "bootstrap-failure", Kind.BOOTSTRAP_FAILURE),
        ("LS203", "interface-misconfig", Kind.INTERFACE_MISCONFIG),
    ]


# ---------------------------------------------------------------------------------------------- LS201
def test_ls201_init_hang_fixture_names_the_ranks_that_never_joined_and_the_waiting_ones():
    job = fixture_job("init_hang_4ranks.log")
    truth = fixture_truth("init_hang_4ranks")
    found = run(InitIncomplete, job)
    missing = [f for f in found if f.severity == Severity.CRITICAL]
    assert [sorted(f.ranks) for f in missing] == truth_ranks(truth, "init_incomplete", primary=True)
    assert missing[0].comm == truth["communicators"][0]["comm_id"]
    assert "never joined" in missing[0].title and missing[0].evidence
    # Ranks are written the one way every rule writes them (findings/wording.py), not "ranks 2, 3".
    assert missing[0].title.startswith("ranks 2–3 never joined")
    assert "2 ranks (0–1) started" in missing[0].title
    waiting = [f for f in found if f.severity == Severity.ERROR]
    assert [sorted(f.ranks) for f in waiting] == truth_ranks(truth, "init_incomplete", primary=False)


def test_ls201_bootstrap_failure_fixture_reports_the_waiting_ranks_not_the_failed_ones():
    job = fixture_job("bootstrap_failure_4ranks.log")
    truth = fixture_truth("bootstrap_failure_4ranks")
    found = run(InitIncomplete, job)
    assert [sorted(f.ranks) for f in found] == truth_ranks(truth, "init_incomplete")
    assert found[0].severity == Severity.ERROR and "failed during init" in found[0].title


def test_ls201_duplicate_gpu_fixture_waiting_ranks_are_the_truths():
    job = fixture_job("duplicate_gpu_4ranks_per_rank")
    truth = fixture_truth("duplicate_gpu_4ranks_per_rank")
    found = run(InitIncomplete, job)
    assert [sorted(f.ranks) for f in found] == truth_ranks(truth, "init_incomplete")
    assert all(f.severity == Severity.ERROR for f in found)


@pytest.mark.parametrize("version", ["2.18", "2.27"])
def test_ls201_simulated_init_hang_with_start_lines(tmp_path, version):
    job, truth = simulate(tmp_path, "init-hang", ranks=8, nodes=2, seed=3, nccl_version=version)
    found = run(InitIncomplete, job)
    critical = [sorted(f.ranks) for f in found if f.severity == Severity.CRITICAL]
    assert critical == truth_ranks(truth, "init_incomplete", primary=True)
    assert sorted(sorted(f.ranks) for f in found) == sorted(truth_ranks(truth, "init_incomplete"))


def test_ls201_store_based_barrier_names_the_rank_that_never_reported(tmp_path):
    job, truth = simulate(
        tmp_path, "init-hang", ranks=8, nodes=2, seed=3, nccl_version="2.14", torch_version="2.0"
    )
    found = run(InitIncomplete, job)
    barrier = [f for f in found if "store-based barrier" in f.title]
    assert [sorted(f.ranks) for f in barrier] == truth_ranks(truth, "init_incomplete", primary=True)
    assert barrier[0].severity == Severity.CRITICAL


def test_ls201_store_barrier_composed_missing_rank_and_timeout(tmp_path):
    wait = (
        "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group "
        "for rank: {r}, key: store_based_barrier_key:1 (world_size=4, worker_count=3, timeout=0:30:00)"
    )
    timeout = (
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: "
        "store_based_barrier_key:1 (world_size=4, worker_count=3, timeout=0:30:00)"
    )
    job = job_of(tmp_path, [wait.format(r=r) for r in (0, 1, 3)] + [timeout])
    (finding,) = run(InitIncomplete, job)
    assert finding.ranks == (2,) and finding.severity == Severity.CRITICAL
    assert "3 of 4 ranks joined" in finding.title and "timed out" in finding.title


def test_ls201_store_barrier_that_completed_is_not_reported(tmp_path):
    lines = [
        "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize process group "
        "for rank: 0, key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)",
        (
            "INFO:torch.distributed.distributed_c10d:Rank 0: Completed store-based barrier for "
            "key:store_based_barrier_key:1 with 2 nodes."
        ),
    ]
    assert run(InitIncomplete, job_of(tmp_path, lines)) == []


def test_ls201_summary_line_between_start_and_complete_is_not_an_incomplete_init(tmp_path):
    # 2.20.3+ prints 'comm … nRanks … nNodes …' between START and COMPLETE (grammar §2.2).
    lines = rank_lines("node-a", 1001, 0, 2, 0, "10.0.0.1") + rank_lines("node-b", 2001, 1, 2, 0, "10.0.0.2")
    assert run(InitIncomplete, job_of(tmp_path, lines)) == []


def test_ls201_one_nodes_output_of_a_healthy_job_has_no_missing_ranks(tmp_path):
    # Only node-a's output is in the file (as in the MangoBoost logs): COMPLETE proves the others joined.
    lines = rank_lines("node-a", 1001, 0, 4, 0, "10.0.0.1") + rank_lines("node-a", 1002, 1, 4, 1, "10.0.0.1")
    assert run(InitIncomplete, job_of(tmp_path, lines)) == []


def test_ls201_every_rank_started_none_completed_no_error_is_critical(tmp_path):
    lines = rank_lines("node-a", 1001, 0, 2, 0, "10.0.0.1", complete=False, summary=False) + rank_lines(
        "node-b", 2001, 1, 2, 0, "10.0.0.2", complete=False, summary=False
    )
    (finding,) = run(InitIncomplete, job_of(tmp_path, lines))
    assert finding.ranks == (0, 1) and finding.severity == Severity.CRITICAL
    assert "no rank logged an error" in finding.title


def test_ls201_subgroup_communicators_that_never_complete_are_one_finding(tmp_path):
    lines = rank_lines("node-a", 1001, 0, 4, 0, "10.0.0.1") + rank_lines("node-a", 1002, 1, 4, 1, "10.0.0.1")
    lines += rank_lines("node-b", 2001, 2, 4, 0, "10.0.0.2") + rank_lines("node-b", 2002, 3, 4, 1, "10.0.0.2")
    for pid, dev, rank, pair in ((1001, 0, 0, "0x1111"), (2001, 0, 1, "0x1111"), (1002, 1, 0, "0x2222")):
        lines.append(
            info(
                "node-a" if pid < 2000 else "node-b",
                pid,
                dev,
                init_line(rank, 2, dev, f"0x56{pid:010x}", "START", comm_id=pair),
            )
        )
    (finding,) = run(InitIncomplete, job_of(tmp_path, lines))
    assert "2 communicators of 2 ranks" in finding.title and "(+1 absent)" in finding.title
    # The pair 0x2222 lacks a member: the stall has a visible cause, so it is not critical on its own.
    assert finding.ranks == (0, 1, 2) and finding.severity == Severity.ERROR


def test_ls201_before_2_18_3_using_network_without_complete_is_a_stalled_init(tmp_path):
    # NCCL 2.14 prints no Init START: 'Using network' (once per communicator) and no COMPLETE.
    lines = []
    for pid, dev in ((1001, 0), (1002, 1)):
        lines += [
            info("gpu-node-040", pid, dev, "Bootstrap : Using bond0:10.70.5.40<0>", tid=pid),
            info("gpu-node-040", pid, dev, "Using network IB"),
        ]
    (finding,) = run(InitIncomplete, job_of(tmp_path, lines))
    assert finding.hosts == ("gpu-node-040",) and "2 processes" in finding.title
    assert finding.severity == Severity.CRITICAL


def test_ls201_before_2_18_3_a_completed_init_is_not_stalled(tmp_path):
    lines = [
        info("node-a", 1001, 0, "Using network IB"),
        info("node-a", 1001, 0, "comm 0x5611f0c2b8a0 rank 0 nranks 1 cudaDev 0 busId 1c000 - Init COMPLETE"),
    ]
    assert run(InitIncomplete, job_of(tmp_path, lines)) == []


# ---------------------------------------------------------------------------------------------- LS202
def test_ls202_bootstrap_failure_fixture_no_interface_names_the_failing_node():
    job = fixture_job("bootstrap_failure_4ranks.log")
    truth = fixture_truth("bootstrap_failure_4ranks")
    (finding,) = run(BootstrapFailure, job)
    assert sorted(finding.ranks) == truth_ranks(truth, "bootstrap_failure", primary=True)[0]
    assert finding.hosts == ("node0065",) and finding.severity == Severity.CRITICAL
    assert "no socket interface found" in finding.title and "NCCL_SOCKET_IFNAME=ens1f0np0" in finding.title
    assert finding.comm == truth["communicators"][0]["comm_id"]


def test_ls202_simulated_connection_refused_names_the_ranks_of_the_firewalled_node(tmp_path):
    job, truth = simulate(tmp_path, "bootstrap-failure", ranks=8, nodes=2, seed=0, nccl_version="2.21")
    assert "refused" in next(f["detail"] for f in truth["faults"] if f["kind"] == "bootstrap_failure")
    (finding,) = run(BootstrapFailure, job)
    assert sorted(finding.ranks) == truth_ranks(truth, "bootstrap_failure", primary=True)[0]
    assert "Connection refused" in finding.title


def test_ls202_veth_victim_is_the_rank_that_timed_out(tmp_path):
    job, truth = simulate(tmp_path, "veth-interface", ranks=8, nodes=2, seed=1, nccl_version="2.27")
    (finding,) = run(BootstrapFailure, job)
    assert [sorted(finding.ranks)] == truth_ranks(truth, "bootstrap_failure")
    assert "172.18.0.1" in finding.title


def test_ls202_closed_sockets_after_a_peers_oom_are_not_a_bootstrap_failure():
    # cuda_oom: ranks 1 and 3 log 'socketProgress: Connection closed by remote peer' and bootstrap.cc -> 6.
    assert run(BootstrapFailure, fixture_job("cuda_oom_4ranks.log")) == []


def test_ls202_connect_refused_with_a_bootstrap_chain(tmp_path):
    lines = rank_lines("node-a", 1001, 0, 2, 0, "10.0.0.1", complete=False, summary=False) + [
        info("node-b", 2001, 0, "Bootstrap : Using ens1f0np0:10.0.0.2<0>", tid=2001),
        info("node-b", 2001, 0, init_line(1, 2, 0, "0x5500000020", "START")),
        warn(
            "node-b",
            2001,
            0,
            "misc/socket.cc:484",
            "socketStartConnect: Connect to 10.0.0.1<44321> failed : Connection refused",
        ),
        info("node-b", 2001, 0, "misc/socket.cc:567 -> 2"),
        info("node-b", 2001, 0, "bootstrap.cc:256 -> 2"),
        info("node-b", 2001, 0, "init.cc:1505 -> 2"),
    ]
    job = job_of(tmp_path, lines)
    (finding,) = run(BootstrapFailure, job)
    assert finding.ranks == (1,) and finding.hosts == ("node-b",)
    assert finding.title.endswith("connect to 10.0.0.1 failed: Connection refused")
    (waiting,) = run(InitIncomplete, job)
    assert waiting.ranks == (0,) and waiting.severity == Severity.ERROR


def test_ls202_connect_failure_on_the_data_path_after_init_is_not_bootstrap(tmp_path):
    lines = (
        rank_lines("node-a", 1001, 0, 2, 0, "10.0.0.1")
        + rank_lines("node-b", 2001, 1, 2, 0, "10.0.0.2")
        + [
            warn(
                "node-b",
                2001,
                0,
                "misc/socket.cc:484",
                "socketStartConnect: Connect to 10.0.0.1<41000> failed : Connection timed out",
            ),
            info("node-b", 2001, 0, "misc/socket.cc:567 -> 2"),
            info("node-b", 2001, 0, "transport/net_socket.cc:339 -> 2"),
            info("node-b", 2001, 0, "transport/net.cc:683 -> 2"),
        ]
    )
    assert run(BootstrapFailure, job_of(tmp_path, lines)) == []


def test_ls202_bootstrap_root_mismatch(tmp_path):
    lines = rank_lines("node-a", 1001, 0, 2, 0, "10.0.0.1", complete=False, summary=False) + [
        warn(
            "node-a",
            1001,
            0,
            "bootstrap.cc:421",
            "Bootstrap Root : rank 1 of 2 ranks has already checked in",
            tid=1050,
        ),
    ]
    (finding,) = run(BootstrapFailure, job_of(tmp_path, lines))
    assert finding.ranks == (0,) and "already checked in" in finding.title
    assert "same world size" in finding.advice


def test_ls202_c10d_store_timeout_is_a_rendezvous_failure(tmp_path):
    lines = [
        "[rank3]:[W602 10:00:00.000000000 socket.cpp:752] [c10d] The client socket has timed out after "
        "1800000ms while trying to connect to (10.0.0.1, 29500)."
    ]
    (finding,) = run(BootstrapFailure, job_of(tmp_path, lines))
    assert finding.ranks == (3,) and "10.0.0.1:29500" in finding.title


# ---------------------------------------------------------------------------------------------- LS203
def test_ls203_veth_interface_names_the_ranks_that_advertise_it(tmp_path):
    job, truth = simulate(tmp_path, "veth-interface", ranks=8, nodes=2, seed=1, nccl_version="2.21")
    (finding,) = run(InterfaceMisconfig, job)
    assert [sorted(finding.ranks)] == truth_ranks(truth, "interface_misconfig", primary=True)
    assert finding.severity == Severity.CRITICAL and "veth" in finding.title
    assert "peers failed to connect to 172.18.0.1" in finding.title


def test_ls203_socket_ifname_matching_no_interface(tmp_path):
    job = fixture_job("bootstrap_failure_4ranks.log")
    (finding,) = run(InterfaceMisconfig, job)
    assert finding.ranks == (2, 3) and finding.hosts == ("node0065",)
    assert finding.severity == Severity.ERROR
    assert "NCCL_SOCKET_IFNAME=ens1f0np0 matches no interface on node0065" in finding.title
    assert "ens1f0np0:10.80.13.64" in finding.title


def test_ls203_oob_interface_not_found(tmp_path):
    lines = [
        warn(
            "node-a",
            1001,
            0,
            "misc/socket.cc:480",
            "no device found matching ib0 and mlx5_0:1, verify NCCL_OOB_NET_IFNAME",
        )
    ]
    (finding,) = run(InterfaceMisconfig, job_of(tmp_path, lines))
    assert finding.hosts == ("node-a",) and "NCCL_OOB_NET_IFNAME" in finding.title


def test_ls203_docker_and_loopback_on_a_single_node_are_only_a_warning(tmp_path):
    lines = []
    for pid, rank in ((1001, 0), (1002, 1)):
        comm = f"0x55{pid:010x}"
        lines += [
            info("dgx1", pid, rank, "Bootstrap : Using lo:127.0.0.1<0>", tid=pid),
            info("dgx1", pid, rank, "NET/Socket : Using [0]lo:127.0.0.1<0> [1]docker0:172.17.0.1<0>"),
            info("dgx1", pid, rank, "Using network Socket"),
            info(
                "dgx1",
                pid,
                rank,
                f"comm {comm} rank {rank} nranks 2 cudaDev {rank} busId {rank + 1}b000 - Init COMPLETE",
            ),
        ]
    (finding,) = run(InterfaceMisconfig, job_of(tmp_path, lines))
    assert finding.severity == Severity.WARNING and finding.ranks == (0, 1)
    assert "lo:127.0.0.1" in finding.title and "docker0:172.17.0.1" in finding.title


def test_ls203_link_local_bootstrap_address_on_a_multi_node_job_is_an_error(tmp_path):
    lines = rank_lines("node-a", 1001, 0, 2, 0, "169.254.3.1", ifname="eth1") + rank_lines(
        "node-b", 2001, 1, 2, 0, "10.0.0.2"
    )
    (finding,) = run(InterfaceMisconfig, job_of(tmp_path, lines))
    assert finding.ranks == (0,) and finding.severity == Severity.ERROR and "link-local" in finding.title


def test_ls203_hosts_bootstrapping_in_different_networks_is_a_warning(tmp_path):
    lines = (
        rank_lines("node-a", 1001, 0, 3, 0, "10.1.0.1")
        + rank_lines("node-b", 2001, 1, 3, 0, "10.1.7.2")
        + rank_lines("node-c", 3001, 2, 3, 0, "192.168.5.3")
    )
    (finding,) = run(InterfaceMisconfig, job_of(tmp_path, lines))
    assert finding.hosts == ("node-c",) and finding.ranks == (2,) and finding.severity == Severity.WARNING


def test_ls203_same_slash16_different_slash24_is_normal(tmp_path):
    # Cloud VPCs put nodes in different /24s of one /16 (seen in the p5 and Polaris logs).
    lines = rank_lines("node-a", 1001, 0, 2, 0, "10.1.0.62") + rank_lines(
        "node-b", 2001, 1, 2, 0, "10.1.88.148"
    )
    assert run(InterfaceMisconfig, job_of(tmp_path, lines)) == []


# ---------------------------------------------------------------------------------------------- quiet cases
@pytest.mark.parametrize(
    "name",
    [
        "healthy_8ranks.log",
        "rank_stall_8ranks.log",
        "collective_mismatch_4ranks.log",
        "ib_error_4ranks.log",
        "socket_fallback_4ranks.log",
        "segfault_4ranks.log",
        "pp_deadlock_4ranks.log",
    ],
)
def test_ls2xx_no_error_findings_on_fixtures_without_startup_faults(name):
    assert serious(all_findings(fixture_job(name))) == []


@pytest.mark.parametrize("version", ["2.10", "2.14", "2.18", "2.27"])
def test_ls2xx_simulated_healthy_runs_are_quiet(tmp_path, version):
    job, _ = simulate(tmp_path, "healthy", ranks=8, nodes=2, seed=2, nccl_version=version, layout="srun")
    assert serious(all_findings(job)) == []


# ---------------------------------------------------------------------------------------------- real corpus
REAL = corpus_files()
real = pytest.mark.skipif(not REAL, reason=CORPUS_ABSENT)


@functools.cache
def real_job(prefix: str):
    (path,) = [p for p in REAL if p.name.startswith(prefix)]
    return load_job([str(path)])


HEALTHY_REAL = [p.name for p in REAL if p.name.startswith("mlcommons__")] + [
    "aws-samples__awsome-distributed-training",
    "sparticlesteve__pytorch-nccl-test__slurm-nccl-shifter",
    "sparticlesteve__podman-nccl-testing__logs__shifter",
    "KeitaW__p5-nccl-test-2024-07-19__nccl-test-output-v2.22.3-1.log",
    "thomaslie210__NCCL_Test_Results__NCCL_Benchmarks__GDR_On",
    "bigscience-workshop__bigscience__experiments__bandwidth__n16",
]


@real
@pytest.mark.parametrize("prefix", HEALTHY_REAL, ids=[p[:50] for p in HEALTHY_REAL])
def test_ls2xx_real_healthy_runs_have_no_error_findings(prefix):
    assert serious(all_findings(real_job(prefix))) == []


@real
def test_ls203_real_single_node_run_over_loopback_and_docker0_is_a_warning():
    job = real_job("mlcommons__training_results_v3.1__Dell__results__XE9640x4H100")
    (finding,) = run(InterfaceMisconfig, job)
    assert finding.severity == Severity.WARNING and "lo:127.0.0.1" in finding.title


@real
def test_ls2xx_real_failures_of_other_families_are_not_claimed_as_startup_faults():
    # Podman OFI memory-registration failure, Cori IB completion error, GF-Bench OOM, ALCF first-collective
    # hang: init completed (or failed on a NET error); none of them is a bootstrap, init or interface problem.
    for prefix in (
        "sparticlesteve__podman-nccl-testing__logs__podman",
        "sparticlesteve__pytorch-nccl-test__slurm-nccl-416593",
        "cuiboyuan__nccl_log_rca_bench",
        "argonne-lcf__alcf-nccl-tests__pytests__resnet50__results__2025-06-27",
    ):
        for path in [p for p in REAL if p.name.startswith(prefix)]:
            assert serious(all_findings(load_job([str(path)]))) == [], path.name


def test_stalled_inits_are_the_communicators_some_member_started_and_none_completed(tmp_path):
    def init(host, pid, rank, comm, comm_id, *, complete):
        line = (
            f"{host}:{pid}:{pid} [{rank}] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks 2 "
            f"cudaDev {rank} nvmlDev {rank} busId {rank + 1}b000 commId {comm_id}"
        )
        return [f"{line} - Init START"] + ([f"{line} - Init COMPLETE"] if complete else [])

    lines = [
        *init("gpu-a", 11, 0, "0xa0", "0x0a", complete=True),
        *init("gpu-a", 12, 1, "0xa1", "0x0a", complete=True),
        *init("gpu-a", 11, 0, "0xb0", "0x0b", complete=False),
        *init("gpu-a", 12, 1, "0xb1", "0x0b", complete=False),
        *init("gpu-a", 11, 0, "0xc0", "0x0c", complete=True),
        *init("gpu-a", 12, 1, "0xc1", "0x0c", complete=False),
        *init("gpu-a", 11, 0, "0xd0", "0x0d", complete=False),
    ]
    states = stalled_inits(job_of(tmp_path, lines))
    assert [(s.uid, s.members.height, s.waiting, s.missing) for s in states] == [
        (states[0].uid, 2, [0, 1], []),
        (states[1].uid, 1, [0], [1]),
    ]
    assert {s.uid[-2:] for s in states} == {"0b", "0d"}


@pytest.mark.parametrize(
    "name", ["init_hang_4ranks.log", "collective_mismatch_4ranks.log", "duplicate_gpu_4ranks_per_rank"]
)
def test_lifecycle_instances_are_the_streams_communicators_table(name):
    """The rules take the instances the stream's numbering built; built again from the Init/Destroy/Abort rows
    of a Job without that table, they are the same rows in the same order."""
    from nccl_logsift.resolve.inits import lifecycle_instances
    from nccl_logsift.resolve.job import Job

    job = fixture_job(name)
    without = Job({k: v for k, v in job.tables.items() if k != "communicators"}, job.paths)
    built = lifecycle_instances(without)
    assert built.height and built.equals(lifecycle_instances(job).select(built.columns))
