"""LS201 init-incomplete naming a rank by its absence; the waiting peers' errors (LS202) become
consequences."""

from __future__ import annotations

import pytest
from builders import run

from nccl_logsift.findings.startup.bootstrap_failure import BootstrapFailure
from nccl_logsift.findings.startup.init_incomplete import InitIncomplete
from nccl_logsift.model import Severity
from nccl_logsift.pipeline import analyze, load_job
from nccl_logsift.render.json import to_dict
from nccl_logsift.simulate import Options, write

UNIQUE_ID = (
    "torch.distributed.DistBackendError: [{r}] is setting up NCCL communicator and retrieving ncclUniqueId "
    "from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout"
)


# PyTorch 2.1 ("retreiving") and 2.2 create the communicator at the first collective; launcher layouts with
# rank labels (srun, torchrun, mpirun) and without (interleaved, per-rank files).
@pytest.mark.parametrize(
    "layout,torch",
    [("srun", "2.1"), ("interleaved", "2.2"), ("torchrun", "2.2"), ("mpirun", "2.1"), ("per-rank", "2.2")],
)
def test_rank_0_that_never_published_the_unique_id_is_the_root_cause(tmp_path, layout, torch):
    out, truth = tmp_path / "job", tmp_path / "truth.json"
    sim = write(
        Options(scenario="init-hang", layout=layout, nccl_version="2.18", torch_version=torch, seed=0),
        str(out),
        str(truth),
    )
    assert sim.job.notes.get("unique_id"), "the seed no longer picks the rank-0 variant"
    report = to_dict(analyze([str(out)]))
    assert [(f["code"], f["ranks"]) for f in report["findings"] if f["primary"]] == [("LS201", [0])]
    waited = [f for f in report["findings"] if f["code"] == "LS202"]
    assert waited and all(f["severity"] == "error" and f["ranks"] == list(range(1, 8)) for f in waited)


def test_store_clients_that_never_joined_are_named_by_absence(tmp_path):
    log = tmp_path / "store.log"
    log.write_text(
        "\n".join(
            [
                (
                    "0: torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. "
                    "2/4 clients joined."
                ),
                (
                    "1: [W socket.cpp:663] [c10d] The client socket has failed to connect to [gpu-a]:29500 "
                    "(errno: 111 - Connection refused)."
                ),
                "0: Traceback (most recent call last):",
            ]
        )
        + "\n"
    )
    (found,) = run(InitIncomplete, load_job([str(log)]))
    assert found.ranks == (2, 3) and found.severity is Severity.CRITICAL
    assert "2 of 4 clients" in found.title


def test_the_clients_left_out_are_not_guessed_when_the_count_disagrees(tmp_path):
    log = tmp_path / "store.log"
    log.write_text(
        "0: torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 3/4 clients "
        "joined.\n"
    )
    (found,) = run(InitIncomplete, load_job([str(log)]))
    assert found.ranks == () and "1 never connected" in found.title


def test_a_store_error_while_rank_0_was_there_stays_a_bootstrap_failure(tmp_path):
    """Its PG options line alone would not do: PyTorch prints it before the (lazy) communicator exists."""
    # Rank 0 created its communicator (NCCL logged its init): the store itself failed the others.
    log = tmp_path / "store.log"
    log.write_text(
        "\n".join(
            [
                "0: gpu-a:4242:4242 [0] NCCL INFO ncclCommInitRankConfig comm 0x5509e7ccfed0 rank 0 nranks "
                "4 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7bbff3add302d34a - Init START",
                *(f"{r}: " + UNIQUE_ID.format(r=r) for r in (1, 2, 3)),
            ]
        )
        + "\n"
    )
    job = load_job([str(log)])
    assert [f.title for f in run(InitIncomplete, job) if "never arrived" in f.title] == []
    (failed,) = run(BootstrapFailure, job)
    assert failed.ranks == (1, 2, 3) and failed.severity is Severity.CRITICAL


# socket.cpp's C10D_ERROR line, then the DistNetworkError init_process_group raises
# (SocketConnectOp::throwTimeoutError); both before the process group exists, so no [rankN]: prefix.
CLIENT_TIMEOUT = "The client socket has timed out after 1800000ms while trying to connect to (gpu-a, 29500)."


def store_timeout_lines(ranks, host_of_exits: str = "gpu-b") -> list[str]:
    lines = []
    for r in ranks:
        lines += [
            f"{r}: [E1112 09:30:01.50123456{r} socket.cpp:1011] [c10d] {CLIENT_TIMEOUT}",
            f"{r}: Traceback (most recent call last):",
            f'{r}:   File "/workspace/train.py", line 41, in <module>',
            f'{r}:     dist.init_process_group("nccl")',
            f"{r}: torch.distributed.DistNetworkError: {CLIENT_TIMEOUT}",
        ]
    return lines + [f"srun: error: {host_of_exits}: task {r}: Exited with exit code 1" for r in ranks]


