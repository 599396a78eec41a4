"""Every scenario in every layout, across NCCL releases: the log parses and the truth's communicators are in
it.

Each (scenario, layout) pair gets one NCCL release from a rotation, so every scenario meets several
releases and every layout meets all of them without running the full product (runtime budget).
"""

from __future__ import annotations

import polars as pl
import pytest
from simhelp import actual_comm_rows, expected_comm_rows, parse, run, unparsed_nccl

from nccl_logsift.simulate import LAYOUTS, SCENARIOS
from nccl_logsift.simulate.truth import KINDS
from nccl_logsift.simulate.versions import nccl_profile, version_key

VERSIONS = ("2.10", "2.14", "2.18", "2.21", "2.26", "2.27", "2.28", "2.29", "2.30")
TORCH = {
    "2.10": ("1.13", "2.0"),
    "2.14": ("2.0", "2.2"),
    "2.18": ("2.1", "2.3"),
    "2.21": ("2.4", "2.5"),
    "2.26": ("2.6", "2.7"),
    "2.27": ("2.8", "2.5"),
    "2.28": ("2.8", "2.7"),
    "2.29": ("2.7", "2.8"),
    "2.30": ("2.13", "2.6"),
}

# NCCL shapes the simulator writes that no grammar family parses yet: none today. Add
# {"regex on the message": "reason"} entries here when a documented shape is written before its grammar lands.
ALLOWED_UNPARSED: dict[str, str] = {}


def _texts(out):
    files = sorted(out.rglob("*")) if out.is_dir() else [out]
    return [line for f in files if f.is_file() for line in f.read_text(errors="replace").splitlines()]


def _cases():
    cases = []
    for i, name in enumerate(SCENARIOS):
        sc = SCENARIOS[name]
        for j, layout in enumerate(LAYOUTS):
            candidates = [
                v
                for v in VERSIONS
                if not sc.min_nccl or version_key(nccl_profile(v).version) >= version_key(sc.min_nccl)
            ]
            version = candidates[(i + 2 * j) % len(candidates)]
            torch = TORCH[version][(i + j) % 2]
            cases.append(
                pytest.param(name, layout, version, torch, id=f"{name}-{layout}-{version}-torch{torch}")
            )
    return cases


@pytest.mark.parametrize("scenario,layout,version,torch", _cases())
def test_simulated_log_parses_and_shows_the_truths_communicators(tmp_path, scenario, layout, version, torch):
    sc = SCENARIOS[scenario]
    ranks = 16 if sc.needs_pp or scenario in ("rank-stall", "ib-error") else 8
    out, truth = run(
        tmp_path,
        scenario=scenario,
        ranks=ranks,
        nccl_version=version,
        torch_version=torch,
        layout=layout,
        seed=len(scenario) + 7 * version_key(version)[1],
        torn_rate=0.0,
    )
    parser, tables = parse(out)
    bad = unparsed_nccl(tables["lines"])
    if ALLOWED_UNPARSED:
        allowed = "|".join(f"(?:{r})" for r in ALLOWED_UNPARSED)
        bad = bad.filter(~pl.col("text").str.contains(allowed))
    assert bad.is_empty(), "unparsed NCCL lines:\n" + "\n".join(bad["text"].head(10).to_list())
    # Some jobs print no NCCL line (nccl-tests without NCCL_DEBUG, a rank 0 that never started NCCL): when
    # NCCL did print, its lines are read as NCCL's.
    printed = any(" NCCL INFO " in line or " NCCL WARN " in line for line in _texts(out))
    assert parser.state.envelope_lines > 0 or not printed
    expected = expected_comm_rows(truth) if printed else {}
    actual = actual_comm_rows(tables["comms"])
    assert actual == expected

    assert truth["schema"] == "nccl-logsift/truth/v1"
    assert truth["world_size"] == ranks and truth["nccl_version"].startswith(version)
    faults = truth["faults"]
    assert all(f["kind"] in KINDS for f in faults)
    assert all(set(f["ranks"]) <= set(range(ranks)) and f["ranks"] for f in faults)
    if scenario == "healthy":
        assert faults == []
    else:
        # A job that fails names its root cause; a job that works degraded has none, and its truth grades
        # the fault by the severity policy instead.
        assert [f for f in faults if f["primary"] or f.get("severity") in ("info", "warning")], (
            "a fault scenario names its primary fault, or grades a degraded run's fault"
        )
