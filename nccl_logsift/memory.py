"""Hand memory the process has freed back to the operating system.

The C allocator keeps what numpy arrays and read buffers release for its own later use; polars and
pyarrow allocate through allocators of their own, which cannot reuse it. After a stream of chunks has
been read, hundreds of MB can sit freed but resident while the diagnosis builds its tables with polars:
``malloc_trim`` returns them (glibc; a no-op elsewhere).
"""

from __future__ import annotations

import ctypes
import functools
import sys


def release_freed() -> None:
    """Return the C allocator's free memory to the system (a few ms)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the C library the interpreter runs on
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim
