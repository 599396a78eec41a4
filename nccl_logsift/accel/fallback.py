"""The compiled loops in pure Python: each entry point of ``csrc/`` with the same arguments, the same checks
and the same results, for where the extension was not built (and ``LOGSIFT_PURE_PYTHON=1``).

Each function mirrors the C function of the same name, read line by line: the arrays it takes (type,
layout, writability, sizes, refused with the same exception and message), what it writes into them and what
it returns, so a caller cannot tell the two apart except by speed. Hashes are the C ones, computed on
Python integers masked to 64 bits, so tables and keys hold the same values bit for bit. Loops whose steps
depend on each other (numbering, the digest's fold, the hash tables) stay loops; where every element is
independent the work is done with numpy. ``tests/test_accel.py`` runs both on the same inputs.

The C code reads the bytes of a line eight at a time through a padded ``words`` view and masks off what
lies past the line; here a line is a ``bytes`` slice, so nothing past it is read at all (the C loops
refuse, or ignore, every value that would reach past the line, so the results agree).
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from typing import Any

import numpy as np

M64 = (1 << 64) - 1
INT64_MAX = (1 << 63) - 1
INT64_MIN = -(1 << 63)
EMPTY = -1  # a free place of a key table (keymap.h), of a string table's slots (collscan.c EMPTY_ID)


# ------------------------------------------------------------------ arguments (arrays.h)
_BOOL, _U8, _I32, _U32, _I64, _U64 = "bool", "uint8", "int32", "uint32", "int64", "uint64"
_WORDS = "uint64 words"
_CODES = {_BOOL: "?", _U8: "B", _I32: "il", _U32: "IL", _I64: "lq", _U64: "LQ", _WORDS: "LQ"}
_SIZES = {_BOOL: 1, _U8: 1, _I32: 4, _U32: 4, _I64: 8, _U64: 8, _WORDS: 8}


def _take(value: Any, name: str, kind: str, ndim: int = 1, writable: bool = False) -> np.ndarray:
    """``value`` as an array of ``kind`` (arrays.h ``take``), refused as the C code refuses it."""
    layout = "" if kind == _WORDS else "writable, C-contiguous " if writable else "C-contiguous "
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"{name}: expected a {layout}{kind} array") from None
    if (kind != _WORDS and not view.c_contiguous) or (writable and view.readonly):
        raise TypeError(f"{name}: expected a {layout}{kind} array")
    code = view.format[1:] if view.format[:1] in ("@", "=", "<") else view.format
    shaped = view.ndim == ndim and len(code) == 1 and code in _CODES[kind] and view.itemsize == _SIZES[kind]
    if shaped and kind == _WORDS:
        shaped = view.strides[0] == 1
    if not shaped:
        raise TypeError(f"{name}: expected a {ndim}-D {kind} array (got {view.ndim}-D, format {view.format})")
    return value if isinstance(value, np.ndarray) else np.asarray(view)


def _int(value: Any, name: str) -> int:
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer") from None
    if not INT64_MIN <= number <= INT64_MAX:
        raise OverflowError("int too big to convert")
    return number


def _uint(value: Any, name: str) -> int:
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an integer") from None
    if number < 0:
        raise OverflowError("can't convert negative int to unsigned")
    if number > M64:
        raise OverflowError("int too big to convert")
    return number


def _bad(function: str, what: str) -> ValueError:
    return ValueError(f"{function}(): {what}")


def _entry(count: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """An entry point of ``count`` positional arguments, refused by number as the C code refuses it."""

    def wrap(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def entry(*args: Any) -> Any:
            if len(args) != count:
                raise TypeError(f"{function.__name__}() takes {count} arguments ({len(args)} given)")
            return function(*args)

        return entry

    return wrap


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _signed(value: int) -> int:
    """A 64-bit pattern as int64."""
    return value - (1 << 64) if value > INT64_MAX else value


# ------------------------------------------------------------------ split.c
_STEP = 32
_BLOCK = 1 << 14
_NEWLINE = 0x0A
_TRIMMED = np.array([0x20, 0x09, 0x0D, 0x00, 0xBD], dtype=np.uint8)  # what may end a line's text


def _or_words(block: np.ndarray) -> int:
    """The OR of the little-endian words of ``block`` (a multiple of 8 bytes long)."""
    if not len(block):
        return 0
    return int.from_bytes(np.bitwise_or.reduce(block.reshape(-1, 8), axis=0).tobytes(), "little")


@_entry(6)
def split_newlines(data, newlines, at, count, high, nul):
    """(at, count, high, nul): the newlines of data[at:] into newlines[count:], stopping at a block that
    might not fit; ``high`` ORs every byte in, ``nul`` says whether one is NUL."""
    data = _take(data, "data", _U8)
    newlines = _take(newlines, "newlines", _I64, writable=True)
    at, count, high, nul = _int(at, "at"), _int(count, "count"), _uint(high, "high"), bool(_int(nul, "nul"))
    if not (at >= 0 and at % _STEP == 0 and 0 <= count <= len(newlines)):
        raise _bad("split_newlines", "at must be a multiple of 32 and count within newlines")
    size, room = len(data), len(newlines)
    whole = size - size % _STEP
    while at < whole and count + _BLOCK <= room:
        stop = min(at + _BLOCK, whole)
        block = data[at:stop]
        found = np.flatnonzero(block == _NEWLINE)
        newlines[count : count + len(found)] = found + at
        count += len(found)
        high |= _or_words(block)
        nul = nul or not block.all()
        at = stop
    if at >= whole and count + _STEP <= room:
        tail = data[at:size]
        found = np.flatnonzero(tail == _NEWLINE)
        newlines[count : count + len(found)] = found + at
        count += len(found)
        if len(tail):
            high |= int(np.bitwise_or.reduce(tail))
            nul = nul or not tail.all()
        at = max(at, size)
    return at, count, high, nul


@_entry(5)
def split_bounds(data, newlines, count, starts, ends):
    """Each line's start and end, less the blanks, NULs and U+FFFD at its ends; returns the NULs left out."""
    data = _take(data, "data", _U8)
    newlines = _take(newlines, "newlines", _I64)
    count = _int(count, "count")
    starts = _take(starts, "starts", _I64, writable=True)
    ends = _take(ends, "ends", _I64, writable=True)
    size = len(data)
    last = int(newlines[count - 1]) + 1 if 0 < count <= len(newlines) else 0
    lines = count + (1 if last < size else 0)
    if count < 0 or count > len(newlines) or len(starts) != lines or len(ends) != lines:
        raise _bad("split_bounds", "starts and ends must have a place for each line")
    if not lines:
        return 0
    stop = np.empty(lines, dtype=np.int64)
    stop[:count] = newlines[:count]
    stop[count:] = size
    start = np.empty(lines, dtype=np.int64)
    start[0] = 0
    start[1:] = stop[:-1] + 1
    starts[:] = start
    ends[:] = stop
    # Most lines have nothing to trim: only those that start with NUL or end in a byte that may be trimmed
    # are walked, as the C loop walks every line.
    filled = np.flatnonzero(stop > start)
    work = filled[(data[start[filled]] == 0) | np.isin(data[stop[filled] - 1], _TRIMMED)]
    nul = 0
    for line in work.tolist():
        begin, end = int(start[line]), int(stop[line])
        first, to = begin, end
        while first < to and data[first] == 0:
            first += 1
        nul += first - begin
        while True:
            byte = int(data[to - 1]) if to > first else 0xFF
            if byte in (0x20, 0x09, 0x0D, 0x00):
                nul += byte == 0
                to -= 1
            elif byte == 0xBD and to - first >= 3 and data[to - 2] == 0xBF and data[to - 3] == 0xEF:
                to -= 3
            else:
                break
        starts[line], ends[line] = first, to
    return nul


