"""The real H200 captures (NCCL 2.28.9, PyTorch 2.11): logs and dumps name the injected culprit.

They live in ../shared/corpus/gpu-h200 beside the repository (``LOGSIFT_SHARED`` points elsewhere, for a
worktree); the tests skip when they are absent.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nccl_logsift.pipeline import analyze

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("LOGSIFT_SHARED", ROOT / ".." / "shared")).resolve()
CAPTURES = SHARED / "corpus" / "gpu-h200"


def _capture(name: str) -> tuple[Path, dict]:
    folder = CAPTURES / name
    if not (folder / "flight-recorder").is_dir():
        pytest.skip(f"real captures not available at {folder} (set LOGSIFT_SHARED to the shared folder)")
    return folder, json.loads((folder / "injected.json").read_text())


def _logs(folder: Path) -> list[str]:
    return [
        str(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.parent.name != "flight-recorder" and p.name != "injected.json"
    ]


@pytest.mark.parametrize("name", ["stall", "mismatch"])
def test_real_capture_culprit_is_named_with_dump_entries(name):
    folder, injected = _capture(name)
    report = analyze([str(folder)])
    (lead,) = [f for f in report.findings if f.primary]
    assert lead.ranks == (injected["culprit_rank"],)
    dumps = [e for e in lead.evidence if e.path.startswith(str(folder / "flight-recorder"))]
    assert dumps and any(f"of rank {injected['culprit_rank']}:" in e.text for e in dumps)
    assert report.dumps.dumped == (0, 1, 2, 3) and report.dumps.missing == ()


def test_real_capture_mismatch_names_both_calls():
    folder, _ = _capture("mismatch")
    report = analyze([str(folder)])
    (lead,) = [f for f in report.findings if f.primary]
    texts = " ".join(e.text for e in lead.evidence if "Flight Recorder" in e.text)
    assert "nccl:_all_gather_base in [1024] Float out [4096] Float" in texts
    assert "nccl:all_reduce in [65536] Float" in texts


def test_real_capture_stall_without_the_culprit_dump_names_it_from_the_logs():
    folder, injected = _capture("stall")
    culprit = injected["culprit_rank"]
    others = [
        str(p) for p in sorted((folder / "flight-recorder").iterdir()) if not p.name.endswith(f"_{culprit}")
    ]
    report = analyze(_logs(folder) + others)
    (lead,) = [f for f in report.findings if f.primary]
    assert lead.ranks == (culprit,)
    assert report.dumps.missing == (culprit,)
    assert any("flight-recorder" in e.path for e in lead.evidence)


def test_real_capture_dumps_table_has_the_collective_each_rank_waits_in():
    from nccl_logsift.pipeline import load_job

    folder, injected = _capture("stall")
    fr = load_job([str(folder)]).table("flight_recorder")
    waiting = fr.filter((fr["pg_desc"] == "default_pg") & (fr["state"] == "scheduled"))
    assert sorted(waiting["rank"].to_list()) == [r for r in range(4) if r != injected["culprit_rank"]]
    assert set(waiting["collective_seq_id"].to_list()) == {13} and set(waiting["op"].to_list()) == {
        "all_reduce"
    }


def test_real_capture_rank_without_a_dump_is_filled_from_its_log():
    from nccl_logsift.findings.flight.flight_recorder_rank_behind import FlightRecorderRankBehind
    from nccl_logsift.pipeline import load_job

    folder, injected = _capture("stall")
    culprit = injected["culprit_rank"]
    others = [
        str(p) for p in sorted((folder / "flight-recorder").iterdir()) if not p.name.endswith(f"_{culprit}")
    ]
    (found,) = FlightRecorderRankBehind().check(load_job(_logs(folder) + others))
    assert found.ranks == (culprit,) and found.seq == 13
    assert f"rank {culprit}: #12 (from its log; no dump)" in found.title
    assert any("Last enqueued NCCL work: 12" in e.text for e in found.evidence)
