"""The decorator of every compiled loop: numba's ``njit``, cached on disk, run without the GIL, and loaded
from its cache without the part of numba's start that only compiling needs.

When a compiled function is first called, numba looks for its machine code in the on-disk cache, and
before looking it "refreshes" its target context: it imports some seventy modules of its own
(unicode, lists, sets, dicts, random numbers, polynomials, datetimes...) and registers their typing and
lowering rules. Those rules are what compiling needs; loading machine code that was compiled before
needs none of them, only numba's runtime (the NRT, for loops that allocate). Skipping the refresh took a
small log's whole run from 0.91 to 0.80 s (median of 8), and the refresh held the GIL while the file could
already be streaming.

:func:`njit` therefore gives each of logsift's functions a cache that loads without that refresh. A
miss (the first run, or after the source changed) compiles as before, and numba's compiler refreshes the
contexts itself then. Only logsift's own functions are changed: any other numba code in the process
loads as numba does. Where numba's cache lacks the methods this relies on (a numba other than the ones
tested), the functions load the usual way.
"""

from __future__ import annotations

from typing import Callable

import numba
from numba.core import caching
from numba.core.runtime import rtsys


def njit(**options) -> Callable:
    """``numba.njit(cache=True, nogil=True, **options)``, loaded from its cache without the refresh."""

    def compile_(function: Callable):
        dispatcher = numba.njit(cache=True, nogil=True, **options)(function)
        _load_without_refresh(dispatcher)
        return dispatcher

    return compile_


def _load_without_refresh(dispatcher) -> None:
    cache = getattr(dispatcher, "_cache", None)
    if not isinstance(cache, caching.Cache) or not all(
        hasattr(cache, name) for name in ("_load_overload", "_guard_against_spurious_io_errors")
    ):
        return

    numbas_own = cache.load_overload

    def load_overload(signature, target_context):
        # What numba's own load_overload does, but for target_context.refresh(): of what the refresh
        # sets up, loading needs the runtime only.
        try:
            rtsys.initialize(target_context)
            with cache._guard_against_spurious_io_errors():
                return cache._load_overload(signature, target_context)
        except Exception:  # internals of a numba that work otherwise: load as numba itself does
            return numbas_own(signature, target_context)
        return None  # an I/O error the guard swallowed: compile instead

    cache.load_overload = load_overload