_WINDOW = 1 << 12  # bytes searched at a time for one newline, doubled on each miss


@_entry(3)
def split_last_newline(data, start, stop):
    """Where the last newline of data[start:stop] is, or -1."""
    data = _take(data, "data", _U8)
    start, stop = _int(start, "start"), _int(stop, "stop")
    if not (start >= 0 and stop <= len(data)):
        raise _bad("split_last_newline", "the range is outside the data")
    window = _WINDOW
    while stop > start:
        low = max(start, stop - window)
        found = np.flatnonzero(data[low:stop] == _NEWLINE)
        if len(found):
            return low + int(found[-1])
        stop, window = low, 2 * window
    return -1


@_entry(2)
def split_next_newline(data, start):
    """Where the first newline at or after start is, or -1."""
    data = _take(data, "data", _U8)
    start = _int(start, "start")
    if start < 0:
        raise _bad("split_next_newline", "start is negative")
    window = _WINDOW
    while start < len(data):
        found = np.flatnonzero(data[start : start + window] == _NEWLINE)
        if len(found):
            return start + int(found[0])
        start, window = start + window, 2 * window
    return -1


def _text_key(text: bytes) -> int:
    """The key of one line's text (split.c's ``text_key``)."""
    odd, state = 0x9E3779B97F4A7C15, 0x243F6A8885A308D3
    for at in range(0, len(text), 8):
        mixed = state ^ ((int.from_bytes(text[at : at + 8], "little") * odd) & M64)
        state = ((((mixed << 27) | (mixed >> 37)) & M64) * 0xC2B2AE3D27D4EB4F) & M64
    state ^= len(text)
    state ^= state >> 33
    state = (state * 0xFF51AFD7ED558CCD) & M64
    state ^= state >> 33
    state = (state * 0xC4CEB9FE1A85EC53) & M64
    return state ^ (state >> 33)


def _ranges_named(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, index: np.ndarray) -> bool:
    """Whether ``starts`` and ``ends`` pair up and each line ``index`` names is a range of ``data``
    (split.c ``ranges_named``)."""
    if len(starts) != len(ends):
        return False
    if not len(index):
        return True
    if not (index.min() >= 0 and index.max() < len(starts)):
        return False
    s, e = starts[index], ends[index]
    return bool((s >= 0).all() and (s <= e).all() and (e <= len(data)).all())


@_entry(5)
def split_keys(data, starts, ends, index, keys):
    """keys[k] = the key of data[starts[i]:ends[i]], i = index[k]."""
    data = _take(data, "data", _U8)
    starts, ends = _take(starts, "starts", _I64), _take(ends, "ends", _I64)
    index, keys = _take(index, "index", _I64), _take(keys, "keys", _U64, writable=True)
    if not (len(keys) == len(index) and _ranges_named(data, starts, ends, index)):
        raise _bad("split_keys", "index, starts and ends must name ranges of the data, one key each")
    raw = data.tobytes()
    for k, i in enumerate(index.tolist()):
        keys[k] = _text_key(raw[starts[i] : ends[i]])


