"""Every rule writes a set of ranks one way (findings/wording.py)."""

from __future__ import annotations

from nccl_logsift.findings.wording import plural, rank_word, ranks_text


def test_ranks_text_joins_runs_of_two_or_more_with_an_en_dash():
    assert ranks_text([9, 7, 6, 3, 2, 1, 0]) == "0–3, 6–7, 9"
    assert ranks_text([4]) == "4"
    assert ranks_text([]) == "?"


def test_ranks_text_counts_a_rank_once():
    assert ranks_text([1, 1, 3]) == "1, 3"


def test_ranks_text_cuts_after_eight_spans():
    assert ranks_text(range(0, 40, 2)) == "0, 2, 4, 6, 8, 10, 12, 14 …"
    assert ranks_text(range(0, 40, 2), limit=2) == "0, 2 …"


def test_rank_word_says_rank_or_ranks():
    assert rank_word([3]) == "rank 3"
    assert rank_word([2, 3, 7]) == "ranks 2–3, 7"


def test_plural():
    assert [plural(1, "rank"), plural(3, "rank"), plural(2, "process")] == [
        "1 rank",
        "3 ranks",
        "2 processes",
    ]
