"""The pure-Python loops (nccl_logsift/accel/fallback.py) against the compiled ones: the same outputs on
crafted edge cases, the same arguments refused, the same findings JSON; and only accel/ imports the
compiled module."""

from __future__ import annotations

import ast
import copy
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nccl_logsift import accel
from nccl_logsift.accel import fallback
from nccl_logsift.io.lines import ByteView, padded
from nccl_logsift.parse import collscan
from nccl_logsift.parse.collscan import ByteTable
from nccl_logsift.pipeline import analyze
from nccl_logsift.render.json import render_json
from tests.conftest import FIXTURES, ROOT

PACKAGE = Path(accel.__file__).parent.parent
COMPILED = accel.compiled()
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the compiled loops are not built")


def test_only_accel_imports_the_compiled_module():
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if "_kernels" not in text:
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            if any(name.split(".")[-1] == "_kernels" for name in names):
                importers.append(path.relative_to(PACKAGE).as_posix())
    assert importers == ["accel/__init__.py"]


def test_the_facade_names_every_entry_point_of_both():
    for name in accel.ENTRY_POINTS:
        assert callable(getattr(fallback, name)) and getattr(accel, name) is not None
    if COMPILED is not None:
        assert sorted(accel.ENTRY_POINTS) == sorted(n for n in dir(COMPILED) if not n.startswith("_"))


def test_without_the_compiled_module_or_when_asked_the_pure_python_loops_are_bound(monkeypatch):
    assert accel.implementation() is (COMPILED or fallback)
    monkeypatch.setenv(accel.PURE_PYTHON_VARIABLE, "1")
    assert accel.implementation() is fallback
    monkeypatch.setenv(accel.PURE_PYTHON_VARIABLE, "0")
    monkeypatch.delattr(accel, "_kernels", raising=False)
    monkeypatch.setitem(sys.modules, "nccl_logsift.accel._kernels", None)  # as if it were not built
    assert accel.compiled() is None and accel.implementation() is fallback


# ------------------------------------------------------------------ running both on the same inputs
def copied(value):
    """A deep copy of a kernel's arguments that keeps every words view a view of its (copied) bytes."""
    if isinstance(value, tuple):
        return _with_words(tuple(copied(item) for item in value), value)
    if isinstance(value, list):
        return _with_words([copied(item) for item in value], value)
    return value.copy() if isinstance(value, np.ndarray) else copy.copy(value)


def _is_words(array) -> bool:
    return isinstance(array, np.ndarray) and array.ndim == 1 and array.itemsize == 8 and array.strides == (1,)


def _with_words(copies, originals):
    """Each words view among ``originals`` rebuilt over the copy of the byte array it views (padding kept)."""
    out = list(copies)
    for k, words in enumerate(originals):
        if not _is_words(words):
            continue
        at = words.__array_interface__["data"][0]
        for j, data in enumerate(originals):
            if isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ctypes.data == at:
                buffer = np.zeros(max(len(data), len(words) + 7), dtype=np.uint8)
                buffer[: len(data)] = data
                out[j] = buffer[: len(data)]
                out[k] = np.ndarray(shape=words.shape, dtype="<u8", buffer=buffer, strides=(1,))
    return type(copies)(out)


def arrays_of(args) -> list[np.ndarray]:
    found = []
    for value in args:
        if isinstance(value, tuple | list):
            found.extend(arrays_of(value))
        elif isinstance(value, np.ndarray) and not _is_words(value):
            found.append(value)
    return found


def both(name: str, *args, columns: int | None = None):
    """Run entry point ``name`` of each implementation on its own copy of ``args``: the results and every
    array afterwards must be equal (for collscan_scan, the first ``columns`` columns of its outputs, the
    result when None). Returns the result."""
    outcomes = []
    for implementation in (fallback, COMPILED):
        mine = copied(args)
        try:
            result = getattr(implementation, name)(*mine)
        except (TypeError, ValueError) as error:
            result = (type(error), str(error))
        except OverflowError:  # its wording is the interpreter's
            result = OverflowError
        outcomes.append((result, mine))
    (result, mine), (expected, theirs) = outcomes
    assert result == expected, name
    taken = result if columns is None else columns
    for got, want in zip(arrays_of(mine), arrays_of(theirs)):
        if name in ("collscan_scan", "collscan_transports") and got.ndim == 2:
            got, want = got[:, :taken], want[:, :taken]
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    return result


