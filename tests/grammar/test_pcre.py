"""Edits of grammar regexes on their groups (nccl_logsift/grammar/pcre.py), used to compose lnav patterns."""

import pytest
import regex

from nccl_logsift.grammar import pcre

NCCL_TIME = r"^(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] )?(?P<host>[^:]+):"


def test_groups_skip_escaped_parens_and_parens_in_classes():
    pattern = r"\((?P<a>[()\]]+)\)(?:x[^)])(?P<b>y)"
    assert [(g.name, pattern[g.start : g.end + 1]) for g in pcre.groups(pattern)] == [
        ("a", r"(?P<a>[()\]]+)"),
        ("", "(?:x[^)])"),
        ("b", "(?P<b>y)"),
    ]


def test_require_drops_the_question_mark_of_the_group_and_the_groups_around_it_only():
    required = pcre.require(NCCL_TIME, "ts")
    assert required == r"^(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?)\] )(?P<host>[^:]+):"
    assert regex.match(required, "[2025-06-02 14:03:11.5] h:") and not regex.match(required, "h:")


def test_require_refuses_a_lazy_optional_group():
    with pytest.raises(ValueError, match="lazy or possessive"):
        pcre.require(r"(?:(?P<ts>\d+) )??x", "ts")


def test_rename_touches_only_the_named_group():
    assert pcre.rename(r"(?P<severity>[EW])(?P<sev>\d)", "severity", "level") == r"(?P<level>[EW])(?P<sev>\d)"
    assert pcre.rename(r"(?P<a>x)", "missing", "b") == r"(?P<a>x)"


def test_keep_group_becomes_a_lookahead_that_consumes_nothing():
    pattern = pcre.as_lookahead(r"(?P<h>\w+): (?P<keep>\[rank\d+\])", "keep")
    assert pattern == r"(?P<h>\w+): (?=\[rank\d+\])"
    assert regex.match(pattern, "gpu9: [rank3]:x").end() == len("gpu9: ")


def test_first_names_only_keeps_the_leftmost_group_of_each_name():
    pattern = pcre.first_names_only(r"(?P<stream>a)(?:(?P<rank>\d)|(?P<rank>\d\d))(?P<stream>b)")
    assert pcre.capture_names(pattern) == ["stream", "rank"]
    assert regex.compile(pattern).fullmatch("a12b")


def test_plain_removes_every_name():
    assert pcre.plain(r"(?P<a>x(?P<b>y))") == "(?:x(?:y))"


def test_pcre_spelling_round_trips_and_leaves_look_behind_alone():
    python = r"(?<=\s)(?P<a>x)(?<!y)(?P<b_2>z)"
    assert pcre.to_pcre(python) == r"(?<=\s)(?<a>x)(?<!y)(?<b_2>z)"
    assert pcre.from_pcre(pcre.to_pcre(python)) == python
