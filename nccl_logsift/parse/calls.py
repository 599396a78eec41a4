"""COLL calls as arrays: what numbering and the digest read, with a row's other columns built only on demand.

A COLL-heavy log is millions of calls, and the diagnosis looks at the columns of a few hundred thousand
of them (the digest's window, see resolve/digest.py). So the calls of a batch travel as :class:`Calls`:
one numpy array per column the compiled loops read (who called, on which communicator, opCount, nranks,
a hash of the call's signature), plus the *pieces* the rows came from. A piece is either a chunk's rows
read by the COLL fast path (:class:`FastPiece`: arrays, and the fields of the few distinct line prefixes)
or a polars frame of rows the general parser read (:class:`FramePiece`). ``Calls.frame`` builds the
polars rows, with every column the grammar gives a COLL line, for the rows asked for and nothing else.

Strings the loops compare (op names, communicator uids) are numbered by :class:`Names`, one per stream,
so equal strings have equal ids in every batch.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from nccl_logsift import accel
from nccl_logsift.memory import detached

if TYPE_CHECKING:
    from nccl_logsift.io.lines import ByteView, RawChunk

# The columns every piece gives the loops; a Calls holds these, then what numbering adds.
KERNEL = ("seq", "process", "comm", "opcount", "has_opcount", "nranks", "sig", "op")
_KERNEL_TYPES = (np.int64, np.uint64, np.uint64, np.int64, np.bool_, np.int64, np.int64, np.int32)
# Numbering's results: the instance (a hash, and "slot": a dense id in the order of first call), the call's
# ordinal, and the instance's generation, comm rank and communicator uid (ids in Calls.uids); the
# sentinels below stand for null.
NUMBERED = ("instance", "slot", "ordinal", "generation", "rank", "uid")
NO_GENERATION = np.iinfo(np.int32).min
NO_RANK = np.iinfo(np.int64).min
NO_ID = -1
_NO_VALUE = np.iinfo(np.int64).min  # a null signature field, in the signature hash
ADDED: dict[str, pl.DataType] = {
    "generation": pl.Int32(),
    "rank": pl.Int64(),
    "comm_uid": pl.String(),
    "ordinal": pl.Int64(),
}
LOCATION = ["source_id", "line_no", "part"]
FAMILY = PATTERN = "coll"  # what the general parser's coll pattern would say of the fast path's rows
# The launcher's "stream" (stdout/stderr) among a fast row's prefix fields, renamed while it sits in one
# frame with the COLL "stream" address.
LAUNCHER_STREAM = "launcher_stream"


class Names:
    """Strings numbered 0, 1, 2, ... in order of first sight; shared by the threads of one stream."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self.names: list[str] = []
        self._lock = threading.Lock()

    def ids(self, values: Sequence[str | None]) -> np.ndarray:
        """The id of each value (int32, NO_ID for None)."""
        with self._lock:
            out = np.empty(len(values), dtype=np.int32)
            for i, value in enumerate(values):
                if value is None:
                    out[i] = NO_ID
                    continue
                known = self._ids.get(value)
                if known is None:
                    known = self._ids[value] = len(self.names)
                    self.names.append(value)
                out[i] = known
            return out

    def of(self, series: pl.Series) -> np.ndarray:
        """The ids of a String column: looked up once per distinct value."""
        distinct = series.unique(maintain_order=True)
        ids = self.ids(distinct.to_list())
        position = (
            series.to_frame("v")
            .join(
                distinct.to_frame("v").with_row_index("at"),
                on="v",
                how="left",
                nulls_equal=True,
                maintain_order="left",
            )["at"]
            .to_numpy()
        )
        return ids[position]

    def series(self, name: str, ids: np.ndarray) -> pl.Series:
        """A String column of the names of ``ids`` (null for NO_ID)."""
        with self._lock:
            names = pl.Series(name, self.names, dtype=pl.String)
        return names.gather(nullable("", ids.astype(np.int64), ids < 0))