# ------------------------------------------------------------------ split
SPLIT_CASES = [
    b"",
    b"\n",
    b"a",
    b"a\nb\n",
    b"a\r\nb \t\r\r\n\nlast",
    b"\x00\x00line\x00\x00\n\x00\x00\x00\n",
    b"torn \xef\xbf\xbd\nall \xef\xbf\xbd\xef\xbf\xbd \n\xbf\xbd\n\xef\xbf\xbd",
    b"x" * 31 + b"\n" + b"y" * 40 + b"\n\xc3\xa9t\xc3\xa9 " * 3,
    b"".join(b"line %d  \n" % i for i in range(3000)) + b"\xff" * 50,
    # Newlines and bytes above 127 at every place of the 32-byte steps (two 16-byte halves on x86-64).
    bytes(random.Random(5).choice(b"ab\n\xc3\xa9 \r\x00\n") for _ in range(5000)),
    b"a" * 17 + b"\x80" + b"\n" * 46,
]


@needs_compiled
@pytest.mark.parametrize("data", SPLIT_CASES, ids=range(len(SPLIT_CASES)))
def test_split_gives_the_same_lines(data):
    raw = np.frombuffer(data, dtype=np.uint8)
    for room in (0, 40, 1 << 14, (1 << 14) + 64):  # room for no block, the tail only, one block, all
        newlines = np.zeros(room, dtype=np.int64)
        for at, count in ((0, 0), (32, 0), (64, 3)):
            both("split_newlines", raw, newlines, at, min(count, room), 0, False)
    newlines = np.flatnonzero(raw == 10).astype(np.int64)
    count = len(newlines)
    lines = count + (1 if (newlines[-1] + 1 if count else 0) < len(raw) else 0)
    both("split_bounds", raw, newlines, count, np.zeros(lines, np.int64), np.zeros(lines, np.int64))
    for start in range(0, len(raw) + 2, max(1, len(raw) // 7)):
        both("split_next_newline", raw, start)
        for stop in (start - 1, start, start + 1, len(raw)):
            both("split_last_newline", raw, start, stop)
    starts, ends = np.zeros(lines, np.int64), np.zeros(lines, np.int64)
    accel.split_bounds(raw, newlines, count, starts, ends)
    every = np.arange(lines, dtype=np.int64)
    both("split_keys", raw, starts, ends, every, np.zeros(lines, np.uint64))
    keys = np.zeros(lines, np.uint64)
    accel.split_keys(raw, starts, ends, every, keys)
    texts = [data[a:b] for a, b in zip(starts, ends)]
    # Equal texts, and only those, share a key.
    assert len(set(keys.tolist())) == len(set(texts))
    assert {(t, k) for t, k in zip(texts, keys.tolist())} == set(zip(texts, keys.tolist()))
    # Every line's view, and ranges of every length from 0 to 14 (12 bytes fit in a view) at every place.
    both("split_views", raw, starts, ends - starts, np.zeros((lines, 4), np.uint32))
    for length in range(min(15, len(raw) + 1)):
        places = np.arange(len(raw) - length + 1, dtype=np.int64)
        lengths = np.full(len(places), length, dtype=np.int64)
        both("split_views", raw, places, lengths, np.zeros((len(places), 4), np.uint32))


@needs_compiled
@pytest.mark.parametrize("data", SPLIT_CASES, ids=range(len(SPLIT_CASES)))
def test_split_marks_the_same_lines(data):
    """Both implementations mark the lines that hold a needle: at either end of a line, never across two, a
    needle longer than some lines, one of several bytes, and the empty one, which every line holds."""
    raw = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(raw == 10).astype(np.int64)
    count = len(newlines)
    lines = count + (1 if (newlines[-1] + 1 if count else 0) < len(raw) else 0)
    starts, ends = np.zeros(lines, np.int64), np.zeros(lines, np.int64)
    accel.split_bounds(raw, newlines, count, starts, ends)
    every = np.arange(lines, dtype=np.int64)
    texts = [data[a:b] for a, b in zip(starts, ends)]
    for needles in (
        [b"a"],
        [b"line 2", b"\xc3\xa9t", b"y" * 41],
        [b"\n"],
        [b"xb", b"b\x00"],
        [b"zz", b""],
        [],
    ):
        blob = np.frombuffer(b"".join(needles), dtype=np.uint8)
        offsets = np.cumsum([0, *map(len, needles)], dtype=np.int64)
        for index in (every, every[::-1].copy(), every[1::3].copy()):
            marked = both("split_marked", raw, starts, ends, index, blob, offsets, np.zeros(len(index), bool))
            assert marked is None
            found = np.zeros(len(index), bool)
            accel.split_marked(raw, starts, ends, index, blob, offsets, found)
            assert found.tolist() == [any(n in texts[i] for n in needles) for i in index.tolist()]


@needs_compiled
def test_split_marks_a_needle_by_its_least_common_byte_at_either_end_of_a_line():
    """The compiled search looks for a needle by its least common byte (an uppercase letter or punctuation
    before a lowercase letter before a space), not its first: that byte near the line's start or end, where
    the needle cannot fit, never marks it, and the needle at either end does."""
    needles = [b" NCCL ", b"ab:", b"- Init "]
    lines = [
        b"NCCL x",  # the pivot byte where the needle would start before the line
        b"x NCCL",  # the needle cut at the end
        b" NCCL x",  # at the start
        b"a NCCL b",
        b":ab",  # the pivot byte first, the rest after it
        b"xxab:",  # at the end
        b"ab",
        b"- Ini",
        b"- Init x",
        b"",
        b"plain print, nothing: here",
    ]
    data = b"\n".join(lines) + b"\n"
    raw = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(raw == 10).astype(np.int64)
    starts, ends = np.zeros(len(lines), np.int64), np.zeros(len(lines), np.int64)
    accel.split_bounds(raw, newlines, len(newlines), starts, ends)
    blob = np.frombuffer(b"".join(needles), dtype=np.uint8)
    offsets = np.cumsum([0, *map(len, needles)], dtype=np.int64)
    index = np.arange(len(lines), dtype=np.int64)
    both("split_marked", raw, starts, ends, index, blob, offsets, np.zeros(len(lines), bool))
    found = np.zeros(len(lines), bool)
    accel.split_marked(raw, starts, ends, index, blob, offsets, found)
    texts = [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    assert found.tolist() == [any(n in text for n in needles) for text in texts]
    assert found.tolist() == [False, False, True, True, False, True, False, False, True, False, False]


def test_text_keys_tell_apart_texts_that_differ_in_length_or_trailing_zero_bytes():
    data = np.frombuffer(b"abcdefgh" + b"abcdefgh\0" + b"abcdefgh\0\0" + b"\0" * 9, dtype=np.uint8)
    starts = np.array([0, 8, 17, 0, 27, 27, 20], dtype=np.int64)
    ends = np.array([8, 17, 27, 0, 27, 28, 29], dtype=np.int64)
    keys = np.zeros(7, np.uint64)
    accel.split_keys(data, starts, ends, np.arange(7, dtype=np.int64), keys)
    assert keys[3] == keys[4] and len(set(keys.tolist())) == 6


# ------------------------------------------------------------------ keymap
@needs_compiled
def test_keymap_gives_the_same_tables():
    rng = np.random.default_rng(3)
    keys, slots = np.zeros(16, np.uint64), np.full(16, -1, np.int64)
    batch = (rng.integers(0, 40, 30).astype(np.uint64) << np.uint64(40)) | np.uint64(7)
    out = np.zeros(30, np.int64)
    done, count = both("keymap_ids", keys, slots, batch, 0, out, 0)  # stops when the table is half full
    COMPILED.keymap_ids(keys, slots, batch, 0, out, 0)
    bigger = np.zeros(64, np.uint64), np.full(64, -1, np.int64)
    both("keymap_rehash", keys, slots, *bigger)
    COMPILED.keymap_rehash(keys, slots, *bigger)
    both("keymap_ids", *bigger, batch, count, out, done)
    both("keymap_fill", np.zeros(32, np.uint64), np.full(32, -1, np.int64), np.unique(batch))
    both("keymap_fill", np.zeros(4, np.uint64), np.full(4, -1, np.int64), np.unique(batch))  # no room


# ------------------------------------------------------------------ digest
def _open_positions(positions: list[int], comms: list[int], calls: list[int], split: set[int]):
    """An open-position table of 4-rank communicators: position ``positions[p]`` of communicator
    ``comms[p]`` at slot p, called ``calls[p]`` times (4 closes it), divergent where p is in ``split``."""
    from nccl_logsift.accel.keymap import KeyMap

    n = len(positions)
    table = KeyMap(n)
    table.ids(_position_keys(positions, comms))
    position = np.array(positions, dtype=np.int64)
    aggregate = np.zeros((n, 8), dtype=np.int64)
    aggregate[:, 0], aggregate[:, 1], aggregate[:, 2] = comms, calls, 4  # COMM, CALLS, NRANKS
    aggregate[:, 4:8] = 7  # signatures and ops alike
    aggregate[sorted(split), 5] = 8  # SIG_MAX differs from SIG_MIN
    return table, position, aggregate


def _position_keys(positions, comms) -> np.ndarray:
    """The open table's keys (digest.c open_key: the communicator's slot above bit 44)."""
    return (np.array(comms, dtype=np.uint64) << np.uint64(44)) | np.array(positions, dtype=np.uint64)


def _fold_nothing(table, position, aggregate, communicators: int, limit: int) -> tuple:
    """digest_fold_positions' arguments for a batch of no call over the open positions given."""
    empty = np.zeros(0, dtype=np.int64)
    n = len(position)
    return (
        *(empty, empty, empty, n, n, empty, empty, empty, np.zeros(0, np.bool_)),
        *(communicators, 0, 0, limit, table.keys, table.slots, position, aggregate),
        *(np.zeros(1, np.int64), np.zeros((1, 16), np.int64), np.zeros(1, np.int64)),  # comm_of, ring, pushed
        *(np.zeros(communicators, np.bool_), np.zeros(communicators, np.uint64)),  # diverged, hashes
        *(np.zeros(0, np.bool_), np.zeros(0, np.bool_), np.zeros((communicators, 2), np.uint64)),
    )


@needs_compiled
@pytest.mark.parametrize("limit", [1, 3, 5, 9, 50])
def test_open_positions_past_the_limit_keep_the_highest_and_the_later_opened_of_equal_ones(limit):
    """A fold with no new call: closed and divergent positions go, and of those still open at most
    ``limit`` stay, the highest positions and, at the cut, the later opened; they move down in slot order
    and the table finds each at its new slot."""
    positions = [5, 9, 3, 9, 7, 9, 1, 12, 9, 4]
    comms = [0, 0, 0, 1, 0, 2, 0, 0, 3, 0]  # position 9 of four communicators
    calls = [1, 1, 4, 1, 1, 1, 1, 1, 1, 1]  # slot 2 closed
    split = {4}
    table, position, aggregate = _open_positions(positions, comms, calls, split)
    staying = [p for p in range(len(positions)) if calls[p] < 4 and p not in split]
    expected = sorted(sorted(staying, key=lambda p: (positions[p], p))[-limit:])
    args = _fold_nothing(table, position, aggregate, 4, limit)
    found, kept = both("digest_fold_positions", *args)
    assert found == 1  # the divergent position, at 7 of communicator 0
    COMPILED.digest_fold_positions(*args)
    assert kept == len(expected) and position[:kept].tolist() == [positions[p] for p in expected]
    assert aggregate[:kept, 0].tolist() == [comms[p] for p in expected]
    table.count = kept
    keys = _position_keys([positions[p] for p in expected], [comms[p] for p in expected])
    assert table.ids(keys).tolist() == list(range(kept)) and table.count == kept


@needs_compiled
def test_the_cut_keeps_the_same_positions_as_a_sort_would_on_random_tables():
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(1, 80))
        comms = rng.integers(0, 6, n)
        positions = rng.integers(0, 12, n)  # many equal positions, of different communicators
        pairs = sorted(set(zip(comms.tolist(), positions.tolist())))  # a key is held once
        order = rng.permutation(len(pairs))
        comms = [pairs[k][0] for k in order]
        positions = [pairs[k][1] for k in order]
        calls = rng.integers(1, 5, len(pairs)).tolist()
        split = {p for p in range(len(pairs)) if rng.random() < 0.1}
        limit = int(rng.integers(1, len(pairs) + 3))
        table, position, aggregate = _open_positions(positions, comms, calls, split)
        staying = [p for p in range(len(pairs)) if calls[p] < 4 and p not in split]
        expected = sorted(sorted(staying, key=lambda p: (positions[p], p))[-limit:])
        args = _fold_nothing(table, position, aggregate, 6, limit)
        _, kept = both("digest_fold_positions", *args)
        COMPILED.digest_fold_positions(*args)
        assert position[:kept].tolist() == [positions[p] for p in expected]
        assert aggregate[:kept, 0].tolist() == [comms[p] for p in expected]


@needs_compiled
def test_a_fold_that_closes_nothing_keeps_every_position_at_its_slot():
    """(Its table is not rebuilt then.) A limit below one position is refused."""
    table, position, aggregate = _open_positions([3, 1, 2], [0, 0, 0], [1, 1, 1], set())
    args = _fold_nothing(table, position, aggregate, 1, 10)
    assert both("digest_fold_positions", *args) == (0, 3)
    COMPILED.digest_fold_positions(*args)
    assert position.tolist() == [3, 1, 2]
    assert table.ids(_position_keys([3, 1, 2], [0, 0, 0])).tolist() == [0, 1, 2] and table.count == 3
    refused = _fold_nothing(table, position, aggregate, 1, 0)
    assert both("digest_fold_positions", *refused)[0] is ValueError
    with pytest.raises(ValueError, match="at least one position"):
        COMPILED.digest_fold_positions(*args[:12], 0, *args[13:])


# ------------------------------------------------------------------ calls
@needs_compiled
def test_call_keys_and_signatures_are_the_same():
    rng = np.random.default_rng(4)
    n = 200
    op = rng.integers(-1, 9, n).astype(np.int32)
    count, datatype, redop, root = (rng.integers(-(1 << 62), 1 << 62, n) for _ in range(4))
    both("calls_signatures", op, count, datatype, redop, root, np.zeros(n, np.int64))
    process, comm = (rng.integers(0, 1 << 63, n).astype(np.uint64) * np.uint64(3) for _ in range(2))
    both("calls_instance_keys", process, comm, np.zeros(n, np.uint64))
    for seq in ([], [5], [1, 1, 2], [2, 1], [-(1 << 63), 1 << 62]):
        both("calls_ascending", np.array(seq, dtype=np.int64))


# ------------------------------------------------------------------ collscan
LINE = (
    b"gpu7:31842:31842 [3] NCCL INFO AllReduce: opCount 1a4 sendbuff 0x7f3a1c000000 recvbuff (nil) count "
    b"4194304 datatype 7 op 0 root -1 comm 0x55d2e4b1a6c0 [nranks=16] stream 0x55d2e3f0c900"
)
COLL_LINES = [
    LINE,
    LINE.replace(b"opCount 1a4", b"opCount 7fffffffffffffff"),
    LINE.replace(b"opCount 1a4", b"opCount 8000000000000000"),  # beyond int64
    LINE.replace(b"opCount 1a4", b"opCount 1A4"),
    LINE.replace(b"opCount 1a4", b"opCount 00000000000000001"),  # 17 digits
    LINE.replace(b"count 4194304", b"count 000000000000000000000000004194304"),
    LINE.replace(b"count 4194304", b"count 9223372036854775807"),
    LINE.replace(b"count 4194304", b"count 9223372036854775808"),
    LINE.replace(b"count 4194304", b"count 123456789012345678"),
    LINE.replace(b"count 4194304", b"count 1234567890123456789"),
    LINE.replace(b"root -1", b"root -9223372036854775808"),
    LINE.replace(b"root -1", b"root -9223372036854775809"),
    LINE.replace(b"root -1", b"root -0"),
    LINE.replace(b"root -1", b"root -"),
    LINE.replace(b"root -1", b"root --1"),
    LINE.replace(b"op 0 root", b"op -1 root"),
    LINE.replace(b"comm 0x55d2e4b1a6c0", b"comm (nil)"),
    LINE.replace(b"stream 0x55d2e3f0c900", b"stream (nil)"),
    LINE.replace(b"stream 0x55d2e3f0c900", b"stream 0x"),
    LINE.replace(b"stream 0x55d2e3f0c900", b"stream 0x12345678901234567"),
    LINE.replace(b"[nranks=16]", b"[nranks=]"),
    LINE.replace(b"[nranks=16]", b"[nranks=16"),
    LINE.replace(b"[nranks=16]", b"[nranks=\xd9\xa1]"),  # a digit of another script
    LINE.replace(b"AllReduce:", b"All-Reduce:"),
    LINE.replace(b"AllReduce:", b":"),
    LINE + b" ",
    LINE + b" task 0",
    LINE[:-1],
    LINE[: LINE.index(b"stream") - 1],
    b"\x1b[32m" + LINE,
    b"noise NCCL INFO x" + LINE,
    b"x NCCL INFO " + LINE[LINE.index(b"AllReduce") :],
    LINE.replace(b"gpu7:31842:31842 [3] ", b""),
    LINE.replace(b"gpu7:31842:31842 [3]", b"gpu7:31842:31843 [0]").replace(b"AllReduce", b"Send"),
    b" NCCL INFO ",
    b" NCCL INFO x",
    b"",
]


def spans(lines: list[bytes]) -> tuple[ByteView, np.ndarray, np.ndarray]:
    view = ByteView(b"\n".join(lines) + b"\n")
    lengths = np.array([len(line) for line in lines], dtype=np.int64)
    starts = np.cumsum(np.r_[0, lengths[:-1] + 1]).astype(np.int64)
    return view, starts, starts + lengths


@needs_compiled
def test_the_coll_scan_takes_the_same_lines_and_reads_the_same_values():
    view, starts, ends = spans(COLL_LINES)
    # Room for one string each at first (the scan adds what it meets while there is room); every op collides.
    prefixes, ops = ByteTable(slots=2), ByteTable(slots=2, hash_mask=0)
    # Lines outside the data are skipped.
    starts, ends = np.r_[starts, -1, 0].astype(np.int64), np.r_[ends, 5, len(view.raw) + 1].astype(np.int64)
    for _ in range(2):  # with empty tables, then with the strings of the first scan added
        outputs = collscan.outputs(len(starts))
        taken = both(
            "collscan_scan", view.raw, view.words, starts, ends, prefixes.arrays, ops.arrays, *outputs
        )
        assert 0 < taken < len(COLL_LINES)
        COMPILED.collscan_scan(view.raw, view.words, starts, ends, prefixes.arrays, ops.arrays, *outputs)
        integers, _, _, ids = (output[:, :taken] for output in outputs)
        rows = integers[collscan.LINE]
        for table, first, last, row in (
            (prefixes, starts[rows], integers[collscan.PREFIX_STOP], collscan.PREFIX_ID),
            (ops, integers[collscan.OP_START], integers[collscan.OP_STOP], collscan.OP_ID),
        ):
            missing = ids[row] < 0
            table.make_room(int(missing.sum()), int((last - first)[missing].sum()))
            both("collscan_add", table.arrays, view.raw, view.words, first, last, ids[row].copy())
            both("collscan_find", table.arrays, view.raw, view.words, first, last, ids[row].copy())
            table.add(view.raw, view.words, first, last, ids[row].copy())
    unpadded = np.frombuffer(view.raw.tobytes(), dtype=np.uint8)  # its words view is not the data's
    outputs = collscan.outputs(len(starts))
    both(
        "collscan_scan", unpadded, view.words, starts, ends, prefixes.arrays, ops.arrays, *outputs, columns=0
    )
    both("collscan_rehash", np.full(32, -1, np.int32), prefixes.hashes, len(prefixes))
    both("collscan_rehash", np.full(2, -1, np.int32), prefixes.hashes, len(prefixes))  # too small


TRANSPORT = b"gpu7:31842:31899 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/CUMEM/read"
TRANSPORT_LINES = [
    TRANSPORT,
    TRANSPORT.replace(b"02/0", b"02"),
    TRANSPORT.replace(b"Channel", b"Ring"),
    TRANSPORT.replace(b"3[3] -> 4[4]", b"3[1b000] -> 4[3d000]"),
    TRANSPORT.replace(b"3[3] -> 4[4]", b"3 -> 4"),
    TRANSPORT.replace(b"3[3] -> 4[4]", b"3[1B000] -> 4[4]"),  # the grammar's hex is lowercase
    TRANSPORT.replace(b"3[3] -> 4[4]", b"3[] -> 4[4]"),
    TRANSPORT.replace(b"3[3] -> 4[4]", b"3[3 -> 4[4]"),
    TRANSPORT.replace(b"3[3] -> 4[4] via P2P/CUMEM/read", b"0[0] -> 8[0] [receive] via NET/IB/0/GDRDMA"),
    TRANSPORT.replace(b"02/0", b"1234567890123456789"),  # 19 digits: the general parser's
    TRANSPORT.replace(b"02/0", b"123456789012345678"),
    TRANSPORT.replace(b"02/0", b"\xd9\xa1"),  # a digit of another script
    TRANSPORT.replace(b"02/0 :", b"02/0:"),
    TRANSPORT.replace(b" -> ", b" ->"),
    TRANSPORT.replace(b"read", b"r\xc3\xa9ad"),  # not ASCII
    TRANSPORT.replace(b"read", b"re\x1bad"),
    TRANSPORT + b" " * 300,  # a tail longer than the scan keeps
    TRANSPORT.replace(b" via P2P/CUMEM/read", b""),
    TRANSPORT.replace(b" via P2P/CUMEM/read", b"via"),
    TRANSPORT.replace(b" via P2P/CUMEM/read", b" "),
    b"\x1b[32m" + TRANSPORT,
    b"x NCCL INFO y" + TRANSPORT,  # the message after the first " NCCL INFO " is not one
    TRANSPORT.replace(b"gpu7:31842:31899 [3] ", b""),
    TRANSPORT.replace(b"Channel 02/0 : 3[3] -> 4[4]", b"Channel 00/02 :    0   1   2   3"),
    TRANSPORT.replace(b"Channel 02/0 : 3[3] -> 4[4] via P2P/CUMEM/read", b"Ring 00 : 3 -> 0 -> 1"),
    b" NCCL INFO Channel 0 : 0 -> 1 x",
    b" NCCL INFO Channel 0",
    b"",
]


@needs_compiled
@pytest.mark.parametrize("room", [0, 1, 2, 100])
def test_the_coll_scan_numbers_the_same_strings_whatever_room_its_tables_have(room):
    """The scan adds the prefixes and op names it meets while its tables have room; collscan_add numbers the
    rest afterwards, in line order: the ids and the tables are the same however much room there was."""
    lines = [LINE.replace(b"gpu7:31842:31842", b"gpu7:3184%d:3184%d" % (n % 3, n % 3)) for n in range(9)]
    lines += [line.replace(b"AllReduce", b"Send") for line in lines[::2]]
    view, starts, ends = spans(lines)
    found = []
    for implementation in (fallback, COMPILED):
        prefixes, ops = ByteTable(slots=2), ByteTable(slots=2)
        prefixes.make_room(room, 40 * room)
        ops.make_room(room, 10 * room)
        outputs = collscan.outputs(len(starts))
        taken = implementation.collscan_scan(
            view.raw, view.words, starts, ends, prefixes.arrays, ops.arrays, *outputs
        )
        assert taken == len(lines)
        integers, _, _, ids = (output[:, :taken] for output in outputs)
        first = starts[integers[collscan.LINE]]
        op_start, op_stop = integers[collscan.OP_START], integers[collscan.OP_STOP]
        prefixes.add(view.raw, view.words, first, integers[collscan.PREFIX_STOP], ids[collscan.PREFIX_ID])
        ops.add(view.raw, view.words, op_start, op_stop, ids[collscan.OP_ID])
        found.append((ids.tolist(), prefixes.strings(0, len(prefixes)), ops.strings(0, len(ops))))
    assert found[0] == found[1]
    ids, prefix_texts, op_texts = found[0]
    assert ids[collscan.PREFIX_ID] == [n % 3 for n in range(9)] + [0, 2, 1, 0, 2]
    assert ids[collscan.OP_ID] == [0] * 9 + [1] * 5
    assert prefix_texts == [b"gpu7:3184%d:3184%d [3]" % (n, n) for n in range(3)]
    assert op_texts == [b"AllReduce", b"Send"]


@needs_compiled
def test_the_transport_scan_takes_the_same_lines_and_reads_the_same_values():
    view, starts, ends = spans(TRANSPORT_LINES)
    tables = {"prefixes": ByteTable(slots=2), "tails": ByteTable(hash_mask=0), "devs": ByteTable()}
    # Lines outside the data, and rows outside the lines, are skipped.
    starts, ends = np.r_[starts, -1, 0].astype(np.int64), np.r_[ends, 5, len(view.raw) + 1].astype(np.int64)
    rows = np.r_[np.arange(len(starts)), -1, len(starts)].astype(np.int64)
    arrays = [table.arrays for table in tables.values()]
    for _ in range(2):  # with empty tables, then with the strings of the first scan added
        outputs = collscan.transport_outputs(len(rows))
        taken = both("collscan_transports", view.raw, view.words, starts, ends, rows, *arrays, *outputs)
        assert taken == 10  # the tails the grammar refuses too (" ", " -> 1", " x"): it reads them later
        COMPILED.collscan_transports(view.raw, view.words, starts, ends, rows, *arrays, *outputs)
        integers, ids = (output[:, :taken] for output in outputs)
        lines = integers[collscan.T_LINE]
        for table, first, last, row in (
            (tables["prefixes"], starts[lines], integers[collscan.T_PREFIX_STOP], collscan.T_PREFIX_ID),
            (tables["tails"], integers[collscan.T_TAIL_START], ends[lines], collscan.T_TAIL_ID),
            (tables["devs"], integers[collscan.T_FROM_DEV_START], integers[collscan.T_FROM_DEV_STOP], 2),
        ):
            bracketed = first >= 0
            first, last, found = first[bracketed], last[bracketed], ids[row][bracketed].copy()
            missing = found < 0
            table.make_room(int(missing.sum()), int((last - first)[missing].sum()))
            table.add(view.raw, view.words, first, last, found)
        arrays = [table.arrays for table in tables.values()]
    assert list(integers[collscan.T_CONN]) == [0, -1, 0, 0, 0, 0, -1, 0, -1, -1]
    unpadded = np.frombuffer(view.raw.tobytes(), dtype=np.uint8)  # its words view is not the data's
    outputs = collscan.transport_outputs(len(rows))
    both("collscan_transports", unpadded, view.words, starts, ends, rows, *arrays, *outputs, columns=0)
    refused = both(
        "collscan_transports",
        view.raw,
        view.words,
        starts,
        ends,
        rows,
        *arrays,
        outputs[0],
        outputs[1][:3],
        columns=0,
    )
    assert refused[0] is ValueError


# ------------------------------------------------------------------ refusals (tests/test_kernels.py's)
@needs_compiled
def test_both_refuse_the_same_arguments_with_the_same_message():
    keys, slots = np.zeros(16, np.uint64), np.full(16, -1, np.int64)
    out, batch = np.zeros(3, np.int64), np.arange(3, dtype=np.uint64)
    readonly = np.zeros(3, np.int64)
    readonly.flags.writeable = False
    for args in (
        (keys, slots, np.arange(3, dtype=np.int64), 0, out, 0),
        (keys, slots, np.arange(6, dtype=np.uint64)[::2], 0, out, 0),
        (keys, slots, batch, 0, readonly, 0),
        (keys, slots, batch, "0", out, 0),
        (keys, slots, batch, 1 << 70, out, 0),
        (keys, slots),
        (keys, slots, np.arange(4, dtype=np.uint64), 0, out, 0),
        (keys[:3], slots[:3], batch, 0, out, 0),
        (keys.reshape(4, 4), slots, batch, 0, out, 0),
        (b"not an array", slots, batch, 0, out, 0),
    ):
        both("keymap_ids", *args)
    data = np.frombuffer(b"a\nb\n", dtype=np.uint8)
    both("split_bounds", data, np.array([1, 3]), 2, np.zeros(1, np.int64), np.zeros(1, np.int64))
    both("split_last_newline", data, 0, 5)
    both("split_last_newline", data, np.uint32(0), np.int16(3))
    both("split_next_newline", data, np.int64(2))
    both("split_next_newline", b"a\nb\n", -1)
    both("split_newlines", data, np.zeros(64, np.int64), 3, 0, 0, False)
    both("split_newlines", data, np.zeros(64, np.int64), 0, 0, -1, False)
    one = np.zeros(1, np.uint64)
    both("split_keys", data, np.array([0]), np.array([1]), np.array([1]), one)
    both("split_keys", data, np.array([3]), np.array([9]), np.array([0]), one)
    both("split_keys", data, np.array([2]), np.array([1]), np.array([0]), one)
    both("split_keys", data, np.array([0]), np.array([1]), np.array([0]), np.zeros(2, np.uint64))
    needles, offsets, mark = np.frombuffer(b"ab", np.uint8), np.array([0, 1, 2]), np.zeros(1, bool)
    line = (np.array([0]), np.array([1]), np.array([0]))
    for starts, ends, index, bounds, marked in (
        (*line, offsets, mark),
        (np.array([0]), np.array([1]), np.array([1]), offsets, mark),  # no such line
        (np.array([3]), np.array([9]), np.array([0]), offsets, mark),  # past the data
        (*line, np.array([0, 1]), mark),  # bounds short of the needles
        (*line, np.array([0, 2, 1, 2]), mark),  # bounds out of order
        (*line, np.array([1, 2]), mark),  # not from 0
        (*line, np.zeros(0, np.int64), mark),
        (*line, offsets, np.zeros(2, bool)),
        (*line, offsets, np.zeros(1, np.uint8)),
    ):
        both("split_marked", data, starts, ends, index, needles, bounds, marked)
    views = np.zeros((1, 4), np.uint32)
    both("split_views", data, np.array([0]), np.array([4]), views)
    both("split_views", data, np.array([1]), np.array([4]), views)  # past the data
    both("split_views", data, np.array([-1]), np.array([1]), views)
    both("split_views", data, np.array([0]), np.array([-1]), views)
    both("split_views", data, np.array([0]), np.array([1]), np.zeros((2, 4), np.uint32))
    both("split_views", data, np.array([0]), np.array([1]), np.zeros((1, 3), np.uint32))
    both("split_views", data, np.array([0]), np.array([1]), np.zeros((1, 4), np.int32))
    both("split_views", data, np.array([0]), np.array([1]), np.zeros(4, np.uint32))
    view, starts, stops = spans([b"x" * 100])
    table = ByteTable()
    both("collscan_find", table.arrays, view.raw, view.words, starts, stops + 1, np.zeros(1, np.int32))
    both("collscan_find", table.arrays, view.raw, view.words, starts, stops, np.zeros(1, np.int64))
    both("collscan_find", table.arrays[:5], view.raw, view.words, starts, stops, np.zeros(1, np.int32))
    both("collscan_add", table.arrays, view.raw, view.words, starts, stops, np.full(1, -1, np.int32))


# ------------------------------------------------------------------ a whole analysis, recorded and replayed
class Recorder:
    """Each compiled entry point's calls through the facade, with a copy of their arguments."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[str, tuple]] = []
        for name in accel.ENTRY_POINTS:
            monkeypatch.setattr(accel, name, self._recording(name, getattr(COMPILED, name)))

    def _recording(self, name, function):
        def call(*args):
            self.calls.append((name, copied(args)))
            return function(*args)

        return call


def findings(path: Path) -> str:
    return render_json(analyze([str(path)], views=False))


@needs_compiled
@pytest.mark.parametrize("name", ["collective_mismatch_4ranks.log", "rank_stall_8ranks.log"])
def test_the_pure_python_loops_give_the_same_findings_and_outputs(monkeypatch, name):
    """The findings JSON of a fixture, byte for byte, with the compiled loops and with the pure-Python
    ones (the facade's names pointed at them, as LOGSIFT_PURE_PYTHON=1 does); and every call the analysis
    made, replayed on both, leaves the same arrays."""
    path = FIXTURES / name
    with monkeypatch.context() as patched:
        recorder = Recorder(patched)
        native = findings(path)
    assert {name for name, _ in recorder.calls} >= {"collscan_scan", "calls_number", "digest_fold_positions"}
    for name, args in recorder.calls:
        both(name, *args)
    for name in accel.ENTRY_POINTS:
        monkeypatch.setattr(accel, name, getattr(fallback, name))
    assert findings(path) == native
    assert json.loads(native)["findings"]


def test_padding_is_what_the_words_view_needs():
    """The C loops read up to 8 bytes past a string through ``words``: ByteView and padded() give them."""
    view = ByteView(b"abc")
    assert len(view.words) == len(view.raw) + 8
    assert view.words.__array_interface__["data"][0] == view.raw.ctypes.data
    assert len(padded(5)) == 5


def test_version_says_when_the_loops_are_pure_python():
    pure = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, accel.PURE_PYTHON_VARIABLE: "1"},
        timeout=60,
    )
    assert pure.returncode == 0 and pure.stdout.endswith(" (pure-Python loops: several times slower)\n")
