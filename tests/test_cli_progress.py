"""The progress bar of analyze and parse: drawn on a terminal's stderr only, gone before the report."""

import gzip
import io
import json
import os
import pty
import subprocess
import sys
import threading

from conftest import FIXTURES, ROOT

from nccl_logsift.cli.progress import known_total, read_progress

STALL = FIXTURES / "rank_stall_8ranks.log"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_analyze_and_parse_print_nothing_on_stderr_when_it_is_not_a_terminal(run_cli, tmp_path):
    analyzed = run_cli("analyze", str(STALL), "--format", "json")
    parsed = run_cli("parse", str(STALL), "-o", str(tmp_path / "t"))
    assert analyzed.exit_code == 0 and parsed.exit_code == 0
    assert analyzed.stderr == "" and parsed.stderr == ""
    assert json.loads(analyzed.stdout)["findings"]


def test_known_total_is_the_size_of_plain_files_and_unknown_otherwise(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "a.log").write_bytes(b"x" * 10)
    (tmp_path / "logs" / "b.log").write_bytes(b"y" * 5)
    (tmp_path / "c.log.gz").write_bytes(gzip.compress(b"z\n"))
    assert known_total([str(tmp_path / "logs")]) == 15
    assert (
        known_total([str(tmp_path / "logs"), str(tmp_path / "c.log.gz")]) is None
    )  # gz counts decompressed bytes
    assert known_total(["-"]) is None


def test_read_progress_yields_no_callback_when_not_a_terminal():
    with read_progress([str(STALL)], stream=io.StringIO()) as progress:
        assert progress is None


def test_read_progress_shows_bytes_rate_and_percentage_on_a_terminal():
    terminal = FakeTerminal()
    size = STALL.stat().st_size
    with read_progress([str(STALL)], stream=terminal) as progress:
        progress(size // 4)
        progress(size // 2)  # a rate needs two readings
    drawn = terminal.getvalue()
    assert "reading" in drawn and "50%" in drawn and "B/s" in drawn and f"/ {size / 1000:.1f} kB" in drawn


def test_progress_bar_on_a_terminal_leaves_json_on_stdout_intact():
    """A real pseudo-terminal as stderr, stdout a pipe: the bar is drawn there, the JSON stays parseable."""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nccl_logsift", "analyze", str(STALL), "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=terminal,
        cwd=ROOT,
    )
    os.close(terminal)
    drawn = bytearray()
    reader = threading.Thread(target=_drain, args=(controller, drawn))  # a full terminal would block the bar
    reader.start()
    stdout, _ = proc.communicate(timeout=60)
    reader.join()
    os.close(controller)
    assert proc.returncode == 0 and json.loads(stdout)["findings"][0]["code"] == "LS101"
    assert b"reading" in drawn and b"100%" in drawn


def _drain(fd: int, into: bytearray) -> None:
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            return
        if not data:
            return
        into.extend(data)
