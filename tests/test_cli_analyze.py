"""logsift analyze through the CLI: formats, exit codes, --fail-on, stdin, and the JSON contract."""

import gzip
import json
import re
import subprocess
import sys

import pytest
from conftest import FIXTURES

STALL = FIXTURES / "rank_stall_8ranks.log"
HEALTHY = FIXTURES / "healthy_8ranks.log"
TOP_KEYS = ["schema", "schema_version", "inputs", "job", "verdict", "findings", "dumps", "next_run", "ranks"]
FINDING_KEYS = [
    "code",
    "kind",
    "severity",
    "primary",
    "title",
    "ranks",
    "hosts",
    "comm",
    "pg",
    "seq",
    "op",
    "evidence",
    "advice",
]


def test_analyze_json_follows_the_contract(run_cli):
    result = run_cli("analyze", str(STALL), "--format", "json")
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert list(report) == TOP_KEYS and report["schema"] == "nccl-logsift/findings/v1"
    assert list(report["job"]) == [
        "nccl_versions",
        "torch_version",
        "world_size",
        "hosts",
        "ranks_seen",
        "communicators",
    ]
    first = report["findings"][0]
    assert list(first) == FINDING_KEYS and first["primary"] and first["kind"] == "rank_behind"
    assert first["ranks"] == [1] and first["evidence"][0]["path"].endswith("rank_stall_8ranks.log")
    assert report["inputs"][0]["unparsed_lines"] == 0 and report["job"]["world_size"] == 8
    assert {r["rank"] for r in report["ranks"]} == set(range(8))


def test_analyze_text_puts_the_verdict_first(run_cli):
    result = run_cli("analyze", str(STALL))
    assert result.exit_code == 0
    assert result.output.index("Verdict") < result.output.index("LS101")
    assert "py-spy dump --pid" in result.output


def test_analyze_fail_on_sets_exit_status(run_cli):
    assert run_cli("analyze", str(STALL), "--fail-on", "error").exit_code == 1
    assert run_cli("analyze", str(HEALTHY), "--fail-on", "error").exit_code == 0


def test_analyze_reads_stdin_and_writes_output_file(run_cli, tmp_path):
    out = tmp_path / "r.json"
    result = run_cli("analyze", "-", "--format", "json", "-o", str(out), input=STALL.read_bytes())
    assert result.exit_code == 0 and result.output == ""
    assert json.loads(out.read_text())["findings"][0]["ranks"] == [1]


def test_analyze_unreadable_input_exits_2_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "analyze", str(tmp_path / "missing.log")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and proc.stderr.startswith("Error:") and "Traceback" not in proc.stderr


def test_the_entry_point_flushes_its_output_and_keeps_the_exit_status():
    # main() leaves without the interpreter's teardown: what it wrote must still arrive, with the status.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nccl_logsift",
            "analyze",
            str(STALL),
            "--format",
            "json",
            "--fail-on",
            "error",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and proc.stderr == ""
    assert json.loads(proc.stdout)["findings"][0]["ranks"] == [1]


