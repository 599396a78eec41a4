"""The compiled loops' extension (nccl_logsift.accel._kernels): arguments checked before any loop runs, and
the GIL released while one runs. What the loops compute is tested through their modules (split, collscan,
keymap, calls, progress, digest)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from nccl_logsift import accel
from nccl_logsift.accel.keymap import KeyMap

_kernels = accel.compiled()
pytestmark = pytest.mark.skipif(_kernels is None, reason="the compiled loops are not built")


def test_the_extension_is_built_from_the_current_sources():
    """In a checkout, a changed loop needs a rebuild (``pip install -e . --no-deps``); the suite would
    otherwise test the loops as they were."""
    built = Path(_kernels.__file__)
    sources = built.parent / "csrc"
    if not sources.is_dir():
        pytest.skip("an installed package, without its C sources")
    stale = [path.name for path in sources.iterdir() if path.stat().st_mtime > built.stat().st_mtime]
    assert not stale, f"rebuild the loops (python -m pip install -e . --no-deps): {stale} changed since"


def test_an_array_of_the_wrong_type_or_layout_is_refused_by_name():
    table = KeyMap()
    out = np.empty(3, dtype=np.int64)
    with pytest.raises(TypeError, match=r"batch: expected a 1-D uint64 array \(got 1-D, format l\)"):
        _kernels.keymap_ids(table.keys, table.slots, np.arange(3, dtype=np.int64), 0, out, 0)
    with pytest.raises(TypeError, match="batch: expected a C-contiguous uint64 array"):
        _kernels.keymap_ids(table.keys, table.slots, np.arange(6, dtype=np.uint64)[::2], 0, out, 0)
    with pytest.raises(TypeError, match="out: expected a writable"):
        readonly = np.empty(3, dtype=np.int64)
        readonly.flags.writeable = False
        _kernels.keymap_ids(table.keys, table.slots, np.arange(3, dtype=np.uint64), 0, readonly, 0)
    with pytest.raises(TypeError, match="count: expected an integer"):
        _kernels.keymap_ids(table.keys, table.slots, np.arange(3, dtype=np.uint64), "0", out, 0)
    with pytest.raises(TypeError, match="takes 6 arguments"):
        _kernels.keymap_ids(table.keys, table.slots)


def test_sizes_that_do_not_fit_together_are_refused_before_the_loop():
    table = KeyMap()
    with pytest.raises(ValueError, match="out is shorter than the batch"):
        _kernels.keymap_ids(
            table.keys, table.slots, np.arange(4, dtype=np.uint64), 0, np.empty(3, dtype=np.int64), 0
        )
    with pytest.raises(ValueError, match="power-of-two"):
        _kernels.keymap_ids(
            table.keys[:3], table.slots[:3], np.arange(1, dtype=np.uint64), 0, np.empty(1, dtype=np.int64), 0
        )
    data = np.frombuffer(b"a\nb\n", dtype=np.uint8)
    with pytest.raises(ValueError, match="a place for each line"):
        one = np.empty(1, dtype=np.int64)
        _kernels.split_bounds(data, np.array([1, 3]), 2, one, one.copy())
    with pytest.raises(ValueError, match="outside the data"):
        _kernels.split_last_newline(data, 0, 5)
    assert table.count == 0 and (table.slots == -1).all()


def test_numpy_integers_are_taken_as_integers():
    data = np.frombuffer(b"a\nb\n", dtype=np.uint8)
    assert _kernels.split_next_newline(data, np.int64(2)) == 3
    assert _kernels.split_last_newline(data, np.uint32(0), np.int16(3)) == 1


def test_a_loop_lets_other_threads_run():
    """A thread that wakes every millisecond keeps waking while the main thread is inside a loop: the loop
    does not hold the GIL (with it held, the thread could not take the time of any wake-up inside)."""
    data = np.full(60_000_000, ord("x"), dtype=np.uint8)
    newlines = np.empty(1 << 15, dtype=np.int64)
    wakes: list[float] = []
    stop = threading.Event()

    def wake() -> None:
        while not stop.is_set():
            time.sleep(0.001)
            wakes.append(time.perf_counter())

    thread = threading.Thread(target=wake)
    thread.start()
    calls = []
    try:
        for _ in range(20):
            start = time.perf_counter()
            _kernels.split_newlines(data, newlines, 0, 0, 0, False)
            calls.append((start, time.perf_counter()))
    finally:
        stop.set()
        thread.join()
    inside = sum(1 for at in wakes for start, end in calls if start + 0.001 < at < end - 0.001)
    loop_time = sum(end - start - 0.002 for start, end in calls if end - start > 0.002)
    assert loop_time > 0.02, "the loops were too quick to tell"
    assert inside >= loop_time / 0.001 / 5, (inside, loop_time)
