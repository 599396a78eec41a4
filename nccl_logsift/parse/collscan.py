"""The COLL fast path (which lines of a chunk are canonical COLL lines, and their fields) and the table of
distinct strings it numbers prefixes and op names in; the loops are ``accel/csrc/collscan.c``.

One pass per line, forwards: the loop finds `` NCCL INFO `` and reads the message of ``INFO(NCCL_COLL,
"%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d] stream
%p", ...)`` (grammar §5.1) from there, literal by literal and value by value, to the line's end. The
prefix before `` NCCL INFO`` and the op name are looked up in :class:`ByteTable` s (the caller adds the
new ones). Bytes are read eight at a time through the chunk's words view (``ByteView.words``: the data
followed by padding), so a word read at the end of a line may run into the next one or the padding; those
bytes are masked off.

A line is taken only when every token has exactly the shape for which the general parser's ``coll``
pattern (grammars/nccl/coll.toml) gives the same typed value; anything else is left to that parser.

:class:`ByteTable` numbers distinct byte strings 0, 1, 2, ... in order of first sight. The strings live
end to end in one uint8 array (with their offsets and hashes); an open-addressing table of slots (linear
probing, at most half full) maps a hash to the ids that have it. A lookup that finds an equal hash
compares the bytes too, so two strings whose hashes collide keep their own ids. Everything is a numpy
array, so the scan looks strings up without calling back into Python; the strings it missed are added
afterwards (:meth:`ByteTable.add`), and Python reads the new ones (:meth:`ByteTable.strings`).
"""

from __future__ import annotations

import numpy as np

from nccl_logsift import accel

# Rows of the integer outputs (int64: the line, its fields, where its prefix ends and where its op name
# is) and of the addresses (uint64).
LINE, OPCOUNT, COUNT, DATATYPE, REDOP, ROOT, NRANKS, PREFIX_STOP, OP_START, OP_STOP = range(10)
COMM, SENDBUFF, RECVBUFF, STREAM = range(4)
# Rows of the id outputs (int32, -1 for a string not in the table yet); the nil flags have the rows of
# the addresses (comm is never nil).
OP_ID, PREFIX_ID = range(2)


# Rows of the transport scan's outputs (collscan.c): integers (int64; NO_VALUE where a line has no /CONN or
# no device bracket) and ids (int32).
(
    T_LINE,
    T_CHANNEL,
    T_CONN,
    T_FROM,
    T_TO,
    T_PREFIX_STOP,
    T_TAIL_START,
    T_FROM_DEV_START,
    T_FROM_DEV_STOP,
    T_TO_DEV_START,
    T_TO_DEV_STOP,
) = range(11)
T_PREFIX_ID, T_TAIL_ID, T_FROM_DEV_ID, T_TO_DEV_ID = range(4)
NO_VALUE = -1


