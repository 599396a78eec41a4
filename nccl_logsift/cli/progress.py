"""A progress bar on stderr for the commands that read logs: bytes read, MB/s, elapsed, and a percentage
when the total is known in advance.

It is drawn only when stderr is a terminal, so pipes, redirected files and CI logs get no extra output,
and it is transient: gone before the command prints its report, so stdout (``--format json``) is untouched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.filesize import decimal
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from nccl_logsift.io.lines import COMPRESSED_MAGIC
from nccl_logsift.io.sources import expand_paths

ProgressCallback = Callable[[int], None]


@contextmanager
def read_progress(paths: Sequence[str], stream: TextIO | None = None) -> Iterator[ProgressCallback | None]:
    """Yield the callback the pipeline calls with the bytes read so far, or None when ``stream`` (stderr
    by default) is not a terminal; the bar is removed when the block exits, normally or by an exception."""
    stream = stream or sys.stderr
    if not stream.isatty():
        yield None
        return
    columns = (
        TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), BytesReadColumn(),
        TransferSpeedColumn(), TimeElapsedColumn(),
    )
    console = Console(file=stream, highlight=False)
    with Progress(*columns, console=console, transient=True, redirect_stdout=False) as bar:
        task = bar.add_task("reading", total=known_total(paths))
        yield lambda bytes_read: bar.update(task, completed=bytes_read)


def known_total(paths: Sequence[str]) -> int | None:
    """The bytes the pipeline will read, when every input is a regular uncompressed file; else None."""
    sources, _ = expand_paths(paths)
    sizes = [s.size for s in sources if s.size is not None and not _is_compressed(s.path)]
    if not sources or len(sizes) < len(sources):
        return None
    return sum(sizes)


def _is_compressed(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4).startswith(COMPRESSED_MAGIC)
    except OSError:  # unreadable: the pipeline reports it and reads nothing from it
        return False


class BytesReadColumn(ProgressColumn):
    """Bytes read, and of how many when known, in decimal units like the MB/s beside it."""

    def render(self, task: Task) -> Text:
        read = decimal(int(task.completed))
        text = read if task.total is None else f"{read} / {decimal(int(task.total))}"
        return Text(text, style="progress.download")
