"""What the truth file says happened is visible in the log it came with, scenario by scenario.

These checks read the parsed tables the way a diagnosis would (COLL lines per communicator and
process, WARN texts, transport lines), so a scenario whose evidence went missing fails here first.
"""

from __future__ import annotations

import re
from datetime import datetime

import polars as pl
import pytest
from simhelp import parse, run

from nccl_logsift.simulate import SCENARIOS


def _setup(tmp_path, scenario, **kw):
    options = {
        "scenario": scenario,
        "ranks": 16 if scenario in ("pp-deadlock", "rank-stall") else 8,
        "seed": 21,
        "nccl_version": kw.pop("nccl_version", "2.21"),
        "torn_rate": 0.0,
    }
    options.update(kw)
    out, truth = run(tmp_path, **options)
    _, tables = parse(out)
    return out, truth, tables


def proc_of(truth, rank):
    p = truth["processes"][rank]
    return p["host"], p["pid"]


def nccl_text(tables, truth, rank) -> list[str]:
    host, pid = proc_of(truth, rank)
    lines = tables["lines"].filter(
        (pl.col("host") == host) & (pl.col("pid") == pid) & (pl.col("producer") == "nccl")
    )
    return lines["text"].to_list()


def coll_on(tables, truth, comm_id, rank) -> pl.DataFrame:
    """The COLL lines ``rank`` printed on the communicator ``comm_id``, in order."""
    host, pid = proc_of(truth, rank)
    mine = (pl.col("host") == host) & (pl.col("pid") == pid)
    ptrs = tables["comms"].filter(mine & (pl.col("comm_id") == comm_id))["comm"].unique().to_list()
    return tables["collectives"].filter(mine & pl.col("comm").is_in(ptrs)).sort("source_id", "line_no")


def primary(truth):
    """The fault the scenario is about: its root cause, or in a job that works degraded (no root cause by the
    severity policy) its only fault."""
    return next((f for f in truth["faults"] if f["primary"]), truth["faults"][0])


def comm_of(truth, comm_id):
    return next(c for c in truth["communicators"] if c["comm_id"] == comm_id)


@pytest.mark.parametrize("scenario", ["rank-stall", "uneven-data", "segfault"])
def test_laggards_stop_one_call_short_where_their_peers_wait(tmp_path, scenario):
    out, truth, tables = _setup(tmp_path, scenario)
    f = primary(truth)
    comm = comm_of(truth, f["comm"])
    for r in f["ranks"]:
        assert coll_on(tables, truth, f["comm"], r).height == f["seq"] - 1
    peers = [r for r in comm["ranks"] if r not in f["ranks"]]
    assert max(coll_on(tables, truth, f["comm"], r).height for r in peers) >= f["seq"]
    waited = [x for x in truth["faults"] if x["kind"] == "watchdog_timeout"]
    assert waited and not set(waited[0]["ranks"]) & set(f["ranks"])
    assert "Watchdog caught collective operation timeout" in out.read_text()


@pytest.mark.parametrize("scenario", ["extra-collective", "collective-mismatch", "pp-deadlock"])
def test_the_culprits_call_differs_at_the_truths_position(tmp_path, scenario):
    _, truth, tables = _setup(tmp_path, scenario)
    f = primary(truth)
    comm = comm_of(truth, f["comm"])
    culprit = f["ranks"][0]
    mine = coll_on(tables, truth, f["comm"], culprit).row(f["seq"] - 1, named=True)
    assert mine["op"] == f["op"]
    others = [coll_on(tables, truth, f["comm"], r) for r in comm["ranks"] if r != culprit]
    theirs = [o.row(f["seq"] - 1, named=True) for o in others if o.height >= f["seq"]]
    assert theirs and all(
        (t["op"], t["count"]) != (mine["op"], mine["count"]) or mine["op"] == t["op"] == "Send"
        for t in theirs
    )


def test_init_hang_missing_ranks_print_nothing_and_the_others_never_complete(tmp_path):
    _, truth, tables = _setup(tmp_path, "init-hang", nccl_version="2.27")
    f = primary(truth)
    for r in f["ranks"]:
        assert nccl_text(tables, truth, r) == []
    joined = [r for r in range(truth["world_size"]) if r not in f["ranks"]]
    starts = tables["comms"].filter(pl.col("phase") == "START").height
    assert starts == len(joined) and tables["comms"].filter(pl.col("phase") == "COMPLETE").is_empty()


def test_init_hang_with_a_store_barrier_logs_world_size_against_worker_count(tmp_path):
    out, truth, _ = _setup(tmp_path, "init-hang", nccl_version="2.14", torch_version="2.0")
    missing = len(primary(truth)["ranks"])
    text = out.read_text()
    assert f"(world_size={truth['world_size']}, worker_count={truth['world_size'] - missing}" in text
    assert "Timed out initializing process group in store based barrier" in text


