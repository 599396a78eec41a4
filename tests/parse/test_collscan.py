"""The table of distinct byte strings the compiled COLL loop looks prefixes and op names up in (the loop
itself is tested through the fast path, tests/parse/test_fastcoll.py)."""

from __future__ import annotations

import numpy as np
import pytest

from nccl_logsift import accel
from nccl_logsift.io.lines import ByteView
from nccl_logsift.parse.collscan import ByteTable

pytestmark = pytest.mark.usefixtures("loops")  # the compiled and the pure-Python loops


def spans(texts: list[bytes]) -> tuple[ByteView, np.ndarray, np.ndarray]:
    view = ByteView(b"".join(texts))
    stops = np.cumsum([len(t) for t in texts]).astype(np.int64)
    return view, stops - np.array([len(t) for t in texts]), stops


def add(table: ByteTable, texts: list[bytes]) -> list[int]:
    view, starts, stops = spans(texts)
    ids = table.lookup(view.raw, view.words, starts, stops)
    table.add(view.raw, view.words, starts, stops, ids)
    return ids.tolist()


def looked_up(table: ByteTable, texts: list[bytes]) -> list[int]:
    view, starts, stops = spans(texts)
    return table.lookup(view.raw, view.words, starts, stops).tolist()


TEXTS = [
    b"gpu7:31842:31842 [3]",
    b"gpu7:31842:31843 [3]",
    b"",
    b"x",
    b"[rank3]:gpu7:31842:31842 [3]",
    b"12345678",
    b"123456789",
]


def test_strings_are_numbered_in_order_of_first_sight():
    table = ByteTable()
    assert add(table, TEXTS + TEXTS[::-1]) == list(range(len(TEXTS))) + list(range(len(TEXTS)))[::-1]
    assert table.strings(0, len(table)) == TEXTS
    assert looked_up(table, TEXTS + [b"gpu7:31842:31842 [4]", b"1234567"]) == list(range(len(TEXTS))) + [
        -1,
        -1,
    ]


def test_strings_whose_hashes_collide_keep_their_own_ids():
    table = ByteTable(slots=2, hash_mask=0)  # every hash is 0, and the slot table must grow
    texts = [f"host{i}:{i}:{i} [0]".encode() for i in range(100)]
    assert add(table, texts) == list(range(100))
    assert looked_up(table, texts[::-1]) == list(range(100))[::-1]
    assert looked_up(table, [b"host100:100:100 [0]", b"host1:1:1 [0] "]) == [-1, -1]


def test_a_growing_table_keeps_its_ids():
    table = ByteTable(slots=2)
    first = add(table, TEXTS)
    add(table, [f"{i}".encode() * 50 for i in range(1000)])
    assert len(table.slots) >= 2 * len(table) and looked_up(table, TEXTS) == first
    assert table.strings(len(TEXTS), len(TEXTS) + 2) == [b"0" * 50, b"1" * 50]


def test_a_table_over_its_bounds_is_emptied_only_when_trimmed():
    table = ByteTable(max_ids=3)
    add(table, TEXTS)
    assert len(table) == len(TEXTS) and looked_up(table, TEXTS[:1]) == [0]
    assert table.trim() and len(table) == 0 and looked_up(table, TEXTS[:1]) == [-1]
    assert add(table, TEXTS[1:3]) == [0, 1] and not table.trim()
    by_bytes = ByteTable(max_bytes=10)
    add(by_bytes, [b"x" * 11])
    assert by_bytes.trim()


def test_the_loops_refuse_strings_outside_the_data_and_a_table_without_room():
    table = ByteTable()
    view, starts, stops = spans([b"x" * 100])
    with pytest.raises(ValueError, match="outside the data"):
        table.lookup(view.raw, view.words, starts, stops + 1)
    with pytest.raises(ValueError, match="no room"):  # add() makes room first (the store holds 64 bytes)
        accel.collscan_add(table.arrays, view.raw, view.words, starts, stops, np.full(1, -1, dtype=np.int32))
    assert len(table) == 0
    with pytest.raises(TypeError, match="ids"):
        accel.collscan_find(table.arrays, view.raw, view.words, starts, stops, np.zeros(1, dtype=np.int64))
