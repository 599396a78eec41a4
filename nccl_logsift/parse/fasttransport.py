"""The fast path for transport lines: one line per connection a communicator sets up, read by position.

A job of N ranks prints a line per channel and peer at every communicator's init (``Channel 02/0 : 3[3] ->
4[4] via P2P/CUMEM/read``, ``Channel 00/0 : 4095[7] -> 0[0] [receive] via NET/IB/0/GDRDMA``: grammar §4.1,
``grammars/nccl/transport.toml``), from src/transport/{p2p,shm,net}.cc's ``INFO(NCCL_INIT|NCCL_P2P,
"Channel %02d/%d : %d[%d] -> %d[%d] via %s", ...)``. A 4096-rank job printed 255,000 of them in 57 MB of
init, nearly every one a distinct message; through the general parser they cost ~4 µs each.

The compiled scan (``collscan.transports``) reads, in the scanning threads, the lines the COLL fast path
left: the head before the first `` NCCL INFO `` (looked up in the COLL fast path's prefix table, so a head
is parsed once whichever path meets it), then ``(Channel|Ring) N[/N] : N[[hex]] -> N[[hex]]`` and the
*tail*: the rest of the line (`` via P2P/CUMEM/read``, `` [receive] via NET/IB/0/GDRDMA``, RCCL's `` comm %p
nRanks %02d`` after it). The channel, connection and ranks are numbers and the device brackets text; every
other field of the row (transport, path, P2P mode and flags, net name and device, direction, GDR, RCCL's
comm) comes from the tail alone. So each distinct tail is parsed once, by the general parser's own message
grammars, in a canonical message (``Channel 0/0 : 0[0] -> 1[1]`` and the tail): lines with that tail are
taken only when the grammars give that message a ``transports`` row of the transport family with exactly
those six values, and the tail holds no mark of a glued line (where those are cut depends on the hosts
known). A tail of anything else (the 2.10+ ``Ring 00 : 3 -> 0 -> 1`` neighbour line, a topology dump) leaves
its lines to the general parser, as do a head that is not one clean INFO envelope, a number of more than 18
digits, an ANSI escape or a byte that is not printable ASCII in the tail.

tests/parse/test_fastcoll.py holds the tables to the general parser's on every fixture and real log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from nccl_logsift.io.lines import RawChunk
from nccl_logsift.memory import copied
from nccl_logsift.parse import collscan
from nccl_logsift.parse.calls import LAUNCHER_STREAM, PrefixFields, nullable
from nccl_logsift.parse.collscan import ByteTable
from nccl_logsift.parse.fastcoll import Prefixes
from nccl_logsift.parse.lineparser import GLUE_MARKS, LineParser
from nccl_logsift.parse.schema import TableSchemas, conform

TABLE = "transports"
FAMILY = "transport"
# The canonical message a tail is parsed in, and the values the grammar must read from it: the scan reads
# these six from every line.
CANONICAL = "Channel 0/0 : 0[0] -> 1[1]"
SCANNED = {"channel": 0, "conn_index": 0, "from_rank": 0, "from_dev": "0", "to_rank": 1, "to_dev": "1"}


def tail_fields(parser: LineParser, tails: list[str]) -> pl.DataFrame:
    """Per tail, in order: whether lines with it are taken (``__taken``) and the fields it gives a row (the
    ``transports`` columns but the scanned ones, with ``family`` and ``pattern``)."""
    claimed = parser.claim([CANONICAL + tail for tail in tails]).get(TABLE)
    marked = [any(mark in tail for mark in GLUE_MARKS) for tail in tails]
    if claimed is None:
        nothing = pl.Series([None] * len(tails), dtype=pl.String)
        return pl.DataFrame(
            {"__taken": np.zeros(len(tails), dtype=bool), "family": nothing, "pattern": nothing}
        )
    read = pl.all_horizontal(
        pl.col(name).eq_missing(pl.lit(value)) if name in claimed.columns else pl.lit(False)
        for name, value in SCANNED.items()
    )
    good = (pl.col("family") == FAMILY) & read & (pl.col("__unfit") == 0)
    fields = claimed.with_columns(good.fill_null(False).alias("__taken")).drop(
        "__unfit", *SCANNED, strict=False
    )
    index = pl.DataFrame({"row": pl.Series(range(len(tails)), dtype=pl.UInt32)})
    joined = index.join(fields, on="row", how="left", maintain_order="left").drop("row")
    taken = joined.get_column("__taken").fill_null(False) & ~pl.Series(marked, dtype=pl.Boolean)
    return joined.with_columns(taken.alias("__taken"))


@dataclass(frozen=True, slots=True)
class TransportPiece:
    """A chunk's transport lines read by the fast path: arrays, and the frames their ids index (each fast
    path's own, grown at the end only: a piece indexes the rows that were there when it was read)."""

    source_id: int
    values: dict[str, np.ndarray]  # line_no, byte_offset, channel, conn_index (+ _nil), ranks, ids
    fields: PrefixFields  # the prefixes' fields, by prefix id
    tails: pl.DataFrame  # the tails' fields, by tail id
    devs: pl.Series  # the device brackets' text, by id
    text: pl.Series | None  # each line's text, when the parser keeps it (views of the chunk's bytes)
    keys: np.ndarray | None = None  # the keys of their texts (accel.split_keys), when repeats are skipped

    def __len__(self) -> int:
        return len(self.values["line_no"])

    def take(self, keep: np.ndarray) -> TransportPiece:
        """The rows ``keep`` (a mask) keeps."""
        return replace(
            self,
            values={name: column[keep] for name, column in self.values.items()},
            text=None if self.text is None else self.text.filter(pl.Series(keep)),
            keys=None if self.keys is None else self.keys[keep],
        )

    def detached(self) -> TransportPiece:
        """The piece with its text copied out of the chunk it was read in (which it kept whole)."""
        return replace(self, text=None if self.text is None else copied(self.text))


