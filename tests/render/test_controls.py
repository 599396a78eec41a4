"""Terminal control sequences in log text reach the terminal report and the live view only as visible text."""

from __future__ import annotations

import io
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT
from rich.console import Console

from nccl_logsift.live import EventKind, LiveEvent
from nccl_logsift.render.controls import visible
from nccl_logsift.render.live import live_view

# Clear the screen and home the cursor, set the window title, an OSC 8 hyperlink, concealed text, a bidi
# override, a C1 CSI and DEL.
PAYLOAD = (
    "\x1b[2J\x1b[H\x1b]0;pwned\x07 \x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\ "
    "\x1b[8mhidden\x1b[0m \u202eevil\u202c \x9b31m \x7f"
)
RAW = ["\x1b", "\x07", "\x9b", "\x7f", "\u202e", "\u202c"]


def test_visible_writes_controls_in_caret_notation_and_code_points():
    assert visible("a\x1b[2Jb\x07\x00\x7f") == "a^[[2Jb^G^@^?"
    assert (
        visible("\x9b\x85\u202a\u202e\u2066\u2069\u200f")
        == "<U+009B><U+0085><U+202A><U+202E><U+2066><U+2069><U+200F>"
    )
    assert (
        visible("tab\tand newline\nstay; ünïcödé and 日本 too")
        == "tab\tand newline\nstay; ünïcödé and 日本 too"
    )


@pytest.fixture
def hostile_log(tmp_path: Path) -> Path:
    """An IB error log whose first WARN carries PAYLOAD, in a file whose name carries a clear-screen."""
    lines = (FIXTURES / "ib_error_4ranks.log").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "NCCL WARN" in line)
    lines[at] = lines[at].replace("Got completion", f"Got completion {PAYLOAD}")
    path = tmp_path / "job\x1b[2J.log"
    path.write_text("\n".join(lines) + "\n")
    return path


def logsift(*args: str) -> subprocess.CompletedProcess:
    """``logsift ARGS`` in a process of its own, from the repository root; it must succeed."""
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", *args], capture_output=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.parametrize("command", [["analyze"], ["watch", "--format", "text"]])
def test_the_terminal_report_carries_no_control_character_of_the_log(hostile_log, command):
    proc = logsift(*command, str(hostile_log))
    text = proc.stdout.decode()
    assert [c for c in RAW if c in text] == []
    # What they were is still shown: the WARN in the evidence, the file's name in the evidence's path.
    assert "Got completion ^[[2J^[[H^[]0;pwned^G" in text
    assert "job^[[2J.log:" in text


def test_the_report_written_with_o_carries_no_control_character_either(hostile_log, tmp_path):
    out = tmp_path / "report.txt"
    logsift("analyze", str(hostile_log), "-o", str(out))
    assert "^[[8mhidden" in out.read_text()
    assert [c for c in RAW if c in out.read_text()] == []


def test_the_html_report_shows_the_controls_of_log_text_instead_of_carrying_them(hostile_log, tmp_path):
    """Escaped, a bidi override still drew text backwards in the page (a host name spelled in reverse)."""
    out = tmp_path / "report.html"
    logsift("report", str(hostile_log), "-o", str(out))
    page = out.read_text()
    island = page.index('<script type="application/json"')  # the findings contract: JSON escapes its own
    shown = page[:island] + page[page.index("</script>", island) :]
    assert [c for c in RAW if c in shown] == []
    assert "&lt;U+202E&gt;evil&lt;U+202C&gt;" in shown and "Got completion ^[[2J^[[H" in shown


@pytest.mark.parametrize("full", [False, True], ids=["one-line", "full"])
def test_the_live_view_shows_controls_in_hosts_ops_titles_and_notes(full):
    from render.test_live_view import STALL, row, snapshot

    hostile = replace(row(0, 7), host=f"node{PAYLOAD}", op=f"AllReduce{PAYLOAD}", comm=f"0x1{PAYLOAD}")
    finding = replace(STALL, title=f"stalled {PAYLOAD}", advice=f"look {PAYLOAD}")
    events = (
        LiveEvent(EventKind.FINDING, 1.0, finding),
        LiveEvent(EventKind.RECOVERED, 2.0, finding, PAYLOAD),
    )
    console = Console(file=io.StringIO(), width=400, color_system=None)
    console.print(live_view(snapshot(rows=(hostile,), events=events), 40, 400, full=full))
    text = console.file.getvalue()
    assert [c for c in RAW if c in text] == []
    # host, op, comm, the finding's title and the recovery's note; the advice too when shown whole
    assert text.count("^[[2J") == 5 + full
