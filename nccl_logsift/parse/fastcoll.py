"""The fast path for the bulk of a COLL-heavy log: NCCL INFO COLL lines read by position, not by regex.

With NCCL_DEBUG_SUBSYS=COLL almost every line is one collective call, printed by one format string
(src/enqueue.cc, ``ncclInfoSetDerived`` / ``INFO(NCCL_COLL, "%s: opCount %lx sendbuff %p recvbuff %p
count %zu datatype %d op %d root %d comm %p [nranks=%d] stream %p", ...)``, grammar §5.1). Its message
has a fixed number of space-separated tokens, so counting tokens from the *end* of the line finds every
field whatever launcher prefix precedes the envelope. A compiled loop (:mod:`~nccl_logsift.parse.collscan`)
walks each line once, checks every literal token and reads every number.

The prefix before `` NCCL INFO`` (launcher tags, host:pid:tid [dev]) repeats for every line of a
thread: the loop numbers distinct prefixes in a hash table kept across chunks, and each new one is
parsed once by the grammar-driven general parser; its fields reach the rows by that number.

A line is taken only when every literal token, the shape of every value and its prefix check out;
anything else (RCCL's extra fields, the 2.3.5 form, torn or glued lines, ANSI colours, values that do
not fit 64 bits) is left to the general parser, which stays the reference: tests compare the two on
real logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import polars as pl

from nccl_logsift.io.lines import ByteView, RawChunk
from nccl_logsift.parse import collscan
from nccl_logsift.parse.collscan import ByteTable

FAMILY = "coll"
PATTERN = "coll"
TABLE = "collectives"
# Fields the fast path reads from the message, and the launcher's "stream" (stdout/stderr), renamed
# while both sit in one frame because COLL lines have a "stream" address too.
COLL_FIELDS = ("op", "opcount", "count", "datatype", "redop", "root", "comm", "nranks", "sendbuff", "recvbuff", "stream")
LAUNCHER_STREAM = "launcher_stream"
_POINTERS = {"sendbuff": collscan.SENDBUFF, "recvbuff": collscan.RECVBUFF, "stream": collscan.STREAM}
# The call fields, after the prefix fields: rows of collscan's integer outputs, then comm.
_CALL = {"count": collscan.COUNT, "datatype": collscan.DATATYPE, "redop": collscan.REDOP, "root": collscan.ROOT, "nranks": collscan.NRANKS}

# What the prefix parser returns for distinct prefixes: a "prefix" column, "producer" ("nccl" when the
# prefix is exactly one clean NCCL INFO envelope, else null: the line goes to the general parser) and
# the envelope and launcher fields.
PrefixParser = Callable[[list[str]], pl.DataFrame]


@dataclass(frozen=True, slots=True)
class FastRows:
    """COLL rows read by the fast path and the chunk positions (line indices) they came from."""

    index: np.ndarray  # int64 positions in the chunk, ascending
    rows: pl.DataFrame  # line_no, byte_offset, prefix fields, COLL fields


class CollFastPath:
    """Reads canonical COLL lines of a chunk.

    ``prefixes`` parses distinct line prefixes (the general parser's launcher and envelope grammars),
    once per prefix while the table of known ones (``ByteTable``, bounded) holds it. ``pointers``
    also reads the sendbuff, recvbuff and stream addresses, which only the tables written by
    ``logsift parse`` carry. ``tables`` makes the prefix and op tables (tests pass small ones).
    """

    def __init__(self, prefixes: PrefixParser, pointers: bool = True, tables: Callable[[], ByteTable] = ByteTable):
        self._parse_prefixes = prefixes
        self.pointers = pointers
        self._prefixes = _Prefixes(tables(), self._prefix_rows)
        self._ops = _Ops(tables())

    def read(self, chunk: RawChunk) -> FastRows:
        lines = len(chunk)
        raw = chunk.view.raw
        if not lines or not len(raw):
            return _none()
        self._prefixes.trim()
        self._ops.trim()
        integers, addresses, nil, ids = collscan.outputs(lines)
        taken = collscan.scan(
            raw, chunk.view.words, chunk.starts, chunk.ends, self._prefixes.table.arrays, self._ops.table.arrays, integers, addresses, nil, ids
        )
        if not taken:
            return _none()
        integers, addresses, nil, ids = integers[:, :taken], addresses[:, :taken], nil[:, :taken], ids[:, :taken]
        prefix_ids, op_ids = ids[collscan.PREFIX_ID], ids[collscan.OP_ID]
        clean = self._prefixes.number(chunk.view, chunk.starts[integers[collscan.LINE]], integers[collscan.PREFIX_STOP], prefix_ids)
        self._ops.number(chunk.view, integers[collscan.OP_START], integers[collscan.OP_STOP], op_ids)
        # A prefix that is not one clean NCCL INFO envelope sends the line back to the general parser.
        pick = slice(None) if clean.all() else np.flatnonzero(clean)
        index = integers[collscan.LINE, pick]
        if not len(index):
            return _none()
        columns = [
            pl.Series("line_no", (index + chunk.first_line_no).astype(np.uint32)),
            pl.Series("byte_offset", chunk.byte_offset[index]),
            self._ops.names(op_ids[pick]),
            pl.Series("opcount", integers[collscan.OPCOUNT, pick]),
        ]
        if self.pointers:
            columns += [_nullable(name, addresses[row, pick], nil[row, pick]) for name, row in _POINTERS.items()]
        frame = pl.DataFrame(columns)
        fields = self._prefixes.fields(prefix_ids[pick])
        call = [pl.Series(name, integers[row, pick]) for name, row in _CALL.items()]
        call.append(pl.Series("comm", addresses[collscan.COMM, pick]))
        return FastRows(index, pl.concat([frame, fields, pl.DataFrame(call)], how="horizontal"))

    def _prefix_rows(self, prefixes: list[str]) -> pl.DataFrame:
        parsed = self._parse_prefixes(prefixes)
        return parsed.rename({"stream": LAUNCHER_STREAM}) if "stream" in parsed.columns else parsed


class _Prefixes:
    """The prefix table and, by prefix id, whether the prefix is a clean envelope and its fields."""

    def __init__(self, table: ByteTable, parse: PrefixParser):
        self.table = table
        self._parse = parse
        self._good = np.zeros(0, dtype=bool)
        self._fields: pl.DataFrame | None = None

    def trim(self) -> None:
        if self.table.trim():
            self._good, self._fields = np.zeros(0, dtype=bool), None

    def number(self, view: ByteView, starts: np.ndarray, stops: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Number the prefixes the scan did not know (``ids`` -1, filled in place) and parse them; whether
        each row's prefix is a clean envelope."""
        self.table.add(view.raw, view.words, starts, stops, ids)
        known, count = len(self._good), len(self.table)
        if count > known:
            texts = [text.decode("utf-8", errors="replace") for text in self.table.strings(known, count)]
            parsed = self._parse(texts)
            # By id: the parser's rows in the order of the texts given.
            parsed = pl.DataFrame({"prefix": pl.Series(texts, dtype=pl.String)}).join(
                parsed, on="prefix", how="left", maintain_order="left"
            )
            self._good = np.concatenate([self._good, parsed["producer"].is_not_null().to_numpy()])
            fields = parsed.drop("prefix", "producer")
            self._fields = fields if self._fields is None else pl.concat([self._fields, fields], how="vertical_relaxed")
        return self._good[ids]

    def fields(self, ids: np.ndarray) -> pl.DataFrame:
        """The envelope and launcher fields of rows whose prefixes have these ids."""
        return self._fields[ids]


class _Ops:
    """The op-name table and the names by id, as a String column."""

    def __init__(self, table: ByteTable):
        self.table = table
        self._names = pl.Series("op", dtype=pl.String)

    def trim(self) -> None:
        if self.table.trim():
            self._names = pl.Series("op", dtype=pl.String)

    def number(self, view: ByteView, starts: np.ndarray, stops: np.ndarray, ids: np.ndarray) -> None:
        """Number the op names the scan did not know (``ids`` -1, filled in place)."""
        self.table.add(view.raw, view.words, starts, stops, ids)
        known, count = len(self._names), len(self.table)
        if count > known:  # letters only, checked by the scan
            new = pl.Series("op", [text.decode("ascii") for text in self.table.strings(known, count)], dtype=pl.String)
            self._names = pl.concat([self._names, new])

    def names(self, ids: np.ndarray) -> pl.Series:
        """The names of these ids: a gather from the few distinct ones."""
        return self._names.gather(ids)


def _nullable(name: str, values: np.ndarray, nil: np.ndarray) -> pl.Series:
    """``values`` as a UInt64 column, null where ``nil`` (%p printed "(nil)")."""
    series = pl.Series(name, values)
    return series.scatter(np.flatnonzero(nil), None) if nil.any() else series


def _none() -> FastRows:
    return FastRows(np.empty(0, dtype=np.int64), pl.DataFrame())
