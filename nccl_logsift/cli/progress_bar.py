"""The bar ``read_progress`` draws on a terminal: bytes read, MB/s, elapsed, and a percentage when the
total is known. It is its own module so that runs without a terminal never import rich's progress."""

from __future__ import annotations

from collections.abc import Iterator
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

from nccl_logsift.cli.progress import ProgressCallback


@contextmanager
def bytes_bar(stream: TextIO, total: int | None) -> Iterator[ProgressCallback]:
    """Draw the bar on ``stream`` while the block runs (transient: it is gone when the block exits)."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        BytesReadColumn(),
        TransferSpeedColumn(),
        TimeElapsedColumn(),
    )
    console = Console(file=stream, highlight=False)
    with Progress(*columns, console=console, transient=True, redirect_stdout=False) as bar:
        task = bar.add_task("reading", total=total)
        yield lambda bytes_read: bar.update(task, completed=bytes_read)


class BytesReadColumn(ProgressColumn):
    """Bytes read, and of how many when known, in decimal units like the MB/s beside it."""

    def render(self, task: Task) -> Text:
        read = decimal(int(task.completed))
        text = read if task.total is None else f"{read} / {decimal(int(task.total))}"
        return Text(text, style="progress.download")
