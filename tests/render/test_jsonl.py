"""``--format jsonl``: the findings contract as JSON Lines, one record per line, for log pipelines."""

from __future__ import annotations

import json

from conftest import FIXTURES


def test_jsonl_is_a_job_record_then_the_contracts_findings_one_per_line(run_cli):
    log = str(FIXTURES / "rank_stall_8ranks.log")
    contract = json.loads(run_cli("analyze", log, "--format", "json").stdout)
    result = run_cli("analyze", log, "--format", "jsonl")
    assert result.exit_code == 0
    records = [json.loads(line) for line in result.stdout.splitlines()]
    job, findings = records[0], records[1:]
    assert job["record"] == "job" and job["verdict"] == contract["verdict"] and job["job"] == contract["job"]
    assert job["findings"] == len(contract["findings"]) == len(findings) > 0
    assert job["worst_severity"] == "critical"
    for record, finding in zip(findings, contract["findings"]):
        assert record.pop("record") == "finding"
        assert record.pop("schema") == contract["schema"] and record.pop("inputs") == [log]
        assert record == finding


def test_jsonl_keeps_one_record_per_line_when_log_text_holds_line_separators(run_cli, tmp_path):
    # Evidence carries whatever a process printed: U+2028/U+2029 end a line for some readers, and a raw
    # newline in a record would split it in two.
    text = (FIXTURES / "ib_error_4ranks.log").read_text()
    log = tmp_path / "job.log"
    log.write_text(text.replace(" NCCL WARN ", " NCCL WARN \u2028\u2029"))
    result = run_cli("analyze", str(log), "--format", "jsonl")
    lines = result.stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert result.stdout.endswith("\n") and len(records) == records[0]["findings"] + 1
    assert any("\u2028" in e["text"] for r in records[1:] for e in r["evidence"])