@_entry(7)
def split_marked(data, starts, ends, index, needles, offsets, marked):
    """marked[k] = whether data[starts[i]:ends[i]], i = index[k], holds one of the needles
    needles[offsets[j]:offsets[j+1]] (an empty one is in every line)."""
    data = _take(data, "data", _U8)
    starts, ends = _take(starts, "starts", _I64), _take(ends, "ends", _I64)
    index, needles = _take(index, "index", _I64), _take(needles, "needles", _U8)
    offsets, marked = _take(offsets, "offsets", _I64), _take(marked, "marked", _BOOL, writable=True)
    ok = len(marked) == len(index) and len(offsets) >= 1
    ok = ok and offsets[0] == 0 and offsets[-1] == len(needles) and bool((np.diff(offsets) >= 0).all())
    if not (ok and _ranges_named(data, starts, ends, index)):
        raise _bad(
            "split_marked",
            "index, starts and ends must name ranges of the data, one mark each, and offsets the needles'"
            " bounds",
        )
    raw, blob = data.tobytes(), needles.tobytes()
    found = [blob[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    for k, i in enumerate(index.tolist()):
        line = raw[starts[i] : ends[i]]
        marked[k] = any(needle in line for needle in found)


_INLINE = 12  # bytes an Arrow string view holds in itself


@_entry(4)
def split_views(data, starts, lengths, views):
    """views[k] = the Arrow string view of data[starts[k]:starts[k]+lengths[k]]: its length, then its bytes
    when they fit in 12 (zero-padded), else their first four, buffer 0 and the offset."""
    data = _take(data, "data", _U8)
    starts, lengths = _take(starts, "starts", _I64), _take(lengths, "lengths", _I64)
    views = _take(views, "views", _U32, ndim=2, writable=True)
    ok = len(starts) == len(lengths) == len(views) and views.shape[1] == 4 and len(data) <= (1 << 31) - 1
    if ok and len(starts):
        ok = bool((starts >= 0).all() and (lengths >= 0).all() and (lengths <= len(data) - starts).all())
    if not ok:
        raise _bad("split_views", "starts and lengths must name ranges of the data, one row of 4 views each")
    if not len(starts):
        return
    # Each range's first 12 bytes (zeros past its end), from a copy of the data with 12 zero bytes behind it.
    padded = np.zeros(len(data) + _INLINE, dtype=np.uint8)
    padded[: len(data)] = data
    head = padded[starts[:, None] + np.arange(_INLINE)]
    head[np.arange(_INLINE) >= lengths[:, None]] = 0
    words = head.view("<u4")
    inline = lengths <= _INLINE
    views[:, 0] = lengths
    views[:, 1] = words[:, 0]
    views[:, 2] = np.where(inline, words[:, 1], 0)
    views[:, 3] = np.where(inline, words[:, 2], starts)


# ------------------------------------------------------------------ keymap.h, keymap.c
def _home(key: int, mask: int) -> int:
    """SplitMix64's finaliser of ``key``, masked."""
    z = (key + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return (z ^ (z >> 31)) & mask


_U = np.uint64


def _mix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """keymap.h ``mix`` of two uint64 columns, element by element (numpy's uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        z = (a * _U(0xBF58476D1CE4E5B9)) ^ (b + _U(0x9E3779B97F4A7C15))
        z = (z ^ (z >> _U(30))) * _U(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U(27))) * _U(0x94D049BB133111EB)
        return z ^ (z >> _U(31))


class _KeyTable:
    """A key table's two arrays (keymap.h ``KeyTable``)."""

    __slots__ = ("keys", "mask", "size", "slots")

    def __init__(self, keys: np.ndarray, slots: np.ndarray):
        self.keys, self.slots, self.size = keys, slots, len(keys)
        self.mask = self.size - 1

    def probe(self, key: int) -> int:
        """Where ``key`` is, or the empty place where it would go."""
        at = _home(key, self.mask)
        keys, slots, mask = self.keys, self.slots, self.mask
        while slots[at] != EMPTY and int(keys[at]) != key:
            at = (at + 1) & mask
        return at

    def find(self, key: int) -> int:
        return int(self.slots[self.probe(key)])

    def find_or_add(self, key: int, new_slot: int) -> int:
        at = self.probe(key)
        if self.slots[at] == EMPTY:
            self.keys[at] = key
            self.slots[at] = new_slot
        return int(self.slots[at])

    def full(self, count: int) -> bool:
        return 2 * (count + 1) > self.size


def _take_table(keys: Any, slots: Any, name: str) -> _KeyTable:
    keys, slots = _take(keys, name, _U64, writable=True), _take(slots, name, _I64, writable=True)
    length = len(keys)
    if length != len(slots) or length < 1 or length & (length - 1):
        raise _bad(name, "a key table's keys and slots must have the same power-of-two length")
    return _KeyTable(keys, slots)


@_entry(6)
def keymap_ids(keys, slots, batch, count, out, done):
    """(done, count): the slot of each key of batch[done:] into out, new keys numbered from count; stops
    before a new key that the full table cannot take."""
    table = _take_table(keys, slots, "keys")
    batch = _take(batch, "batch", _U64)
    count = _int(count, "count")
    out = _take(out, "out", _I64, writable=True)
    done = _int(done, "done")
    if not (len(out) >= len(batch) and done >= 0):
        raise _bad("keymap_ids", "out is shorter than the batch")
    found = []
    i = done
    for key in batch[done:].tolist():
        at = table.probe(key)
        if table.slots[at] == EMPTY:
            if table.full(count):
                break
            table.keys[at] = key
            table.slots[at] = count
            count += 1
        found.append(int(table.slots[at]))
        i += 1
    out[done:i] = found
    return i, count


@_entry(4)
def keymap_rehash(old_keys, old_slots, keys, slots):
    """Every key of the old table into the new one, with its slot."""
    old = _take_table(old_keys, old_slots, "old")
    table = _take_table(keys, slots, "new")
    if table.size < old.size:
        raise _bad("keymap_rehash", "the new table is smaller")
    held = np.flatnonzero(old.slots != EMPTY)
    for key, slot in zip(old.keys[held].tolist(), old.slots[held].tolist()):
        table.find_or_add(key, slot)


@_entry(3)
def keymap_fill(keys, slots, distinct):
    """The distinct keys as slots 0, 1, 2, ..."""
    table = _take_table(keys, slots, "table")
    distinct = _take(distinct, "distinct", _U64)
    if 2 * len(distinct) > table.size:
        raise _bad("keymap_fill", "the table has no room for the keys")
    for slot, key in enumerate(distinct.tolist()):
        table.find_or_add(key, slot)


# ------------------------------------------------------------------ calls.c
@_entry(6)
def calls_signatures(op, count, datatype, redop, root, out):
    """A hash of each call's (op, count, datatype, redop, root) into out."""
    op = _take(op, "op", _I32)
    count = _take(count, "count", _I64)
    datatype = _take(datatype, "datatype", _I64)
    redop = _take(redop, "redop", _I64)
    root = _take(root, "root", _I64)
    out = _take(out, "out", _I64, writable=True)
    if not all(len(column) == len(op) for column in (count, datatype, redop, root, out)):
        raise _bad("calls_signatures", "the columns must be as long")
    h = _mix(op.astype(np.int64).view(_U), count.view(_U))
    h = _mix(h, datatype.view(_U))
    h = _mix(h, redop.view(_U))
    out[:] = _mix(h, root.view(_U)).view(np.int64)


@_entry(3)
def calls_instance_keys(process, comm, out):
    """The (host, pid, comm) key of each call into out."""
    process = _take(process, "process", _U64)
    comm = _take(comm, "comm", _U64)
    out = _take(out, "out", _U64, writable=True)
    if not (len(comm) == len(process) and len(out) == len(process)):
        raise _bad("calls_instance_keys", "the columns must be as long")
    out[:] = _mix(process, comm)


@_entry(1)
def calls_ascending(seq):
    """Whether the values never decrease."""
    seq = _take(seq, "seq", _I64)
    return bool(len(seq) < 2 or (seq[1:] >= seq[:-1]).all())


# What numbering keeps per group (calls.c): EPOCH, START, FROM, UNTIL, SLOT, INSTANCE.
_GROUP_FIELDS = 6
_ORPHAN = 0x6A09E667F3BCC909


@_entry(25)
def calls_number(
    keys,
    group_of,
    seq,
    order,
    epoch,
    start_keys,
    start_slots,
    lo,
    hi,
    start_seq,
    start_instance,
    start_generation,
    start_rank,
    start_uid,
    count_keys,
    count_slots,
    instances,
    next_ordinal,
    group,
    instance,
    slot,
    ordinal,
    generation,
    rank,
    uid,
):
    """Number the calls in line order into instances (calls.c ``number_loop``); returns how many instances
    are counted."""
    keys = _take(keys, "keys", _U64)
    group_of = _take(group_of, "group_of", _I64)
    seq = _take(seq, "seq", _I64)
    order = _take(order, "order", _I64)
    epoch = _int(epoch, "epoch")
    starts = _take_table(start_keys, start_slots, "start_keys")
    lo = _take(lo, "lo", _I64)
    hi = _take(hi, "hi", _I64)
    start_seq = _take(start_seq, "start_seq", _I64)
    start_instance = _take(start_instance, "start_instance", _U64)
    start_generation = _take(start_generation, "start_generation", _I32)
    start_rank = _take(start_rank, "start_rank", _I64)
    start_uid = _take(start_uid, "start_uid", _I32)
    counts = _take_table(count_keys, count_slots, "count_keys")
    instances = _int(instances, "instances")
    next_ordinal = _take(next_ordinal, "next_ordinal", _I64, writable=True)
    group = _take(group, "group", _I64, ndim=2, writable=True)
    outputs = {
        "instance": _take(instance, "instance", _U64, writable=True),
        "slot": _take(slot, "slot", _I64, writable=True),
        "ordinal": _take(ordinal, "ordinal", _I64, writable=True),
        "generation": _take(generation, "generation", _I32, writable=True),
        "rank": _take(rank, "rank", _I64, writable=True),
        "uid": _take(uid, "uid", _I32, writable=True),
    }
    calls, starts_count = len(keys), len(start_seq)
    fits = (
        all(len(column) == calls for column in (group_of, seq, order, *outputs.values()))
        and len(hi) == len(lo)
        and len(start_instance) == starts_count
        and all(len(column) == starts_count + 1 for column in (start_generation, start_rank, start_uid))
        and group.shape[1] == _GROUP_FIELDS
    )
    if not fits:
        raise _bad(
            "calls_number", "the columns of the calls, of the starts or of the groups differ in length"
        )
    key_list, group_list, seq_list = keys.tolist(), group_of.tolist(), seq.tolist()
    lo_list, hi_list, starts_seq = lo.tolist(), hi.tolist(), start_seq.tolist()
    instance_of, generation_of = start_instance.tolist(), start_generation.tolist()
    rank_of, uid_of = start_rank.tolist(), start_uid.tolist()
    room = len(next_ordinal)
    nexts = next_ordinal.tolist()
    groups = group.tolist()
    done: list[int] = []
    out: dict[str, list[int]] = {name: [] for name in outputs}
    failed = False
    for i in order.tolist():
        g = groups[group_list[i]]
        call_seq = seq_list[i]
        if g[0] != epoch or not (g[2] <= call_seq < g[3]):
            # The latest start at or before the call, and until when it stays so.
            at, since, until = -1, INT64_MIN, INT64_MAX
            found = starts.find(key_list[i])
            if found >= 0:
                j = hi_list[found] - 1
                while j >= lo_list[found] and starts_seq[j] > call_seq:
                    until = starts_seq[j]
                    j -= 1
                if j >= lo_list[found]:
                    at, since = j, starts_seq[j]
            this = instance_of[at] if at >= 0 else key_list[i] ^ _ORPHAN
            place = counts.probe(this)
            if counts.slots[place] == EMPTY:
                if counts.full(instances) or instances >= room:
                    failed = True
                    break
                counts.keys[place] = this
                counts.slots[place] = instances
                nexts[instances] = 0
                instances += 1
            g[:] = [epoch, at, since, until, int(counts.slots[place]), _signed(this)]
        at = g[1] if g[1] >= 0 else starts_count  # none: the entry after the starts
        call_slot = g[4]
        done.append(i)
        out["instance"].append(g[5] & M64)
        out["slot"].append(call_slot)
        out["ordinal"].append(nexts[call_slot])
        nexts[call_slot] += 1
        out["generation"].append(generation_of[at])
        out["rank"].append(rank_of[at])
        out["uid"].append(uid_of[at])
    next_ordinal[:] = nexts
    group[:] = np.array(groups, dtype=np.int64).reshape(group.shape)
    for name, column in outputs.items():
        column[done] = np.array(out[name], dtype=column.dtype)
    if failed:  # the caller reserves an instance per start and one per group without a start
        raise _bad("calls_number", "the instance table has no room for the batch")
    return instances


# ------------------------------------------------------------------ digest.c
_POSITION_BITS = 44
_MAX_COMMS = 1 << (64 - _POSITION_BITS)
# The columns of an open position's aggregate.
_COMM, _CALLS, _NRANKS, _P2P, _SIG_MIN, _SIG_MAX, _OP_MIN, _OP_MAX = range(8)
_AGGREGATES = 8


def _take_rings(ring: Any, pushed: Any) -> tuple[np.ndarray, np.ndarray]:
    ring = _take(ring, "ring", _I64, ndim=2, writable=True)
    pushed = _take(pushed, "pushed", _I64, writable=True)
    width = ring.shape[1]
    if len(ring) != len(pushed) or width < 1 or width & (width - 1):
        raise _bad("digest", "the ring must have a row per instance and a power-of-two width")
    return ring, pushed


def _take_open(
    keys: Any, slots: Any, position: Any, aggregate: Any
) -> tuple[_KeyTable, np.ndarray, np.ndarray]:
    table = _take_table(keys, slots, "open")
    position = _take(position, "position", _I64, writable=True)
    aggregate = _take(aggregate, "aggregate", _I64, ndim=2, writable=True)
    if len(aggregate) != len(position) or aggregate.shape[1] != _AGGREGATES:
        raise _bad("digest", "aggregate must have a row of 8 per position")
    return table, position, aggregate


def _still_kept(
    ring: np.ndarray, pushed: np.ndarray, slot: np.ndarray, row: np.ndarray, total: int, recent: int
):
    """Whether call ``row`` of instance ``slot`` is among the ``recent`` last calls or its instance's last."""
    width = ring.shape[1]
    times = pushed[slot]
    oldest = ring[slot, times & (width - 1)]
    return (row >= total - recent) | (times <= width) | (row >= oldest)


@_entry(23)
def digest_fold_calls(
    slot,
    comm,
    in_comm,
    opcount,
    has_opcount,
    ordinal,
    total,
    instances,
    communicators,
    comm_keys,
    comm_slots,
    comm_of,
    calls,
    last_opcount,
    min_opcount,
    opcount_seen,
    steady,
    ring,
    pushed,
    diverged,
    comm_hash,
    new_members,
    where,
):
    """(new instances, instances, communicators): instances, opCount statistics and each instance's last
    rows; then the position of every call (digest.c ``fold_calls_loop``)."""
    slot = _take(slot, "slot", _I64)
    comm = _take(comm, "comm", _U64)
    in_comm = _take(in_comm, "in_comm", _BOOL)
    opcount = _take(opcount, "opcount", _I64)
    has_opcount = _take(has_opcount, "has_opcount", _BOOL)
    ordinal = _take(ordinal, "ordinal", _I64)
    total = _int(total, "total")
    instances = _int(instances, "instances")
    communicators = _int(communicators, "communicators")
    table = _take_table(comm_keys, comm_slots, "comm_keys")
    comm_of = _take(comm_of, "comm_of", _I64, writable=True)
    calls = _take(calls, "calls", _I64, writable=True)
    last = _take(last_opcount, "last_opcount", _I64, writable=True)
    least = _take(min_opcount, "min_opcount", _I64, writable=True)
    seen = _take(opcount_seen, "opcount_seen", _BOOL, writable=True)
    steady = _take(steady, "steady", _BOOL, writable=True)
    ring, pushed = _take_rings(ring, pushed)
    diverged = _take(diverged, "diverged", _BOOL, writable=True)
    comm_hash = _take(comm_hash, "comm_hash", _U64, writable=True)
    new_members = _take(new_members, "new_members", _I64, writable=True)
    where = _take(where, "where", _I64, writable=True)
    m, length = len(slot), len(comm_of)
    if not all(
        len(column) == m for column in (comm, in_comm, opcount, has_opcount, ordinal, new_members, where)
    ):
        raise _bad("digest_fold_calls", "the batch's columns and outputs must have the same length")
    if not (
        all(len(column) == length for column in (calls, last, least, seen, steady, ring))
        and 0 <= instances <= length
    ):
        raise _bad(
            "digest_fold_calls",
            "the per-instance arrays must have the same length, and room for the instances",
        )
    if not (len(diverged) == len(comm_hash) and 0 <= communicators <= len(diverged)):
        raise _bad(
            "digest_fold_calls",
            "the per-communicator arrays must have the same length, and room for the communicators",
        )
    width = ring.shape[1]
    # The per-instance state as lists while the loop runs, written back after it.
    st_comm, st_calls, st_last, st_min = comm_of.tolist(), calls.tolist(), last.tolist(), least.tolist()
    st_seen, st_steady, st_pushed = seen.tolist(), steady.tolist(), pushed.tolist()
    ring_rows: dict[int, list[int]] = {}
    added = 0
    batch_comm, batch_in_comm = comm.tolist(), in_comm.tolist()
    batch_opcount, batch_has = opcount.tolist(), has_opcount.tolist()
    for i, s in enumerate(slot.tolist()):
        if s == instances:  # numbering numbers instances in the order of their first call
            instances += 1
            new_members[added] = i
            added += 1
            c = -1
            if batch_in_comm[i]:
                c = table.find_or_add(batch_comm[i], communicators)
                if c == communicators:
                    diverged[c] = False
                    comm_hash[c] = batch_comm[i]
                    communicators += 1
            st_comm[s], st_calls[s], st_steady[s], st_seen[s], st_pushed[s] = c, 0, True, False, 0
        row = ring_rows.get(s)
        if row is None:
            row = ring_rows[s] = ring[s].tolist()
        row[st_pushed[s] & (width - 1)] = total - m + i
        st_pushed[s] += 1
        if st_comm[s] >= 0:
            st_calls[s] += 1
            if batch_has[i]:
                value = batch_opcount[i]
                if st_seen[s]:
                    if value <= st_last[s]:
                        st_steady[s] = False
                    st_min[s] = min(st_min[s], value)
                else:
                    st_min[s] = value
                    st_seen[s] = True
                st_last[s] = value
    comm_of[:] = st_comm
    calls[:] = st_calls
    last[:] = st_last
    least[:] = st_min
    seen[:] = st_seen
    steady[:] = st_steady
    pushed[:] = st_pushed
    for s, row in ring_rows.items():
        ring[s] = row
    # Which communicators count positions by opCount (findings.progress.positioned, on the stats so far).
    usable = np.ones(max(communicators, 1), dtype=np.bool_)
    most = np.zeros(max(communicators, 1), dtype=np.int64)
    c = comm_of[:instances]
    on = c >= 0
    unusable = on & (~steady[:instances] | (seen[:instances] & (least[:instances] > 1)))
    usable[c[unusable]] = False
    np.maximum.at(most, c[on], calls[:instances][on])
    c = comm_of[slot]
    counted = (c >= 0) & (c < _MAX_COMMS)
    known = np.where(counted, c, 0)
    by_opcount = usable[known] & (most[known] > 1) & has_opcount
    where[:] = np.where(counted, np.where(by_opcount, opcount, ordinal), -1)
    return added, instances, communicators


_BUCKET_BITS = 11  # digest.c BUCKET_BITS


def _open_key(comm: int, position: int) -> int:
    return ((comm << _POSITION_BITS) | position) & M64


def _keep_open(table: _KeyTable, position: np.ndarray, aggregate: np.ndarray, kept: int) -> None:
    """Key the positions 0 to kept - 1 (moved down already) in the emptied table, bucket by bucket of their
    home places (digest.c ``key_open``: at most 2**11 buckets), each bucket's in slot order."""
    shift = max((table.size - 1).bit_length() - _BUCKET_BITS, 0)
    keys = [
        _open_key(comm & M64, at & M64)
        for comm, at in zip(aggregate[:kept, _COMM].tolist(), position[:kept].tolist())
    ]
    buckets = np.array([_home(key, table.mask) >> shift for key in keys], dtype=np.int64)
    for slot in np.argsort(buckets, kind="stable").tolist():
        table.find_or_add(keys[slot], slot)


@_entry(25)
def digest_fold_positions(
    slot,
    at,
    where,
    opened,
    positions,
    nranks,
    sig,
    op,
    p2p,
    communicators,
    total,
    recent,
    limit,
    open_keys,
    open_slots,
    position,
    aggregate,
    comm_of,
    ring,
    pushed,
    diverged_comm,
    comm_hash,
    window,
    keep,
    diverged,
):
    """(newly divergent communicators, positions still open): the calls folded into their open positions,
    divergences found, closed positions dropped, at most ``limit`` kept open (the highest; of equal
    positions at the cut, the later opened), and the rows kept (digest.c ``fold_positions_loop``)."""
    slot = _take(slot, "slot", _I64)
    at = _take(at, "at", _I64)
    where = _take(where, "where", _I64)
    opened = _int(opened, "opened")
    positions = _int(positions, "positions")
    nranks = _take(nranks, "nranks", _I64)
    sig = _take(sig, "sig", _I64)
    op = _take(op, "op", _I64)
    p2p = _take(p2p, "p2p", _BOOL)
    communicators = _int(communicators, "communicators")
    total = _int(total, "total")
    recent = _int(recent, "recent")
    limit = _int(limit, "limit")
    table, position, aggregate = _take_open(open_keys, open_slots, position, aggregate)
    comm_of = _take(comm_of, "comm_of", _I64)
    ring, pushed = _take_rings(ring, pushed)
    diverged_comm = _take(diverged_comm, "diverged_comm", _BOOL, writable=True)
    comm_hash = _take(comm_hash, "comm_hash", _U64)
    window = _take(window, "window", _BOOL, writable=True)
    keep = _take(keep, "keep", _BOOL, writable=True)
    diverged = _take(diverged, "diverged", _U64, ndim=2, writable=True)
    m = len(slot)
    if not all(len(column) == m for column in (at, where, nranks, sig, op, p2p, window, keep)):
        raise _bad("digest_fold_positions", "the batch's columns and outputs must have the same length")
    if opened < 0 or positions < opened or positions > len(position) or 2 * positions > table.size:
        raise _bad("digest_fold_positions", "the open table must hold the positions")
    if limit < 1:
        raise _bad("digest_fold_positions", "at least one position must be allowed to stay open")
    if len(comm_of) != len(ring):
        raise _bad("digest_fold_positions", "the per-instance arrays must have the same length")
    if (
        len(diverged_comm) != len(comm_hash)
        or not 0 <= communicators <= len(diverged_comm)
        or diverged.shape[1] != 2
        or len(diverged) < communicators
    ):
        raise _bad(
            "digest_fold_positions", "the per-communicator arrays must have room for the communicators"
        )
    # Every call into its open position (new positions come in order of first sight).
    columns = (slot, at, where, nranks, sig, op, p2p)
    for s, p, w, n, g, o, pair in zip(*(column.tolist() for column in columns)):
        if p < 0:
            continue
        a = aggregate[p]
        if p == opened:
            opened += 1
            position[p] = w
            a[:] = (comm_of[s], 0, 0, 1, g, g, o, o)
        a[_CALLS] += 1
        a[_NRANKS] = max(a[_NRANKS], n)
        if not pair:
            a[_P2P] = 0
        a[_SIG_MIN], a[_SIG_MAX] = min(a[_SIG_MIN], g), max(a[_SIG_MAX], g)
        a[_OP_MIN], a[_OP_MAX] = min(a[_OP_MIN], o), max(a[_OP_MAX], o)
    # Divergent positions (signatures differ, or both sides of a point-to-point pair are the same op);
    # positions every member has called are closed, the others move down to slots 0, 1, 2, ...
    a = aggregate[:positions]
    split = np.where(
        a[:, _P2P] != 0,
        (a[:, _CALLS] == 2) & (a[:, _OP_MIN] == a[:, _OP_MAX]),
        a[:, _SIG_MIN] != a[:, _SIG_MAX],
    )
    comm = a[:, _COMM]
    candidate = split.copy()
    candidate[split] = ~diverged_comm[comm[split]]
    lowest = np.full(max(communicators, 1), INT64_MAX, dtype=np.int64)
    np.minimum.at(lowest, comm[candidate], position[:positions][candidate])
    first = np.where(lowest == INT64_MAX, -1, lowest)[:communicators]
    kept = np.flatnonzero(~split & (a[:, _CALLS] < a[:, _NRANKS]))
    if len(kept) > limit:  # the highest stay; a stable sort keeps the later opened of equal positions
        kept = np.sort(kept[np.argsort(position[kept], kind="stable")[len(kept) - limit :]])
    if len(kept) < positions:  # (when every position stays, slots and table are as they were)
        position[: len(kept)] = position[kept]
        aggregate[: len(kept)] = aggregate[kept]
        table.slots.fill(EMPTY)
        _keep_open(table, position, aggregate, len(kept))
    found = np.flatnonzero(first >= 0)
    diverged_comm[found] = True
    diverged[: len(found), 0] = comm_hash[found]
    diverged[: len(found), 1] = first[found].astype(np.uint64)
    # What is kept: this batch's rows at a new divergence (and the position before it), and the rows still
    # among the most recent or their instance's last.
    c = comm_of[slot]
    at_first = np.where(c >= 0, np.append(first, -1)[np.where(c >= 0, c, communicators)], -1)
    keep[:] = (at_first >= 0) & ((where == at_first) | (where == at_first - 1))
    window[:] = _still_kept(ring, pushed, slot, total - m + np.arange(m, dtype=np.int64), total, recent)
    return len(found), len(kept)


@_entry(7)
def digest_alive(slot, row, total, recent, ring, pushed, alive):
    """Which rows of the window are still kept, into alive."""
    slot = _take(slot, "slot", _I64)
    row = _take(row, "row", _I64)
    total, recent = _int(total, "total"), _int(recent, "recent")
    ring, pushed = _take_rings(ring, pushed)
    alive = _take(alive, "alive", _BOOL, writable=True)
    if not (len(row) == len(slot) and len(alive) == len(slot)):
        raise _bad("digest_alive", "slot, row and alive must have the same length")
    alive[:] = _still_kept(ring, pushed, slot, row, total, recent)


# ------------------------------------------------------------------ collscan.c
# Rows of the outputs (collscan.py).
_LINE, _OPCOUNT, _COUNT, _DATATYPE, _REDOP, _ROOT, _NRANKS_ROW, _PREFIX_STOP, _OP_START, _OP_STOP = range(10)
_COMM_ROW, _SENDBUFF, _RECVBUFF, _STREAM = range(4)
_OP_ID, _PREFIX_ID = range(2)
_HEX, _POINTER, _DECIMAL, _SIGNED_DECIMAL, _BRACKETED = range(5)
_TEMPLATE = (  # the message after the op name: (literal, kind of value, row)
    (b" opCount ", _HEX, _OPCOUNT),
    (b" sendbuff ", _POINTER, _SENDBUFF),
    (b" recvbuff ", _POINTER, _RECVBUFF),
    (b" count ", _DECIMAL, _COUNT),
    (b" datatype ", _DECIMAL, _DATATYPE),
    (b" op ", _DECIMAL, _REDOP),
    (b" root ", _SIGNED_DECIMAL, _ROOT),
    (b" comm ", _POINTER, _COMM_ROW),
    (b" [nranks=", _BRACKETED, _NRANKS_ROW),
    (b" stream ", _POINTER, _STREAM),
)
_MESSAGE = b" NCCL INFO "
_LETTERS = re.compile(rb"[A-Za-z]+")
_HEX_DIGITS = re.compile(rb"[0-9a-f]{1,16}")
_DIGITS = re.compile(rb"[0-9]+")
_SHORT_DIGITS = 18  # fewer digits than this are below 10**18, far from the int64 limit

_SEED, _MULTIPLY, _FINISH = 0x243F6A8885A308D3, 0x9E3779B97F4A7C15, 0xFF51AFD7ED558CCD
_STRINGS, _USED, _HASH_MASK = 0, 1, 2


def _hash(text: bytes) -> int:
    """collscan.c ``hash_of``: eight bytes at a time, the last word zero-filled."""
    h = _SEED ^ len(text)
    for at in range(0, len(text), 8):
        h = ((h ^ int.from_bytes(text[at : at + 8], "little")) * _MULTIPLY) & M64
        h ^= h >> 32
    h ^= h >> 33
    h = (h * _FINISH) & M64
    return h ^ (h >> 33)


class _Strings:
    """A string table's arrays (collscan.c ``Strings``: ByteTable.arrays)."""

    __slots__ = ("capacity", "hashes", "mask", "offsets", "room", "slots", "state", "store")

    def __init__(self, slots, hashes, offsets, store, state, room: int):
        self.slots, self.hashes, self.offsets, self.store, self.state = slots, hashes, offsets, store, state
        self.capacity, self.room = len(hashes), room
        self.mask = int(state[_HASH_MASK]) & M64

    def probe(self, text: bytes, h: int) -> int:
        """Where the id of ``text`` (hash ``h``) is, or the empty place where it would go."""
        size = len(self.slots)
        at = (h >> 32) & (size - 1)
        while True:
            known = int(self.slots[at])
            if known == EMPTY:
                return at
            if int(self.hashes[known]) == h:
                start, stop = int(self.offsets[known]), int(self.offsets[known + 1])
                if stop - start == len(text) and self.store[start:stop].tobytes() == text:
                    return at
            at = (at + 1) & (size - 1)

    def find(self, text: bytes) -> int:
        return int(self.slots[self.probe(text, _hash(text) & self.mask)])

    def find_or_add(self, text: bytes) -> int:
        """collscan.c ``find_or_add``: the id of ``text``, added as the next id when the table lacks it
        and has room for one more string; -1 when it lacks it and has none."""
        h = _hash(text) & self.mask
        slot = self.probe(text, h)
        if self.slots[slot] != EMPTY:
            return int(self.slots[slot])
        known, at = int(self.state[_STRINGS]), int(self.state[_USED])
        if 2 * (known + 1) > len(self.slots) or known + 1 > self.capacity or at + len(text) > self.room:
            return EMPTY
        self.store[at : at + len(text)] = np.frombuffer(text, dtype=np.uint8)
        self.hashes[known] = h
        self.offsets[known + 1] = at + len(text)
        self.slots[slot] = known
        self.state[_STRINGS] = known + 1
        self.state[_USED] = at + len(text)
        return known


def _take_strings(arrays: Any, name: str) -> _Strings:
    if not isinstance(arrays, tuple) or len(arrays) != 6:
        raise TypeError(f"{name}: expected ByteTable.arrays (a tuple of six arrays)")
    slots = _take(arrays[0], name, _I32, writable=True)
    hashes = _take(arrays[1], name, _U64, writable=True)
    offsets = _take(arrays[2], name, _I64, writable=True)
    store = _take(arrays[3], name, _U8, writable=True)
    words = _take(arrays[4], name, _WORDS)
    state = _take(arrays[5], name, _I64, writable=True)
    size = len(slots)
    fits = (
        size >= 2
        and not size & (size - 1)
        and len(state) == 3
        and len(offsets) == len(hashes) + 1
        and state[_STRINGS] <= len(hashes)
        and _address(words) == _address(store)
        and len(words) + 7 >= len(store)
    )
    if not fits:
        raise _bad(name, "not the arrays of one ByteTable")
    return _Strings(slots, hashes, offsets, store, state, len(words) - 1)


def _hex(token: bytes) -> int | None:
    return int(token, 16) if _HEX_DIGITS.fullmatch(token) else None


def _decimal(token: bytes, is_signed: bool) -> int | None:
    """collscan.c ``decimal``: "-?[0-9]+" (the sign only when signed), any number of digits, as an int64."""
    negative = is_signed and token[:1] == b"-"
    digits = token[1:] if negative else token
    if not _DIGITS.fullmatch(digits):
        return None
    value = int(digits)
    if len(digits) > _SHORT_DIGITS and value > INT64_MAX + negative:
        return None
    return -value if negative else value


def _read_message(line: bytes, at: int) -> tuple[int, list[int | None], list[bool]] | None:
    """collscan.c ``read_message`` from ``at`` to the end of ``line``: (where the op name's colon is, the
    values by template field, their nil flags), or None when any literal or value is not in its exact form."""
    end = len(line)
    space = line.find(b" ", at)
    stop = end if space < 0 else space
    colon = stop - 1
    if colon <= at or line[colon] != 0x3A or not _LETTERS.fullmatch(line, at, colon):
        return None
    at = stop
    values: list[int | None] = []
    nils: list[bool] = []
    for literal, kind, _ in _TEMPLATE:
        if not line.startswith(literal, at):
            return None
        start = at + len(literal)
        space = line.find(b" ", start)
        at = end if space < 0 else space
        token = line[start:at]
        is_nil = False
        value: int | None
        if kind == _HEX:
            value = _hex(token)
            if value is not None and value > INT64_MAX:  # %lx beyond int64: the general parser makes it null
                value = None
        elif kind == _POINTER:
            if token == b"(nil)":
                is_nil, value = True, 0
                if literal == b" comm ":  # comm is never (nil)
                    value = None
            elif len(token) >= 3 and token[:2] == b"0x":
                value = _hex(token[2:])
            else:
                value = None
        elif kind == _BRACKETED:
            value = _decimal(token[:-1], False) if len(token) >= 2 and token[-1:] == b"]" else None
        else:
            value = _decimal(token, kind == _SIGNED_DECIMAL)
        if value is None:
            return None
        values.append(value)
        nils.append(is_nil)
    return (colon, values, nils) if at == end else None


def _message(line: bytes) -> tuple[int, tuple[int, list[int | None], list[bool]]] | None:
    """Where the space before "NCCL INFO" is when the line from there to its end is one COLL message in its
    exact form, with what was read; None otherwise. Each " NCCL INFO " is tried in turn."""
    at = line.find(_MESSAGE)
    while at >= 0 and at + len(_MESSAGE) < len(line):
        read = _read_message(line, at + len(_MESSAGE))
        if read is not None:
            return at, read
        at = line.find(_MESSAGE, at + 1)
    return None


@_entry(10)
def collscan_scan(data, words, starts, ends, prefixes, ops, integers, addresses, nil, ids):
    """Fill the outputs for each canonical COLL line; returns how many lines were taken."""
    data = _take(data, "data", _U8)
    words = _take(words, "words", _WORDS)
    starts = _take(starts, "starts", _I64)
    ends = _take(ends, "ends", _I64)
    prefix_table = _take_strings(prefixes, "prefixes")
    op_table = _take_strings(ops, "ops")
    integers = _take(integers, "integers", _I64, ndim=2, writable=True)
    addresses = _take(addresses, "addresses", _U64, ndim=2, writable=True)
    nil = _take(nil, "nil", _BOOL, ndim=2, writable=True)
    ids = _take(ids, "ids", _I32, ndim=2, writable=True)
    lines, width = len(starts), integers.shape[1]
    fits = (
        len(ends) == lines
        and len(integers) == 10
        and width >= lines
        and addresses.shape == (4, width)
        and nil.shape == (4, width)
        and ids.shape == (2, width)
    )
    if not fits:
        raise _bad("collscan_scan", "the outputs must be collscan.outputs(len(starts))")
    if _address(words) != _address(data) or len(words) < len(data) + 8:
        return 0  # not the data's words view with its padding: nothing is read
    text, size = data.tobytes(), len(data)
    # Each distinct prefix or op name is looked up (and added, while there is room) once: a string the table
    # had no room for at its first line has none at a later one either (room only shrinks in a scan).
    prefix_ids: dict[bytes, int] = {}
    op_ids: dict[bytes, int] = {}
    taken = 0
    for index, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
        if start < 0 or end > size:
            continue
        line = text[start:end]
        found = _message(line)
        if found is None or 0x1B in line[: found[0]]:  # an ANSI colour in the prefix: the general parser's
            continue
        at, (colon, values, nils) = found
        prefix, name = line[:at], line[at + len(_MESSAGE) : colon]
        if prefix not in prefix_ids:
            prefix_ids[prefix] = prefix_table.find_or_add(prefix)
        if name not in op_ids:
            op_ids[name] = op_table.find_or_add(name)
        for (_, kind, row), value, is_nil in zip(_TEMPLATE, values, nils):
            if kind in (_HEX, _DECIMAL, _SIGNED_DECIMAL, _BRACKETED):
                integers[row, taken] = value
            else:
                addresses[row, taken] = value
                nil[row, taken] = is_nil
        integers[_OP_STOP, taken] = start + colon
        integers[_PREFIX_STOP, taken] = start + at
        integers[_OP_START, taken] = start + at + len(_MESSAGE)
        integers[_LINE, taken] = index
        ids[_PREFIX_ID, taken] = prefix_ids[prefix]
        ids[_OP_ID, taken] = op_ids[name]
        taken += 1
    return taken


def _take_rows(args: tuple, function: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    data = _take(args[0], "data", _U8)
    words = _take(args[1], "words", _WORDS)
    starts = _take(args[2], "starts", _I64)
    stops = _take(args[3], "stops", _I64)
    ids = _take(args[4], "ids", _I32, writable=True)
    if _address(words) != _address(data) or len(words) < len(data) + 8:
        raise _bad(function, "words must be the data's words view, with its padding")
    if len(stops) != len(starts) or len(ids) != len(starts):
        raise _bad(function, "starts, stops and ids must be as long")
    if len(starts) and ((starts < 0) | (stops < starts) | (stops > len(data))).any():
        raise _bad(function, "a string is outside the data")
    return data, starts, stops, ids


# The transport scan (collscan.c ``read_transport``): its message, the rows of its outputs, the tail's bounds.
_TRANSPORT = re.compile(
    rb"(?:Channel |Ring )([0-9]+)(?:/([0-9]+))? : "
    rb"([0-9]+)(?:\[([0-9a-f]+)\])? -> ([0-9]+)(?:\[([0-9a-f]+)\])?"
)
(
    _T_LINE,
    _T_CHANNEL,
    _T_CONN,
    _T_FROM,
    _T_TO,
    _T_PREFIX_STOP,
    _T_TAIL_START,
    _T_FROM_DEV_START,
    _T_FROM_DEV_STOP,
    _T_TO_DEV_START,
    _T_TO_DEV_STOP,
) = range(11)
_T_PREFIX_ID, _T_TAIL_ID, _T_FROM_DEV_ID, _T_TO_DEV_ID = range(4)
_NO_VALUE = -1
_MAX_TAIL = 256
_PRINTABLE = re.compile(rb"[\x20-\x7e]*")


def _transport(line: bytes, at: int) -> tuple[list[int], list[tuple[int, int]], int] | None:
    """collscan.c ``read_transport`` from ``at`` to the end of ``line``: the channel, connection, ranks (the
    connection NO_VALUE when absent), the device brackets' bounds ((NO_VALUE, NO_VALUE) when absent) and where
    the tail starts; None when the message is not of the form."""
    match = _TRANSPORT.match(line, at)
    if match is None:
        return None
    numbers = [match.group(n) for n in (1, 2, 3, 5)]
    if any(n is not None and len(n) > _SHORT_DIGITS for n in numbers):
        return None  # more digits are left to the general parser, which says whether they fit
    tail = match.end()
    if tail >= len(line) or line[tail] != 0x20 or len(line) - tail > _MAX_TAIL:
        return None
    if not _PRINTABLE.fullmatch(line, tail):
        return None
    values = [_NO_VALUE if n is None else int(n) for n in numbers]
    devices = [match.span(n) if match.group(n) is not None else (_NO_VALUE, _NO_VALUE) for n in (4, 6)]
    return values, devices, tail


@_entry(10)
def collscan_transports(data, words, starts, ends, rows, prefixes, tails, devs, integers, ids):
    """Fill the outputs for each transport line among the lines ``rows``; returns how many were taken."""
    data = _take(data, "data", _U8)
    words = _take(words, "words", _WORDS)
    starts = _take(starts, "starts", _I64)
    ends = _take(ends, "ends", _I64)
    rows = _take(rows, "rows", _I64)
    tables = [
        _take_strings(table, name)
        for table, name in ((prefixes, "prefixes"), (tails, "tails"), (devs, "devs"))
    ]
    integers = _take(integers, "integers", _I64, ndim=2, writable=True)
    ids = _take(ids, "ids", _I32, ndim=2, writable=True)
    count, width = len(rows), integers.shape[1]
    if not (len(ends) == len(starts) and len(integers) == 11 and width >= count and ids.shape == (4, width)):
        raise _bad("collscan_transports", "the outputs must be collscan.transport_outputs(len(rows))")
    if _address(words) != _address(data) or len(words) < len(data) + 8:
        return 0  # not the data's words view with its padding: nothing is read
    text, size, lines = data.tobytes(), len(data), len(starts)
    known: list[dict[bytes, int]] = [{}, {}, {}]  # the tables are only read: each string looked up once

    def find(table: int, piece: bytes) -> int:
        if piece not in known[table]:
            known[table][piece] = tables[table].find(piece)
        return known[table][piece]

    taken = 0
    for line in rows.tolist():
        if line < 0 or line >= lines:
            continue
        start, end = int(starts[line]), int(ends[line])
        if start < 0 or end > size or end - start < 12:
            continue
        piece = text[start:end]
        at = piece.find(_MESSAGE)
        if at < 0 or at + len(_MESSAGE) >= len(piece):
            continue
        read = _transport(piece, at + len(_MESSAGE))
        if read is None or 0x1B in piece[:at]:
            continue
        values, devices, tail = read
        for row, value in zip((_T_CHANNEL, _T_CONN, _T_FROM, _T_TO), values):
            integers[row, taken] = value
        for (row, stop_row, id_row), (first, last) in zip(
            (
                (_T_FROM_DEV_START, _T_FROM_DEV_STOP, _T_FROM_DEV_ID),
                (_T_TO_DEV_START, _T_TO_DEV_STOP, _T_TO_DEV_ID),
            ),
            devices,
        ):
            bounded = first != _NO_VALUE
            integers[row, taken] = start + first if bounded else _NO_VALUE
            integers[stop_row, taken] = start + last if bounded else _NO_VALUE
            ids[id_row, taken] = find(2, piece[first:last]) if bounded else _NO_VALUE
        integers[_T_TAIL_START, taken] = start + tail
        integers[_T_PREFIX_STOP, taken] = start + at
        integers[_T_LINE, taken] = line
        ids[_T_PREFIX_ID, taken] = find(0, piece[:at])
        ids[_T_TAIL_ID, taken] = find(1, piece[tail:])
        taken += 1
    return taken


@_entry(6)
def collscan_find(table, data, words, starts, stops, ids):
    """The id of each string data[start:stop] in the table into ids, -1 where the table lacks it."""
    strings = _take_strings(table, "table")
    data, starts, stops, ids = _take_rows((data, words, starts, stops, ids), "collscan_find")
    text = data.tobytes()
    known: dict[bytes, int] = {}
    found = []
    for start, stop in zip(starts.tolist(), stops.tolist()):
        piece = text[start:stop]
        if piece not in known:
            known[piece] = strings.find(piece)
        found.append(known[piece])
    ids[:] = found


@_entry(6)
def collscan_add(table, data, words, starts, stops, ids):
    """Number the strings of the rows whose id is -1, in place (ByteTable.add has made room)."""
    strings = _take_strings(table, "table")
    data, starts, stops, ids = _take_rows((data, words, starts, stops, ids), "collscan_add")
    missing = ids < 0
    count = int(strings.state[_STRINGS]) + int(missing.sum())
    used = int(strings.state[_USED]) + int((stops - starts)[missing].sum())
    if 2 * count > len(strings.slots) or count > strings.capacity or used > strings.room:
        raise _bad("collscan_add", "the table has no room for the strings (ByteTable.make_room)")
    text = data.tobytes()
    for row in np.flatnonzero(missing).tolist():
        ids[row] = strings.find_or_add(text[int(starts[row]) : int(stops[row])])


@_entry(3)
def collscan_rehash(slots, hashes, count):
    """The ids of the first ``count`` strings into an empty slot table."""
    slots = _take(slots, "slots", _I32, writable=True)
    hashes = _take(hashes, "hashes", _U64)
    count = _int(count, "count")
    size = len(slots)
    if not (0 <= count <= len(hashes) and 2 * count <= size and size >= 2 and not size & (size - 1)):
        raise _bad("collscan_rehash", "the slots must be a power of two, twice the strings")
    for i, h in enumerate(hashes[:count].tolist()):
        at = (h >> 32) & (size - 1)
        while slots[at] != EMPTY:
            at = (at + 1) & (size - 1)
        slots[at] = i
