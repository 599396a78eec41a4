"""The class escapes of the grammars are read as ASCII classes, so that every engine that runs a pattern
(Python ``regex``, polars' Rust engine, RE2 in pyarrow) matches the same lines, and Python's ``regex``
and polars capture the same groups."""

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import regex

from nccl_logsift.grammar import load_grammars
from nccl_logsift.grammar.dialect import dialect_problems
from nccl_logsift.grammar.schema import ascii_classes, class_escapes, group_names
from nccl_logsift.parse.lineparser import python_regex


@pytest.mark.parametrize(
    ("written", "read"),
    [
        (r"^(?P<pid>\d+) \S+", r"^(?P<pid>[0-9]+) [^\t\n\x0B\f\r ]+"),
        (r"[\w.]*", r"[0-9A-Za-z_.]*"),
        (r"[^\s:]+", r"[^\t\n\x0B\f\r :]+"),
        (r"\D\W", r"[^0-9][^0-9A-Za-z_]"),
        (r"\\d \.", r"\\d \."),  # an escaped backslash, then a letter: no class
        (r"[]\d]", r"[]0-9]"),  # a "]" first in a class is a member
        (r"[^]\s]", r"[^]\t\n\x0B\f\r ]"),
        (r"\[\d\]", r"\[[0-9]\]"),  # escaped brackets open no class
    ],
)
def test_class_escapes_are_written_out_as_ascii_classes(written, read):
    assert ascii_classes(written) == read
    assert ascii_classes(read) == read


def test_a_negated_escape_inside_a_class_is_left_and_reported():
    assert ascii_classes(r"[\S:]") == r"[\S:]"
    assert any("ASCII" in problem for problem in dialect_problems(ascii_classes(r"^[\S:]+$")))


def test_a_non_ascii_digit_or_space_is_not_a_digit_or_space_to_any_engine():
    pattern = ascii_classes(r"^\d+\s\w$")
    for line in ("١٢ x", "12\u00a0x", "12 é"):
        assert regex.search(pattern, line) is None
        assert not pl.Series([line]).str.contains(pattern)[0]
        assert not pc.match_substring_regex(pa.array([line]), pattern)[0].as_py()
    assert regex.search(pattern, "12 x")


GRAMMARS = load_grammars()


@pytest.mark.parametrize("grammar", GRAMMARS.grammars, ids=[g.family for g in GRAMMARS.grammars])
def test_the_three_engines_match_the_same_sample_lines(grammar):
    """Each pattern of a grammar, over its samples and near misses and the other grammars' samples: the
    lines each engine finds a match in are the same (the parser tests lines in RE2 before polars runs the
    patterns: lineparser._plain_test)."""
    lines = [s.line for g in GRAMMARS.grammars for s in g.samples] + list(grammar.near_misses)
    assert not any(class_escapes(p.regex) for p in grammar.patterns)
    for pattern in grammar.patterns:
        python = [regex.search(pattern.regex, line) is not None for line in lines]
        rust = pl.Series(lines, dtype=pl.String).str.contains(pattern.regex).to_list()
        re2 = pc.match_substring_regex(pa.array(lines, pa.large_string()), pattern.regex).to_pylist()
        assert python == rust == re2, pattern.name


def _messages() -> list[str]:
    """Every sample line, and what is left of it once its launcher prefixes and envelope are read (the text
    message patterns run on)."""
    from nccl_logsift.io.lines import LineChunk
    from nccl_logsift.parse.lineparser import LineParser

    lines = [s.line for g in GRAMMARS.grammars for s in g.samples]
    chunk = LineChunk(
        0,
        pl.Series(range(1, len(lines) + 1), dtype=pl.UInt32),
        pl.Series([0] * len(lines), dtype=pl.UInt64),
        pl.Series(lines, dtype=pl.String),
    )
    _, frame = LineParser(GRAMMARS).parse_frame(chunk)
    left = frame.select(pl.coalesce("msg", "rest")).to_series().drop_nulls().to_list()
    return sorted({*lines, *left})


MESSAGES = _messages()


@pytest.mark.parametrize("grammar", GRAMMARS.grammars, ids=[g.family for g in GRAMMARS.grammars])
def test_python_and_polars_capture_the_same_groups(grammar):
    """Small batches are matched in Python's ``regex`` (LineParser._claim_small), large ones in polars: for
    every pattern, over every sample, its message and the grammar's near misses, both find the same
    groups, null where a group took no part."""
    texts = [*MESSAGES, *grammar.near_misses]
    for pattern in grammar.patterns:
        names = group_names(pattern.regex)
        search = python_regex(pattern.regex).search
        python = [
            None if (m := search(text)) is None else {name: m.group(name) for name in names} for text in texts
        ]
        captured = pl.Series(texts, dtype=pl.String).str.extract_groups(f"(?P<__all>)(?:{pattern.regex})")
        rust = [
            None if row["__all"] is None else {name: row[name] for name in names}
            for row in captured.to_list()
        ]
        assert python == rust, pattern.name
        assert any(row is not None for row in python), f"{pattern.name} matches no sample"


def test_python_reads_dollar_as_the_end_of_the_text_as_polars_does():
    """Python's "$" also matches before a final newline; polars' and RE2's do not."""
    assert python_regex(r"^(?P<a>x)$").search("x\n") is None
    assert not pl.Series(["x\n"]).str.contains(r"^(?P<a>x)$")[0]
    assert python_regex(r"^x[$]$").search("x$")
