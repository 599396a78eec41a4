"""Options shared by several commands, as decorators, and what reading standard input needs."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import click

from nccl_logsift.cli.output import MIN_WIDTH
from nccl_logsift.errors import InputError
from nccl_logsift.io.sources import STDIN

input_paths = click.argument("paths", nargs=-1, type=click.Path(allow_dash=True, path_type=str))

width_option = click.option(
    "--width",
    type=click.IntRange(min=MIN_WIDTH),
    default=None,
    metavar="N",
    help="Lay the text report out in N columns (default: the terminal's width; to a pipe or a file, "
    "COLUMNS when set, else 120). Log lines wrap, never cut.",
)

STDIN_HINT = "reading the log from standard input; pipe a log in or give a path (Ctrl-C to stop)"
COPY_BYTES = 1 << 16


def check_stdin(paths: Sequence[str]) -> bool:
    """Before a command reads its inputs: when they include standard input (no PATH, or ``-``), refuse a
    closed one, and on a terminal say that it is being read (the command would otherwise seem to hang).
    True when standard input is read from a terminal."""
    if paths and STDIN not in paths:
        return False
    if sys.stdin is None:
        raise InputError("standard input is closed: pipe a log in or give a path")
    if not sys.stdin.isatty():
        return False
    click.echo(STDIN_HINT, err=True)
    return True


@contextmanager
def reading_stdin(paths: Sequence[str]) -> Iterator[None]:
    """Around a command's reading of its inputs: :func:`check_stdin`, and when standard input is a
    terminal, make Ctrl-C stop the command.

    The reader thread's read of a terminal cannot be interrupted, and the reading code waits for that
    thread when Ctrl-C unwinds it. So the terminal is copied into a pipe put in its place on descriptor 0,
    and Ctrl-C closes the pipe's writing end: the reader sees the end of its input and the interrupt goes
    on as for any other input.
    """
    if not check_stdin(paths):
        yield
        return
    terminal = os.dup(0)
    read_end, write_end = os.pipe()
    os.dup2(read_end, 0)
    os.close(read_end)
    null = os.open(os.devnull, os.O_WRONLY)

    def end_input() -> None:
        # /dev/null takes the writing end's number, so that it is never reused for another file while the
        # copying thread may still write to it; the pipe has no writer left, and its reader sees the end.
        os.dup2(null, write_end)

    def copy() -> None:
        try:
            while data := os.read(terminal, COPY_BYTES):  # Ctrl-D ends the input, as for a plain read
                os.write(write_end, data)
        except OSError:
            pass
        end_input()

    def interrupted(signum, frame) -> None:
        end_input()
        raise KeyboardInterrupt

    threading.Thread(target=copy, name="logsift-terminal", daemon=True).start()
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # nohup, a background job: Ctrl-C is not ours
        yield
        return
    previous = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