def nullable(name: str, values: np.ndarray, null: np.ndarray) -> pl.Series:
    """``values`` as a column, null where ``null``."""
    series = pl.Series(name, values)
    return series.scatter(np.flatnonzero(null), None) if null.any() else series


def process_keys(frame: pl.DataFrame) -> np.ndarray:
    """A hash of each row's (host, pid) (uint64): with the comm address, what finds a call's communicator
    instance.

    Each distinct pair is hashed in Python (:func:`_process_key`), so that a few rows cost no query: a
    scanning thread asks for the one or two new prefixes of every per-rank file, and a polars query
    (~0.2 ms, more beside the other threads' queries) was ~15% of what 4,096 such files cost it. A larger
    frame finds its distinct pairs, and each row its pair's hash, in polars."""
    n = frame.height
    host = (
        frame.get_column("host").cast(pl.String)
        if "host" in frame.columns
        else pl.repeat(None, n, dtype=pl.String, eager=True)
    )
    pid = (
        frame.get_column("pid").cast(pl.Int64)
        if "pid" in frame.columns
        else pl.repeat(None, n, dtype=pl.Int64, eager=True)
    )
    if n <= _FEW_PROCESS_ROWS:
        return pair_keys(host.to_list(), pid.to_list())
    pairs = pl.DataFrame([host.alias("host"), pid.alias("pid")])
    distinct = pairs.unique(maintain_order=True)
    keys = pl.Series("key", [_process_key(h, p) for h, p in distinct.iter_rows()], dtype=pl.UInt64)
    keyed = pairs.join(
        distinct.with_columns(keys), on=["host", "pid"], how="left", nulls_equal=True, maintain_order="left"
    )
    return keyed.get_column("key").to_numpy()


_FEW_PROCESS_ROWS = 64


def pair_keys(hosts: list[str | None], pids: list[int | None]) -> np.ndarray:
    """:func:`process_keys` of a few (host, pid) pairs, hashed in Python."""
    return np.array([_process_key(h, p) for h, p in zip(hosts, pids)], dtype=np.uint64)


def _process_key(host: str | None, pid: int | None) -> int:
    """The key of one (host, pid): the first 8 bytes of its BLAKE2b digest, the same in every run (a null host
    or pid is told from every value)."""
    text = ("-" if host is None else "+" + host) + "\0" + ("-" if pid is None else str(pid))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def seq_of(source_id: np.ndarray | int, line_no: np.ndarray, part: np.ndarray | int = 0) -> np.ndarray:
    """A total order over the lines of all sources (resolve.communicators.with_seq, as arrays)."""
    return (
        (np.asarray(source_id, dtype=np.int64) << 40)
        + (line_no.astype(np.int64) << 8)
        + np.asarray(part, dtype=np.int64)
    )


def signatures(
    op: np.ndarray, count: np.ndarray, datatype: np.ndarray, redop: np.ndarray, root: np.ndarray
) -> np.ndarray:
    """A hash of each call's (op, count, datatype, redop, root): equal calls, equal hashes (int64).
    ``op`` holds :class:`Names` ids (int32), the others int64."""
    out = np.empty(len(op), dtype=np.int64)
    accel.calls_signatures(op, count, datatype, redop, root, out)
    return out


def instance_keys(process: np.ndarray, comm: np.ndarray) -> np.ndarray:
    """The (host, pid, comm) key of each call or instance start (uint64, from two uint64 columns)."""
    out = np.empty(len(process), dtype=np.uint64)
    accel.calls_instance_keys(process, comm, out)
    return out


# Distinct prefix fields frames that the pieces of one frame may index (Calls.frame): every scanning thread
# has its own, which grows into a new frame as it learns new prefixes.
_JOINED_FIELDS = 4
_PINNED_SHARE = 2  # kept calls keep their chunk while their text is at least 1/2 of it (FastPiece.lines)