def test_a_reader_that_goes_away_ends_the_run_quietly():
    # `logsift analyze big.log | head -1`: the pipe closes before the report is written.
    proc = subprocess.run(
        f"{sys.executable} -m nccl_logsift analyze {STALL} --format json | head -c 1",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert proc.stdout == "{" and "Traceback" not in proc.stderr


def test_the_findings_do_not_depend_on_the_html_views():
    # analyze --format json/text skips the views (only the HTML page draws them): the contract is the same.
    from nccl_logsift.pipeline import analyze
    from nccl_logsift.render.json import render_json

    with_views, without = analyze([str(STALL)]), analyze([str(STALL)], views=False)
    assert with_views.views is not None and without.views is None
    assert render_json(with_views) == render_json(without)


def test_the_json_text_is_the_contract_indented_with_one_line_per_rank():
    from dataclasses import replace

    from nccl_logsift.pipeline import analyze
    from nccl_logsift.render.json import render_json, to_dict

    report = analyze([str(STALL)], views=False)
    text = render_json(report)
    assert json.loads(text) == to_dict(report) and list(json.loads(text))[-1] == "ranks"
    lines = text.splitlines()
    ranks = lines[lines.index('  "ranks": [') + 1 : -2]
    assert len(ranks) == len(report.ranks) > 1
    assert [json.loads(line.rstrip(",")) for line in ranks] == to_dict(report)["ranks"]
    assert lines[1] == '  "schema": "nccl-logsift/findings/v1",'  # the rest stays indented
    empty = render_json(replace(report, ranks=()))
    assert json.loads(empty)["ranks"] == [] and empty.endswith('"ranks": []\n}\n')


@pytest.mark.parametrize("how", ["stdin", "gzip"])
def test_coll_evidence_is_quoted_from_inputs_that_cannot_be_read_again(run_cli, tmp_path, how):
    """A file's COLL lines are read again for evidence; a pipe's and a compressed file's are kept with the
    calls instead, so the findings are the same."""
    log = FIXTURES / "collective_mismatch_4ranks.log"
    from_file = run_cli("analyze", str(log), "--format", "json")
    if how == "stdin":
        other = run_cli("analyze", "-", "--format", "json", input=log.read_bytes())
    else:
        packed = tmp_path / "job.log.gz"
        packed.write_bytes(gzip.compress(log.read_bytes()))
        other = run_cli("analyze", str(packed), "--format", "json")
    want, got = json.loads(from_file.output), json.loads(other.output)
    quoted = [e["text"] for f in got["findings"] for e in f["evidence"]] + [
        r["last_line"]["text"] for r in got["ranks"]
    ]
    assert any("NCCL INFO AllReduce: opCount" in text for text in quoted)
    for report in (want, got):
        report.pop("inputs")
        for finding in report["findings"]:
            for evidence in finding["evidence"]:
                evidence.pop("path")
        for rank in report["ranks"]:
            rank["last_line"].pop("path")
    assert got == want


def test_fail_on_error_passes_a_job_that_only_ran_degraded(run_cli):
    """Severity policy: a rank that is late every step slows the job (a warning); the job did not fail."""
    log = FIXTURES / "slow_rank_4ranks.log"
    assert run_cli("analyze", str(log), "--fail-on", "error").exit_code == 0
    assert run_cli("analyze", str(STALL), "--fail-on", "error").exit_code == 1
    assert run_cli("analyze", str(log), "--fail-on", "warning").exit_code == 1


def test_text_to_a_pipe_is_120_columns_unless_columns_or_width_say(run_cli):
    from click.testing import CliRunner

    from nccl_logsift.cli import cli

    def panel_width(*args: str, columns: str | None) -> int:
        result = CliRunner().invoke(cli, ["analyze", str(STALL), *args], env={"COLUMNS": columns})
        assert result.exit_code == 0
        return len(result.stdout.splitlines()[0])

    assert panel_width(columns=None) == 120
    assert panel_width(columns="not a number") == 120
    assert panel_width(columns="90") == 90
    assert panel_width("--width", "150", columns="90") == 150
    assert run_cli("analyze", str(STALL), "--width", "10").exit_code == 2  # below the narrowest it lays out


def test_quiet_prints_only_the_verdict(run_cli):
    result = run_cli("analyze", str(STALL), "-q")
    verdict = json.loads(run_cli("analyze", str(STALL), "--format", "json").stdout)["verdict"]
    assert result.exit_code == 0 and result.stdout == verdict + "\n"
    assert run_cli("analyze", str(STALL), "-q", "--fail-on", "error").exit_code == 1


def test_capital_v_is_the_version(run_cli):
    from nccl_logsift import __version__

    assert run_cli("-V").stdout == run_cli("--version").stdout == f"logsift, version {__version__}\n"


def test_verbose_says_what_was_read_and_how_long_each_stage_took():
    # In a process of its own: the logging the CLI sets up is the root logger's, which pytest holds here.
    def stderr(*flags: str) -> str:
        command = [sys.executable, "-m", "nccl_logsift", *flags, "analyze", str(STALL), "-q"]
        proc = subprocess.run(command, capture_output=True, text=True)
        assert proc.returncode == 0
        return proc.stderr

    assert stderr() == ""
    verbose = stderr("-v")
    assert "read 1 input(s), 627 lines" in verbose and "not understood (0.00%)" in verbose
    assert re.search(r"diagnosis: 3 finding\(s\) in \d+\.\d\d s", verbose) and "table rows:" in verbose
    assert "DEBUG" not in verbose
    debug = stderr("-vv")
    assert "family coll: 84 line(s)" in debug and f"input {STALL}: " in debug