@pytest.mark.parametrize("layout", ["srun", "torchrun"])
def test_import_error_ranks_print_their_traceback_and_never_reach_nccl(tmp_path, layout):
    out, truth, tables = _setup(tmp_path, "import-error", nccl_version="2.27", layout=layout, nodes=2)
    f = primary(truth)
    text = out.read_text()
    assert "ModuleNotFoundError: No module named" in text and "in <module>" in text
    for r in f["ranks"]:
        assert nccl_text(tables, truth, r) == []
    joined = [r for r in range(truth["world_size"]) if r not in f["ranks"]]
    assert tables["comms"].filter(pl.col("phase") == "START").height == len(joined)
    assert tables["comms"].filter(pl.col("phase") == "COMPLETE").is_empty()


@pytest.mark.parametrize("version", ["2.26", "2.27"])
def test_node_death_is_reported_by_the_other_nodes_ras_only(tmp_path, version):
    out, truth, tables = _setup(tmp_path, "node-death", nccl_version=version, layout="srun", nodes=2)
    dead = primary(truth)["ranks"]
    ras = tables["ras"]
    declared = ras.filter(pl.col("event") == "dead_peer")
    assert declared.height and not set(declared["host"]) & {truth["processes"][r]["host"] for r in dead}
    ips = {
        t.rsplit(":", 1)[-1].split("<")[0]
        for r in dead
        for t in nccl_text(tables, truth, r)
        if re.search(r"Bootstrap ?: Using", t)
    }
    assert {p.split("<")[0] for p in declared["peer"]} == ips
    host = truth["processes"][dead[0]]["host"]
    assert not [line for line in out.read_text().splitlines() if "srun: error" in line and host in line]


def test_import_error_with_a_store_barrier_leaves_the_others_timing_out_in_it(tmp_path):
    out, truth, _ = _setup(tmp_path, "import-error", nccl_version="2.14", torch_version="2.0", layout="srun")
    text = out.read_text()
    assert "Timed out initializing process group in store based barrier" in text
    assert [f["kind"] for f in truth["faults"]] == ["process_exit", "process_exit"]


@pytest.mark.parametrize(
    "scenario,needle",
    [
        ("bootstrap-failure", r"no socket interface found|exceeded retries|Connect to"),
        ("ib-error", r"Got completion from peer \S+ with (?:error|status=)12"),
        ("cuda-oom", r"Cuda failure (?:2 )?'out of memory'"),
        ("duplicate-gpu", r"Duplicate GPU detected : rank \d+ and rank \d+ both on CUDA device [0-9a-f]+"),
    ],
)
def test_the_culprits_own_warn_says_what_broke(tmp_path, scenario, needle):
    _, truth, tables = _setup(tmp_path, scenario)
    for r in primary(truth)["ranks"]:
        warns = [t for t in nccl_text(tables, truth, r) if " NCCL WARN " in t]
        assert any(re.search(needle, w) for w in warns), (r, warns)


def test_veth_interface_shows_in_the_bootstrap_lines_of_its_node_only(tmp_path):
    _, truth, tables = _setup(tmp_path, "veth-interface")
    culprits = set(primary(truth)["ranks"])
    for r in range(truth["world_size"]):
        boot = [t for t in nccl_text(tables, truth, r) if "Bootstrap : Using" in t]
        if boot:
            assert ("veth" in boot[0]) == (r in culprits)
    victim = next(f for f in truth["faults"] if f["kind"] == "bootstrap_failure")["ranks"][0]
    assert any("172.18.0.1<" in t and " NCCL WARN " in t for t in nccl_text(tables, truth, victim))


@pytest.mark.parametrize("scenario", ["socket-fallback", "gdr-disabled", "p2p-disabled"])
def test_fallback_transports_are_on_the_culprits_lines_only(tmp_path, scenario):
    _, truth, tables = _setup(tmp_path, scenario, nccl_version="2.18")
    culprits = set(primary(truth)["ranks"])
    seen = 0
    for r in range(truth["world_size"]):
        lines = [t for t in nccl_text(tables, truth, r) if " via " in t]
        net = [t for t in lines if "via NET/" in t]
        if scenario == "socket-fallback":
            checked = net
            assert all("via NET/Socket/" in t for t in net)
        elif scenario == "gdr-disabled":
            checked = [t for t in net if "[send]" in t]
            assert all(("GDRDMA" in t) == (r not in culprits) for t in checked)
        else:
            checked = [t for t in lines if "via NET/" not in t]
            assert all(("via SHM/" in t) == (r in culprits) for t in checked)
        seen += len(checked)
    assert seen


def test_hostname_collision_joins_two_machines_into_one_node(tmp_path):
    _, truth, tables = _setup(tmp_path, "hostname-collision")
    assert len(set(truth["hosts"])) < len(truth["hosts"])
    summary = tables["comms"].filter(pl.col("what") == "Summary")
    assert summary["n_nodes"].max() < truth["nodes"]
    ips = {}
    for r in range(truth["world_size"]):
        boot = [t for t in nccl_text(tables, truth, r) if "Bootstrap : Using" in t]
        ips[r] = boot[0].rsplit(":", 1)[-1] if boot else None
    p2p = [t for r in primary(truth)["ranks"] for t in nccl_text(tables, truth, r) if "via P2P/" in t]
    pairs = {tuple(int(x) for x in re.findall(r" (\d+)\[", t)[:2]) for t in p2p}
    assert any(ips[a] != ips[b] for a, b in pairs)


