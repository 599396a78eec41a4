"""The regex dialect of grammar files: what both Python ``regex`` and polars (Rust ``regex``) accept.

Polars runs the patterns in the hot path, and it rejects look-around and back-references
(rust-lang/regex#618); Python rejects ``(?<name>...)``. Patterns are checked against both here.
"""

from __future__ import annotations

import polars as pl
import regex

_FORBIDDEN = (
    ("(?=", "look-ahead is not supported by polars; make the part optional or capture it"),
    ("(?!", "negative look-ahead is not supported by polars"),
    ("(?<=", "look-behind is not supported by polars"),
    ("(?<!", "negative look-behind is not supported by polars"),
)


def dialect_problems(pattern: str) -> list[str]:
    problems = [why for token, why in _FORBIDDEN if token in pattern]
    if "(?<" in pattern.replace("(?<=", "").replace("(?<!", ""):
        problems.append("write named groups as (?P<name>...)")
    try:
        regex.compile(pattern)
    except regex.error as exc:
        problems.append(f"does not compile in Python: {exc}")
    try:
        pl.Series([""]).str.contains(pattern)
    except pl.exceptions.PolarsError as exc:
        problems.append(f"does not compile in polars: {str(exc).splitlines()[0]}")
    return problems
