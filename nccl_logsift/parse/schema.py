"""The table schemas, derived from the grammar files: key columns first, then each family's fields.

Every message table starts with the same key columns (``source_id, line_no, part`` locate the line;
``host, pid`` identify the process), so tables join on identical names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.grammar.schema import MESSAGE_KEYS, Grammar, Layer
from nccl_logsift.parse.kinds import DTYPES

SCHEMA_VERSION = "nccl-logsift/tables/v1"
# The engine logsift's lazy queries run on. Polars 2 runs a lazy query on its streaming engine unless told
# otherwise, and that costs ~2 ms a query however few its rows: an analysis runs thousands of small ones
# (a batch's patterns, the numbering's instances). Eager calls already run in memory.
ENGINE = "in-memory"

LOCATION = {"source_id": pl.UInt16(), "line_no": pl.UInt32(), "part": pl.UInt8()}
LINE_EXTRA = {
    "byte_offset": pl.UInt64(),
    "producer": pl.String(),
    "family": pl.String(),
    "pattern": pl.String(),
    "torn": pl.Boolean(),
}


def _constant_dtype(value: object) -> pl.DataType:
    if isinstance(value, bool):
        return pl.Boolean()
    if isinstance(value, int):
        return pl.Int64()
    if isinstance(value, float):
        return pl.Float64()
    return pl.String()


def grammar_columns(grammars: list[Grammar]) -> dict[str, pl.DataType]:
    """Fields (captured and constant) of these grammars, in declaration order."""
    columns: dict[str, pl.DataType] = {}
    for g in grammars:
        for f in g.fields:
            columns.setdefault(f.name, DTYPES[f.kind])
        for p in g.patterns:
            for key, value in p.set.items():
                columns.setdefault(key, _constant_dtype(value))
    return columns


@dataclass(frozen=True, slots=True)
class TableSchemas:
    """Column names and dtypes of ``lines`` and of every message table."""

    prefix_columns: dict[str, pl.DataType]  # launcher and envelope fields
    lines: dict[str, pl.DataType]
    tables: dict[str, dict[str, pl.DataType]]

    @classmethod
    def from_grammars(cls, grammars: GrammarSet, keep_text: bool) -> TableSchemas:
        prefix = grammar_columns(grammars.layer(Layer.LAUNCHER) + grammars.layer(Layer.ENVELOPE))
        prefix.pop("producer", None)
        lines = {**LOCATION, "byte_offset": LINE_EXTRA["byte_offset"], **prefix}
        lines.update({k: v for k, v in LINE_EXTRA.items() if k != "byte_offset"})
        if keep_text:
            lines["text"] = pl.String()
        keys = {
            **LOCATION,
            "byte_offset": LINE_EXTRA["byte_offset"],
            **{k: prefix[k] for k in MESSAGE_KEYS if k in prefix},
        }
        tables = {}
        for name, members in sorted(grammars.tables.items()):
            fields = grammar_columns(members)
            columns = {**keys, **{k: v for k, v in fields.items() if k not in keys}}
            columns["family"] = pl.String()
            columns["pattern"] = pl.String()
            tables[name] = columns
        return cls(prefix, lines, tables)


def conform(frame: pl.DataFrame, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """Select exactly ``columns`` in order, adding missing ones as nulls and casting to the schema."""
    if frame.is_empty():
        return pl.DataFrame(schema=columns)
    return frame.select(_conformed(tuple(columns.items()), tuple(frame.columns)))


# The expressions of conform, by schema and the frame's columns: a batch conforms some twenty tables of up
# to ninety columns, and building their casts again took ~4 ms of every call of the general parser.
_CONFORMED: dict[tuple, list[pl.Expr]] = {}
_CONFORMED_KEPT = 512


def _conformed(columns: tuple[tuple[str, pl.DataType], ...], present: tuple[str, ...]) -> list[pl.Expr]:
    key = (columns, present)
    exprs = _CONFORMED.get(key)
    if exprs is None:
        have = set(present)
        exprs = [
            (pl.col(name) if name in have else pl.lit(None)).cast(dtype).alias(name)
            for name, dtype in columns
        ]
        if len(_CONFORMED) >= _CONFORMED_KEPT:
            _CONFORMED.clear()
        _CONFORMED[key] = exprs
    return exprs


def empty(columns: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=columns)


# Columns the parser and the resolver add, documented here because no grammar declares them.
COLUMN_DOCS = {
    "source_id": "index of the input (order of the PATH arguments, directories walked in sorted order)",
    "line_no": "1-based line number in the (decompressed) input",
    "part": "0, or the piece number when a glued line was cut at a second envelope",
    "byte_offset": "where the line (or piece) starts in the decompressed input",
    "producer": "whose envelope the line carries: nccl, torch_cpp, torch_py, or null for plain text",
    "family": (
        "the grammar family that parsed the line; blank / text for lines with no envelope; null = unparsed"
    ),
    "pattern": "the pattern of the family that matched",
    "torn": "the line was cut apart because another process's output was glued into it",
    "text": "the line as read (launcher prefixes included)",
    "rank": (
        "lines: the resolved global rank (process's world rank, else torch or MPI label); "
        "collectives: rank in the communicator"
    ),
    "global_rank": "rank of the process in the world communicator",
    "generation": (
        "instance number of the communicator pointer in its process (pointers are reused after destroy)"
    ),
    "comm_uid": "communicator identity across processes: commId, split parentage, or n<nranks>#<k>",
    "ordinal": "0-based position of this call among the process's calls on this communicator instance",
}


def table_docs(
    grammars: GrammarSet,
    added: Mapping[str, Mapping[str, pl.DataType]],
    resolved: Mapping[str, tuple[str, Mapping[str, pl.DataType]]],
) -> str:
    """Markdown describing every table and column: the parsed tables from the grammar files, with the
    columns resolution ``added`` to them, then the ``resolved`` tables (name → what a row is, columns)."""
    schemas = TableSchemas.from_grammars(grammars, keep_text=True)
    docs = {name: doc for g in grammars.grammars for f in g.fields for name, doc in [(f.name, f.doc)] if doc}
    docs.update(COLUMN_DOCS)
    families = grammars.tables
    out = [
        "# Tables written by `logsift parse`",
        "",
        f"Schema version `{SCHEMA_VERSION}`. Generated from the grammar files by `logsift tables`; "
        "do not edit.",
        "Every message table starts with the location and process columns of the line it came from.",
        "",
    ]
    sections = [("lines", "every input line", {**schemas.lines, **added.get("lines", {})})]
    sections += [
        (
            name,
            "families: " + ", ".join(f"`{g.family}`" for g in families[name]),
            {**columns, **added.get(name, {})},
        )
        for name, columns in schemas.tables.items()
    ]
    sections += [(name, what, columns) for name, (what, columns) in resolved.items()]
    for name, what, columns in sections:
        out += [f"## `{name}`", "", what, "", "| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{c}` | {t} | {docs.get(c, '')} |" for c, t in columns.items()]
        out.append("")
    return "\n".join(out)
