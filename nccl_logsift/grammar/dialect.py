r"""The regex dialect of grammar files: what Python ``regex``, polars (Rust ``regex``) and RE2 (pyarrow's
compute functions) all accept, and read alike. The parser runs a pattern in polars over a large batch, in
Python's ``regex`` over a small one (parse/lineparser.py ``LineParser._claim_small``).

Polars runs the patterns in the hot path, and it rejects look-around and back-references
(rust-lang/regex#618); Python rejects ``(?<name>...)``. Patterns are checked against all three here.

``\d``, ``\w`` and ``\s`` are read as their ASCII classes (:func:`ascii_classes`), which is what NCCL and
PyTorch write: Python and Rust read them as Unicode classes and RE2 as ASCII ones, so spelling them out
makes the engines agree, and it halves the time the Rust engine takes to compile a pattern, which polars
pays again in every batch (it keeps 32 compiled patterns per thread, and the grammars hold ~400).
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import regex

from nccl_logsift.grammar.schema import class_escapes

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
    try:
        pc.match_substring_regex(pa.array([""]), pattern)
    except pa.ArrowInvalid as exc:
        problems.append(f"does not compile in RE2: {str(exc).splitlines()[0]}")
    if class_escapes(pattern):
        problems.append(
            f"{', '.join(class_escapes(pattern))} inside a character class: list the ASCII characters meant"
        )
    return problems
