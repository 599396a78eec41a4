"""What is derived from a job, computed once per job: a job is read-only, so this is only a cache."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_CACHE: dict[int, tuple[weakref.ref, dict]] = {}


def cached(job: object, key: str, compute: Callable[[], T]) -> T:
    """``compute()``'s value for this job and key: computed on the first call, kept while the job lives."""
    ref, values = _CACHE.get(id(job), (None, None))
    if ref is None or ref() is not job or values is None:
        for k in [k for k, (r, _) in _CACHE.items() if r() is None]:
            del _CACHE[k]
        values = {}
        _CACHE[id(job)] = (weakref.ref(job), values)
    if key not in values:
        values[key] = compute()
    return values[key]


def per_job(fn: Callable[[Any], T]) -> Callable[[Any], T]:
    """Decorator: compute a one-argument helper of a job once per job."""

    @functools.wraps(fn)
    def wrapper(job: Any) -> T:
        return cached(job, f"{fn.__module__}.{fn.__qualname__}", lambda: fn(job))

    return wrapper
