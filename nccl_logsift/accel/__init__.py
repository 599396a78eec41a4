"""The per-line and per-call loops, behind one name each: compiled, or in pure Python where they are not.

Every loop of the package that runs once per line or per call lives here, and this is the only module that
imports the compiled extension (``nccl_logsift.accel._kernels``, built by setup.py from ``csrc/``; one C
file per caller, listed in ``csrc/module.c``). Each entry point has a pure-Python twin in
:mod:`nccl_logsift.accel.fallback` that takes the same arguments, checks them the same way and writes the
same outputs; it is used when the extension was not built (no C compiler at install) or when
``LOGSIFT_PURE_PYTHON=1`` is set, and is several times slower. ``tests/test_accel.py`` runs both on the
same inputs.

:data:`NATIVE` says which is in use. The loops' callers import them from here only:

* ``split_*``: the lines of a chunk (``io/split.py``), the keys of their texts (``parse/chunks.py``) and
  their Arrow string views (``io/lines.py``);
* ``collscan_*``: the COLL and transport fast paths, and their table of distinct strings
  (``parse/collscan.py``);
* ``keymap_*``: dense slots for 64-bit keys (``accel/keymap.py``, and numbering's table of starts);
* ``calls_*``: call signatures and keys (``parse/calls.py``) and numbering (``resolve/progress.py``);
* ``digest_*``: the collective digest (``resolve/digest.py``).

The arrays the loops read eight bytes at a time (a chunk's ``words`` view, a string table's store) are
padded: see ``io/lines.py``'s ``ByteView`` and ``padded``.
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_PYTHON_VARIABLE = "LOGSIFT_PURE_PYTHON"

# Every entry point, by the name callers use.
ENTRY_POINTS = (
    "split_newlines",
    "split_bounds",
    "split_last_newline",
    "split_next_newline",
    "split_keys",
    "split_views",
    "split_marked",
    "collscan_scan",
    "collscan_transports",
    "collscan_find",
    "collscan_add",
    "collscan_rehash",
    "keymap_ids",
    "keymap_rehash",
    "keymap_fill",
    "calls_signatures",
    "calls_instance_keys",
    "calls_ascending",
    "calls_number",
    "digest_fold_calls",
    "digest_fold_positions",
    "digest_alive",
)


def compiled() -> ModuleType | None:
    """The compiled extension, or None where it was not built (whatever ``LOGSIFT_PURE_PYTHON`` says)."""
    try:
        from nccl_logsift.accel import _kernels
    except ImportError:
        return None
    return _kernels


def pure_python_requested() -> bool:
    """Whether ``LOGSIFT_PURE_PYTHON`` asks for the pure-Python loops (any value but empty or 0)."""
    return os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0")


def implementation() -> ModuleType:
    """The module whose loops are bound here: the compiled one unless it is absent or not wanted."""
    native = None if pure_python_requested() else compiled()
    if native is not None:
        return native
    from nccl_logsift.accel import fallback

    return fallback


_loops = implementation()
NATIVE: bool = _loops.__name__ != "nccl_logsift.accel.fallback"

split_newlines = _loops.split_newlines
split_bounds = _loops.split_bounds
split_last_newline = _loops.split_last_newline
split_next_newline = _loops.split_next_newline
split_keys = _loops.split_keys
split_views = _loops.split_views
split_marked = _loops.split_marked
collscan_scan = _loops.collscan_scan
collscan_transports = _loops.collscan_transports
collscan_find = _loops.collscan_find
collscan_add = _loops.collscan_add
collscan_rehash = _loops.collscan_rehash
keymap_ids = _loops.keymap_ids
keymap_rehash = _loops.keymap_rehash
keymap_fill = _loops.keymap_fill
calls_signatures = _loops.calls_signatures
calls_instance_keys = _loops.calls_instance_keys
calls_ascending = _loops.calls_ascending
calls_number = _loops.calls_number
digest_fold_calls = _loops.digest_fold_calls
digest_fold_positions = _loops.digest_fold_positions
digest_alive = _loops.digest_alive
