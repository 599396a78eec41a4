"""The exit status contract of the `logsift` command (nccl_logsift/errors.py), run as a real process: output
that cannot be written, closed standard streams, a reader that goes away, and logsift's own bugs."""

import errno
import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from conftest import FIXTURES, ROOT

from nccl_logsift.cli import cli
from nccl_logsift.errors import OutputError

STALL = FIXTURES / "rank_stall_8ranks.log"
LOGSIFT = f"{sys.executable} -m nccl_logsift"


def run(command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``command`` through the shell (for redirections such as ``>&-``), from the repository root."""
    return subprocess.run(
        command,
        shell=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def assert_one_error_line(proc: subprocess.CompletedProcess, status: int, says: str) -> None:
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and says in lines[0], proc.stderr


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_full_disk_on_stdout_is_an_error_with_status_2(fmt):
    assert_one_error_line(run(f"{LOGSIFT} analyze {STALL} --format {fmt} >/dev/full"), 2, "No space left")


@pytest.mark.parametrize("command", ["analyze {log} -o /dev/full", "report {log} -o /dev/full"])
def test_a_full_disk_under_o_is_an_error_with_status_2(command):
    assert_one_error_line(run(f"{LOGSIFT} {command.format(log=STALL)}"), 2, "cannot write /dev/full")


def test_a_closed_stdout_is_an_error_with_status_2():
    assert_one_error_line(run(f"{LOGSIFT} analyze {STALL} >&-"), 2, "standard output: it is closed")


def test_a_closed_stdout_does_not_matter_when_the_report_goes_to_a_file(tmp_path):
    proc = run(f"{LOGSIFT} analyze {STALL} --format json -o {tmp_path / 'r.json'} >&-")
    assert proc.returncode == 0 and proc.stderr == ""
    assert json.loads((tmp_path / "r.json").read_text())["findings"][0]["ranks"] == [1]


def test_a_closed_stdin_is_an_input_error():
    assert_one_error_line(run(f"{LOGSIFT} analyze <&-"), 2, "standard input is closed")


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_reader_that_closes_the_pipe_ends_the_run_with_status_0_and_nothing_on_stderr(fmt):
    # `true` has exited long before the report is written: every write meets a closed pipe (EPIPE).
    proc = subprocess.run(
        ["bash", "-c", f"{LOGSIFT} analyze {STALL} --format {fmt} | true; echo status=${{PIPESTATUS[0]}}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.stdout == "status=0\n" and proc.stderr == ""


@pytest.mark.parametrize("command", ["analyze", "analyze --format json", "report"])
def test_an_output_file_in_a_missing_directory_fails_before_the_input_is_read(command, tmp_path):
    # Standard input stays open and empty: a command that read it before checking -o would wait forever.
    out = tmp_path / "missing" / "out.html"
    with subprocess.Popen(
        [sys.executable, "-m", "nccl_logsift", *command.split(), "-", "-o", str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            _, stderr = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 2 and stderr.startswith("Error: cannot write") and "does not exist" in stderr
    assert not out.parent.exists()


def test_an_output_file_under_a_file_fails_with_status_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_one_error_line(run(f"{LOGSIFT} analyze {STALL} -o {blocker}/out.json"), 2, "is not a directory")


def test_the_output_check_leaves_no_file_behind_when_the_input_fails(tmp_path):
    out = tmp_path / "r.json"
    proc = run(f"{LOGSIFT} analyze {tmp_path / 'missing.log'} -o {out}")
    assert proc.returncode == 2 and not out.exists()


# A bug stands in for any: the analysis raises what no handler expects.
BUGGY = textwrap.dedent("""
    import sys
    import nccl_logsift.pipeline as pipeline

    def analyze(*args, **kwargs):
        raise ZeroDivisionError("an internal bug\\nsecond line")

    pipeline.analyze = analyze
    sys.argv = ["logsift", *sys.argv[1:]]
    from nccl_logsift.cli import main
    main()
""")


@pytest.mark.parametrize("fail_on", [[], ["--fail-on", "info"]])
def test_an_internal_error_is_one_line_and_status_3(fail_on):
    proc = subprocess.run(
        [sys.executable, "-c", BUGGY, "analyze", str(STALL), *fail_on],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert_one_error_line(proc, 3, "Error: internal error: ZeroDivisionError: an internal bug (")
    assert "--debug" in proc.stderr and "second line" not in proc.stderr


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_debug_shows_the_traceback_of_an_internal_error(how):
    args, env = (["--debug"], {}) if how == "flag" else ([], {"LOGSIFT_DEBUG": "1"})
    proc = subprocess.run(
        [sys.executable, "-c", BUGGY, *args, "analyze", str(STALL)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, **env},
    )
    assert proc.returncode == 3
    assert "Traceback (most recent call last)" in proc.stderr and "ZeroDivisionError" in proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("Error: internal error: ZeroDivisionError")


def test_the_help_and_the_readme_document_every_exit_status(run_cli):
    from nccl_logsift.errors import ExitCode

    shown = run_cli("--help").output
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Exit codes") :]
    section = section[: section.index("\n## ", 1)]
    for code in ExitCode:
        assert f"\n    {code.value} " in shown, code
        assert f"`{code.value}`" in section, code


def test_a_batch_dataset_that_cannot_be_made_fails_with_status_2(tmp_path):
    (tmp_path / "archive" / "job").mkdir(parents=True)
    (tmp_path / "archive" / "job" / "job.log").write_bytes(STALL.read_bytes())
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run(f"{LOGSIFT} batch {tmp_path / 'archive'} -o {blocker}/fleet")
    assert_one_error_line(proc, 2, "cannot write into directory")


def test_a_report_that_fails_midway_leaves_the_previous_file_whole(run_cli, tmp_path, monkeypatch):
    """-o wrote into the file itself: a write that failed halfway left half a report in its place."""
    out = tmp_path / "report.txt"
    out.write_text("the previous report\n")

    def half_then_full_disk(report, console):
        console.print("Verdict: half of it")
        console.file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("nccl_logsift.render.terminal.render_terminal", half_then_full_disk)
    result = CliRunner().invoke(cli, ["analyze", str(STALL), "-o", str(out)])
    # The error the command's entry point turns into "Error: ..." and status 2.
    assert isinstance(result.exception, OutputError) and "cannot write" in str(result.exception)
    assert out.read_text() == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]  # no temporary left behind


def test_a_new_report_file_gets_the_mode_a_new_file_gets(run_cli, tmp_path):
    mask = os.umask(0o022)
    try:
        assert (
            run_cli("analyze", str(STALL), "--format", "json", "-o", str(tmp_path / "r.json")).exit_code == 0
        )
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
