"""The leftover lines of several sources parsed in one call of the general parser.

A directory of per-rank files (``NCCL_DEBUG_FILE=%h.%p``) is dozens of sources, each of a few dozen lines
the COLL fast path leaves (a process's init and teardown) and many COLL lines it takes. The general parser
costs a fixed few tens of milliseconds per call however few its lines, so the leftovers of a source wait
for those of the next (``parse/chunks.py``, :meth:`ChunkParser.hold`) and are parsed in one call.

The parser numbers the lines of one source: :func:`parse_sources` gives it the lines of all of them numbered 1
to n in input order (:class:`Joined`), then puts each row's source and line number back, so the tables are
those of parsing each source on its own, in the same order.

Only one thing the parser does depends on what came before a line: where a glued line is cut depends on
the hosts known when the parser runs (grammar §9.2, ``LineParser._split_glued``), and parsed after the next
source was read, more are known. :func:`cut_alike` tells the lines that are cut alike whatever hosts are
known; a source's leftovers wait only when every one of them is. The batches of the next source still end
where they would on their own (``ChunkParser.ready`` counts its lines alone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from nccl_logsift.io.lines import LineChunk
from nccl_logsift.parse.lineparser import UNPARSED, LineParser
from nccl_logsift.parse.repeats import RepeatSkip

# An NCCL envelope at the start of a line (grammars/envelope/nccl.toml without its optional timestamp and
# source-location fields): no launcher pattern takes the start of such a line, so the parser reads it as the
# line's envelope and learns its host before it looks for glued lines.
_PLAIN_ENVELOPE = (
    r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*:\d+:\d+ (?:\[-?\d+\] )?NCCL (?:INFO|WARN|ATTN|TRACE|CALL)(?: |$)"
)

_PLAIN_ENVELOPE_RE = re.compile(_PLAIN_ENVELOPE)
# The most lines cut_alike reads in Python: a source's few leftover lines (a per-rank file's init lines)
# cost ~0.1 ms there; a larger batch is read in polars.
_FEW_LINES = 2000


def cut_alike(text: pl.Series) -> bool:
    """Whether every line of ``text`` is parsed alike whatever hosts are known.

    A cut that depends on the hosts is made at an NCCL envelope head (``host:pid:tid … NCCL INFO``) glued
    into a line, which shows `` NCCL `` past the line's own plain NCCL envelope, whose host the parser
    knows (PyTorch heads are cut whatever is known). The parser strips ANSI escapes first, which may join
    a `` NCCL `` that the text does not show: a line with one is not vouched for.
    """
    if len(text) <= _FEW_LINES:  # a polars query compiles the regex again on the main thread (~1.5 ms)
        return not any(
            "\x1b" in line or " NCCL " in _PLAIN_ENVELOPE_RE.sub("", line, count=1)
            for line in text.to_list()
            if line is not None
        )
    message = text.str.replace(_PLAIN_ENVELOPE, "")  # the text itself where no plain envelope starts it
    glued = message.str.contains(" NCCL ", literal=True) | text.str.contains("\x1b", literal=True)
    return not glued.any()


def parse_sources(
    parser: LineParser, repeats: RepeatSkip | None, rest: list[LineChunk], keys: list[np.ndarray]
) -> tuple[dict[str, pl.DataFrame], dict[int, int]]:
    """The tables of the leftover lines of several sources (``rest``, in input order; ``keys``: the keys of
    their texts, when repeats are skipped), parsed in one call as each source's would be on its own, and
    how many lines of each source were not understood (by ``source_id``). The texts of each source are
    learnt from its own lines, as they are when each is parsed on its own (``ChunkParser.flush_calls``),
    in one query for all: one per source cost a directory of 512 files ~1 s."""
    by_source: dict[int, list[int]] = {}  # each source's chunks, by their place in ``rest``
    for n, chunk in enumerate(rest):
        by_source.setdefault(chunk.source_id, []).append(n)
    sources = [LineChunk.concat([rest[n] for n in places]) for places in by_source.values()]
    joined = Joined.of(sources)
    if repeats is None:
        tables = parser.parse(joined.chunk)
    else:
        tables, unfit = parser.parse_unfit(joined.chunk)
        # Learnt before the rows take their sources' line numbers back: each source's texts from its lines.
        mine = np.concatenate([keys[n] for places in by_source.values() for n in places])
        repeats.learn(joined.chunk, mine, tables["lines"], unfit, joined.source_id)
    tables = {name: joined.restore(frame) for name, frame in tables.items()}
    unparsed = dict(tables["lines"].filter(UNPARSED).group_by("source_id").len().iter_rows())
    return tables, unparsed


@dataclass(frozen=True, slots=True)
class Joined:
    """Lines of several sources as one chunk numbered 1 to n, and where each came from."""

    chunk: LineChunk
    source_id: np.ndarray  # uint16: the source of each line of ``chunk``
    line_no: np.ndarray  # uint32: its line number there

    @classmethod
    def of(cls, chunks: list[LineChunk]) -> Joined:
        """``chunks`` (consecutive lines of their sources, in input order) as one."""
        sizes = [len(chunk) for chunk in chunks]
        source_id = np.repeat(np.array([chunk.source_id for chunk in chunks], dtype=np.uint16), sizes)
        line_no = np.concatenate([chunk.line_no.to_numpy() for chunk in chunks]).astype(np.uint32)
        joined = LineChunk(
            source_id=chunks[0].source_id,
            line_no=pl.Series("line_no", np.arange(1, len(line_no) + 1, dtype=np.uint32)),
            byte_offset=pl.concat([chunk.byte_offset for chunk in chunks]),
            text=pl.concat([chunk.text for chunk in chunks]),
        )
        return cls(joined, source_id, line_no)

    def restore(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` (parsed from :attr:`chunk`) with each row's source and line number where it came from."""
        if frame.is_empty() or "line_no" not in frame.columns:
            return frame
        at = frame.get_column("line_no").to_numpy().astype(np.int64) - 1
        restored = [pl.Series("line_no", self.line_no[at], dtype=pl.UInt32)]
        if "source_id" in frame.columns:
            restored.append(pl.Series("source_id", self.source_id[at], dtype=pl.UInt16))
        return frame.with_columns(restored)
