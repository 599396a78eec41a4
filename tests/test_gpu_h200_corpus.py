"""logsift analyze on the real H200 jobs with an injected fault (../shared/corpus/gpu-h200, NCCL 2.28.9,
PyTorch 2.11): the injected culprit is the root cause, and the socket transport these nodes have (no RDMA
device) is a warning at most. Skipped when the corpus is absent."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from nccl_logsift.pipeline import analyze
from nccl_logsift.render.json import to_dict

H200 = (ROOT / ".." / "shared" / "corpus" / "gpu-h200").resolve()
JOBS = ["stall", "mismatch"]
pytestmark = pytest.mark.skipif(not H200.is_dir(), reason="../shared/corpus/gpu-h200 is not available")


def logs_of(job: str) -> list[str]:
    """The job's console or per-node logs; not its truth, flight-recorder dumps or torchrun's copies."""
    return sorted(str(p) for p in (H200 / job).iterdir() if p.is_file() and p.name != "injected.json")


@pytest.mark.parametrize("job", JOBS)
def test_injected_culprit_is_the_root_cause(job):
    injected = json.loads((H200 / job / "injected.json").read_text())
    report = to_dict(analyze(logs_of(job)))
    primaries = [f for f in report["findings"] if f["primary"]]
    assert primaries and all(f["severity"] == "critical" for f in primaries)
    assert all(f["ranks"] == [injected["culprit_rank"]] for f in primaries), [
        (f["code"], f["ranks"]) for f in primaries
    ]


@pytest.mark.parametrize("job", JOBS)
def test_socket_transport_without_rdma_device_is_not_an_error(job):
    report = to_dict(analyze(logs_of(job)))
    transport = [f for f in report["findings"] if f["kind"] == "transport_fallback"]
    assert any("NET/Socket" in f["title"] for f in transport)
    assert [
        (f["severity"], f["title"][:60]) for f in transport if f["severity"] not in ("info", "warning")
    ] == []
