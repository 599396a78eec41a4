"""Commands reading standard input from a terminal: they say so, Ctrl-C stops them, Ctrl-D ends the input.

Each runs in a session of its own whose controlling terminal is a pseudo-terminal, as under a shell: Ctrl-C
is the byte 0x03 typed into it, which the terminal turns into SIGINT for the command's process group.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

import pytest
from conftest import FIXTURES, ROOT, foreground

from nccl_logsift.cli.options import STDIN_HINT

STALL = FIXTURES / "rank_stall_8ranks.log"


# Run in the child: the terminal on its stdin becomes its session's controlling terminal, then logsift runs.
TAKE_TERMINAL_AND_RUN = (
    "import fcntl, runpy, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "sys.argv = ['logsift', *sys.argv[1:]]; runpy.run_module('nccl_logsift', run_name='__main__')"
)


def on_a_terminal(*args: str) -> tuple[subprocess.Popen, int]:
    """``logsift ARGS`` with a pseudo-terminal on stdin; the terminal's other end is returned with it."""
    ours, theirs = pty.openpty()
    proc = subprocess.Popen(
        foreground([sys.executable, "-c", TAKE_TERMINAL_AND_RUN, *args]),
        cwd=ROOT,
        stdin=theirs,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    os.close(theirs)
    return proc, ours


def wait_for_hint(proc: subprocess.Popen) -> str:
    """The first line on stderr (the hint comes before anything is read)."""
    ready, _, _ = select.select([proc.stderr], [], [], 60)
    assert ready, "nothing on stderr within 60 s"
    return proc.stderr.readline().decode()


def type_into(terminal: int, data: bytes) -> None:
    """Type ``data``, reading back the terminal's echo so that it never fills up."""
    for start in range(0, len(data), 1024):
        os.write(terminal, data[start : start + 1024])
        while select.select([terminal], [], [], 0)[0]:
            os.read(terminal, 1 << 16)


@pytest.mark.parametrize(
    "command",
    [["analyze"], ["analyze", "-"], ["report", "-o", "{tmp}/r.html"], ["parse", "-o", "{tmp}/tables"]],
)
def test_a_terminal_on_stdin_gets_a_hint_and_ctrl_c_stops_the_command(command, tmp_path):
    proc, terminal = on_a_terminal(*(arg.format(tmp=tmp_path) for arg in command))
    try:
        assert wait_for_hint(proc) == STDIN_HINT + "\n"
        time.sleep(0.5)  # the input is being read
        typed = time.monotonic()
        os.write(terminal, b"\x03")
        _, stderr = proc.communicate(timeout=20)
        took = time.monotonic() - typed
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(terminal)
    assert proc.returncode == 130 and took < 5, (proc.returncode, took)
    assert stderr.decode().strip() == "Aborted."
    assert list(tmp_path.iterdir()) == []  # no report, no tables, nothing half-made


def test_a_log_typed_into_the_terminal_is_analysed_when_ctrl_d_ends_it():
    proc, terminal = on_a_terminal("analyze", "--format", "json")
    try:
        assert wait_for_hint(proc) == STDIN_HINT + "\n"
        type_into(terminal, STALL.read_bytes())
        os.write(terminal, b"\x04")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(terminal)
    assert proc.returncode == 0 and stderr == b"", stderr
    report = json.loads(stdout)
    assert report["findings"][0]["ranks"] == [1] and report["inputs"][0]["lines"] == len(
        STALL.read_text().splitlines()
    )


def test_a_piped_stdin_gets_no_hint():
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "analyze", "--format", "json"],
        cwd=ROOT,
        input=STALL.read_bytes(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stderr == b""
