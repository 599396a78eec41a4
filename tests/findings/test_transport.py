"""LS301 transport-fallback and LS302 net-error: simulated scenarios, composed logs, the real corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import fixture_job, job_of, only
from conftest import CORPUS, CORPUS_ABSENT, FIXTURES

from nccl_logsift.findings.transport.net_error import NetError
from nccl_logsift.findings.transport.transport_fallback import TransportFallback
from nccl_logsift.model import Kind, Severity
from nccl_logsift.pipeline import load_job
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.transports import n_nodes, transport_rows
from nccl_logsift.simulate import Options, write

COMM_ID = "0x1f2e3d4c5b6a7988"


# ---------------------------------------------------------------------------------------------- helpers
def proc(host, pid, rank, nranks, dev, ip, comm, *, channels=(), net="IB", extra=(), comm_id=COMM_ID):
    """The init lines NCCL 2.21 prints for one rank (grammar §2.1, §4.1, §4.2)."""
    tid = pid + 90
    pre = f"{host}:{pid}:{tid} [{dev}] NCCL INFO"
    init = (
        f"ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} "
        f"busId {dev + 1}b000 commId {comm_id}"
    )
    return [
        f"{host}:{pid}:{pid} [{dev}] NCCL INFO Bootstrap : Using ib0:{ip}<0>",
        *[f"{pre} {e}" for e in extra],
        f"{pre} Using network {net}",
        f"{pre} {init} - Init START",
        *[f"{pre} {c}" for c in channels],
        f"{pre} {init} - Init COMPLETE",
    ]


def simulate(tmp_path: Path, scenario: str, **options):
    out, truth = tmp_path / f"{scenario}.log", tmp_path / f"{scenario}.json"
    write(Options(scenario=scenario, **options), str(out), str(truth))
    return load_job([str(out)]), json.loads(truth.read_text())


def primary_ranks(truth: dict, kind: str) -> list[int]:
    return next(sorted(f["ranks"]) for f in truth["faults"] if f["kind"] == kind and f["primary"])


def fault_of(truth: dict, kind: str) -> dict:
    return next(f for f in truth["faults"] if f["kind"] == kind)


def two_node_ib(gdr_on_b: bool = True) -> list[str]:
    """Ranks 0-1 on node-a, 2-3 on node-b; rings cross the nodes over NET/IB."""
    g_b = "/GDRDMA" if gdr_on_b else ""
    return [
        *proc(
            "node-a",
            1001,
            0,
            4,
            0,
            "10.0.0.1",
            "0x55aa00000010",
            channels=[
                "Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA",
                "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
            ],
        ),
        *proc(
            "node-a",
            1002,
            1,
            4,
            1,
            "10.0.0.1",
            "0x55aa00000020",
            channels=["Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0/GDRDMA"],
        ),
        *proc(
            "node-b",
            2001,
            2,
            4,
            0,
            "10.0.0.2",
            "0x55bb00000010",
            channels=[
                f"Channel 00/0 : 1[1] -> 2[0] [receive] via NET/IB/0{g_b}",
                "Channel 00/0 : 2[0] -> 3[1] via P2P/CUMEM/read",
            ],
        ),
        *proc(
            "node-b",
            2002,
            3,
            4,
            1,
            "10.0.0.2",
            "0x55bb00000020",
            channels=[f"Channel 00/0 : 3[1] -> 0[0] [send] via NET/IB/0{g_b}"],
        ),
    ]


def two_node_sockets(nodes: tuple[str, ...] = ("node-a", "node-b")) -> list[str]:
    """Ranks 0-1 on node-a, 2-3 on node-b, NCCL saying nNodes 2, every ring crossing the nodes over
    NET/Socket; ``nodes`` picks whose lines the log holds (one node's output file of a two-node job)."""

    def rank(host, pid, r, dev, ip, comm, channel):
        return proc(
            host,
            pid,
            r,
            4,
            dev,
            ip,
            comm,
            net="Socket",
            extra=["NET/IB : No device found."],
            channels=[
                f"comm {comm} rank {r} nRanks 4 nNodes 2 localRanks 2 localRank {dev} MNNVL 0",
                channel,
            ],
        )

    per_node = {
        "node-a": [
            *rank(
                "node-a",
                1001,
                0,
                0,
                "10.0.0.1",
                "0x55aa00000010",
                "Channel 00/0 : 3[1] -> 0[0] [receive] via NET/Socket/0",
            ),
            *rank(
                "node-a",
                1002,
                1,
                1,
                "10.0.0.1",
                "0x55aa00000020",
                "Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0",
            ),
        ],
        "node-b": [
            *rank(
                "node-b",
                2001,
                2,
                0,
                "10.0.0.2",
                "0x55bb00000010",
                "Channel 00/0 : 1[1] -> 2[0] [receive] via NET/Socket/0",
            ),
            *rank(
                "node-b",
                2002,
                3,
                1,
                "10.0.0.2",
                "0x55bb00000020",
                "Channel 00/0 : 3[1] -> 0[0] [send] via NET/Socket/0",
            ),
        ],
    }
    return [line for node in nodes for line in per_node[node]]


# --------------------------------------------------------------------------------------------- transport_rows
def test_transport_rows_map_each_connection_to_the_peer_of_its_communicator(tmp_path):
    rows = transport_rows(job_of(tmp_path, two_node_ib()))
    got = rows.select("job_rank", "peer_global", "peer_host", "same_host").rows()
    assert got == [
        (0, 3, "node-b", False),
        (0, 1, "node-a", True),
        (1, 2, "node-b", False),
        (2, 1, "node-a", False),
        (2, 3, "node-b", True),
        (3, 0, "node-a", False),
    ]


def test_transport_rows_of_a_table_out_of_line_order_are_those_of_the_table_in_order(tmp_path):
    job = job_of(tmp_path, two_node_ib())
    reversed_job = Job({**job.tables, "transports": job.table("transports").reverse()}, job.paths)
    assert transport_rows(reversed_job).equals(transport_rows(job))


def test_transport_rows_give_a_runtime_connection_beyond_the_latest_split_to_the_larger_communicator(
    tmp_path,
):
    # NCCL 2.22 connects at the first collective, after the process created a 2-rank split: rank 3 exists
    # only in the 4-rank world communicator.
    lines = [
        *proc("node-a", 1001, 0, 4, 0, "10.0.0.1", "0x55aa00000010"),
        *proc("node-a", 1001, 0, 2, 0, "10.0.0.1", "0x55aa00000099", comm_id="0x99"),
        "node-a:1001:1091 [0] NCCL INFO Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA",
        *proc("node-b", 2002, 3, 4, 1, "10.0.0.2", "0x55bb00000020"),
    ]
    rows = transport_rows(job_of(tmp_path, lines))
    assert rows.select("job_rank", "peer_comm_rank", "peer_global", "peer_host").rows() == [
        (0, 3, 3, "node-b")
    ]


# ---------------------------------------------------------------------------------------------- LS301
def test_ls301_socket_fallback_fixture_with_ib_disabled_is_info_as_a_choice_of_the_job():
    job = load_job([str(FIXTURES / "socket_fallback_4ranks.log")])
    finding = only(list(TransportFallback().check(job)))
    truth = json.loads((FIXTURES / "socket_fallback_4ranks.truth.json").read_text())
    fault = fault_of(truth, "transport_fallback")
    assert finding.kind == Kind.TRANSPORT_FALLBACK and not fault["primary"]
    assert list(finding.ranks) == fault["ranks"]
    assert finding.severity == Severity.INFO == Severity.parse(fault["severity"])
    assert "NET/Socket" in finding.title and "NCCL_IB_DISABLE=1" in finding.title
    assert "on purpose" in finding.title
    assert finding.evidence and finding.first_seen is not None


@pytest.mark.parametrize("version", ["2.14", "2.27"])
def test_ls301_simulated_socket_fallback_without_ib_device_is_a_warning_on_all_ranks(tmp_path, version):
    job, truth = simulate(tmp_path, "socket-fallback", ranks=8, nccl_version=version)
    findings = list(TransportFallback().check(job))
    finding = only([f for f in findings if "NET/Socket" in f.title])
    fault = fault_of(truth, "transport_fallback")
    assert list(finding.ranks) == fault["ranks"] and not fault["primary"]
    assert finding.severity == Severity.WARNING == Severity.parse(fault["severity"])
    assert "No device found" in finding.title
    # 2.27+ also says the IB plugin failed: NCCL went on with sockets, so that is a note, not an error.
    assert all(f.severity <= Severity.WARNING for f in findings)


def test_ls301_simulated_gdr_disabled_names_the_ranks_of_the_node_without_gdr(tmp_path):
    job, truth = simulate(tmp_path, "gdr-disabled", ranks=8, nccl_version="2.21")
    finding = only(list(TransportFallback().check(job)))
    assert list(finding.ranks) == fault_of(truth, "transport_fallback")["ranks"]
    assert finding.severity == Severity.WARNING and "GPUDirect RDMA" in finding.title


@pytest.mark.parametrize("nodes, severity", [(1, Severity.INFO), (2, Severity.WARNING)])
def test_ls301_simulated_p2p_disabled_names_the_ranks_on_shm(tmp_path, nodes, severity):
    """Set on the job's only node it is the job's choice (info); on one node of two, a slip (warning)."""
    job, truth = simulate(tmp_path, "p2p-disabled", ranks=8, nccl_version="2.27", nodes=nodes)
    finding = only(list(TransportFallback().check(job)))
    fault = fault_of(truth, "transport_fallback")
    assert list(finding.ranks) == fault["ranks"]
    assert finding.severity == severity == Severity.parse(fault["severity"])
    assert "SHM" in finding.title and "NCCL_P2P_DISABLE=1" in finding.title


def test_ls301_healthy_single_node_job_on_p2p_is_not_a_fallback(tmp_path):
    # One host, no IB device, NCCL selects Socket but never uses it: P2P between the two GPUs is normal.
    lines = [
        *proc(
            "dgx1",
            3001,
            0,
            2,
            0,
            "10.1.0.5",
            "0x5601",
            net="Socket",
            extra=["NET/IB : No device found."],
            channels=["Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"],
        ),
        *proc(
            "dgx1",
            3002,
            1,
            2,
            1,
            "10.1.0.5",
            "0x5602",
            net="Socket",
            extra=["NET/IB : No device found."],
            channels=["Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read"],
        ),
    ]
    assert list(TransportFallback().check(job_of(tmp_path, lines))) == []


def test_ls301_shm_between_gpus_of_one_host_with_p2p_disabled_is_info_as_a_choice_of_the_job(tmp_path):
    lines = [
        "dgx1:3001:3001 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
        *proc(
            "dgx1",
            3001,
            0,
            2,
            0,
            "10.1.0.5",
            "0x5601",
            channels=["Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"],
        ),
        *proc(
            "dgx1",
            3002,
            1,
            2,
            1,
            "10.1.0.5",
            "0x5602",
            channels=["Channel 00 : 1[1] -> 0[0] via SHM/direct/direct"],
        ),
    ]
    finding = only(list(TransportFallback().check(job_of(tmp_path, lines))))
    assert finding.ranks == (0, 1) and finding.hosts == ("dgx1",)
    assert finding.severity == Severity.INFO and "NCCL_P2P_DISABLE=1" in finding.title


def test_ls301_one_node_without_gdrdma_while_the_other_has_it_is_named(tmp_path):
    findings = list(TransportFallback().check(job_of(tmp_path, two_node_ib(gdr_on_b=False))))
    finding = only(findings)
    assert finding.ranks == (2, 3) and finding.hosts == ("node-b",)
    assert finding.severity == Severity.WARNING and "node-b" in finding.title


def test_ls301_gdr_turned_off_by_the_job_everywhere_is_info(tmp_path):
    """NCCL_NET_GDR_LEVEL echoed as set by environment: the job chose host staging (severity policy)."""
    lines = [line.replace("/GDRDMA", "") for line in two_node_ib()] + [
        "node-a:1001:1001 [0] NCCL INFO NCCL_NET_GDR_LEVEL set by environment to LOC",
        "node-a:1001:1001 [0] NCCL INFO GPU Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 4 > 0)",
    ]
    finding = only(list(TransportFallback().check(job_of(tmp_path, lines))))
    assert finding.severity == Severity.INFO and "No rank uses GPUDirect RDMA" in finding.title
    # The same without the setting: GDR lost to the distance limit is a warning.
    unset = [line for line in lines if "set by environment" not in line]
    lost = only(list(TransportFallback().check(job_of(tmp_path, unset, "unset.log"))))
    assert lost.severity == Severity.WARNING


def test_ls301_two_node_ib_with_gdrdma_everywhere_is_clean(tmp_path):
    assert list(TransportFallback().check(job_of(tmp_path, two_node_ib()))) == []


def test_ls301_one_node_on_sockets_while_the_other_uses_ib_is_a_warning(tmp_path):
    lines = two_node_ib()
    lines = [
        line.replace("via NET/IB/0", "via NET/Socket/0") if line.startswith("node-b") else line
        for line in lines
    ]
    finding = only(list(TransportFallback().check(job_of(tmp_path, lines))), severity=Severity.WARNING)
    assert finding.ranks == (2, 3) and "NET/Socket" in finding.title and "IB" in finding.title


def test_ls301_two_node_job_on_sockets_names_the_job_by_its_node_count(tmp_path):
    finding = only(list(TransportFallback().check(job_of(tmp_path, two_node_sockets()))))
    assert finding.severity == Severity.WARNING and finding.hosts == ("node-a", "node-b")
    assert "All inter-node traffic of this 2-node job runs over TCP sockets" in finding.title


def test_ls301_sockets_in_one_node_s_log_of_a_two_node_job_say_the_logs_show_one_node(tmp_path):
    """nNodes counts the job's nodes, the hosts count the logs: the title says both, so the verdict's '1
    host(s)' does not read as a contradiction of '2-node job'."""
    job = job_of(tmp_path, two_node_sockets(nodes=("node-a",)))
    finding = only(list(TransportFallback().check(job)))
    assert n_nodes(job) == 2 and finding.hosts == ("node-a",) and finding.ranks == (0, 1)
    assert "this 2-node job (these logs show 1 of its nodes) runs over TCP sockets" in finding.title


def test_ls301_collnet_sharp_setup_failure_is_a_warning(tmp_path):
    lines = two_node_ib() + [
        "",
        (
            "node-a:1001:1091 [0] sharp_plugin.c:288 NCCL WARN NET/IB :SHARP coll init error: Cannot create "
            "SHArP job(-11)"
        ),
        "",
        (
            "node-a:1001:1091 [0] transport.cc:253 NCCL WARN Cannot initialize CollNet, using point-to-point "
            "network instead"
        ),
    ]
    finding = only(list(TransportFallback().check(job_of(tmp_path, lines))))
    assert finding.ranks == (0,) and finding.severity == Severity.WARNING
    assert "CollNet" in finding.title and "SHArP" in finding.title


def test_ls301_healthy_fixture_has_no_fallback():
    job = load_job([str(FIXTURES / "healthy_8ranks.log")])
    assert [f for f in TransportFallback().check(job) if f.severity >= Severity.WARNING] == []


# ---------------------------------------------------------------------------------------------- LS302
def ib_completion(host, pid, dev, peer, status, vendor, req="Send"):
    return [
        "",
        f"{host}:{pid}:{pid + 95} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from "
        f"peer {peer} with status={status} opcode=0 len=0 vendor err {vendor} ({req})",
    ]


def test_ls302_ib_error_fixture_names_the_rank_that_logged_it_and_its_peer():
    job = load_job([str(FIXTURES / "ib_error_4ranks.log")])
    finding = only(list(NetError().check(job)))
    truth = json.loads((FIXTURES / "ib_error_4ranks.truth.json").read_text())
    assert list(finding.ranks) == primary_ranks(truth, "net_error")
    assert finding.severity == Severity.CRITICAL and finding.kind == Kind.NET_ERROR
    assert "status 12" in finding.title and "RETRY_EXC_ERR" in finding.title
    assert "node0153" in finding.title and "rank 2" in finding.title


@pytest.mark.parametrize("version", ["2.14", "2.27"])
def test_ls302_simulated_ib_error_names_the_logging_rank(tmp_path, version):
    job, truth = simulate(tmp_path, "ib-error", ranks=8, nccl_version=version)
    finding = only(list(NetError().check(job)))
    assert list(finding.ranks) == primary_ranks(truth, "net_error") and finding.severity == Severity.CRITICAL


def test_ls302_status_12_names_the_rank_that_logged_it_and_its_peer(tmp_path):
    lines = (
        two_node_ib()
        + ib_completion("node-a", 1002, 1, "10.0.0.2<43211>", 12, 129)
        + [
            "node-a:1002:1097 [1] NCCL INFO transport/net_ib.cc:1715 -> 6",
        ]
    )
    finding = only(list(NetError().check(job_of(tmp_path, lines))))
    assert finding.ranks == (1,) and finding.hosts == ("node-a",)
    # rank 1 sends to rank 2 over the network: the peer address of node-b resolves to that rank
    assert "10.0.0.2<43211> = node-b, rank 2" in finding.title
    assert "vendor err 129" in finding.title and finding.severity == Severity.CRITICAL


def test_ls302_status_5_after_status_12_is_reported_as_its_consequence(tmp_path):
    lines = (
        two_node_ib()
        + ib_completion("node-a", 1002, 1, "10.0.0.2<43211>", 12, 129)
        + ib_completion("node-b", 2001, 0, "10.0.0.1<51002>", 5, 249, req="Recv")
    )
    findings = list(NetError().check(job_of(tmp_path, lines)))
    first = only(findings, severity=Severity.CRITICAL)
    flush = only(findings, severity=Severity.WARNING)
    assert first.ranks == (1,) and flush.ranks == (2,)
    assert "WR_FLUSH_ERR" in flush.title and "after the status 12 error" in flush.title
    assert first.first_seen < flush.first_seen


def test_ls302_status_5_alone_says_the_cause_is_missing(tmp_path):
    lines = two_node_ib() + ib_completion("node-b", 2001, 0, "10.0.0.1<51002>", 5, 249, req="Recv")
    finding = only(list(NetError().check(job_of(tmp_path, lines))))
    assert finding.severity == Severity.ERROR and "not in these logs" in finding.title


def test_ls302_status_4_is_decoded_as_gpudirect_blocked(tmp_path):
    lines = two_node_ib() + [
        "",
        "node-a:1001:1096 [0] transport/net_ib/p2p.cc:550 NCCL WARN NET/IB: Got completion from peer "
        "10.0.0.2<40100> with status=IBV_WC_LOC_PROT_ERR(4) opcode=IBV_WC_RDMA_WRITE(1) vendor_err=81  hca "
        "mlx5_0",
    ]
    finding = only(list(NetError().check(job_of(tmp_path, lines))))
    assert finding.ranks == (0,) and "status 4" in finding.title and "ACS" in finding.title


def test_ls302_ib_port_error_event_is_critical(tmp_path):
    lines = two_node_ib() + [
        "",
        (
            "node-b:2002:2150 [1] transport/net_ib.cc:120 NCCL WARN NET/IB : mlx5_1:1 Got async event : port "
            "error"
        ),
    ]
    finding = only(list(NetError().check(job_of(tmp_path, lines))))
    assert finding.ranks == (3,) and finding.severity == Severity.CRITICAL and "port error" in finding.title


def test_ls302_ofi_error_followed_by_an_error_chain_is_critical(tmp_path):
    lines = two_node_ib() + [
        "",
        "node-a:1001:1094 [0] register_mr_buffers:647 NCCL WARN NET/OFI Unable to register memory (type = "
        "2) for device 1. RC: -22, Error: Invalid argument",
        "node-a:1001:1094 [0] NCCL INFO transport/net.cc:783 -> 2",
    ]
    finding = only(list(NetError().check(job_of(tmp_path, lines))))
    assert finding.ranks == (0,) and finding.severity == Severity.CRITICAL and "NET/OFI" in finding.title


def test_ls302_ofi_warning_that_nccl_survives_is_a_warning(tmp_path):
    lines = two_node_ib() + [
        "",
        (
            "node-a:1001:1094 [0] nccl_net_ofi_rdma_init:7737 NCCL WARN NET/OFI OFI fi_getinfo() call "
            "failed: Function not implemented"
        ),
    ]
    finding = only(list(NetError().check(job_of(tmp_path, lines))))
    assert finding.severity == Severity.WARNING


def test_ls302_closed_socket_after_cuda_oom_points_at_the_failed_peer_as_a_consequence():
    job = load_job([str(FIXTURES / "cuda_oom_4ranks.log")])
    finding = only(list(NetError().check(job)))
    assert finding.ranks == (1, 3) and finding.severity == Severity.WARNING
    assert (
        "consequence" in finding.title
        and "rank 0 failed before" in finding.title
        and "out of memory" in finding.title
    )


def test_ls302_closed_socket_with_no_other_failure_is_an_error_naming_the_peer_host(tmp_path):
    lines = two_node_ib() + [
        "",
        (
            "node-a:1001:1099 [0] misc/socket.cc:60 NCCL WARN socketProgress: Connection closed by remote "
            "peer 10.0.0.2<37291>"
        ),
        "node-a:1001:1099 [0] NCCL INFO misc/socket.cc:79 -> 6",
    ]
    finding = only(list(NetError().check(job_of(tmp_path, lines))))
    assert finding.ranks == (0,) and finding.severity == Severity.ERROR
    assert "node-b" in finding.title and "peer process probably died" in finding.title


def test_ls302_healthy_fixture_has_no_network_error():
    job = load_job([str(FIXTURES / "healthy_8ranks.log")])
    assert list(NetError().check(job)) == []


# ---------------------------------------------------------------------------------------------- real corpus
def corpus(name: str) -> Path:
    path = CORPUS / name
    if not path.exists():
        pytest.skip(CORPUS_ABSENT)
    return path


@pytest.fixture(scope="module")
def corpus_jobs():
    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = load_job([str(corpus(name))])
        return cache[name]

    return get


HEALTHY = [
    "mlcommons__training_results_v2.0__Azure__results__ND96amsr_A100_v4_n16_pytorch__rnnt__result_1.txt",
    "mlcommons__training_results_v2.0__Dell__results__2xXE8545x4A100-SXM-80GB__maskrcnn__result_0.txt",
    "mlcommons__training_results_v3.1__Dell__results__2xXE8640x4H100-SXM-80GB__bert__result_0.txt",
    "mlcommons__training_results_v4.1__Clemson__results__6x8xH100-SXM5-80GB__bert__result_0.txt",
    "mlcommons__training_results_v4.1__Oracle__results__512xBM.GPU.H100.8__llama2_70b_lora__result_2.txt",
    "mlcommons__training_results_v5.1__Dell__results__1xXE9680x8H200-SXM-141GB__retinanet__result_0.txt",
    "mlcommons__training_results_v5.1__Dell__results__2xXE9685Lx8B200-SXM-180GB__retinanet__result_1.txt",
    "mlcommons__training_results_v5.1__MangoBoost__results__MI300X-LLMBoost-GPUBoost-2node__llama2_70b_lora__result_5.txt",
    "mlcommons__training_results_v5.1__MangoBoost__results__MI325X-LLMBoost-GPUBoost-2node__llama2_70b_lora__result_0.txt",
    "mlcommons__training_results_v1.1__Dell__results__DSS8440x8A100-PCIE-40GB__bert__result_0.txt",
    "mlcommons__training_results_v0.7__Alibaba__results__a100-8__resnet__200711025203744603517_5.log",
    "sparticlesteve__podman-nccl-testing__logs__shifter-nccl-tests-30743809.out",
    "bigscience-workshop__bigscience__experiments__bandwidth__n16_32gb_all_reduce_bench.txt",
]


@pytest.mark.parametrize("name", HEALTHY, ids=lambda n: n[:60])
def test_corpus_healthy_production_runs_get_no_error_from_ls301_ls302(corpus_jobs, name):
    job = corpus_jobs(name)
    serious = [
        f.title for r in (TransportFallback, NetError) for f in r().check(job) if f.severity >= Severity.ERROR
    ]
    assert serious == []


def test_corpus_cori_shifter_run_is_named_as_sockets_over_ipoib_a_warning_as_it_completed(corpus_jobs):
    job = corpus_jobs("sparticlesteve__pytorch-nccl-test__slurm-nccl-shifter-416768.out")
    finding = only(list(TransportFallback().check(job)))
    assert finding.severity == Severity.WARNING and "IPoIB" in finding.title
    assert finding.hosts == ("cgpu15", "cgpu16")


def test_corpus_gdr_off_run_is_named_with_the_distance_reason(corpus_jobs):
    job = corpus_jobs(
        "thomaslie210__NCCL_Test_Results__NCCL_Benchmarks__GDR_Off__n013_n014_GDR_Off_Big__result_big_all_reduce_perf.txt"
    )
    finding = only(list(TransportFallback().check(job)))
    assert (
        finding.severity == Severity.WARNING and finding.ranks == (0, 1) and "distance 6 > 4" in finding.title
    )
    gdr_on = corpus_jobs(
        "thomaslie210__NCCL_Test_Results__NCCL_Benchmarks__GDR_On__n013_n014_GDR_ON_Big2__result_big_all_reduce_perf.txt"
    )
    assert list(TransportFallback().check(gdr_on)) == []


def test_corpus_mangoboost_mix_of_gdr_and_host_staged_channels_is_info(corpus_jobs):
    job = corpus_jobs(
        "mlcommons__training_results_v5.1__MangoBoost__results__MI325X-LLMBoost-GPUBoost-2node__llama2_70b_lora__result_0.txt"
    )
    finding = only(list(TransportFallback().check(job)))
    assert finding.severity == Severity.INFO and "without GPUDirect RDMA" in finding.title


def test_corpus_nersc_ib_completion_error_names_rank_10(corpus_jobs):
    job = corpus_jobs("sparticlesteve__pytorch-nccl-test__slurm-nccl-416593.out")
    finding = only(list(NetError().check(job)))
    assert finding.ranks == (10,) and finding.severity == Severity.CRITICAL and "status 12" in finding.title


def test_corpus_perlmutter_podman_ofi_error_is_critical_on_all_ranks(corpus_jobs):
    job = corpus_jobs("sparticlesteve__podman-nccl-testing__logs__podman-nccl-tests-30743802.out")
    finding = only(list(NetError().check(job)))
    assert finding.severity == Severity.CRITICAL and finding.ranks == tuple(range(8))
    assert "Unable to register memory" in finding.title


MANGOBOOST_MI300X = (
    "mlcommons__training_results_v5.1__MangoBoost__results__"
    "MI300X-LLMBoost-GPUBoost-2node__llama2_70b_lora__result_5.txt"
)


def test_corpus_mangoboost_one_node_file_of_a_two_node_job_has_a_verdict_that_agrees_with_itself():
    """Only mi300x-01's output is in the file, while RCCL says nNodes 2 (SOURCES.md #29): the verdict counts
    the logs' hosts and the socket finding counts the job's nodes, and each says which it counts."""
    from nccl_logsift.pipeline import analyze

    report = analyze([str(corpus(MANGOBOOST_MI300X))])
    assert report.job.hosts == ("mi300x-01",) and report.job.world_size == 16
    assert report.verdict.startswith(
        "No hang or failure found in these logs (8 rank(s) on 1 host(s)): the job looks healthy"
    )
    assert "Root cause" not in report.verdict
    assert (
        "All inter-node traffic of this 2-node job (these logs show 1 of its nodes) runs over TCP sockets"
        in report.verdict
    )


@pytest.mark.parametrize(
    "name, nodes",
    [
        # Torn lines leave host tails on one line each (x3005x3005c0s31b0n0, xn0): not nodes.
        ("argonne-lcf__alcf-nccl-tests__pytests__resnet50__results__2025-01-15-15-21-09__without_aws.log", 2),
        ("argonne-lcf__alcf-nccl-tests__pytests__resnet50__results__2025-06-27-09-51-31__with_aws.log", 2),
        # NCCL_DEBUG=WARN: no init lines, so no processes; the hosts are those of the WARN lines.
        (
            "mlcommons__training_results_v4.1__Oracle__results__512xBM.GPU.H100.8__llama2_70b_lora__result_2.txt",
            64,
        ),
    ],
    ids=["alcf-resnet50-2025-01", "alcf-resnet50-2025-06", "oracle-512-ranks"],
)
def test_corpus_node_count_agrees_with_the_hosts_the_job_summary_counts(corpus_jobs, name, nodes):
    from nccl_logsift.report import summarize_job

    job = corpus_jobs(name)
    assert n_nodes(job) == nodes == len(summarize_job(job).hosts)


def test_n_nodes_counts_a_host_whose_processes_failed_before_init():
    """In the bootstrap-failure fixture one node's processes never completed their init: their WARN lines
    still name the host, so the job spans 2 nodes."""
    assert n_nodes(fixture_job("bootstrap_failure_4ranks.log")) == 2


def test_n_nodes_skips_the_host_of_a_torn_line():
    """A host named on one NCCL line only is the tail of a line another process tore ("x3005x3005c0s31b0n0"),
    not a node: two hosts here, as in the ALCF resnet50 logs, whatever the stray names."""
    import polars as pl

    rows = [("x3005c0s25b1n0", 11, n) for n in range(1, 6)] + [
        ("x3005c0s31b0n0", 12, n) for n in range(6, 11)
    ]
    rows += [("x3005x3005c0s31b0n0", 12, 11), ("c0s31b0n0", 13, 12)]
    lines = pl.DataFrame(
        {"host": [h for h, _, _ in rows], "pid": [p for _, p, _ in rows], "line_no": [n for _, _, n in rows]},
        schema={"host": pl.String, "pid": pl.Int64, "line_no": pl.UInt32},
    ).with_columns(source_id=pl.lit(0, pl.UInt16), part=pl.lit(0, pl.UInt8), producer=pl.lit("nccl"))
    assert n_nodes(Job({"lines": lines}, ("job.log",))) == 2
