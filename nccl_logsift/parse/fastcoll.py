"""The fast path for the bulk of a COLL-heavy log: NCCL INFO COLL lines read by position, not by regex.

With NCCL_DEBUG_SUBSYS=COLL almost every line is one collective call, printed by one format string
(src/enqueue.cc, ``ncclInfoSetDerived`` / ``INFO(NCCL_COLL, "%s: opCount %lx sendbuff %p recvbuff %p
count %zu datatype %d op %d root %d comm %p [nranks=%d] stream %p", ...)``, grammar §5.1). Its message
is the rest of the line after `` NCCL INFO ``, whatever launcher prefix precedes the envelope. A compiled
loop (:mod:`~nccl_logsift.parse.collscan`) walks each line once, checks every literal and reads every number.

The prefix before `` NCCL INFO`` (launcher tags, host:pid:tid [dev]) repeats for every line of a
thread: the loop numbers distinct prefixes in a hash table kept across chunks, and each new one is
parsed once by the grammar-driven general parser; its fields reach the rows by that number.

A line is taken only when every literal token, the shape of every value and its prefix check out;
anything else (RCCL's extra fields, the 2.3.5 form, torn or glued lines, ANSI colours, values that do
not fit 64 bits) is left to the general parser, which stays the reference: tests compare the two on
real logs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

from nccl_logsift.io.lines import ByteView, RawChunk
from nccl_logsift.parse import collscan
from nccl_logsift.parse.calls import (
    FAMILY,
    LAUNCHER_STREAM,
    PATTERN,
    FastPiece,
    Names,
    PrefixFields,
    pair_keys,
    signatures,
)
from nccl_logsift.parse.collscan import ByteTable
from nccl_logsift.parse.lineparser import ParsedPrefixes

__all__ = ["COLL_FIELDS", "FAMILY", "LAUNCHER_STREAM", "PATTERN", "TABLE", "CollFastPath", "FastRows"]

TABLE = "collectives"
# Fields the fast path reads from the message (the lines table of ``logsift parse`` goes without them).
COLL_FIELDS = (
    "op",
    "opcount",
    "count",
    "datatype",
    "redop",
    "root",
    "comm",
    "nranks",
    "sendbuff",
    "recvbuff",
    "stream",
)
_POINTERS = {"sendbuff": collscan.SENDBUFF, "recvbuff": collscan.RECVBUFF, "stream": collscan.STREAM}
_NUMBERS = {
    "opcount": collscan.OPCOUNT,
    "count": collscan.COUNT,
    "datatype": collscan.DATATYPE,
    "redop": collscan.REDOP,
    "root": collscan.ROOT,
    "nranks": collscan.NRANKS,
}

# What parses distinct prefixes (LineParser.parse_prefixes): each one's envelope and launcher fields, and
# whether it is exactly one clean NCCL INFO envelope (else its lines go to the general parser).
PrefixParser = Callable[[list[str]], ParsedPrefixes]


@dataclass(frozen=True, slots=True)
class FastRows:
    """COLL rows read by the fast path and the chunk positions (line indices) they came from."""

    index: np.ndarray  # int64 positions in the chunk, ascending
    piece: FastPiece | None

    @property
    def rows(self) -> pl.DataFrame:
        """The rows as a frame: line_no, byte_offset, op, opcount, pointers, prefix fields, call fields."""
        return self.piece.frame() if self.piece is not None else pl.DataFrame()


# Strings (and their bytes) the COLL scan may add to the prefix and op tables in a chunk before the rest of
# those it meets are added after it (ByteTable.make_room grows a table only when it has less).
_NEW_PREFIXES = (64, 64 * 64)
_NEW_OPS = (16, 16 * 32)


class CollFastPath:
    """Reads canonical COLL lines of a chunk.

    ``prefixes`` parses distinct line prefixes (the general parser's launcher and envelope grammars),
    once per prefix while the table of known ones (``ByteTable``, bounded) holds it. ``pointers``
    also reads the sendbuff, recvbuff and stream addresses, which only the tables written by
    ``logsift parse`` carry. ``ops`` numbers op names for the stream; ``tables`` makes the prefix and
    op tables (tests pass small ones).
    """

    def __init__(
        self,
        prefixes: PrefixParser,
        pointers: bool = True,
        tables: Callable[[], ByteTable] = ByteTable,
        ops: Names | None = None,
    ):
        self.pointers = pointers
        self.ops = ops or Names()
        self.prefixes = Prefixes(tables(), prefixes)
        self._ops = _Ops(tables(), self.ops)

    def read(self, chunk: RawChunk) -> FastRows:
        lines = len(chunk)
        raw = chunk.view.raw
        if not lines or not len(raw):
            return _none()
        self.prefixes.trim()
        self._ops.trim()
        # Room for the scan to add what it meets, while each line is in the cache (what does not fit is added
        # after it): a new per-rank file brings a prefix or two for its thousands of lines.
        self.prefixes.table.make_room(*_NEW_PREFIXES)
        self._ops.table.make_room(*_NEW_OPS)
        integers, addresses, nil, ids = collscan.outputs(lines)
        taken = collscan.scan(
            raw,
            chunk.view.words,
            chunk.starts,
            chunk.ends,
            self.prefixes.table.arrays,
            self._ops.table.arrays,
            integers,
            addresses,
            nil,
            ids,
        )
        if not taken:
            return _none()
        integers, addresses, nil, ids = (
            integers[:, :taken],
            addresses[:, :taken],
            nil[:, :taken],
            ids[:, :taken],
        )
        prefix_ids, op_ids = ids[collscan.PREFIX_ID], ids[collscan.OP_ID]
        clean = self.prefixes.number(
            chunk.view, chunk.starts[integers[collscan.LINE]], integers[collscan.PREFIX_STOP], prefix_ids
        )
        self._ops.number(chunk.view, integers[collscan.OP_START], integers[collscan.OP_STOP], op_ids)
        # A prefix that is not one clean NCCL INFO envelope sends the line back to the general parser.
        pick = slice(None) if clean.all() else np.flatnonzero(clean)
        index = integers[collscan.LINE, pick]
        if not len(index):
            return _none()
        values = {name: integers[row, pick] for name, row in _NUMBERS.items()}
        values["comm"] = addresses[collscan.COMM, pick]
        if self.pointers:
            for name, row in _POINTERS.items():
                values[name], values[f"{name}_nil"] = addresses[row, pick], nil[row, pick]
        values["line_no"] = (index + chunk.first_line_no).astype(np.uint32)
        values["byte_offset"] = chunk.byte_offset[index]
        values["op"] = self._ops.global_ids[op_ids[pick]]
        values["sig"] = signatures(
            values["op"], values["count"], values["datatype"], values["redop"], values["root"]
        )
        values["prefix"] = prefix_ids[pick]
        fields, values["process"] = self.prefixes.fields(values["prefix"])
        return FastRows(index, FastPiece(chunk.source_id, values, fields, self.ops))


class Prefixes:
    """The prefix table and, by prefix id, whether the prefix is a clean envelope, its fields and the hash
    of its (host, pid); shared with the transport fast path (parse/fasttransport.py) of the same thread."""

    def __init__(self, table: ByteTable, parse: PrefixParser):
        self.table = table
        self._parse = parse
        self._forget()

    def _forget(self) -> None:
        self._good = np.zeros(0, dtype=bool)
        self._process = np.zeros(0, dtype=np.uint64)
        self._fields: PrefixFields | None = None

    def trim(self) -> None:
        if self.table.trim():
            self._forget()

    def number(self, view: ByteView, starts: np.ndarray, stops: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Number the prefixes the scan did not know (``ids`` -1, filled in place) and parse them; whether
        each row's prefix is a clean envelope."""
        self.table.add(view.raw, view.words, starts, stops, ids)
        known, count = len(self._good), len(self.table)
        if count > known:
            texts = [text.decode("utf-8", errors="replace") for text in self.table.strings(known, count)]
            parsed = self._parse(texts)
            self._good = np.concatenate([self._good, np.array(parsed.clean, dtype=bool)])
            self._process = np.concatenate(
                [self._process, pair_keys(parsed.column("host"), parsed.column("pid"))]
            )
            if self._fields is None:  # the launcher's stream renamed, as in the calls' frame
                names = {LAUNCHER_STREAM if n == "stream" else n: t for n, t in parsed.columns.items()}
                self._fields = PrefixFields(pl.DataFrame(schema=names))
            # Tuples, made a frame by the main thread when it reads the fields (a frame per new per-rank
            # file's prefix cost its scanning thread ~1 ms).
            self._fields.add(parsed.fields)
        return self._good[ids]

    def fields(self, ids: np.ndarray) -> tuple[PrefixFields, np.ndarray]:
        """The fields of every prefix known, by id (one frame, shared by the pieces that index it: no
        copy per chunk), and each row's (host, pid) hash."""
        return self._fields, self._process[ids]


class _Ops:
    """The op-name table and each name's id among the stream's op names."""

    def __init__(self, table: ByteTable, names: Names):
        self.table = table
        self._names = names
        self.global_ids = np.zeros(0, dtype=np.int32)

    def trim(self) -> None:
        if self.table.trim():
            self.global_ids = np.zeros(0, dtype=np.int32)

    def number(self, view: ByteView, starts: np.ndarray, stops: np.ndarray, ids: np.ndarray) -> None:
        """Number the op names the scan did not know (``ids`` -1, filled in place)."""
        self.table.add(view.raw, view.words, starts, stops, ids)
        known, count = len(self.global_ids), len(self.table)
        if count > known:  # letters only, checked by the scan
            new = [text.decode("ascii") for text in self.table.strings(known, count)]
            self.global_ids = np.concatenate([self.global_ids, self._names.ids(new)])


def _none() -> FastRows:
    return FastRows(np.empty(0, dtype=np.int64), None)
