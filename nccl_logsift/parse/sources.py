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
known; a source's leftovers wait only when every one of them is. A batch within a source still ends where
it did (``ChunkParser.ready`` counts the lines of the source being read).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import polars as pl
import pyarrow as pa

from nccl_logsift.io.lines import LineChunk
from nccl_logsift.parse.lineparser import UNPARSED, LineParser
from nccl_logsift.parse.repeats import RepeatSkip

# An NCCL envelope at the start of a line (grammars/envelope/nccl.toml without its optional timestamp and
# source-location fields): no launcher pattern takes the start of such a line, so the parser reads it as the
# line's envelope and learns its host before it looks for glued lines.
_PLAIN_ENVELOPE = (
    r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*:\d+:\d+ (?:\[-?\d+\] )?NCCL (?:INFO|WARN|ATTN|TRACE|CALL)(?: |$)"
)


def cut_alike(text: pl.Series) -> bool:
    """Whether every line of ``text`` is parsed alike whatever hosts are known.

    A cut that depends on the hosts is made at an NCCL envelope head (``host:pid:tid … NCCL INFO``) glued
    into a line, which shows `` NCCL `` past the line's own plain NCCL envelope, whose host the parser
    knows (PyTorch heads are cut whatever is known). The parser strips ANSI escapes first, which may join
    a `` NCCL `` that the text does not show: a line with one is not vouched for.
    """
    message = text.str.replace(_PLAIN_ENVELOPE, "")  # the text itself where no plain envelope starts it
    glued = message.str.contains(" NCCL ", literal=True) | text.str.contains("\x1b", literal=True)
    return not glued.any()


def parse_sources(
    parser: LineParser, repeats: RepeatSkip | None, rest: list[LineChunk]
) -> tuple[dict[str, pl.DataFrame], dict[int, int]]:
    """The tables of the leftover lines of several sources (``rest``, in input order), parsed in one call as
    each source's would be on its own, and how many lines of each source were not understood (by
    ``source_id``). The repeats of each source's lines are skipped and learnt by source, as they are
    when each is parsed on its own (``ChunkParser.flush_calls``)."""
    sources = [
        LineChunk.concat([chunk for chunk in rest if chunk.source_id == source_id])
        for source_id in dict.fromkeys(chunk.source_id for chunk in rest)
    ]
    split = [repeats.split(chunk, parser.state) for chunk in sources] if repeats is not None else []
    parsed = [chunk for chunk, _ in split] if repeats is not None else sources
    if not any(map(len, parsed)):
        return dict(parser.empty_tables), {}
    joined = Joined.of([chunk for chunk in parsed if len(chunk)])
    if repeats is None:
        tables = parser.parse(joined.chunk)
    else:
        tables, unfit = parser.parse_unfit(joined.chunk)
    tables = {name: joined.restore(frame) for name, frame in tables.items()}
    lines = tables["lines"]
    unparsed = dict(lines.filter(UNPARSED).group_by("source_id").len().iter_rows())
    if repeats is not None:
        unfit_source, unfit_lines = joined.sources(unfit)
        for chunk, keys in split:
            if len(chunk):
                mine = lines.filter(pl.col("source_id") == chunk.source_id)
                repeats.learn(chunk, keys, mine, unfit_lines.filter(unfit_source == chunk.source_id))
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

    def sources(self, line_no: pl.Series) -> tuple[np.ndarray, pl.Series]:
        """The source and line number of each of ``line_no`` (numbers of :attr:`chunk`)."""
        at = line_no.to_numpy().astype(np.int64) - 1
        return self.source_id[at], pl.Series(line_no.name, self.line_no[at], dtype=pl.UInt32)


def apart(chunk: LineChunk) -> LineChunk:
    """``chunk`` with its text copied out of the block it was read in (its lines are views into it): lines
    that wait for the next source's keep their own bytes, not a 4 MB block each."""
    # As a one-column table, as io/lines.py builds its columns: polars' Series constructor would import
    # pyarrow.compute for an Arrow array.
    copy = pa.table({chunk.text.name: chunk.text.to_arrow().cast(pa.large_string())})
    return replace(chunk, text=pl.DataFrame(copy).to_series())
