"""Field kinds of the grammar files as polars dtypes and the expressions that cast captured text to them."""

from __future__ import annotations

import re

import polars as pl

from nccl_logsift.grammar.schema import FieldKind

DTYPES: dict[FieldKind, pl.DataType] = {
    FieldKind.INT: pl.Int64(),
    FieldKind.HEX: pl.Int64(),
    FieldKind.PTR: pl.UInt64(),
    FieldKind.FLOAT: pl.Float64(),
    FieldKind.STR: pl.String(),
}


def cast_field(expr: pl.Expr, kind: FieldKind) -> pl.Expr:
    """Captured text → typed value; text that does not convert becomes null, never an error."""
    if kind is FieldKind.INT:
        return expr.str.to_integer(strict=False).cast(pl.Int64)
    if kind is FieldKind.HEX:
        return expr.str.strip_prefix("0x").str.to_integer(base=16, strict=False).cast(pl.Int64)
    if kind is FieldKind.PTR:
        # %p prints 0x... or "(nil)" (grammar §0); nil is null here.
        return expr.str.strip_prefix("0x").str.to_integer(base=16, dtype=pl.UInt64, strict=False)
    if kind is FieldKind.FLOAT:
        return expr.cast(pl.Float64, strict=False)
    return expr


_HEX_DIGITS = r"^(?:0x)?[0-9A-Fa-f]+$"
_NUMBER = {FieldKind.INT: r"^[-+]?[0-9]+$", FieldKind.HEX: _HEX_DIGITS, FieldKind.PTR: _HEX_DIGITS}


def unfit(expr: pl.Expr, kind: FieldKind) -> pl.Expr | None:
    """Whether captured text is a well-formed number that became null because it does not fit its column;
    None for kinds that cannot overflow."""
    shape = _NUMBER.get(kind)
    if shape is None:
        return None
    # The shape is tested only where the cast gave null (the regex skips null text): every field of every
    # line is cast, few casts fail.
    failed = pl.when(cast_field(expr, kind).is_null()).then(expr)
    return failed.str.contains(shape).fill_null(False)


def typed_value(value: object, kind: FieldKind) -> object:
    """A sample's expected value in the same representation ``cast_field`` produces."""
    if value == "<null>":
        return None
    if kind is FieldKind.PTR and isinstance(value, str):
        return None if value == "(nil)" else int(value.removeprefix("0x"), 16)
    if kind is FieldKind.HEX and isinstance(value, str):
        return int(value.removeprefix("0x"), 16)
    return value


class Unsure(ValueError):
    """Text whose cast :func:`cast_value` does not vouch for: :func:`cast_field` must cast it."""


_INT64 = (-(1 << 63), (1 << 63) - 1)
_LIMITS = {FieldKind.INT: _INT64, FieldKind.HEX: _INT64, FieldKind.PTR: (0, (1 << 64) - 1)}
_PLAIN = {
    FieldKind.INT: re.compile(_NUMBER[FieldKind.INT]),
    FieldKind.HEX: re.compile(_HEX_DIGITS),
    FieldKind.PTR: re.compile(_HEX_DIGITS),
    FieldKind.FLOAT: re.compile(r"^[-+]?[0-9]+(?:\.[0-9]+)?$"),
}


def cast_value(text: str | None, kind: FieldKind) -> tuple[object, bool]:
    """What :func:`cast_field` and :func:`unfit` give one captured text, in Python: the value, and whether
    it is a number too large for its column. Only plain forms are cast here (digits, an optional sign for
    decimal ones, an optional 0x for hexadecimal ones); anything else raises :class:`Unsure`.
    tests/parse/test_kinds.py compares the two on every form at the limits of each column."""
    if text is None or kind is FieldKind.STR:
        return text, False
    if _PLAIN[kind].match(text) is None or not text.isascii():
        raise Unsure(text)
    if kind is FieldKind.FLOAT:
        return float(text), False
    value = int(text) if kind is FieldKind.INT else int(text.removeprefix("0x"), 16)
    low, high = _LIMITS[kind]
    return (value, False) if low <= value <= high else (None, True)