def tables(pieces: Sequence[TransportPiece], schemas: TableSchemas) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The ``transports`` and ``lines`` rows of ``pieces``, in their order, as the general parser gives them:
    one frame for them all (a directory of 512 per-rank files brings a piece a file, and frames made a
    piece at a time cost ~4 ms each)."""
    v = {name: np.concatenate([piece.values[name] for piece in pieces]) for name in pieces[0].values}
    n = len(v["line_no"])
    sources = np.concatenate([np.full(len(piece), piece.source_id, dtype=np.uint16) for piece in pieces])
    location = pl.DataFrame(
        [
            pl.Series("source_id", sources),
            pl.Series("line_no", v["line_no"]),
            pl.Series("part", np.zeros(n, dtype=np.uint8)),
            pl.Series("byte_offset", v["byte_offset"]),
        ]
    )
    fields, prefix_ids = _joined(pieces, lambda piece: piece.fields.frame, "prefix")
    prefix = fields[prefix_ids].rename({LAUNCHER_STREAM: "stream"}, strict=False)
    tails, tail_ids = _joined(pieces, lambda piece: piece.tails, "tail")
    tail = tails[tail_ids]
    devs = [_joined(pieces, lambda piece: piece.devs, name) for name in ("from_dev", "to_dev")]
    scanned = pl.DataFrame(
        [
            pl.Series("channel", v["channel"]),
            nullable("conn_index", v["conn_index"], v["conn_index_nil"]),
            pl.Series("from_rank", v["from_rank"]),
            pl.Series("to_rank", v["to_rank"]),
            *(_devs(name, column, ids) for name, (column, ids) in zip(("from_dev", "to_dev"), devs)),
        ]
    )
    transports = conform(
        pl.concat([location, prefix, scanned, tail], how="horizontal"), schemas.tables[TABLE]
    )
    lines = [location, prefix, tail.select("family", "pattern")]
    if pieces[0].text is not None:
        lines.append(pl.concat([piece.text for piece in pieces if piece.text is not None]).to_frame())
    marks = pl.DataFrame({"producer": ["nccl"] * n, "torn": np.zeros(n, dtype=bool)})
    return transports, conform(pl.concat([*lines, marks], how="horizontal"), schemas.lines)


def _joined(pieces: Sequence[TransportPiece], frame_of: Callable[[TransportPiece], Any], name: str) -> tuple:
    """The frames (or columns) the pieces' ids ``name`` index, one after the other (one per fast path, or
    per time its frame grew), and the ids into that; -1 (no value) stays -1. Each piece's frame is read once:
    a scanning thread may grow its fast path's while this runs."""
    frames = [frame_of(piece) for piece in pieces]
    starts: dict[int, int] = {}
    distinct = []
    for frame in frames:
        if id(frame) not in starts:
            starts[id(frame)] = sum(len(f) for f in distinct)
            distinct.append(frame)
    ids = np.concatenate(
        [
            np.where(piece.values[name] < 0, -1, piece.values[name] + starts[id(frame)])
            for piece, frame in zip(pieces, frames)
        ]
    )
    if len(distinct) == 1:
        return distinct[0], ids
    return pl.concat(
        distinct, how="diagonal_relaxed" if isinstance(distinct[0], pl.DataFrame) else "vertical"
    ), ids


