"""The fast path for the bulk of a COLL-heavy log: NCCL INFO COLL lines read by position, not by regex.

With NCCL_DEBUG_SUBSYS=COLL almost every line is one collective call, printed by one format string
(src/enqueue.cc, ``ncclInfoSetDerived`` / ``INFO(NCCL_COLL, "%s: opCount %lx sendbuff %p recvbuff %p
count %zu datatype %d op %d root %d comm %p [nranks=%d] stream %p", ...)``, grammar §5.1). Its message
has a fixed number of space-separated tokens, so counting tokens from the *end* of the line finds every
field whatever launcher prefix precedes the envelope. numpy finds the spaces of a whole chunk in one
scan; literal tokens are checked with 8-byte loads at their positions; values become zero-copy string
views that polars converts to numbers.

The prefix before `` NCCL INFO`` (launcher tags, host:pid:tid [dev]) repeats for every line of a
thread, so it is parsed once per distinct prefix by the grammar-driven general parser and cached.

A line is taken only when every literal token, the shape of every value and its prefix check out;
anything else (RCCL's extra fields, the 2.3.5 form, torn or glued lines, ANSI colours) is left to the
general parser, which stays the reference: tests compare the two on real logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import polars as pl
import regex

from nccl_logsift.io.lines import RawChunk
from nccl_logsift.parse import numbers

FAMILY = "coll"
PATTERN = "coll"
TABLE = "collectives"
# Fields the fast path reads from the message, and the launcher's "stream" (stdout/stderr), renamed
# while both sit in one frame because COLL lines have a "stream" address too.
COLL_FIELDS = ("op", "opcount", "count", "datatype", "redop", "root", "comm", "nranks", "sendbuff", "recvbuff", "stream")
LAUNCHER_STREAM = "launcher_stream"

# Tokens counted from the end of the line (-1 is the last). Literals checked at their place:
_LITERALS = {-22: b"NCCL", -21: b"INFO", -19: b"opCount", -17: b"sendbuff", -15: b"recvbuff", -2: b"stream"}
_OP = -20  # "AllReduce:"
_OPCOUNT = -18
_POINTERS = {"sendbuff": -16, "recvbuff": -14, "stream": -1}
# Tokens -13 to -3 ("count N datatype D op O root R comm 0xP [nranks=N]") repeat for every call with the
# same shape on the same communicator: they are parsed once per distinct text.
_CALL_FIRST, _CALL_LAST = -13, -3
_CALL = regex.compile(
    r"count (?P<count>\d+) datatype (?P<datatype>\d+) op (?P<redop>\d+) root (?P<root>-?\d+) "
    r"comm 0x(?P<comm>[0-9a-f]{1,16}) \[nranks=(?P<nranks>\d+)\]"
)
_TOKENS = 22
_COLUMNS = np.arange(_TOKENS)[None, :]
_NIL = b"(nil)"
_MAX_CACHE = 1 << 16

_LITERAL_COLUMNS = np.array([_TOKENS + k for k in _LITERALS])
_LITERAL_LENGTHS = np.array([len(text) for text in _LITERALS.values()])[None, :]
_LITERAL_MASKS = np.array([(1 << (8 * min(len(t), 8))) - 1 for t in _LITERALS.values()], dtype=np.uint64)[None, :]
_LITERAL_WORDS = np.array([int.from_bytes(t[:8].ljust(8, b"\0"), "little") for t in _LITERALS.values()], dtype=np.uint64)[None, :]

# What the prefix parser returns for one distinct prefix: envelope and launcher fields, or None when
# the prefix is not exactly one clean NCCL INFO envelope (the line then goes to the general parser).
PrefixParser = Callable[[list[str]], pl.DataFrame]


@dataclass(frozen=True, slots=True)
class FastRows:
    """COLL rows read by the fast path and the chunk positions (line indices) they came from."""

    index: np.ndarray  # int64 positions in the chunk, ascending
    rows: pl.DataFrame  # line_no, byte_offset, prefix fields, COLL fields


class CollFastPath:
    """Reads canonical COLL lines of a chunk.

    ``prefixes`` parses distinct line prefixes (the general parser's launcher and envelope grammars);
    both prefixes and call shapes are cached across chunks. ``pointers`` also reads the sendbuff,
    recvbuff and stream addresses, which only the tables written by ``logsift parse`` carry.
    """

    def __init__(self, prefixes: PrefixParser, pointers: bool = True):
        self._parse_prefixes = prefixes
        self.pointers = pointers
        self._prefixes = _Cache(self._prefix_rows, "prefix")
        self._calls = _Cache(_call_rows, "call")

    def read(self, chunk: RawChunk) -> FastRows:
        view = chunk.view
        raw, words = view.raw, view.words
        if not len(chunk) or not len(raw):
            return _none()
        spaces = np.flatnonzero(raw == 32)
        after = np.searchsorted(spaces, chunk.ends)
        lines = np.flatnonzero(after - np.searchsorted(spaces, chunk.starts) >= _TOKENS)
        if not len(lines):
            return _none()
        ends = chunk.ends[lines]
        # The last 22 spaces of each line, one row per line: token -k runs from space column 22-k (plus
        # one) to space column 23-k, the last token to the end of the line.
        cut = spaces[(after[lines] - _TOKENS)[:, None] + _COLUMNS]
        start = cut + 1
        stop = np.empty_like(cut)
        stop[:, :-1] = cut[:, 1:]
        stop[:, -1] = ends

        def token(k: int) -> tuple[np.ndarray, np.ndarray]:
            return start[:, _TOKENS + k], stop[:, _TOKENS + k]

        literal = _LITERAL_COLUMNS
        at = start[:, literal]
        ok = ((stop[:, literal] - at == _LITERAL_LENGTHS) & ((words[at] & _LITERAL_MASKS) == _LITERAL_WORDS)).all(axis=1)
        ok &= ~_has_byte(raw, chunk.starts[lines], ends, 27)  # ANSI colours: left to the general parser
        op_start, op_stop = token(_OP)
        ok &= (op_stop - op_start >= 2) & (raw[op_stop - 1] == ord(":"))
        opcount, good = numbers.hexadecimal(view, *token(_OPCOUNT))
        ok &= good
        addresses = {}
        for name, k in _POINTERS.items():
            s, e = token(k)
            nil = (e - s == len(_NIL)) & ((words[s] & _mask(len(_NIL))) == _word(_NIL))
            hex_address = (e - s > 2) & ((words[s] & _mask(2)) == _word(b"0x"))
            if self.pointers:
                value, good = numbers.hexadecimal(view, s + 2, e)
                hex_address &= good
                addresses[name] = (value, nil)
            # Without the values (the diagnosis does not use them) only the shape is checked: 0x... or (nil).
            ok &= hex_address | nil
        if not ok.any():
            return _none()
        taken = lines[ok]
        starts = chunk.starts[taken]
        call_start, call_stop = token(_CALL_FIRST)[0][ok], token(_CALL_LAST)[1][ok]
        columns = [
            pl.Series("line_no", (taken + chunk.first_line_no).astype(np.uint32)),
            pl.Series("byte_offset", chunk.byte_offset[taken]),
            view.strings(starts, cut[ok, 0] - starts, "prefix"),
            view.strings(op_start[ok], op_stop[ok] - op_start[ok] - 1, "op"),
            pl.Series("opcount", opcount[ok].astype(np.int64)),
            view.strings(call_start, call_stop - call_start, "call"),
        ]
        if self.pointers:
            columns += [
                pl.Series(name, value[ok]).scatter(np.flatnonzero(nil[ok]), None)
                for name, (value, nil) in addresses.items()
            ]
        frame = pl.DataFrame(columns)
        frame = self._prefixes.join(frame)
        frame = self._calls.join(frame)
        # A prefix that is not one clean NCCL INFO envelope, an op that is not a word, or a call that is
        # not in the exact format sends the line back to the general parser.
        clean = frame["producer"].is_not_null() & frame["nranks"].is_not_null() & frame["op"].str.contains(r"^[A-Za-z]+$")
        frame = frame.drop("prefix", "call", "producer")
        if clean.all():  # the usual case: no copy of the columns
            return FastRows(taken, frame)
        return FastRows(taken[clean.to_numpy()], frame.filter(clean))

    def _prefix_rows(self, prefixes: list[str]) -> pl.DataFrame:
        parsed = self._parse_prefixes(prefixes).filter(pl.col("producer").is_not_null())
        return parsed.rename({"stream": LAUNCHER_STREAM}) if "stream" in parsed.columns else parsed


class _Cache:
    """Values parsed once per distinct text of ``key`` (bounded), joined onto each chunk's rows."""

    def __init__(self, parse: Callable[[list[str]], pl.DataFrame], key: str):
        self._parse = parse
        self._key = key
        self._known: pl.DataFrame | None = None
        self._seen = pl.Series(dtype=pl.String)  # every text parsed, including those that did not parse

    def join(self, frame: pl.DataFrame) -> pl.DataFrame:
        distinct = frame[self._key].unique()
        # A hash lookup of the chunk's distinct texts (thousands for a 4096-rank job), not a Python loop.
        missing = distinct.filter(~distinct.is_in(self._seen.implode()))
        if len(missing):
            if len(self._seen) + len(missing) > _MAX_CACHE:
                self._seen, self._known = pl.Series(dtype=pl.String), None
            parsed = self._parse(missing.to_list())
            self._seen = pl.concat([self._seen, missing.rename(self._seen.name)])
            self._known = parsed if self._known is None else pl.concat([self._known, parsed], how="vertical_relaxed")
        known = self._known
        if known is None or known.is_empty():
            return frame.join(self._parse([]), on=self._key, how="left")
        return frame.join(known, on=self._key, how="left", maintain_order="left")


def _call_rows(calls: list[str]) -> pl.DataFrame:
    """The fields of distinct call texts; texts not in the exact format are left out."""
    rows = [(text, m) for text in calls if (m := _CALL.fullmatch(text))]
    return pl.DataFrame(
        {
            "call": [text for text, _ in rows],
            **{name: [int(m[name]) for _, m in rows] for name in ("count", "datatype", "redop", "root", "nranks")},
            "comm": pl.Series([int(m["comm"], 16) for _, m in rows], dtype=pl.UInt64),
        },
        schema_overrides={name: pl.Int64 for name in ("count", "datatype", "redop", "root", "nranks")},
    )


def _none() -> FastRows:
    return FastRows(np.empty(0, dtype=np.int64), pl.DataFrame())


def _word(text: bytes) -> np.uint64:
    return np.frombuffer(text[:8].ljust(8, b"\0"), dtype="<u8")[0]


def _mask(length: int) -> np.uint64:
    return np.uint64((1 << (8 * min(length, 8))) - 1)


def _has_byte(raw: np.ndarray, starts: np.ndarray, ends: np.ndarray, byte: int) -> np.ndarray:
    """Whether each line [start, end) contains ``byte``: one scan for the byte, then a range count."""
    where = np.flatnonzero(raw == byte)
    if not len(where):
        return np.zeros(len(starts), dtype=bool)
    return np.searchsorted(where, ends) > np.searchsorted(where, starts)
