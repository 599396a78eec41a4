"""Scenarios diagnosed across launcher layouts, NCCL versions and world sizes (simulated on the fly).

Known gaps are listed with their reason as strict xfails: they fail loudly once fixed.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nccl_logsift.cli import cli
from nccl_logsift.pipeline import analyze
from nccl_logsift.render.json import to_dict
from nccl_logsift.simulate.scenarios import SCENARIOS

LAYOUTS = [
    ("interleaved", "2.27"),
    ("srun", "2.18"),
    ("torchrun", "2.14"),
    ("mpirun", "2.21"),
    ("per-rank", "2.26"),
    ("interleaved", "2.10"),
]
KNOWN_GAPS = {
    (
        "veth-interface",
        "torchrun",
        "2.14",
    ): "before NCCL 2.18.3 the bad interface's host is known but its ranks are not",
    ("segfault", "interleaved", "2.27"): "no exit line in this layout: the dead rank is only seen as behind",
    ("segfault", "interleaved", "2.30"): "no exit line in this layout: the dead rank is only seen as behind",
    (
        "pp-deadlock",
        "torchrun",
        "2.14",
    ): "grouped send/recv in 2.14 shift positions: the culprit pair is not isolated",
}


def cases():
    names = list(SCENARIOS)
    for i, name in enumerate(names):
        for layout, version in LAYOUTS[i % 3 : i % 3 + 3]:
            if name in ("slow-rank", "node-death") and version < "2.26":
                version = "2.26"  # timestamps (slow-rank) from 2.26.2, RAS (node-death) from 2.24.3
            marks = (
                [pytest.mark.xfail(reason=KNOWN_GAPS[(name, layout, version)], strict=True)]
                if (name, layout, version) in KNOWN_GAPS
                else []
            )
            yield pytest.param(name, layout, version, 8, i, marks=marks, id=f"{name}-{layout}-{version}")
    yield pytest.param("rank-stall", "srun", "2.21", 1024, 7, id="rank-stall-srun-2.21-1024ranks")
    # 4 nodes with tensor, pipeline and data parallel groups: the ranks that time out in a pipeline group's
    # SEND/RECV are waiting, neither mismatched nor behind in the default group.
    yield pytest.param("rank-stall", "torchrun", "2.27", 32, 7, id="rank-stall-torchrun-2.27-32ranks")
    # 2 nodes on NCCL 2.27: the world communicator connects at its first collective, after the split
    # communicators, so its connection lines must not be read as the splits' (no false same-host NET finding).
    yield pytest.param("slow-rank", "interleaved", "2.27", 16, 0, id="slow-rank-interleaved-2.27-16ranks")
    # A data-parallel replica (half the world) runs out of data: its ranks destroy their communicators
    # (2.21), or, where teardown is not logged (2.30), only the half ahead times out.
    yield pytest.param("uneven-data", "srun", "2.21", 16, 1, id="uneven-data-srun-2.21-16ranks")
    yield pytest.param("uneven-data", "torchrun", "2.30", 16, 1, id="uneven-data-torchrun-2.30-16ranks")
    # The odd call is in a data-parallel pair: a tie there, broken by the other pairs at that position.
    yield pytest.param(
        "collective-mismatch", "srun", "2.21", 16, 2, id="collective-mismatch-srun-2.21-16ranks"
    )
    yield pytest.param(
        "extra-collective", "per-rank", "2.27", 16, 2, id="extra-collective-per-rank-2.27-16ranks"
    )
    # Noise loses a COLL line of rank 3 at call #3 of the world; its watchdog, later waiting on work #32,
    # shows that call completed: a lost line, not the mismatch that hung the job.
    yield pytest.param("uneven-data", "interleaved", "2.27", 8, 1, id="uneven-data-2.27-lost-coll-line")
    # A data-parallel replica leaves on 2.30 (no Destroy lines), three of its ranks' world calls lost: the
    # world watchdog's silent ranks join the COLL view's, in one finding.
    yield pytest.param("uneven-data", "interleaved", "2.30", 32, 1, id="uneven-data-2.30-32ranks-lost-calls")
    # Seven ranks whose watchdog lines say nothing of the world's stuck call, though their COLL lines show
    # them in it: the stalled rank is the only root cause.
    yield pytest.param("rank-stall", "srun", "2.14", 32, 1, id="rank-stall-srun-2.14-32ranks-quiet-watchdogs")
    # Noise tears the header off one rank's Init COMPLETE line; the job completes all the same.
    yield pytest.param("healthy", "interleaved", "2.14", 32, 1, id="healthy-interleaved-2.14-32ranks")


def simulate(tmp_path, name, layout, version, ranks, seed):
    out, truth = tmp_path / "job", tmp_path / "truth.json"
    args = [
        "simulate",
        "-s",
        name,
        "--ranks",
        str(ranks),
        "--layout",
        layout,
        "--nccl-version",
        version,
        "--seed",
        str(seed),
        "-o",
        str(out),
        "--truth",
        str(truth),
    ]
    if ranks > 64:
        args += ["--ops", "10"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return out, json.loads(truth.read_text())


@pytest.mark.parametrize("name,layout,version,ranks,seed", list(cases()))
def test_scenario_is_diagnosed_per_its_truth(tmp_path, name, layout, version, ranks, seed):
    out, truth = simulate(tmp_path, name, layout, version, ranks, seed)
    report = to_dict(analyze([str(out)]))
    primaries = [(f["kind"], f["ranks"]) for f in report["findings"] if f["primary"]]
    assert_severity_policy(truth, report)
    if not any(f["primary"] for f in truth["faults"]):
        return
    wanted = [(f["kind"], sorted(f["ranks"])) for f in truth["faults"] if f["primary"]]
    for kind, ranks_ in wanted:
        assert (kind, ranks_) in primaries, f"want {kind} {ranks_}, primaries {primaries}"
    # Nothing else is a root cause: no other kind, and no second culprit set of the same kind.
    assert sorted({(k, tuple(r)) for k, r in primaries}) == sorted({(k, tuple(r)) for k, r in wanted})


SEVERITY = ["info", "warning", "error", "critical"]


def assert_severity_policy(truth, report):
    """A job that works (no primary fault in its truth) has nothing at error or worse, no root cause and a
    verdict without one; a fault whose truth states a severity is reported at that severity at most."""
    if not any(f["primary"] for f in truth["faults"]):
        serious = [
            (f["code"], f["severity"], f["title"][:80])
            for f in report["findings"]
            if f["severity"] in ("error", "critical")
        ]
        assert serious == []
        assert not [f["code"] for f in report["findings"] if f["primary"]]
        assert "Root cause" not in report["verdict"] and "looks healthy" in report["verdict"]
    for fault in (f for f in truth["faults"] if f.get("severity")):
        graded = [f["severity"] for f in report["findings"] if f["kind"] == fault["kind"]]
        assert graded, f"{fault['kind']} not reported"
        worst = max(graded, key=SEVERITY.index)
        assert worst == fault["severity"], (fault["kind"], graded, fault["severity"])


# The scenarios of a job that works (healthy, or degraded: slower transport, a slow rank), in every simulated
# NCCL series, each in another launcher layout.
WORKING = ["healthy", "socket-fallback", "gdr-disabled", "p2p-disabled", "slow-rank"]
ALL_LAYOUTS = ["interleaved", "srun", "torchrun", "mpirun", "per-rank"]


def working_cases():
    from nccl_logsift.simulate.versions import NCCL_PROFILES

    for i, name in enumerate(WORKING):
        for j, version in enumerate(NCCL_PROFILES):
            if name == "slow-rank" and version < "2.26":
                continue  # its signal, timestamps, exists only from NCCL 2.26.2
            layout = ALL_LAYOUTS[(i + j) % len(ALL_LAYOUTS)]
            yield pytest.param(name, layout, version, 8, 100 + j, id=f"{name}-{layout}-{version}")


@pytest.mark.parametrize("name,layout,version,ranks,seed", list(working_cases()))
def test_working_job_has_no_error_and_no_root_cause(tmp_path, name, layout, version, ranks, seed):
    out, truth = simulate(tmp_path, name, layout, version, ranks, seed)
    assert not any(f["primary"] for f in truth["faults"])
    assert_severity_policy(truth, to_dict(analyze([str(out)])))


# Every scenario once in the newest simulated format, NCCL 2.30.7: "(func)" after each WARN's and trace's
# file:line, and no Destroy/Abort lines (DESTROY subsystem, outside the default mask). Diagnosis must not lean
# on either.
NEWEST = "2.30"


def newest_cases():
    for i, name in enumerate(SCENARIOS):
        layout = ALL_LAYOUTS[i % len(ALL_LAYOUTS)]
        gap = KNOWN_GAPS.get((name, layout, NEWEST))
        marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
        yield pytest.param(name, layout, NEWEST, 8, 200 + i, marks=marks, id=f"{name}-{layout}-{NEWEST}")


@pytest.mark.parametrize("name,layout,version,ranks,seed", list(newest_cases()))
def test_scenario_in_the_newest_nccl_format_is_diagnosed_per_its_truth(
    tmp_path, name, layout, version, ranks, seed
):
    test_scenario_is_diagnosed_per_its_truth(tmp_path, name, layout, version, ranks, seed)


# Cascades: the first failure is the root cause and what followed from it is a consequence. Ranks that die of
# an ImportError at startup leave the others waiting in init (store barrier with PyTorch <= 2.0, NCCL
# bootstrap later) until a timeout or the launcher stops them.
# A node that dies mid-training reports nothing; NCCL's RAS on the other nodes declares its processes dead,
# and the node RAS names is the culprit, not the ranks that report it (they only time out).
CASCADES = [
    ("import-error", "srun", "2.10"),
    ("import-error", "torchrun", "2.27"),
    ("import-error", "mpirun", "2.21"),
    ("import-error", "srun", "2.26"),
    ("import-error", "torchrun", "2.14"),
    ("node-death", "srun", "2.26"),
    ("node-death", "torchrun", "2.27"),
    ("node-death", "per-rank", "2.27"),
    ("node-death", "interleaved", "2.26"),
    ("node-death", "srun", "2.28"),
    ("node-death", "mpirun", "2.29"),
    ("import-error", "torchrun", "2.29"),
    # A death or an error first, then closed sockets, watchdog timeouts and aborts on the others.
    ("cuda-oom", "srun", "2.21"),
    ("cuda-oom", "torchrun", "2.27"),
    ("cuda-oom", "mpirun", "2.18"),
    ("segfault", "srun", "2.21"),
    ("segfault", "torchrun", "2.14"),
    ("ib-error", "srun", "2.18"),
    ("ib-error", "interleaved", "2.27"),
    # NCCL 2.30.7: "(func)" after the WARN's file:line, and no Abort lines (DESTROY subsystem).
    ("ib-error", "mpirun", "2.30"),
    ("cuda-oom", "torchrun", "2.30"),
    ("segfault", "torchrun", "2.30"),
    ("node-death", "srun", "2.30"),
    ("import-error", "srun", "2.30"),
    # Rank 0 never started: the others time out connecting to the c10d store it would have hosted. (Only
    # launchers that label the waiting processes' lines with ranks: the timeouts come before any rank prefix.)
    ("store-host-absent", "srun", "2.21"),
    ("store-host-absent", "mpirun", "2.27"),
    ("store-host-absent", "srun", "2.30"),
]
LEAD_SAYS = {
    "import-error": "ModuleNotFoundError",
    "node-death": "RAS declared",
    "cuda-oom": "out of memory",
    "segfault": "SIGSEGV",
    "ib-error": "status 12",
    "store-host-absent": "never arrived",
}


@pytest.mark.parametrize("name,layout,version", CASCADES, ids=["-".join(c) for c in CASCADES])
@pytest.mark.parametrize("seed", [0, 1])
def test_first_failure_is_the_root_cause_and_what_followed_are_consequences(
    tmp_path, name, layout, version, seed
):
    out, truth = simulate(tmp_path, name, layout, version, 8, seed)
    report = to_dict(analyze([str(out)]))
    wanted = [(f["kind"], sorted(f["ranks"])) for f in truth["faults"] if f["primary"]]
    primaries = [(f["kind"], f["ranks"]) for f in report["findings"] if f["primary"]]
    assert primaries == wanted
    lead = next(f for f in report["findings"] if f["primary"])
    assert LEAD_SAYS[name] in lead["title"] and report["verdict"].startswith("Root cause: ")
    # Echoes are graded below the cause: never critical unless they name the culprits themselves.
    culprits = {r for f in truth["faults"] if f["primary"] for r in f["ranks"]}
    echoes = [
        (f["code"], f["ranks"])
        for f in report["findings"]
        if not f["primary"] and f["severity"] == "critical" and not set(f["ranks"]) <= culprits
    ]
    assert echoes == []
    # The ranks that waited are reported, as consequences.
    for fault in (f for f in truth["faults"] if not f["primary"]):
        assert any(
            f["kind"] == fault["kind"] and not f["primary"] and set(f["ranks"]) & set(fault["ranks"])
            for f in report["findings"]
        ), fault