class PrefixFields:
    """The fields of the line prefixes one fast path numbered, a row per prefix id. Rows are only ever added
    at the end (a fast path that forgets its prefixes starts another), so a piece that indexes it when it
    was smaller indexes the same rows now: the pieces of one scanning thread, over every file it read,
    share one frame (a directory of 512 per-rank files brings a new prefix, and a new frame, with every
    file).

    Rows :meth:`add` ed are joined to the frame when it is next read (by the main thread, once a batch): a
    join per file cost the scanning threads of 4,096 per-rank files ~10% of their time. The line heads a
    parser read (``lineparser._Heads``) are kept the same way."""

    __slots__ = ("_added", "_frame", "_lock")

    def __init__(self, frame: pl.DataFrame):
        self._frame = frame
        self._added: list[pl.DataFrame | list[tuple]] = []
        self._lock = threading.Lock()

    def add(self, rows: pl.DataFrame | list[tuple]) -> None:
        """Add ``rows`` at the end: a frame of the same columns, or tuples in their order (made a frame,
        with the tuples added next to them, when the frame is read)."""
        with self._lock:
            self._added.append(rows)

    @property
    def frame(self) -> pl.DataFrame:
        with self._lock:
            if self._added:
                schema = self._frame.schema
                frames, tuples = [self._frame], []
                for rows in self._added:
                    if isinstance(rows, list):
                        tuples += rows
                        continue
                    if tuples:
                        frames.append(pl.DataFrame(tuples, schema=schema, orient="row"))
                        tuples = []
                    frames.append(rows)
                if tuples:
                    frames.append(pl.DataFrame(tuples, schema=schema, orient="row"))
                self._frame = pl.concat(frames, how="vertical_relaxed").rechunk()
                self._added = []
            return self._frame