def outputs(lines: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Arrays for :func:`scan` to fill for a chunk of ``lines`` lines: integers, addresses, nil flags, ids."""
    return (
        np.empty((10, lines), dtype=np.int64),
        np.empty((4, lines), dtype=np.uint64),
        np.empty((4, lines), dtype=np.bool_),
        np.empty((2, lines), dtype=np.int32),
    )


def scan(data, words, starts, ends, prefixes, ops, integers, addresses, nil, ids) -> int:
    """Fill the outputs for each canonical COLL line of ``data``; return how many lines were taken.

    ``words`` is the words view of ``data`` (``ByteView.words``); ``prefixes`` and ``ops`` are
    ``ByteTable.arrays``. Column ``j`` of every output describes the ``j``-th line taken;
    ``integers[LINE]`` is its index. Runs without the GIL.
    """
    return accel.collscan_scan(data, words, starts, ends, prefixes, ops, integers, addresses, nil, ids)


def transport_outputs(rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Arrays for :func:`transports` to fill for ``rows`` lines tried: integers, ids."""
    return np.empty((11, rows), dtype=np.int64), np.empty((4, rows), dtype=np.int32)


def transports(data, words, starts, ends, rows, prefixes, tails, devs, integers, ids) -> int:
    """Fill the outputs for each transport line among the lines ``rows`` (int64 indices) of ``data``: those
    whose message after the first `` NCCL INFO `` is ``(Channel|Ring) N[/N] : N[[hex]] -> N[[hex]]`` and a
    tail of printable ASCII to the end of the line; return how many were taken. ``prefixes``, ``tails`` and
    ``devs`` are ``ByteTable.arrays``; column ``j`` of the outputs describes the ``j``-th line taken,
    ``integers[T_LINE]`` its index. Runs without the GIL."""
    return accel.collscan_transports(data, words, starts, ends, rows, prefixes, tails, devs, integers, ids)


# ---------------------------------------------------------------------- the table of distinct strings
_EMPTY = -1
_PAD = 8  # bytes after the store's strings, so that a word can be read at the start of the last one

# What the loops receive as a table: (slots, hashes, offsets, store, store words, state). state holds the
# number of strings, the bytes they use and the mask applied to every hash (all ones, except in tests
# that force collisions).
_STRINGS, _USED, _HASH_MASK = 0, 1, 2


class ByteTable:
    """Byte strings ↔ dense ids, bounded: emptied when more than ``max_ids`` strings or ``max_bytes`` are
    held.

    ``slots`` is the first size of the slot table (a power of two); ``hash_mask`` keeps only some bits
    of every hash (tests set it to 0 to make every pair of strings collide).
    """

    def __init__(
        self,
        max_ids: int = 1 << 16,
        max_bytes: int = 16 << 20,
        slots: int = 1 << 10,
        hash_mask: int = (1 << 64) - 1,
    ):
        if slots < 2 or slots & (slots - 1):
            raise ValueError(f"slots must be a power of two, not {slots}")
        self.max_ids = max_ids
        self.max_bytes = max_bytes
        self._first_slots = slots
        self.state = np.array([0, 0, np.uint64(hash_mask).view(np.int64)], dtype=np.int64)
        self._empty()

    def _empty(self) -> None:
        slots = self._first_slots
        self.slots = np.full(slots, _EMPTY, dtype=np.int32)
        self.hashes = np.zeros(slots // 2, dtype=np.uint64)
        self.offsets = np.zeros(slots // 2 + 1, dtype=np.int64)
        # Room for a few strings from the start.
        self._set_store(np.zeros(64 + _PAD, dtype=np.uint8))
        self.state[_STRINGS] = self.state[_USED] = 0

    def _set_store(self, store: np.ndarray) -> None:
        self.store = store
        self.store_words = np.ndarray(shape=(len(store) - _PAD + 1,), dtype="<u8", buffer=store, strides=(1,))

    def __len__(self) -> int:
        return int(self.state[_STRINGS])

    @property
    def arrays(self) -> tuple:
        return self.slots, self.hashes, self.offsets, self.store, self.store_words, self.state

    def trim(self) -> bool:
        """Empty the table if it holds more than its bounds; True when it did (every id is forgotten).

        Called between chunks, never between a lookup and the use of its ids.
        """
        if len(self) <= self.max_ids and int(self.state[_USED]) <= self.max_bytes:
            return False
        self._empty()
        return True

    def add(
        self, data: np.ndarray, words: np.ndarray, starts: np.ndarray, stops: np.ndarray, ids: np.ndarray
    ) -> None:
        """Number the strings ``data[start:stop]`` of the rows whose id is -1 (a kernel's misses), in place.

        ``words`` is the words view of ``data``; ``ids`` is int32.
        """
        missing = ids < 0
        if not missing.any():
            return
        self.make_room(int(missing.sum()), int((stops - starts)[missing].sum()))
        accel.collscan_add(self.arrays, data, words, starts.astype(np.int64), stops.astype(np.int64), ids)

    def lookup(
        self, data: np.ndarray, words: np.ndarray, starts: np.ndarray, stops: np.ndarray
    ) -> np.ndarray:
        """The id of each string ``data[start:stop]`` (int32), -1 for one the table lacks."""
        ids = np.empty(len(starts), dtype=np.int32)
        accel.collscan_find(self.arrays, data, words, starts.astype(np.int64), stops.astype(np.int64), ids)
        return ids

    def make_room(self, strings: int, nbytes: int) -> None:
        """Room for ``strings`` more strings of ``nbytes`` in all (the COLL scan adds what it meets while
        there is room, :meth:`add` what it missed)."""
        count, used = len(self), int(self.state[_USED])
        slots = len(self.slots)
        while slots < 2 * (count + strings):
            slots *= 2
        if slots > len(self.slots):
            self.slots = np.full(slots, _EMPTY, dtype=np.int32)
            self.hashes = _grown(self.hashes, slots // 2)
            self.offsets = _grown(self.offsets, slots // 2 + 1)
            accel.collscan_rehash(self.slots, self.hashes, count)
        if len(self.store) - _PAD < used + nbytes:
            self._set_store(_grown(self.store, max(used + nbytes, 2 * (len(self.store) - _PAD)) + _PAD))

    def strings(self, first: int, last: int) -> list[bytes]:
        """The strings with ids ``first`` to ``last - 1``."""
        offsets, store = self.offsets, self.store
        return [store[offsets[i] : offsets[i + 1]].tobytes() for i in range(first, last)]


def _grown(array: np.ndarray, size: int) -> np.ndarray:
    grown = np.zeros(size, dtype=array.dtype)
    grown[: len(array)] = array
    return grown
