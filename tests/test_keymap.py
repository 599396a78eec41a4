"""KeyMap: 64-bit keys to dense slots in order of first sight, grown as keys come."""

from __future__ import annotations

import numpy as np
import pytest

from nccl_logsift.accel.keymap import KeyMap, earlier, grown

pytestmark = pytest.mark.usefixtures("loops")  # the compiled and the pure-Python loops


def first_sight(keys: list[int], known: dict[int, int]) -> list[int]:
    return [known.setdefault(key, len(known)) for key in keys]


def test_ids_number_keys_in_order_of_first_sight_across_batches_and_growth():
    rng = np.random.default_rng(5)
    table = KeyMap(capacity=2)  # grows many times on the way
    known: dict[int, int] = {}
    for size in (1, 7, 1000, 0, 5000):
        keys = rng.integers(0, 3000, size).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        assert table.ids(keys).tolist() == first_sight(keys.tolist(), known)
    assert table.count == len(known)
    assert 2 * table.count <= len(table.keys)  # at most half full
    count = table.count
    assert table.ids(np.array(list(known), dtype=np.uint64)).tolist() == list(known.values())
    assert table.count == count  # found, not added again


def test_keys_that_share_their_low_bits_keep_their_own_slots():
    keys = np.arange(200, dtype=np.uint64) << np.uint64(40)  # equal in every low bit
    table = KeyMap(capacity=4)
    assert table.ids(keys).tolist() == list(range(200))
    assert table.ids(keys[::-1]).tolist() == list(range(199, -1, -1))


def test_grown_keeps_values_and_zero_fills_per_slot_rows():
    values = np.arange(6, dtype=np.int64).reshape(3, 2)
    longer = grown(values, 7)
    assert longer.shape == (12, 2) and (longer[:3] == values).all() and not longer[3:].any()
    assert grown(values, 2) is values


def test_earlier_counts_the_entries_before_each_with_its_slot():
    slots = np.random.default_rng(3).integers(0, 7, 500)
    expected = [int((slots[:i] == slot).sum()) for i, slot in enumerate(slots)]
    assert earlier(slots).tolist() == expected
    assert earlier(np.zeros(0, dtype=np.int64)).tolist() == []