class FastPiece:
    """A chunk's rows read by the COLL fast path: arrays, and the fields of the line prefixes they index.

    ``values`` holds a column per field read from the message (and ``line_no``, ``byte_offset``,
    ``op`` ids, ``prefix``: each row's row in ``fields``, the prefixes the fast path knew, shared by the
    pieces of many chunks; pointer columns come with a ``<name>_nil`` mask), and the loops' columns
    ``process``, ``sig``; a piece :meth:`joined` from several sources has each row's ``source_id`` too.
    ``text`` is each line's text (``logsift parse`` only). ``lines`` is the chunk's bytes and the rows' line
    bounds, set when the input cannot be read again for evidence (standard input, compressed files): the
    rows :meth:`take` keeps keep the chunk, or get their text copied out when they hold less than
    1/``_PINNED_SHARE`` of its bytes (a digest keeping a few calls of many chunks would otherwise keep every
    chunk whole).
    """

    # The message's columns, in the order of the frame (prefix fields go after opcount and the pointers).
    HEAD = ("line_no", "byte_offset", "op", "opcount")
    POINTERS = ("sendbuff", "recvbuff", "stream")
    CALL = ("count", "datatype", "redop", "root", "nranks", "comm")

    __slots__ = ("fields", "lines", "ops", "source_id", "text", "values")

    def __init__(
        self,
        source_id: int,
        values: dict[str, np.ndarray],
        fields: PrefixFields,
        ops: Names,
        text: pl.Series | None = None,
    ):
        self.source_id = source_id
        self.values = values
        self.fields = fields
        self.ops = ops
        self.text = text
        self.lines: tuple[ByteView, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.values["line_no"])

    def kernel(self) -> dict[str, np.ndarray]:
        v = self.values
        return {
            "seq": seq_of(v.get("source_id", self.source_id), v["line_no"]),
            "process": v["process"],
            "comm": v["comm"],
            "opcount": v["opcount"],
            "has_opcount": np.ones(len(self), dtype=np.bool_),
            "nranks": v["nranks"],
            "sig": v["sig"],
            "op": v["op"],
        }

    def take(self, rows: np.ndarray) -> FastPiece:
        values = {name: column[rows] for name, column in self.values.items()}
        # Gathered text shares the buffers of the text it came from, whole: the digest's window takes a few
        # rows of a piece at every trim, and kept the text of every row it had once held (mixed32 watched
        # from standard input: 930-950 MB, now 680-690 MB).
        text = None if self.text is None else detached(self.text.gather(rows).to_frame()).to_series()
        piece = FastPiece(self.source_id, values, self.fields, self.ops, text)
        if self.lines is not None:
            piece.text, piece.lines = _taken_lines(self.lines, rows)
        return piece

    @staticmethod
    def joined(pieces: Sequence[FastPiece], rows: Sequence[np.ndarray]) -> FastPiece:
        """The ``rows`` of each of ``pieces`` as one piece: pieces that :meth:`joins` says go together."""
        first = pieces[0]
        values = {
            name: np.concatenate([piece.values[name][at] for piece, at in zip(pieces, rows)])
            for name in first.values
            if name != "prefix"
        }
        if any(piece.source_id != first.source_id for piece in pieces):
            values["source_id"] = np.concatenate(
                [np.full(len(at), piece.source_id, dtype=np.uint16) for piece, at in zip(pieces, rows)]
            )
        # The prefix fields they index (each scanning thread has its own), one after the other, each as it
        # is now (it only grows: the rows the pieces index are there).
        fields: dict[int, tuple[int, pl.DataFrame]] = {}
        for piece in pieces:
            if id(piece.fields) not in fields:
                start = sum(len(frame) for _, frame in fields.values())
                fields[id(piece.fields)] = (start, piece.fields.frame)
        values["prefix"] = np.concatenate(
            [piece.values["prefix"][at] + fields[id(piece.fields)][0] for piece, at in zip(pieces, rows)]
        )
        frames = [frame for _, frame in fields.values()]
        joined = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
        text = None
        if first.text is not None:
            text = pl.concat([piece.text.gather(at) for piece, at in zip(pieces, rows)])  # type: ignore[union-attr]
        return FastPiece(first.source_id, values, PrefixFields(joined), first.ops, text)

    def joins(self) -> tuple:
        """What pieces must share to be :meth:`joined`: their op names and columns, and text kept as a column
        or not at all (not as the chunk's bytes). Pieces of several sources join: the digest's window of a
        directory of per-rank files holds a piece of each file, and a frame made a piece at a time cost
        ~1 ms each."""
        if self.lines is not None:
            return (id(self),)
        return (id(self.ops), tuple(self.values), self.text is None)

    def frame(self) -> pl.DataFrame:
        """The rows with the columns the general parser gives a COLL line (and ``launcher_stream``, the
        prefix's stream), in the fast path's order."""
        v = self.values
        columns = [
            pl.Series("line_no", v["line_no"]),
            pl.Series("byte_offset", v["byte_offset"]),
            self.ops.series("op", v["op"]),
            pl.Series("opcount", v["opcount"]),
        ]
        columns += [nullable(name, v[name], v[f"{name}_nil"]) for name in self.POINTERS if name in v]
        head = pl.DataFrame(columns)
        fields = self.fields.frame[v["prefix"]]
        call = pl.DataFrame([pl.Series(name, v[name]) for name in self.CALL])
        parts = [head, fields, call]
        if self.text is not None:
            parts.append(self.text.to_frame())
        elif self.lines is not None:
            parts.append(_text_of(self.lines).to_frame())
        source = v.get("source_id")
        return pl.concat(parts, how="horizontal").with_columns(
            source_id=pl.lit(self.source_id, pl.UInt16)
            if source is None
            else pl.Series(source, dtype=pl.UInt16),
            part=pl.lit(0, pl.UInt8),
            family=pl.lit(FAMILY),
            pattern=pl.lit(PATTERN),
        )