def test_rank_0_whose_store_never_listened_is_named_by_its_peers_connect_timeouts(tmp_path):
    """Ranks 4-7 time out connecting to the TCPStore on gpu-a, which rank 0 would host; nothing of rank 0 or
    gpu-a is in the logs: rank 0 (on gpu-a) is the cause, the timeouts and exits are consequences."""
    log = tmp_path / "job.log"
    log.write_text("\n".join(store_timeout_lines(range(4, 8))) + "\n")
    report = to_dict(analyze([str(log)]))
    (lead,) = [f for f in report["findings"] if f["primary"]]
    assert (lead["code"], lead["ranks"], lead["hosts"]) == ("LS201", [0], ["gpu-a"])
    assert "timed out connecting to the c10d store on gpu-a:29500" in lead["title"]
    echoes = {f["code"]: f["severity"] for f in report["findings"] if not f["primary"]}
    assert echoes == {"LS202": "error", "LS501": "error"}


def test_a_store_host_that_logged_is_not_called_absent_but_rank_0_still_is(tmp_path):
    """Single node: the waiting ranks run on the store's host (the launcher names it), so only rank 0 is
    missing."""
    log = tmp_path / "job.log"
    log.write_text("\n".join(store_timeout_lines(range(1, 4), host_of_exits="gpu-a")) + "\n")
    (found,) = [f for f in run(InitIncomplete, load_job([str(log)])) if "never arrived" in f.title]
    assert found.ranks == (0,) and found.hosts == ()


def test_a_store_timeout_while_rank_0_logged_stays_a_bootstrap_failure(tmp_path):
    """Rank 0 was there (a firewall, a wrong MASTER_ADDR): the store was unreachable, nobody is absent."""
    log = tmp_path / "job.log"
    rank0 = "0: gpu-a:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4"
    log.write_text("\n".join([rank0, *store_timeout_lines(range(1, 4))]) + "\n")
    job = load_job([str(log)])
    assert [f for f in run(InitIncomplete, job) if "never arrived" in f.title] == []
    (failed,) = run(BootstrapFailure, job)
    assert failed.ranks == (1, 2, 3) and failed.severity is Severity.CRITICAL


@pytest.mark.parametrize("layout,nccl", [("srun", "2.21"), ("mpirun", "2.27"), ("per-rank", "2.30")])
def test_simulated_store_host_absent_names_rank_0(tmp_path, layout, nccl):
    out, truth = tmp_path / "job", tmp_path / "truth.json"
    write(
        Options(scenario="store-host-absent", layout=layout, nccl_version=nccl, nodes=2, seed=0),
        str(out),
        str(truth),
    )
    report = to_dict(analyze([str(out)]))
    assert [(f["code"], f["ranks"]) for f in report["findings"] if f["primary"]] == [("LS201", [0])]
    assert not [f for f in report["findings"] if f["severity"] == "critical" and not f["primary"]]


# torchrun's dynamic rendezvous (dynamic_rendezvous.py): the node agent that came logs its join attempt, then
# raises RendezvousTimeoutError (no message) when fewer than min_nodes joined; the launch configs record lists
# min_nodes (launcher/api.py), one enveloped line each from PyTorch 2.4.
AGENT = "I1112 09:00:03.{us:06d} 18211 site-packages/torch/distributed/{where}] "
LAUNCH = [
    AGENT.format(us=401000, where="launcher/api.py:188") + text
    for text in (
        "Starting elastic_operator with launch configs:",
        "  entrypoint       : train.py",
        "  min_nodes        : 3",
        "  max_nodes        : 3",
    )
]
RDZV_TIMEOUT = [
    "Traceback (most recent call last):",
    '  File "/usr/local/bin/torchrun", line 8, in <module>',
    "    sys.exit(main())",
    '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/elastic/rendezvous/'
    'dynamic_rendezvous.py", line 688, in run',
    "    raise RendezvousTimeoutError",
    "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
]


def join_attempt(host: str, pid: int) -> str:
    where = "elastic/rendezvous/dynamic_rendezvous.py:1161"
    return AGENT.format(us=412000, where=where) + (
        f"The node '{host}_{pid}_0' attempts to join the next round of the rendezvous 'job-4471'."
    )


def test_nodes_that_never_joined_torchruns_rendezvous_are_the_cause_not_the_agents_that_timed_out(tmp_path):
    node_logs = []
    for host, pid in (("gpu-b07", 18211), ("gpu-b08", 18090)):
        path = tmp_path / f"{host}.log"
        path.write_text("\n".join([*LAUNCH, join_attempt(host, pid), *RDZV_TIMEOUT]) + "\n")
        node_logs.append(str(path))
    report = to_dict(analyze(node_logs))
    (lead,) = [f for f in report["findings"] if f["primary"]]
    assert lead["code"] == "LS201" and lead["severity"] == "critical"
    assert lead["title"].startswith("1 node never joined torchrun's rendezvous 'job-4471': only 2 nodes")
    assert "(gpu-b07, gpu-b08) of the 3 it needs arrived" in lead["title"]
    assert not [f for f in report["findings"] if f["severity"] == "critical" and not f["primary"]]


def test_a_rendezvous_timeout_without_launch_configs_still_blames_a_missing_node(tmp_path):
    log = tmp_path / "agent.log"
    log.write_text("\n".join([join_attempt("gpu-b07", 18211), *RDZV_TIMEOUT]) + "\n")
    (found,) = run(InitIncomplete, load_job([str(log)]))
    assert found.title.startswith(
        "A node never joined torchrun's rendezvous 'job-4471': only 1 node (gpu-b07)"
    )
    assert found.ranks == ()
