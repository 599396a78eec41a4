"""Glued lines (a second process's envelope in the middle of a line): the cut stays linear in the line's
length and works for any number of envelopes on one line."""

from __future__ import annotations

import time

import polars as pl
import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import LineChunk
from nccl_logsift.parse.lineparser import MAX_PARTS, LineParser

ENVELOPE = "gpu-node-1:123:456 [0] NCCL INFO cudaDriverVersion 12020"


def chunk(lines: list[str]) -> LineChunk:
    offsets = [0]
    for line in lines[:-1]:
        offsets.append(offsets[-1] + len(line.encode()) + 1)
    return LineChunk(
        source_id=0,
        line_no=pl.Series("line_no", range(1, len(lines) + 1), dtype=pl.UInt32),
        byte_offset=pl.Series("byte_offset", offsets, dtype=pl.UInt64),
        text=pl.Series("text", lines, dtype=pl.String),
    )


@pytest.fixture
def parser() -> LineParser:
    return LineParser(load_grammars())


def _best_of_three(parser: LineParser, text: str) -> float:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        parser._cut_points(text)
        times.append(time.perf_counter() - start)
    return min(times)


def test_the_glued_head_search_is_linear_in_a_long_run_of_host_characters(parser):
    # Before, every start inside the run scanned to its end: 5k characters took 0.1 s, 40k 7 s.
    small = _best_of_three(parser, "see NCCL docs " + "a" * 5_000)
    large = _best_of_three(parser, "see NCCL docs " + "a" * 40_000)
    assert large < 20 * small + 0.05


@pytest.mark.parametrize("size", [80_000, 1_000_000])
def test_a_long_line_with_an_nccl_word_parses_in_seconds(parser, size):
    start = time.perf_counter()
    lines = parser.parse(chunk(["see NCCL docs " + "a" * size, ENVELOPE]))["lines"]
    assert time.perf_counter() - start < 10
    assert lines["line_no"].to_list() == [1, 2] and lines["family"].to_list() == ["text", "network"]


def test_a_line_of_more_envelopes_than_parts_keeps_the_rest_in_its_last_part(parser):
    tables = parser.parse(chunk([ENVELOPE * 300]))
    lines = tables["lines"]
    assert lines.height == MAX_PARTS and lines["part"].to_list() == list(range(MAX_PARTS))
    assert parser.state.glued_uncut == 300 - MAX_PARTS
    # Nothing is dropped: the last part holds the heads that were not cut, and the text adds up to the line.
    assert lines["text"][-1] == ENVELOPE * (300 - MAX_PARTS + 1)
    assert "".join(lines["text"].to_list()) == ENVELOPE * 300


def test_glued_parts_start_at_their_byte_offset_after_multibyte_text(parser):
    line = "héllo wörld " + ENVELOPE + " ünïcode " + ENVELOPE
    lines = parser.parse(chunk(["first line", line]))["lines"].filter(pl.col("line_no") == 2)
    encoded = line.encode()
    starts = [encoded.index(ENVELOPE.encode()), encoded.rindex(ENVELOPE.encode())]
    first = len(b"first line\n")
    assert lines["byte_offset"].to_list() == [first, first + starts[0], first + starts[1]]


def test_a_line_of_a_hundred_thousand_glued_envelopes_parses_in_seconds(parser):
    start = time.perf_counter()
    lines = parser.parse(chunk([ENVELOPE * 100_000]))["lines"]
    assert time.perf_counter() - start < 20
    assert lines.height == MAX_PARTS and parser.state.glued_uncut == 100_000 - MAX_PARTS