class FramePiece:
    """Rows of the ``collectives`` table as the general parser (or a worker process) made them.

    ``lines`` is as a :class:`FastPiece`'s: the bytes the rows were read from (a segment of an input
    that cannot be read again, parsed by a worker process) and their line bounds, for their text.
    """

    __slots__ = ("columns", "lines", "rows")

    def __init__(self, rows: pl.DataFrame, ops: Names | None, columns: dict[str, np.ndarray] | None = None):
        """``columns``: the loops' columns when already known (a taken piece), else computed (``ops`` numbers
        the op names)."""
        self.rows = rows
        self.columns = columns if columns is not None else _frame_kernel(rows, ops)
        self.lines: tuple[ByteView, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.rows.height

    def kernel(self) -> dict[str, np.ndarray]:
        return self.columns

    def take(self, rows: np.ndarray) -> FramePiece:
        piece = FramePiece(
            self.rows[rows], None, {name: column[rows] for name, column in self.columns.items()}
        )
        if self.lines is not None:
            text, piece.lines = _taken_lines(self.lines, rows)
            if text is not None:
                piece.rows = piece.rows.with_columns(text)
        return piece

    def frame(self) -> pl.DataFrame:
        if self.lines is not None:
            return self.rows.with_columns(_text_of(self.lines))
        return self.rows

    def quote(self, chunk: RawChunk) -> None:
        """Set ``lines`` from ``chunk``, the lines the rows were parsed from (by their byte offsets; a glued
        piece's text runs from where it starts to the end of its physical line)."""
        at = self.rows["byte_offset"].to_numpy().astype(np.int64) - int(chunk.byte_offset[0])
        line = np.searchsorted(chunk.starts, at, side="right") - 1
        self.lines = (chunk.view, at, chunk.ends[line])


def _text_of(lines: tuple[ByteView, np.ndarray, np.ndarray]) -> pl.Series:
    view, starts, ends = lines
    return view.strings(starts, ends - starts, "text")


def _taken_lines(lines: tuple[ByteView, np.ndarray, np.ndarray], rows: np.ndarray):
    """The lines of the rows a piece keeps: (None, their lines) while they make up 1/``_PINNED_SHARE`` of
    the bytes or more, else (their text copied out, None): a digest keeping a few calls of many chunks
    would otherwise keep every chunk whole."""
    view, starts, ends = lines
    starts, ends = starts[rows], ends[rows]
    if (ends - starts).sum() * _PINNED_SHARE < len(view.raw):
        return view.copied(starts, ends - starts, "text"), None
    return None, (view, starts, ends)


def _frame_kernel(rows: pl.DataFrame, ops: Names) -> dict[str, np.ndarray]:
    """The loops' columns of general-parser rows (any of their fields may be null)."""

    def ints(name: str) -> pl.Expr:
        if name not in rows.columns:
            return pl.lit(_NO_VALUE, pl.Int64).alias(name)
        return pl.col(name).cast(pl.Int64).fill_null(_NO_VALUE)

    values = rows.select(
        pl.col("comm").cast(pl.UInt64).fill_null(0)
        if "comm" in rows.columns
        else pl.lit(0, pl.UInt64).alias("comm"),
        pl.col("opcount").cast(pl.Int64).fill_null(0),
        pl.col("opcount").is_not_null().alias("has_opcount"),
        pl.col("nranks").cast(pl.Int64).fill_null(0)
        if "nranks" in rows.columns
        else pl.lit(0, pl.Int64).alias("nranks"),
        *(ints(name) for name in ("count", "datatype", "redop", "root")),
    )
    op = (
        ops.of(rows["op"].cast(pl.String))
        if "op" in rows.columns
        else np.full(rows.height, NO_ID, dtype=np.int32)
    )
    arrays = {name: values[name].to_numpy() for name in values.columns}
    part = rows["part"].to_numpy() if "part" in rows.columns else 0
    return {
        "seq": seq_of(rows["source_id"].to_numpy(), rows["line_no"].to_numpy(), part),
        "process": process_keys(rows),
        "comm": arrays["comm"],
        "opcount": arrays["opcount"],
        "has_opcount": arrays["has_opcount"],
        "nranks": arrays["nranks"],
        "sig": signatures(op, arrays["count"], arrays["datatype"], arrays["redop"], arrays["root"]),
        "op": op,
    }


Piece = FastPiece | FramePiece


@dataclass(slots=True)
class Calls:
    """COLL calls in line order: the loops' columns (``KERNEL``, then ``NUMBERED``) and the rows' pieces.

    ``piece`` and ``row`` say where each call's row is; ``ops`` and ``uids`` name the op and uid ids;
    ``schema`` (the ``collectives`` table's) orders the columns of :meth:`frame`.
    """

    columns: dict[str, np.ndarray]
    pieces: list[Piece]
    ops: Names
    schema: dict[str, pl.DataType]
    uids: Names | None = None

    @staticmethod
    def of(pieces: Sequence[Piece], ops: Names, schema: dict[str, pl.DataType]) -> Calls:
        pieces = [piece for piece in pieces if len(piece)]
        kernels = [piece.kernel() for piece in pieces]
        if pieces:
            columns = {name: np.concatenate([kernel[name] for kernel in kernels]) for name in KERNEL}
        else:
            columns = {name: np.zeros(0, dtype=dtype) for name, dtype in zip(KERNEL, _KERNEL_TYPES)}
        columns["piece"] = np.repeat(np.arange(len(pieces), dtype=np.int32), [len(piece) for piece in pieces])
        columns["row"] = np.concatenate(
            [np.arange(len(piece), dtype=np.int64) for piece in pieces] or [np.zeros(0, np.int64)]
        )
        seq = columns["seq"]
        if (
            len(seq) > 1 and not (seq[1:] >= seq[:-1]).all()
        ):  # the general parser's rows go between the fast ones
            order = np.argsort(seq, kind="stable")
            columns = {name: column[order] for name, column in columns.items()}
        return Calls(columns, pieces, ops, schema)

    @staticmethod
    def from_frame(rows: pl.DataFrame, ops: Names, schema: dict[str, pl.DataType]) -> Calls:
        return Calls.of([FramePiece(rows, ops)] if rows.height else [], ops, schema)

    def __len__(self) -> int:
        return len(self.columns["piece"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def take(self, keep: np.ndarray, names: Sequence[str] | None = None) -> Calls:
        """The calls where ``keep`` (a mask), with the columns ``names`` only (by default all)."""
        picked = np.flatnonzero(keep)
        piece, row = self.columns["piece"][picked], self.columns["row"][picked]
        pieces, new_piece, new_row = [], np.empty(len(picked), np.int32), np.empty(len(picked), np.int64)
        order, bounds = _by_piece(piece, len(self.pieces))
        for p, old in enumerate(self.pieces):
            mine = order[bounds[p] : bounds[p + 1]]
            if len(mine):
                new_piece[mine] = len(pieces)
                new_row[mine] = np.arange(len(mine))
                pieces.append(old.take(row[mine]))
        kept = names if names is not None else [name for name in self.columns if name not in ("piece", "row")]
        columns = {name: self.columns[name][picked] for name in kept}
        return Calls(
            {**columns, "piece": new_piece, "row": new_row}, pieces, self.ops, self.schema, self.uids
        )

    @staticmethod
    def concat(calls: Sequence[Calls]) -> Calls:
        """Calls one after the other, in the order given; they share their columns, ops and uids."""
        calls = [c for c in calls if len(c)] or list(calls[:1])
        if len(calls) == 1:
            return calls[0]
        first = calls[0]
        offsets = np.cumsum([0] + [len(c.pieces) for c in calls[:-1]]).astype(np.int32)
        columns = {
            name: np.concatenate([c.columns[name] for c in calls])
            for name in first.columns
            if name != "piece"
        }
        columns["piece"] = np.concatenate([c.columns["piece"] + offset for c, offset in zip(calls, offsets)])
        return Calls(columns, [p for c in calls for p in c.pieces], first.ops, first.schema, first.uids)

    def frame(self, extra: Sequence[str] = ()) -> pl.DataFrame:
        """The rows of every call with the ``collectives`` columns they have (numbering's ``ADDED`` once
        numbered), their ``text`` when the pieces carry it (``logsift parse``; the kept calls of an input
        that cannot be read again), and the arrays named in ``extra``, in line order."""
        frames = []
        order, bounds = _by_piece(self.columns["piece"], len(self.pieces))
        for run in _runs(self.pieces):
            places = [order[bounds[p] : bounds[p + 1]] for p in run]
            mine = np.concatenate(places)
            if len(run) == 1:
                piece, rows = self.pieces[run[0]], self.columns["row"][mine]
                frame = piece.frame()
                if len(rows) != len(piece) or (rows != np.arange(len(rows))).any():
                    frame = frame[rows]
            else:  # consecutive chunks' fast rows: one frame, not one per chunk (~1 ms each)
                joined = [self.pieces[p] for p in run]
                rows_of = [self.columns["row"][at] for at in places]
                frame = FastPiece.joined(joined, rows_of).frame()  # type: ignore[arg-type]
            # The table's columns, and the text a piece kept (an input that cannot be read again).
            frame = frame.select([name for name in (*self.schema, "text") if name in frame.columns])
            frames.append(
                frame.with_columns(
                    *self._added(mine), *(pl.Series(name, self.columns[name][mine]) for name in extra)
                )
            )
        if not frames:
            return pl.DataFrame(schema={**self.schema, **(ADDED if "ordinal" in self.columns else {})})
        if len(frames) == 1:
            return frames[0]
        merged = pl.concat(frames, how="diagonal_relaxed")
        # Pieces usually come in line order (a digest's window, a batch's fast rows): no sorted copy then.
        return merged if _in_order(merged) else merged.sort(LOCATION)

    def _added(self, at: np.ndarray) -> list[pl.Series]:
        if "ordinal" not in self.columns:  # not numbered
            return []
        c = self.columns
        generation, rank = c["generation"][at], c["rank"][at]
        return [
            nullable("generation", generation, generation == NO_GENERATION),
            nullable("rank", rank, rank == NO_RANK),
            self.uids.series("comm_uid", c["uid"][at]),
            pl.Series("ordinal", c["ordinal"][at]),
        ]


def _by_piece(piece: np.ndarray, pieces: int) -> tuple[np.ndarray, np.ndarray]:
    """Each piece's calls, found in one sort (not a pass over every call per piece): the places of piece
    ``p``'s calls, ascending, are ``order[bounds[p]:bounds[p + 1]]``."""
    if len(piece) < 2 or (piece[1:] >= piece[:-1]).all():  # pieces one after the other: the usual case
        return np.arange(len(piece)), np.searchsorted(piece, np.arange(pieces + 1))
    order = np.argsort(piece, kind="stable")
    return order, np.searchsorted(piece[order], np.arange(pieces + 1))


def _runs(pieces: Sequence[Piece]) -> list[list[int]]:
    """The pieces' positions in runs of consecutive fast pieces that can be joined (FastPiece.joins), each
    other piece a run of its own."""
    runs: list[list[int]] = []
    last, fields = None, set()
    for p, piece in enumerate(pieces):
        key = piece.joins() if isinstance(piece, FastPiece) else None
        if key is not None and key == last and (id(piece.fields) in fields or len(fields) < _JOINED_FIELDS):
            runs[-1].append(p)
            fields.add(id(piece.fields))
        else:
            runs.append([p])
            fields = {id(piece.fields)} if isinstance(piece, FastPiece) else set()
        last = key
    return runs


def _in_order(frame: pl.DataFrame) -> bool:
    """Whether the rows are sorted by LOCATION (source, line, part; never null)."""
    source, line, part = (frame[name].to_numpy().astype(np.uint64) for name in LOCATION)
    key = (source << np.uint64(40)) | (line << np.uint64(8)) | part
    return bool((key[1:] >= key[:-1]).all())