def _devs(name: str, devs: pl.Series, ids: np.ndarray) -> pl.Series:
    absent = ids < 0
    if absent.all():  # 2.4's lines have no brackets (and the table may hold none)
        return pl.Series(name, [None] * len(ids), dtype=pl.String)
    return devs.gather(np.where(absent, 0, ids)).alias(name).scatter(np.flatnonzero(absent), None)


def merged(table: pl.DataFrame, fast: pl.DataFrame) -> pl.DataFrame:
    """``table`` (the general parser's) with the fast path's rows of it, in line order. The rows are put in
    order by one numpy sort of their places (:func:`_places`): polars' sort on the three columns encoded
    them as rows first (coll4096's merges: 0.21 against 0.14 s). (Merging the two sorted frames,
    ``merge_sorted`` on one key, cost as much as the sort: either gathers every column.)"""
    if fast.is_empty():
        return table
    if table.is_empty() and _in_line_order(fast):  # as the pieces come, mostly
        return fast
    both = pl.concat([table, fast])
    return both[np.argsort(_places(both), kind="stable")]


def _places(frame: pl.DataFrame) -> np.ndarray:
    """Each row's place as one number, in the order of (source_id, line_no, part): 16, 32 and 8 bits."""
    place = frame.get_column("source_id").to_numpy().astype(np.uint64) << np.uint64(40)
    place |= frame.get_column("line_no").to_numpy().astype(np.uint64) << np.uint64(8)
    place |= frame.get_column("part").to_numpy().astype(np.uint64)
    return place


def _in_line_order(frame: pl.DataFrame) -> bool:
    place = _places(frame)
    return bool(np.all(place[1:] > place[:-1]))


