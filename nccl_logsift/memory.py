"""How the C allocator (glibc's malloc) holds freed memory: kept for reuse while the input streams,
handed back to the operating system between stages.

The stream allocates a fresh read buffer for every 4 MB chunk (kept while lines of it are parsed) and
arrays for what the compiled loops find in it. By default glibc gives a freed block of that size back to
the system at once (``munmap``, or ``madvise`` at the top of a thread's heap), so the next one is a fresh
mapping that the kernel faults in and zeroes page by page: ~0.3 CPU s a GB, and over 1 s for a 4096-rank
job. :func:`reuse_freed` makes glibc keep such blocks for the next allocations; :func:`release_freed`
(``malloc_trim``) hands what is free back once the stream has ended, when the diagnosis builds its
tables with polars and pyarrow, whose allocators of their own cannot reuse it.

Both are no-ops where the C library is not glibc (musl has no ``malloc_trim``, and its ``mallopt`` does
nothing).
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

# mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
# Blocks up to this size come from the heap, whose freed memory is reused, rather than from mappings
# of their own: read buffers, the compiled loops' outputs and a segment of the parallel parse (16 MB).
_MMAP_THRESHOLD = 64 << 20
# Free memory at the top of a heap is kept up to this size rather than returned after every free: room
# for the blocks above, and no more (a larger one measured no faster and kept ~20 MB more of a 4096-rank
# job's peak).
_TRIM_THRESHOLD = 64 << 20
# Columns of up to this many texts are copied through Python strings (copied).
_FEW_STRINGS = 256


def reuse_freed() -> None:
    """Keep freed blocks of up to 64 MB for reuse instead of returning each to the system (call once, early).

    For the command's own processes: a program that imports logsift as a library keeps its own settings.
    """
    mallopt = _libc_function("mallopt", (ctypes.c_int, ctypes.c_int))
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)


def release_freed() -> None:
    """Return the C allocator's free memory to the system (a few ms)."""
    trim = _libc_function("malloc_trim", (ctypes.c_size_t,))
    if trim is not None:
        trim(0)


@functools.cache
def _libc_function(name: str, argtypes: tuple):
    """A function of the C library the interpreter runs on, or None (not Linux, or not there: musl has no
    ``malloc_trim``, and its ``mallopt`` does nothing)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = list(argtypes)
    function.restype = ctypes.c_int
    return function


def detached(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with each text column that shares far larger buffers copied into a buffer of its own: for a
    frame kept across batches.

    A polars text column is a list of views into byte buffers, and a filtered or sliced column shares the
    buffers of the column it came from, whole. The ``text`` of a line is a view into the 4 MB chunk it was
    read from (``io/lines.py``), and the host of a family's row into the host column of its whole batch:
    one kept line of a batch held that batch's buffers until the end, so an analysis grew with its input
    (a 10 GB log, ~1 GB of chunks retained for a few lines each). A column is copied when its buffers hold
    more than twice the bytes its rows use (and 1 MiB more): a table that keeps most of its batch (a
    4096-rank job's init lines) is left as it is, which saves a second copy at the peak.
    """
    import polars as pl

    if frame.is_empty():
        return frame
    shared = [
        name for name, dtype in frame.schema.items() if dtype == pl.String and _shares(frame.get_column(name))
    ]
    if not shared:
        return frame
    return frame.with_columns(copied(frame.get_column(name)) for name in shared)


def copied(column: pl.Series) -> pl.Series:
    """A text column in buffers of its own, whatever buffers it shared: for text that must outlive the chunk
    it was read in (the lines of a source held for the next one's)."""
    import polars as pl
    import pyarrow as pa

    if len(column) <= _FEW_STRINGS:
        # As Python strings: the export and import below cost ~0.4 ms of CPU a call however few the rows,
        # and a directory of 4,096 per-rank files copies each file's leftover lines (~35) out of its chunk.
        return pl.Series(column.name, column.to_list(), dtype=pl.String)
    # Through Arrow: a cast to large_string writes the values out contiguously; polars' own casts keep views.
    return pl.from_arrow(column.to_arrow().cast(pa.large_string())).alias(column.name)


def _shares(column: pl.Series) -> bool:
    """Whether the text buffers behind ``column`` (seen through a zero-copy Arrow export of its views) are far
    larger than what its rows use."""
    import polars as pl

    exported = column.to_arrow(compat_level=pl.CompatLevel.newest())
    chunks = exported.chunks if hasattr(exported, "chunks") else [exported]
    # A view array's buffers: validity, the 16-byte views, then the data buffers the views point into.
    held = sum(buffer.size for chunk in chunks for buffer in chunk.buffers()[2:] if buffer is not None)
    used = column.str.len_bytes().sum() or 0
    return held > 2 * used + (1 << 20)
