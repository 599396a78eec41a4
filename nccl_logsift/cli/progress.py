"""A progress bar on stderr for the commands that read logs: bytes read, MB/s, elapsed, and a percentage
when the total is known in advance.

It is drawn only when stderr is a terminal, so pipes, redirected files and CI logs get no extra output,
and it is transient: gone before the command prints its report, so stdout (``--format json``) is untouched.
The bar itself is in ``progress_bar``, imported only then: rich's progress costs ~20 ms to import, and
the runs that care about start-up (scripts, hooks, CI) have no terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

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
    from nccl_logsift.cli.progress_bar import bytes_bar

    with bytes_bar(stream, known_total(paths)) as update:
        yield update


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
