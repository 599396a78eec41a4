"""Captured text cast in Python (``kinds.cast_value``, for a few line heads) is what polars' cast gives."""

from __future__ import annotations

import polars as pl
import pytest

from nccl_logsift.grammar.schema import FieldKind
from nccl_logsift.parse.kinds import Unsure, cast_field, cast_value, unfit

TEXTS = [
    "0",
    "5",
    "05",
    "+5",
    "-5",
    "-0",
    "123456789",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "0x0",
    "0x1f",
    "1F",
    "ff",
    "0xffffffffffffffff",
    "ffffffffffffffff",
    "7fffffffffffffff",
    "8000000000000000",
    "0x10000000000000000",
    "-1f",
    "0x",
    "",
    " 5",
    "5 ",
    "1_000",
    "abc",
    "(nil)",
    "1.5",
    "-2.25",
    "+0.5",
    "1e5",
    ".5",
    "5.",
    "inf",
    "nan",
    "12.345678901234567890",
    "٣",
]


@pytest.mark.parametrize("kind", list(FieldKind))
def test_a_value_cast_in_python_is_the_one_polars_casts(kind):
    """Every text cast_value vouches for casts to the same value, with the same verdict on whether it fits;
    the others it leaves to polars."""
    frame = pl.DataFrame({"text": TEXTS}).with_columns(
        value=cast_field(pl.col("text"), kind),
        lost=unfit(pl.col("text"), kind) if unfit(pl.col("text"), kind) is not None else pl.lit(False),
    )
    vouched = 0
    for text, value, lost in frame.iter_rows():
        try:
            assert cast_value(text, kind) == (value, lost), text
            vouched += 1
        except Unsure:
            continue
    assert vouched >= 8  # the plain forms at least
    assert cast_value(None, kind) == (None, False)