def test_slow_rank_trails_the_others_in_the_timestamps(tmp_path):
    _, truth, tables = _setup(tmp_path, "slow-rank", nccl_version="2.27", ranks=8)
    slow = primary(truth)["ranks"][0]
    comm = truth["communicators"][0]["comm_id"]

    def times(r):
        rows = coll_on(tables, truth, comm, r)
        return [datetime.fromisoformat(t) for t in rows["ts"].to_list()]

    mine = times(slow)
    lags = []
    for r in range(truth["world_size"]):
        if r != slow:
            lags += [(a - b).total_seconds() for a, b in zip(mine, times(r))]
    lags.sort()
    assert lags[len(lags) // 2] > 0.08


def test_healthy_runs_end_in_destroy_without_warnings(tmp_path):
    out, truth, tables = _setup(tmp_path, "healthy", nccl_version="2.26")
    assert truth["faults"] == []
    assert " NCCL WARN " not in out.read_text()
    destroyed = tables["comms"].filter(pl.col("what") == "Destroy").height
    assert destroyed == sum(len(c["init_completed"]) for c in truth["communicators"])


def test_a_detail_mismatch_is_reported_by_every_rank_and_the_culprits_own_fingerprint_differs(tmp_path):
    _out, truth, tables = _setup(tmp_path, "debug-mismatch")
    culprit = primary(truth)["ranks"][0]
    reports = tables["app_errors"].filter(pl.col("event") == "collective_mismatch")
    assert sorted(reports["fp_rank"].to_list()) == list(range(8))
    prints = reports["fp_op"] + reports["fp_shape"] + reports["fp_dtypes"]
    own = dict(zip(reports["fp_rank"].to_list(), prints.to_list()))
    assert [r for r in own if own[r] != own[(culprit + 1) % 8]] == [culprit]
    assert set(reports.filter(pl.col("fp_rank") != culprit)["peer_rank"].to_list()) == {culprit}


def test_a_gpu_fault_shows_only_as_the_culprits_watchdog_cuda_error(tmp_path):
    out, truth, tables = _setup(tmp_path, "gpu-fault", nccl_version="2.27")
    culprit = primary(truth)["ranks"][0]
    cuda = pl.col("detail").str.starts_with("CUDA error: ")
    died = tables["torch"].filter((pl.col("event") == "watchdog_terminated") & cuda)
    assert died["pg_rank"].to_list() == [culprit]
    # the others' watchdogs die of their timeouts in the collective the culprit never reached
    waited = tables["torch"].filter(pl.col("event") == "watchdog_timeout")["pg_rank"].unique().sort()
    assert waited.to_list() == [r for r in range(8) if r != culprit]
    assert " NCCL WARN " not in out.read_text()


def test_an_nccl_tests_failure_is_printed_by_the_failing_ranks_host_without_nccl_lines(tmp_path):
    out, truth, tables = _setup(tmp_path, "nccl-tests-failure", layout="mpirun")
    culprit = primary(truth)["ranks"][0]
    failed = tables["nccltests"].filter(pl.col("event") == "test_nccl_failure")
    assert failed["mpi_rank"].to_list() == [culprit]
    assert failed["test_host"].to_list() == [proc_of(truth, culprit)[0]]
    assert tables["lines"].filter(pl.col("producer") == "nccl").height == 0
    text = out.read_text()
    assert "Process name: [[" in text and f",1],{culprit}]" in text


def test_a_store_host_absent_leaves_rank_0_silent_and_the_others_timing_out_on_its_store(tmp_path):
    out, truth, tables = _setup(tmp_path, "store-host-absent", layout="srun", nodes=2)
    store_host = proc_of(truth, 0)[0]
    missing = {p["rank"] for p in truth["processes"] if p["host"] == store_host}
    timeouts = tables["torch"].filter(pl.col("event") == "store_connect_timeout")
    assert set(timeouts["store_host"].to_list()) == {store_host}
    assert set(timeouts["task"].to_list()) == set(range(8)) - missing
    text = out.read_text()
    assert not any(line.startswith(f"{r}: ") for r in missing for line in text.splitlines())
    assert " NCCL " not in text


def test_every_scenario_has_an_evidence_test():
    covered = {
        "rank-stall",
        "uneven-data",
        "segfault",
        "extra-collective",
        "collective-mismatch",
        "pp-deadlock",
        "init-hang",
        "bootstrap-failure",
        "ib-error",
        "cuda-oom",
        "duplicate-gpu",
        "veth-interface",
        "socket-fallback",
        "gdr-disabled",
        "p2p-disabled",
        "hostname-collision",
        "slow-rank",
        "healthy",
        "import-error",
        "node-death",
        "debug-mismatch",
        "gpu-fault",
        "nccl-tests-failure",
        "store-host-absent",
    }
    assert covered == set(SCENARIOS)
