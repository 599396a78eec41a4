"""The bounded digest of COLL calls gives the diagnosis the unbounded tables give."""

from __future__ import annotations

import re

import pytest

from nccl_logsift.findings.digest import CollectiveDigest
from nccl_logsift.pipeline import Analysis, ParseOptions, TableStream
from nccl_logsift.simulate import Options, write


def diagnose(path, digest: CollectiveDigest | None = None):
    analysis = Analysis(TableStream([str(path)], ParseOptions(every_line=False)))
    if digest is not None:
        analysis.digest = digest
    for batch in analysis.stream:
        analysis.add(batch)
    return analysis.report(), analysis.digest


def tiny() -> CollectiveDigest:
    """A window of a few dozen calls per instance, trimmed many times over a 600-step job."""
    return CollectiveDigest(budget=400, final=200, min_window=16)


@pytest.mark.parametrize("scenario", ["collective-mismatch", "extra-collective", "rank-stall", "uneven-data", "pp-deadlock", "healthy"])
def test_a_tiny_window_gives_the_same_root_cause(tmp_path, scenario):
    path = tmp_path / "job.log"
    write(Options(scenario=scenario, ranks=8, nodes=2, ops=600, noise=False), str(path))
    full, _ = diagnose(path)
    bounded, digest = diagnose(path, tiny())
    assert digest.calls > 2000 and digest.table().height < digest.calls / 4
    key = lambda r: [(f.code, f.ranks, f.comm, f.seq, f.op) for f in r.findings[:3]]  # noqa: E731
    assert key(bounded) == key(full)


def test_an_early_divergence_survives_the_window(tmp_path):
    """One rank calls a different size at its 20th call and the job runs on: found after 600 steps."""
    path = tmp_path / "job.log"
    write(Options(scenario="healthy", ranks=4, nodes=1, ops=600, noise=False), str(path))
    lines = path.read_text().splitlines()
    calls = [i for i, line in enumerate(lines) if " opCount " in line and line.startswith(lines[[j for j, l in enumerate(lines) if " opCount " in l][0]].split(" ")[0])]
    lines[calls[19]] = re.sub(r" count \d+ ", " count 12345 ", lines[calls[19]])
    path.write_text("\n".join(lines) + "\n")
    full, _ = diagnose(path)
    bounded, digest = diagnose(path, tiny())
    mismatch = [f for f in bounded.findings if f.code == "LS102"]
    assert mismatch and mismatch[0].seq == [f for f in full.findings if f.code == "LS102"][0].seq
    assert "count 12345" in " ".join(e.text for e in mismatch[0].evidence)
