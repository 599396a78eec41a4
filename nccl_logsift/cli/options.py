"""Options shared by several commands, as decorators, and what reading standard input needs."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from nccl_logsift.errors import InputError
from nccl_logsift.io.sources import STDIN

input_paths = click.argument("paths", nargs=-1, type=click.Path(allow_dash=True, path_type=str))

STDIN_HINT = "reading the log from standard input; pipe a log in or give a path (Ctrl-C to stop)"


def check_stdin(paths: Sequence[str]) -> None:
    """Before a command reads standard input (no PATH, or ``-``): refuse one that is closed, and say that
    it is being read when it is a terminal, where the command would otherwise seem to hang."""
    if paths and STDIN not in paths:
        return
    if sys.stdin is None:
        raise InputError("standard input is closed: pipe a log in or give a path")
    if sys.stdin.isatty():
        click.echo(STDIN_HINT, err=True)
