"""Dumps and logs of one simulated job analysed together: the culprit named with dump entries as evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nccl_logsift.pipeline import analyze
from nccl_logsift.simulate import Options, write


def _job(
    tmp_path: Path,
    scenario: str,
    form: str = "pickle",
    ranks: int = 8,
    seed: int = 0,
    buffer: int | None = None,
):
    log = tmp_path / "job.log"
    sim = write(
        Options(scenario=scenario, ranks=ranks, seed=seed),
        str(log),
        str(tmp_path / "truth.json"),
        str(tmp_path / "fr"),
        form,
        buffer,
    )
    return log, sim.truth


def _primary(report):
    return [f for f in report.findings if f.primary]


def _dump_evidence(finding) -> list:
    return [e for e in finding.evidence if "nccl_trace_rank_" in e.path]


@pytest.mark.parametrize("scenario, form", [("rank-stall", "pickle"), ("collective-mismatch", "json")])
def test_fusion_names_the_truth_culprit_with_dump_entries(tmp_path, scenario, form):
    _, truth = _job(tmp_path, scenario, form)
    culprit = next(f for f in truth["faults"] if f["primary"])
    report = analyze([str(tmp_path)])
    (lead,) = _primary(report)
    assert list(lead.ranks) == culprit["ranks"] and lead.kind.value == culprit["kind"]
    quoted = _dump_evidence(lead)
    assert quoted and all(e.text.startswith("Flight Recorder entry") for e in quoted)
    assert {e.path for e in quoted} <= {str(p) for p in (tmp_path / "fr").iterdir()}
    # One finding per problem: the dump's own finding was folded into the log's.
    assert not [
        f for f in report.findings if f.code in ("LS701", "LS702") and set(f.ranks) == set(lead.ranks)
    ]
    assert report.dumps.dumped == tuple(truth["flight_recorder"]["dumped"])


def test_fusion_mismatch_names_both_sides_from_the_dumps(tmp_path):
    from nccl_logsift.findings.flight.flight_recorder_mismatch import FlightRecorderMismatch
    from nccl_logsift.findings.wording import ranks_text
    from nccl_logsift.pipeline import load_job

    _, truth = _job(tmp_path, "collective-mismatch")
    culprit = next(f for f in truth["faults"] if f["primary"])["ranks"]
    (found,) = FlightRecorderMismatch().check(load_job([str(tmp_path)]))
    assert list(found.ranks) == culprit
    # Ranks are written one way (findings/wording.py).
    others = ranks_text(r for r in range(8) if r not in culprit)
    assert f"while ranks {others} enqueued" in found.title
    sides = {int(e.text.split(" of rank ")[1].split(":")[0]) for e in found.evidence}
    assert set(culprit) < sides  # the culprit's entry and the majority's


def test_fusion_without_the_culprit_dump_still_names_it_from_the_logs(tmp_path):
    log, truth = _job(tmp_path, "rank-stall")
    culprit = next(f for f in truth["faults"] if f["primary"])["ranks"]
    dumps = [p for p in sorted((tmp_path / "fr").iterdir()) if not p.name.endswith(f"_{culprit[0]}")]
    report = analyze([str(log), *map(str, dumps)])
    (lead,) = _primary(report)
    assert list(lead.ranks) == culprit
    assert _dump_evidence(lead)  # the peers' dumps show the collective they wait in
    assert report.dumps.missing == tuple(culprit)


def test_fusion_ranks_that_died_write_no_dump_and_the_audit_says_so(tmp_path):
    _, truth = _job(tmp_path, "segfault")
    not_dumped = [r["rank"] for r in truth["flight_recorder"]["not_dumped"]]
    assert not_dumped and all("ended" in r["why"] for r in truth["flight_recorder"]["not_dumped"])
    assert sorted(p.name for p in (tmp_path / "fr").iterdir()) == [
        f"nccl_trace_rank_{r}" for r in truth["flight_recorder"]["dumped"]
    ]
    report = analyze([str(tmp_path)])
    assert report.dumps.missing == tuple(not_dumped)
    assert f"missing: rank(s) {', '.join(map(str, not_dumped))}" in report.dumps.summary


def test_fusion_healthy_job_writes_no_dump_and_finds_nothing_in_none(tmp_path):
    _, truth = _job(tmp_path, "healthy", ranks=4)
    assert (truth["flight_recorder"]["dumped"] == [] and not (tmp_path / "fr").exists()) or not list(
        (tmp_path / "fr").iterdir()
    )
    report = analyze([str(tmp_path)])
    assert not [f for f in report.findings if f.code.startswith("LS7")]
    assert report.dumps.dumped == () and report.dumps.missing == ()


def test_fusion_dumps_taken_while_healthy_are_not_a_rank_behind(tmp_path):
    """Ranks one collective apart whose front completed: timing, not a hang."""
    import pickle

    from test_dump import _dump, _entry

    write(Options(scenario="healthy", ranks=2, seed=0), str(tmp_path / "job.log"))
    ahead = _dump(entries=[_entry(1), _entry(2)])
    behind = _dump(
        entries=[_entry(1)],
        pg_status={
            "0": {
                "last_enqueued_collective": 1,
                "last_started_collective": -1,
                "last_completed_collective": 1,
            }
        },
    )
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(ahead, protocol=4))
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(behind, protocol=4))
    report = analyze([str(tmp_path)])
    assert not [f for f in report.findings if f.code.startswith("LS7")]
    assert report.dumps.dumped == (0, 1)


def test_fusion_json_contract_has_the_audit_and_advice(tmp_path, run_cli):
    _job(tmp_path, "rank-stall", ranks=4)
    result = run_cli("analyze", str(tmp_path), "--format", "json")
    data = json.loads(result.output)
    assert data["dumps"]["dumped"] == [0, 1, 2, 3] and data["dumps"]["missing"] == []
    assert {f["path"].rsplit("/", 1)[1] for f in data["dumps"]["files"]} == {
        f"nccl_trace_rank_{r}" for r in range(4)
    }
    assert all(set(a) == {"missing", "setting", "why"} for a in data["next_run"])
    (lead,) = [f for f in data["findings"] if f["primary"]]
    assert any("nccl_trace_rank_" in e["path"] for e in lead["evidence"])


def test_fusion_text_and_html_show_the_audit_and_advice(tmp_path, run_cli):
    _job(tmp_path, "rank-stall", ranks=4)
    text = run_cli("analyze", str(tmp_path)).output
    assert "Flight Recorder: Flight Recorder dumps read for 4 of 4" in text and "Next run" in text
    page = tmp_path / "report.html"
    run_cli("analyze", str(tmp_path), "--format", "html", "-o", str(page))
    html = page.read_text()
    assert 'id="dumps"' in html and 'id="next-run"' in html and "nccl_trace_rank_0" in html


def test_fusion_parse_writes_the_flight_tables(tmp_path, run_cli):
    import polars as pl

    _job(tmp_path, "collective-mismatch", ranks=4)
    out = tmp_path / "tables"
    result = run_cli("parse", str(tmp_path / "job.log"), str(tmp_path / "fr"), "-o", str(out))
    assert result.exit_code == 0
    fr = pl.read_parquet(out / "flight_recorder.parquet")
    assert set(fr["rank"].unique()) == {0, 1, 2, 3}
    assert fr["op"].str.contains(":").sum() == 0 and fr["profiling_name"].str.starts_with("nccl:").all()
    dumps = pl.read_parquet(out / "flight_dumps.parquet")
    assert dumps["host"].null_count() == 0  # keyed to the ranks the logs resolved
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tables"]["flight_recorder"]["rows"] == fr.height
    assert not any("nccl_trace_rank" in i["path"] for i in manifest["inputs"])  # dumps are not read as logs


def test_fusion_only_dumps_is_an_input_error(tmp_path, run_cli):
    _job(tmp_path, "rank-stall", ranks=4)
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "analyze", str(tmp_path / "fr")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "only Flight Recorder dumps given" in proc.stderr


def test_fusion_dumps_named_by_log_lines_are_found(tmp_path):
    """A log line 'dumping nccl trace to <path>' leads to a dump that was not given."""
    log, _ = _job(tmp_path, "rank-stall", ranks=4)
    elsewhere = tmp_path / "fr"
    lines = [
        f"[rank{r}]:[I1126 06:20:50.1 ProcessGroupNCCL.cpp:1700] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
        f"ProcessGroupNCCL dumping nccl trace to {elsewhere}/nccl_trace_rank_{r}\n"
        for r in range(4)
    ]
    with open(log, "a") as handle:
        handle.writelines(lines)
    report = analyze([str(log)])
    assert report.dumps.dumped == (0, 1, 2, 3)
    assert [n.rank for n in report.dumps.named] == [0, 1, 2, 3] and all(n.read for n in report.dumps.named)
    assert "dumping nccl trace to" in report.dumps.named[0].line.text


def test_fusion_success_lines_say_which_dumps_were_written(tmp_path):
    """'Flight Recorder trace successfully dumped.' makes a rank expected, and its absent dump a lost one."""
    log, _ = _job(tmp_path, "rank-stall", ranks=4)
    done = [
        f"[rank{r}]:[I1126 06:20:51.1 ProcessGroupNCCL.cpp:1716] [PG ID 0 PG GUID 0(default_pg) Rank {r}] "
        "Flight Recorder trace successfully dumped.\n"
        for r in (0, 3)
    ]
    with open(log, "a") as handle:
        handle.writelines(done)
    report = analyze([str(log), str(tmp_path / "fr" / "nccl_trace_rank_0")])
    assert report.dumps.written == (0, 3)
    assert 3 in report.dumps.missing and 0 not in report.dumps.missing
    assert "rank(s) 3 finished writing a dump not among these inputs" in report.dumps.summary