class TransportFastPath:
    """Reads the transport lines among a chunk's lines. ``prefixes`` is the COLL fast path's prefix table
    (``fastcoll.CollFastPath.prefixes``); ``fields`` parses new tails (:func:`tail_fields`); ``text`` keeps
    each line's text."""

    def __init__(
        self,
        prefixes: Prefixes,
        fields: Callable[[list[str]], pl.DataFrame],
        text: bool = True,
        tables: Callable[[], ByteTable] = ByteTable,
    ):
        self._prefixes = prefixes
        self._fields = fields
        self._text = text
        self._tail_table, self._dev_table = tables(), tables()
        self._forget_tails()
        self._forget_devs()

    def _forget_tails(self) -> None:
        self._taken = np.zeros(0, dtype=bool)
        self._tails: pl.DataFrame | None = None

    def _forget_devs(self) -> None:
        self._devs = pl.Series("dev", [], dtype=pl.String)

    def read(self, chunk: RawChunk, rows: np.ndarray) -> tuple[np.ndarray, TransportPiece | None]:
        """The positions (ascending, among ``rows``) of the chunk's transport lines, and their piece."""
        none = np.empty(0, dtype=np.int64), None
        if not len(rows):
            return none
        if self._tail_table.trim():
            self._forget_tails()
        if self._dev_table.trim():
            self._forget_devs()
        view = chunk.view
        integers, ids = collscan.transport_outputs(len(rows))
        taken = collscan.transports(
            view.raw,
            view.words,
            chunk.starts,
            chunk.ends,
            rows.astype(np.int64, copy=False),
            self._prefixes.table.arrays,
            self._tail_table.arrays,
            self._dev_table.arrays,
            integers,
            ids,
        )
        if not taken:
            return none
        integers, ids = integers[:, :taken], ids[:, :taken]
        lines = integers[collscan.T_LINE]
        clean = self._prefixes.number(
            view, chunk.starts[lines], integers[collscan.T_PREFIX_STOP], ids[collscan.T_PREFIX_ID]
        )
        tail_ids = ids[collscan.T_TAIL_ID]
        self._tail_table.add(
            view.raw, view.words, integers[collscan.T_TAIL_START], chunk.ends[lines], tail_ids
        )
        self._learn_tails()
        for start, stop, id_row in (
            (collscan.T_FROM_DEV_START, collscan.T_FROM_DEV_STOP, collscan.T_FROM_DEV_ID),
            (collscan.T_TO_DEV_START, collscan.T_TO_DEV_STOP, collscan.T_TO_DEV_ID),
        ):
            bracketed = np.flatnonzero(integers[start] >= 0)
            if len(bracketed):
                dev_ids = ids[id_row, bracketed]
                self._dev_table.add(
                    view.raw, view.words, integers[start, bracketed], integers[stop, bracketed], dev_ids
                )
                ids[id_row, bracketed] = dev_ids
        self._learn_devs()
        keep = clean & self._taken[tail_ids]
        pick = slice(None) if keep.all() else np.flatnonzero(keep)
        index = lines[pick]
        if not len(index):
            return none
        conn = integers[collscan.T_CONN, pick]
        values = {
            "line_no": (index + chunk.first_line_no).astype(np.uint32),
            "byte_offset": chunk.byte_offset[index],
            "channel": integers[collscan.T_CHANNEL, pick],
            "conn_index": conn,
            "conn_index_nil": conn == collscan.NO_VALUE,
            "from_rank": integers[collscan.T_FROM, pick],
            "to_rank": integers[collscan.T_TO, pick],
            "from_dev": ids[collscan.T_FROM_DEV_ID, pick],
            "to_dev": ids[collscan.T_TO_DEV_ID, pick],
            "tail": tail_ids[pick],
            "prefix": ids[collscan.T_PREFIX_ID, pick],
        }
        text = None
        if self._text:
            starts = chunk.starts[index]
            text = view.strings(starts, chunk.ends[index] - starts, "text")
        fields, _ = self._prefixes.fields(values["prefix"])
        assert self._tails is not None
        return index, TransportPiece(chunk.source_id, values, fields, self._tails, self._devs, text)

    def _learn_tails(self) -> None:
        known, count = len(self._taken), len(self._tail_table)
        if count <= known:
            return
        # Printable ASCII, as the scan checked.
        fresh = self._fields([tail.decode("ascii") for tail in self._tail_table.strings(known, count)])
        self._taken = np.concatenate([self._taken, fresh.get_column("__taken").to_numpy()])
        fields = fresh.drop("__taken")
        self._tails = (
            fields if self._tails is None else pl.concat([self._tails, fields], how="diagonal_relaxed")
        )

    def _learn_devs(self) -> None:
        known, count = len(self._devs), len(self._dev_table)
        if count > known:
            fresh = [d.decode("ascii") for d in self._dev_table.strings(known, count)]  # hex digits: scanned
            self._devs = pl.concat([self._devs, pl.Series("dev", fresh, dtype=pl.String)])
