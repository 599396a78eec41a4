"""Parse chunks of lines into tables: launcher prefixes → producer envelope → message family.

Every step is a polars expression over the whole chunk; Python touches individual lines only for the
rare glued lines (two envelopes in one physical line) that ``_split_glued`` cuts apart. The launcher and
envelope steps run over distinct line heads where they can: an NCCL INFO line's head (launcher tags,
host:pid:tid [dev]) repeats for every line of its thread, so each head is read once per parser and its
lines take its fields (``LineParser._apart_by_head``), as the COLL fast path's lines do.

Dispatch of message families shrinks a pool of distinct messages: grammar by grammar, each pattern whose
literal anchor the batch has captures over the messages with that anchor (the capture also says whether it
matched), each message goes to the first pattern that matches it, and the claimed messages leave the pool.
Frequent families run first (grammar ``priority``), so the pool is small by the time the rare families look
at it. A batch's cost is mostly the number of polars queries it runs (~0.1-0.5 ms each however few its
rows) and the regexes polars compiles again in every batch (it keeps 32 per thread): see
``LineParser._claim``. A small pool (the init lines of one per-rank file, a live batch, a small job's log)
is matched in Python's ``regex`` instead, with patterns compiled once per process, and only the casts of
the fields it captured run in polars (``LineParser._claim_small``).
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import regex

from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.grammar.schema import (
    MESSAGE_KEYS,
    FieldKind,
    Grammar,
    Layer,
    Pattern,
    end_of_text,
    group_names,
)
from nccl_logsift.io.lines import LineChunk
from nccl_logsift.parse.calls import PrefixFields
from nccl_logsift.parse.kinds import Unsure, cast_field, cast_value, unfit
from nccl_logsift.parse.schema import ENGINE, LOCATION, TableSchemas, conform

log = logging.getLogger(__name__)

_ANSI = r"\x1b\[[0-9;]*[A-Za-z]"
_MATCH = "__all"
_LAUNCHER_ROUNDS = 3
# Per row, the launcher and the envelope fields whose number did not fit its column (kept apart: the
# envelope of a glued line's first piece is matched again, its launcher prefix is not).
_UNFIT = {Layer.LAUNCHER: "__unfit_launcher", Layer.ENVELOPE: "__unfit_envelope"}
TORCH_PRODUCERS = ("torch_cpp", "torch_py")
# Pieces a physical line is cut into at most (part 0 to 255).
MAX_PARTS = 256
# The longest host name (RFC 1035: 253 characters in dotted form).
HOST_CHARS = 253
# An NCCL envelope head anywhere in a line: used to find where a second process's line was glued in.
# A PyTorch C++ line ([rank4]:[E ProcessGroupNCCL.cpp:563] ...) glued into another line is cut there too.
# The host starts only at the first letter or digit of its run of host characters: from any later start
# the run ends at the same place, so the match would fail there too, after scanning the run again (a
# run of n characters cost n²/2 steps). The lookbehind reads back over dots and dashes only.
_GLUED_HEAD = regex.compile(
    r"(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?\] )?"
    r"(?<![A-Za-z0-9_][.\-]*+)(?P<host>[A-Za-z0-9_][A-Za-z0-9_.\-]*+):\d+:\d+ "
    r"(?:\[-?\d+\] )?(?:\S+ \S+ |\S+ )?NCCL (?:INFO|WARN|ATTN|TRACE|CALL)(?: |$)"
    r"|(?P<torch>\[rank\d+\]:\[[EWIF][\d ]"
    r"|\[[EWIF](?:\d{3,4} \d\d:\d\d:\d\d\.\d+)? [\w.]+\.(?:cpp|cc|h):\d+\] )"
)


# The rows of a lines table counted as not understood (ParseState.unparsed_envelope_lines): an envelope no
# family claimed, not a torn fragment.
UNPARSED = pl.col("producer").is_not_null() & pl.col("family").is_null() & ~pl.col("torn")
# The frame of the rows each message pattern claimed (LineParser._dispatch_messages).
_ASSIGNED = {"row": pl.UInt32, "family": pl.String, "pattern": pl.String, "__unfit": pl.UInt32}
# The most rows the patterns of a message grammar capture over side by side (LineParser._claim).
_TOGETHER_ROWS = 2000
# The longest message matched in Python (LineParser._claim_small): Python's engine backtracks, and a pattern
# such as nccl_tests' "^(?:.*?(?P<test_host>[^\s:]+): )?Test NCCL failure ..." takes time quadratic in the
# message's length (~2 ms a message at 1 KB, seconds at 1 MB); Rust's engine, which polars runs, is linear.
# Below this, every pattern stays under ~0.2 ms a message on messages made to make it backtrack.
_SMALL_BYTES = 256
# The most time the searches of one LineParser._claim_small call take together before polars takes over.
_SMALL_SECONDS = 0.5
# The most rows whose messages are matched in Python, not in polars (LineParser._claim_small). Per call, on
# the init lines of a 4096-rank job: 75 lines 45 against 68 ms, 7,400 distinct messages 107 against 116 ms,
# 18,900 224 against 202 ms; on 40,000 leftover lines of mixed32 (1,700 distinct) 138 against 178 ms.
_SMALL_ROWS = 5000
# The most rows of one pattern whose fields a small batch casts in Python (_cast_claims): past it polars
# cast costs less than a cast per field and row in Python (5,000 init messages of a 4096-rank job: 75 against
# 60 ms; 100 of them: 3.6 against 7.2 ms).
_CAST_ROWS = 256
# The most heads read in Python, not in polars (_HeadReader).
_SMALL_HEADS = 64
# The most bytes of messages searched for anchors at once (_routes).
_PRESENT_BYTES = 8 << 20
# The messages in which _routes looks for the short anchors in Python first.
_SHORT_FIRST = 16
# What ends the head of an NCCL INFO line (LineParser._apart_by_head): its envelope, the level and one space.
_INFO = " NCCL INFO "
# The columns of a read head (``LineParser._read_heads``) before the launcher and envelope fields.
_HEAD_META = {"__head": pl.String, "__clean": pl.Boolean, "__start": pl.UInt32, "__msg": pl.UInt32}
# What a line must hold to be cut into glued pieces (LineParser._split_glued), where the cut depends on the
# hosts known when it is parsed: another process's NCCL envelope, a PyTorch "]:[" rank tag, a c10 glog head.
GLUE_MARKS = (" NCCL ", "]:[", ".cpp:")
# The most distinct heads a parser keeps what the launcher and envelope steps made of (_Heads): a launcher's
# timestamp makes every line's head new.
_MAX_HEADS = 1 << 16
# A named group: the patterns joined into one regex have their groups made plain (names repeat across them).
_GROUP_NAME = re.compile(r"\(\?P?<(?![=!])\w+>|\(\?P=")


def _ungrouped(pattern: str) -> str:
    """``pattern`` with its named groups as groups without a name, and no capture."""
    return re.sub(r"\(\?P?<(?![=!])\w+>", "(?:", pattern)


class PlainFilter(Protocol):
    """What an analysis drops of the plain lines whatever batch they come in (``tables.PlainLines``)."""

    def known(self, plain: pl.DataFrame) -> pl.Series:
        """Which of these plain ``lines`` rows are dropped."""
        ...

    def unlabeled_known(self) -> bool:
        """Whether every plain line without a launcher label that no rule reads is dropped now."""
        ...

    def read_pattern(self) -> str:
        """The regex of the texts of plain lines a rule reads (in polars' dialect)."""
        ...


# Codes of LineParser.unlabeled_plain: a line dropped unparsed, and its family.
PLAIN_TEXT, PLAIN_BLANK = 1, 2
PLAIN_FAMILIES = {PLAIN_TEXT: "text", PLAIN_BLANK: "blank"}


@dataclass(slots=True)
class ParseState:
    """What the parser carries from one chunk to the next."""

    known_hosts: set[str] = field(default_factory=set)
    family_counts: Counter = field(default_factory=Counter)
    unparsed_shapes: Counter = field(default_factory=Counter)
    lines: int = 0
    envelope_lines: int = 0
    unparsed_envelope_lines: int = 0
    torn_fragments: int = 0
    # Numbers too large for their column, read as null (pid 99999999999999999999, opCount of 17 hex digits).
    values_out_of_range: int = 0
    # Lines longer than io.lines.MAX_LINE_BYTES, cut to it (parse/chunks.py).
    long_lines_cut: int = 0
    # Glued envelope heads left inside the last piece of a line cut into MAX_PARTS pieces already.
    glued_uncut: int = 0
    # Hosts a glued line named before any line of theirs was seen: the cut there depends on what was
    # known, so a parser that started mid-file (parse/parallel.py) reports them to be checked.
    unknown_glued_hosts: set[str] = field(default_factory=set)
    # Lines not parsed because they repeat a line whose rows the analysis's fold of repeats drops
    # (parse/repeats.py): counted in ParseSummary.repeats_folded.
    repeats_skipped: int = 0

    def count_unparsed(self, families: Mapping[str, int], enveloped: int = 0, folded: int = 0) -> None:
        """Count lines left out unparsed (dropped, or skipped as repeats) as parsing them would have: how
        many of each family, how many of them had an envelope, and how many the fold of repeats would have
        dropped."""
        self.lines += sum(families.values())
        self.envelope_lines += enveloped
        self.repeats_skipped += folded
        self.family_counts.update({family: count for family, count in families.items() if count})

    def absorb(self, other: ParseState) -> None:
        """Add what another parser found (a worker's part of the same input) to this state."""
        self.known_hosts |= other.known_hosts
        self.family_counts.update(other.family_counts)
        self.unparsed_shapes.update(other.unparsed_shapes)
        self.lines += other.lines
        self.envelope_lines += other.envelope_lines
        self.unparsed_envelope_lines += other.unparsed_envelope_lines
        self.torn_fragments += other.torn_fragments
        self.glued_uncut += other.glued_uncut
        self.values_out_of_range += other.values_out_of_range
        self.long_lines_cut += other.long_lines_cut
        self.repeats_skipped += other.repeats_skipped


@dataclass(frozen=True, slots=True)
class _Prefix:
    """One launcher or envelope pattern as the three steps that apply it to a frame, built once per parser:
    building the capture step compiles the regex (~0.2 ms), and a batch applies each pattern several times."""

    fields: tuple[str, ...]
    captures: pl.Expr  # __g: the groups, and the whole match as __all
    matches: pl.Expr  # whether the regex matches any row (no captures: the DFA runs)
    hit: pl.Expr  # __hit: the rows the pattern applies to
    updates: tuple[pl.Expr, ...]  # its fields and constants, and the rest (launcher) or message (envelope)
    # What _HeadReader applies in Python: the anchored regex, the kind of each field, the constants the
    # pattern sets, and whether its group "keep" gives back the end of the match.
    regex: str
    kinds: tuple[FieldKind, ...]
    constants: tuple[tuple[str, object], ...]
    keeps: bool

    @classmethod
    def of(cls, grammar: Grammar, pattern: Pattern) -> _Prefix:
        body = pattern.regex[1:] if pattern.regex.startswith("^") else pattern.regex
        groups = group_names(pattern.regex)
        fields = tuple(name for name in grammar.field_kinds if name in groups)
        kinds = grammar.field_kinds
        anchored = f"^(?P<{_MATCH}>{body})"
        captures = pl.col("rest").str.extract_groups(anchored).alias("__g")
        matches = pl.col("rest").str.contains(f"^(?:{_ungrouped(body)})").any()
        hit = pl.col("__g").struct.field(_MATCH).is_not_null()
        if grammar.layer is Layer.ENVELOPE:
            hit = hit & pl.col("producer").is_null()  # the first envelope that matches a line is its envelope
        updates = [
            pl.when(pl.col("__hit"))
            .then(cast_field(pl.col("__g").struct.field(name), kinds[name]))
            .otherwise(pl.col(name))
            .alias(name)
            for name in fields
        ]
        updates += [
            pl.when(pl.col("__hit")).then(pl.lit(value)).otherwise(pl.col(key)).alias(key)
            for key, value in pattern.set.items()
        ]
        lost = [unfit(pl.col("__g").struct.field(name), kinds[name]) for name in fields]
        lost = [u for u in lost if u is not None]
        if lost:
            counter = _UNFIT[grammar.layer]
            added = pl.col(counter) + pl.sum_horizontal(lost).cast(pl.UInt32)
            updates.append(pl.when(pl.col("__hit")).then(added).otherwise(pl.col(counter)).alias(counter))
        consumed = pl.col("__g").struct.field(_MATCH).str.len_chars()
        if "keep" in groups:
            consumed = consumed - pl.col("__g").struct.field("keep").str.len_chars().fill_null(0)
        # A launcher prefix is stripped from the rest of the line; what follows an envelope is its message.
        target = "rest" if grammar.layer is Layer.LAUNCHER else "msg"
        after = pl.col("rest").str.slice(consumed)
        updates.append(pl.when(pl.col("__hit")).then(after).otherwise(pl.col(target)).alias(target))
        return cls(
            fields,
            captures,
            matches,
            hit.alias("__hit"),
            tuple(updates),
            anchored,
            tuple(kinds[name] for name in fields),
            tuple(pattern.set.items()),
            "keep" in groups,
        )

    def apply(self, frame: pl.LazyFrame) -> pl.LazyFrame:
        return frame.with_columns(self.captures).with_columns(self.hit).with_columns(self.updates).drop("__g")


@dataclass(frozen=True, slots=True)
class _Extraction:
    """One message pattern's capture step, and each of its fields cast to its kind, built once per parser:
    on a batch of a few lines, building the expressions cost more than running them.

    The captures also say whether the pattern matches (an empty group, ``_MATCH``, ahead of the pattern is
    null where it does not), so that a batch compiles each pattern once, not once to test and once to
    capture: polars keeps 32 compiled regexes per thread, and the grammars hold ~400."""

    candidates: pl.Expr  # the messages worth trying: with the pattern's anchor, at its level
    captures: pl.Expr  # __g: the groups
    columns: tuple[pl.Expr, ...]  # the fields, constants, family, pattern and __unfit
    groups: tuple[str, ...]  # the fields of __g: _MATCH, then the named groups
    # What :meth:`cast` writes without a query: each field's kind, and the constant columns' values.
    kinds: tuple[tuple[str, FieldKind], ...]
    constants: tuple[tuple[str, object], ...]
    # The schema of :meth:`matched`'s frame, by the dtype of its rows (found once, without running it).
    schemas: dict = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, grammar: Grammar, pattern: Pattern) -> _Extraction:
        kinds = grammar.field_kinds
        groups = group_names(pattern.regex)
        columns = [cast_field(pl.col("__g").struct.field(g), kinds[g]).alias(g) for g in groups if g in kinds]
        columns += [pl.lit(v).alias(k) for k, v in pattern.set.items()]
        columns += [pl.lit(grammar.family).alias("family"), pl.lit(pattern.name).alias("pattern")]
        lost = [unfit(pl.col("__g").struct.field(g), kinds[g]) for g in groups if g in kinds]
        lost = [u for u in lost if u is not None]
        unfit_count = pl.sum_horizontal(lost).cast(pl.UInt32) if lost else pl.lit(0, pl.UInt32)
        columns.append(unfit_count.alias("__unfit"))
        captures = pl.col("msg").str.extract_groups(f"(?P<{_MATCH}>)(?:{pattern.regex})").alias("__g")
        constants = (*pattern.set.items(), ("family", grammar.family), ("pattern", pattern.name))
        return cls(
            _candidate(pattern),
            captures,
            tuple(columns),
            (_MATCH, *groups),
            tuple((g, kinds[g]) for g in groups if g in kinds),
            constants,
        )

    def captured(self, rows: pl.LazyFrame) -> pl.LazyFrame:
        """The rows of ``rows`` the pattern matches, with their fields."""
        return (
            rows.filter(self.candidates)
            .select("row", self.captures)
            .filter(pl.col("__g").struct.field(_MATCH).is_not_null())
            .with_columns(self.columns)
            .drop("__g")
        )

    def matched(self, rows: pl.Series, matches: list[regex.Match]) -> pl.LazyFrame:
        """The same for rows the pattern was matched on in Python (``LineParser._claim_small``): ``rows``
        and the match of each."""
        captures = {
            name: pl.Series(
                name, [m.group(name) for m in matches] if name != _MATCH else [""] * len(matches), pl.String
            )
            for name in self.groups
        }
        struct = pl.struct(*(pl.lit(capture) for capture in captures.values())).alias("__g")
        return pl.LazyFrame([rows]).with_columns(struct).with_columns(self.columns).drop("__g")

    def schema(self, rows: pl.Series) -> pl.Schema:
        """The schema of :meth:`matched`'s frame for ``rows`` of its dtype (found once, not by running it)."""
        schema = self.schemas.get(rows.dtype)
        if schema is None:
            schema = self.schemas[rows.dtype] = self.matched(rows.clear(), []).collect_schema()
        return schema

    def values(self, matches: list[regex.Match]) -> dict[str, list] | None:
        """The values of :meth:`matched`'s columns other than the rows, the fields cast in Python
        (``kinds.cast_value``): None when a captured text is not one it vouches for (polars casts the
        pattern's rows then)."""
        lost = [0] * len(matches)
        columns: dict[str, list] = {}
        try:
            for name, kind in self.kinds:
                values = []
                for n, match in enumerate(matches):
                    value, unfit_ = cast_value(match.group(name), kind)
                    values.append(value)
                    lost[n] += unfit_
                columns[name] = values
        except Unsure:
            return None
        columns.update((key, [value] * len(matches)) for key, value in self.constants)
        columns["__unfit"] = lost
        return columns


def _cast_claims(
    claims: list[tuple[_Extraction, pl.Series, list[regex.Match]]], schema: pl.Schema
) -> pl.DataFrame | None:
    """One frame of what several patterns claimed (each its extraction, the rows it claimed and their
    matches), the fields cast in Python: the frames of :meth:`_Extraction.matched`, one after the other,
    each column null in the rows of a pattern without it. ``schema`` is :func:`_claims_schema`'s. None when
    a captured text is not one ``kinds.cast_value`` vouches for (polars casts them then). A small batch's
    claims took a frame per pattern, a Series per column (~0.35 ms a pattern, ~25 patterns in the init
    lines of a per-rank file); a frame made from rows costs half of one made from columns."""
    names = schema.names()
    made: list[tuple] = []
    for extraction, rows, matches in claims:
        values = extraction.values(matches)
        if values is None:
            return None
        values[rows.name] = rows.to_list()
        nulls = [None] * len(matches)
        made.extend(zip(*(values.get(name, nulls) for name in names)))
    return pl.DataFrame(made, schema=schema, orient="row")


def _claims_schema(claims: list[tuple[_Extraction, pl.Series, list[regex.Match]]]) -> pl.Schema | None:
    """The columns of :func:`_cast_claims`' frame for these claims, in order of first sight; None when two
    patterns give a column different types."""
    schema: dict[str, pl.DataType] = {}
    for extraction, rows, _ in claims:
        for name, dtype in extraction.schema(rows).items():
            if schema.setdefault(name, dtype) != dtype:
                return None
    return pl.Schema(schema)


@dataclass(frozen=True, slots=True)
class _Prefixes:
    """The launcher or the envelope patterns, and one test of whether any of them matches a row."""

    patterns: tuple[_Prefix, ...]
    strips: bool  # launcher patterns: each strips its match from ``rest``, which the patterns after it read
    any_matches: pl.Expr | None  # None when the patterns cannot be joined into one regex
    joined: str | None  # that regex, which matches where any of the patterns does

    @classmethod
    def of(cls, grammars: GrammarSet, layer: Layer) -> _Prefixes:
        patterns = [p for g in grammars.layer(layer) for p in g.patterns]
        bodies = [_ungrouped(p.regex[1:] if p.regex.startswith("^") else p.regex) for p in patterns]
        joined = "^(?:" + "|".join(f"(?:{b})" for b in bodies) + ")"
        joinable = not _GROUP_NAME.search(joined)
        any_matches = pl.col("rest").str.contains(joined).any() if joinable else None
        prefixes = tuple(_Prefix.of(g, p) for g in grammars.layer(layer) for p in g.patterns)
        return cls(prefixes, layer is Layer.LAUNCHER, any_matches, joined if joinable else None)

    def fields(self) -> set[str]:
        return {f for spec in self.patterns for f in spec.fields}

    def applied(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` with every pattern applied in turn, as one query: eagerly, each step of each pattern
        ran polars' engine on its own (~250 queries a batch).

        A pattern that matches no row changes nothing, and capturing costs several times testing (most
        patterns match no line of a log), so the patterns are tested first, all in one query. A launcher
        pattern changes ``rest``, which the patterns after it read, so only those ahead of the first that
        matches are left out; an envelope pattern leaves ``rest`` as it is, so each that matches nothing
        is."""
        if not frame.height or not self.patterns:
            return frame
        if self.any_matches is not None and not frame.select(self.any_matches).item():
            return frame
        found = frame.select(p.matches.alias(str(n)) for n, p in enumerate(self.patterns)).row(0)
        if self.strips:
            first = next((n for n, hit in enumerate(found) if hit), len(found))
            applied = self.patterns[first:]
        else:
            applied = tuple(p for p, hit in zip(self.patterns, found) if hit)
        lazy = frame.lazy()
        for prefix in applied:
            lazy = prefix.apply(lazy)
        return lazy.drop("__hit", strict=False).collect(engine=ENGINE)


@dataclass(frozen=True, slots=True)
class _Compiled:
    """What a parser builds from its grammars, once per process for each grammar set (and ``keep_text``):
    the tables' schemas and empty tables, the launcher and envelope steps, each message grammar's anchors,
    the plain-line test and each message pattern's capture step (built when a batch first has its
    anchor). An analysis builds a parser per job: these took ~40 ms of a small job's ~300."""

    schemas: TableSchemas
    empty_tables: dict[str, pl.DataFrame]
    launchers: _Prefixes
    envelopes: _Prefixes
    anchors: dict[str, list[str] | None]  # None when a pattern has none (every message is a candidate)
    plain_test: tuple[pl.Expr, tuple[str, ...]] | None
    extractions: dict[tuple[str, int], _Extraction]
    # The launcher and envelope fields, the producer and the counts of values out of range, as a frame has
    # them before any pattern has set one (~20 µs an expression to build, ~50 of them a step).
    prefix_defaults: dict[str, pl.Expr]

    @classmethod
    def of(cls, grammars: GrammarSet, keep_text: bool) -> _Compiled:
        key = (id(grammars), keep_text)
        held = _COMPILED.get(key)
        if held is not None and held[0] is grammars:
            return held[1]
        schemas = TableSchemas.from_grammars(grammars, keep_text)
        # Every table with no rows (~0.3 ms each): a batch has rows for a few tables only.
        empty_tables = {name: pl.DataFrame(schema=columns) for name, columns in schemas.tables.items()}
        empty_tables["lines"] = pl.DataFrame(schema=schemas.lines)
        anchors = {
            g.family: sorted({p.anchor for p in g.patterns}) if all(p.anchor for p in g.patterns) else None
            for g in grammars.layer(Layer.MESSAGE)
        }
        built = cls(
            schemas,
            empty_tables,
            _Prefixes.of(grammars, Layer.LAUNCHER),
            _Prefixes.of(grammars, Layer.ENVELOPE),
            anchors,
            _plain_test(grammars),
            {},
            {
                **{
                    name: pl.lit(None, dtype=dtype).alias(name)
                    for name, dtype in schemas.prefix_columns.items()
                },
                "producer": pl.lit(None, dtype=pl.String).alias("producer"),
                **{name: pl.lit(0, pl.UInt32).alias(name) for name in _UNFIT.values()},
            },
        )
        if len(_COMPILED) >= _COMPILED_SETS:
            _COMPILED.clear()
        _COMPILED[key] = (grammars, built)  # the grammar set is held, so its id is not reused
        return built


# By (id of a grammar set, keep_text): the set and what was built from it (_Compiled.of).
_COMPILED: dict[tuple[int, bool], tuple[GrammarSet, _Compiled]] = {}
_COMPILED_SETS = 8


# What no plain line holds: an ANSI escape (the parser strips it first) and the literals
# ``LineParser._split_glued`` looks for.
_PLAIN_MARKS = ("\x1b", " NCCL ", "]:[", ".cpp:")
_PLAIN_MARK_PATTERNS = tuple(pl.escape_regex(mark) for mark in _PLAIN_MARKS)  # the same, as regexes


def _plain_test(grammars: GrammarSet) -> tuple[pl.Expr, tuple[str, ...]] | None:
    """True for the lines the parser would find plain (family ``text`` or ``blank``, no envelope) once
    their launcher prefixes are stripped, tested on what is left (``rest``): no ANSI escape (stripped
    first), none of the literals ``LineParser._split_glued`` looks for, and none of these regexes
    matching: one for all launcher and envelope patterns where the rest starts, and one per text grammar
    anywhere (whatever its anchor and level). None when the patterns cannot be joined into one regex.

    The regexes run in RE2 (pyarrow) on the main thread, which compiles the joined patterns in ~1 ms: the
    Rust engine polars uses took 16 ms, paid again in every batch (polars keeps 32 compiled regexes per
    thread, and the main thread runs many). The scanning threads run them in polars, all in one
    (``_joined``), compiled once per thread (``LineParser.unlabeled_plain``). The grammars are written so
    that both engines read them alike (grammar/dialect.py)."""
    heads = [
        _ungrouped(p.regex[1:] if p.regex.startswith("^") else p.regex)
        for layer in (Layer.LAUNCHER, Layer.ENVELOPE)
        for g in grammars.layer(layer)
        for p in g.patterns
    ]
    # One regex per text grammar: all of them in one alternation outgrow the regex engine's DFA, which
    # then falls back to a far slower engine.
    texts = ["|".join(f"(?:{_ungrouped(p.regex)})" for p in g.patterns) for g in grammars.messages("text")]
    if not heads or _GROUP_NAME.search("".join(heads + texts)):
        return None
    unmarked = ~pl.col("rest").str.contains_any(list(_PLAIN_MARKS))
    regexes = ("^(?:" + "|".join(f"(?:{h})" for h in heads) + ")", *(t for t in texts if t))
    try:
        for rx in regexes:
            pc.match_substring_regex(pa.array(["", "x"]), rx)
        pl.Series(["", "x"]).str.contains(_joined(regexes))
    except (pa.ArrowInvalid, pl.exceptions.PolarsError):
        return None
    return unmarked, regexes


@functools.cache
def _joined(regexes: tuple[str, ...]) -> str:
    """Regexes as one alternation (the plain test's, ``_plain_test``), for polars' engine, which runs it ~5x
    faster than each in turn (RE2 does not: its DFA outgrows its budget)."""
    return "|".join(f"(?:{rx})" for rx in regexes)


class _HeadReader:
    """``LineParser._read_heads`` for a few heads, in Python: the launcher and envelope patterns matched in
    ``regex`` and the fields cast by ``kinds.cast_value``. The steps over a frame run ~20 polars queries
    (~0.2 ms each however few the rows): ~3 ms a new head, and a directory of per-rank files brings new
    heads with every file (512 files: 1.5 s of the scanning threads' time, contended for the GIL).

    Each pattern is applied as the steps apply it (``_Prefixes.applied``): the launcher patterns in turn,
    each to what the ones before it left, in rounds until nothing more is stripped; then the envelope
    patterns in turn, each to the heads no envelope claimed yet. A later pattern's field or constant
    replaces an earlier one's, and a number any pattern captured that does not fit its column makes the
    head unclean. tests/parse/test_lineparser.py reads heads both ways and expects the same rows."""

    def __init__(self, launchers: _Prefixes, envelopes: _Prefixes, columns: Mapping[str, pl.DataType]):
        self.launchers, self.envelopes = launchers.patterns, envelopes.patterns
        # The launcher patterns as one regex: most heads have no launcher prefix, and one search says so
        # where each of the 13 patterns cost one (``parse_prefixes`` of a new per-rank file's two heads:
        # 0.46 to 0.25 ms).
        self.any_launcher = launchers.joined
        self.columns = dict(columns)
        self.schema = {**_HEAD_META, **self.columns}
        # Usable when every field and constant has an output column (the producer aside).
        every = (*self.launchers, *self.envelopes)
        self.usable = all(name in self.columns for prefix in every for name in prefix.fields) and all(
            key == "producer" or key in self.columns for prefix in every for key, _ in prefix.constants
        )

    def read(self, heads: list[str]) -> HeadRows | None:
        """The rows ``_read_heads`` gives ``heads``; None when a head is longer than _SMALL_BYTES (Python's
        engine backtracks, Rust's is linear), the searches ran past _SMALL_SECONDS or a field's text is
        not one ``cast_value`` vouches for: the polars steps read them then."""
        if not self.usable:
            return None
        rests = [head + _INFO.rstrip() for head in heads]
        if any(len(rest) > _SMALL_BYTES for rest in rests):
            return None
        n = len(heads)
        values: list[dict[str, object]] = [{} for _ in range(n)]  # per head, each column's last value
        fits, producer = [True] * n, [None] * n
        msg: list[str | None] = [None] * n
        deadline = time.monotonic() + _SMALL_SECONDS

        def apply(prefix: _Prefix, row: int) -> str | None:
            """What ``prefix`` leaves of the head's rest, its fields and constants written; None when it
            does not match."""
            timeout = max(deadline - time.monotonic(), 1e-6)
            m = python_regex(prefix.regex).match(rests[row], timeout=timeout)
            if m is None:
                return None
            for name, kind in zip(prefix.fields, prefix.kinds):
                values[row][name], lost = cast_value(m.group(name), kind)
                fits[row] = fits[row] and not lost
            for key, value in prefix.constants:
                values[row][key] = value
                if key == "producer":
                    producer[row] = value
            consumed = len(m.group(_MATCH)) - (len(m.group("keep") or "") if prefix.keeps else 0)
            return rests[row][consumed:]

        try:
            for _ in range(_LAUNCHER_ROUNDS):  # launcher prefixes stack, in any order
                before = list(rests)
                # The heads a launcher pattern matches: only a launcher pattern's strip changes a head's rest.
                stripped = [row for row in range(n) if self._has_launcher(rests[row], deadline)]
                for prefix in self.launchers:
                    for row in stripped:
                        after = apply(prefix, row)
                        if after is not None:
                            rests[row] = after
                if rests == before:
                    break
            for prefix in self.envelopes:  # the first envelope that matches a head is its envelope
                for row in range(n):
                    if producer[row] is None:
                        after = apply(prefix, row)
                        if after is not None:
                            msg[row] = after
        except (TimeoutError, Unsure):
            return None
        info = len(_INFO.rstrip())
        names = list(self.columns)
        rows = [
            (
                head,
                p == "nccl" and v.get("level") == "INFO" and m == "" and fit,
                len(head) + info - len(rest),
                len(head) + len(_INFO),
                *(v.get(name) for name in names),
            )
            for head, rest, p, v, m, fit in zip(heads, rests, producer, values, msg, fits)
        ]
        return HeadRows(self.schema, rows)

    def _has_launcher(self, rest: str, deadline: float) -> bool:
        """Whether some launcher pattern matches where ``rest`` starts (True when they cannot be joined)."""
        if self.any_launcher is None:
            return True
        timeout = max(deadline - time.monotonic(), 1e-6)
        return python_regex(self.any_launcher).match(rest, timeout=timeout) is not None


@dataclass(frozen=True)
class HeadRows:
    """What the launcher and envelope steps make of a few line heads, read in Python (:class:`_HeadReader`):
    a tuple per head, in the order of ``schema`` (the columns of ``LineParser._read_heads``). A frame is
    made only when one is asked for: a scanning thread meets a new head with every per-rank file, and the
    frame of one head (28 columns) cost more than reading it."""

    schema: dict[str, pl.DataType]
    rows: list[tuple]

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.rows, schema=self.schema, orient="row")


@dataclass(frozen=True)
class ParsedPrefixes:
    """Launcher and envelope fields of line heads that stop right before `` NCCL INFO ``
    (:meth:`LineParser.parse_prefixes`), in the order asked: each head's fields as a tuple in the order of
    ``columns``, and whether the head is exactly one clean INFO envelope (the fast paths take only those
    lines; the others go to the general parser)."""

    heads: list[str]
    clean: list[bool]
    columns: dict[str, pl.DataType]
    fields: list[tuple]

    def frame(self) -> pl.DataFrame:
        """``prefix``, ``producer`` ("nccl" for a clean head, else null) and the columns, a row per head."""
        return pl.DataFrame(
            [
                (head, "nccl" if clean else None, *row)
                for head, clean, row in zip(self.heads, self.clean, self.fields)
            ],
            schema={"prefix": pl.String, "producer": pl.String, **self.columns},
            orient="row",
        )

    def column(self, name: str) -> list:
        """The values of column ``name``, one per head (each None when the grammars have no such field)."""
        if name not in self.columns:
            return [None] * len(self.heads)
        at = list(self.columns).index(name)
        return [row[at] for row in self.fields]

    def hosts(self) -> list[str]:
        """The hosts of the clean heads."""
        return [h for c, h in zip(self.clean, self.column("host")) if c and h is not None]


class _Heads:
    """What the launcher and envelope steps make of each distinct line head a parser met (``__head``, and
    the columns of ``LineParser._read_heads``), kept across batches and shared by the threads that ask:
    a thread's lines share their head, the COLL fast path's scanning threads meet the same new heads (a
    directory of per-rank files brings new ones with every file), and reading heads costs a few ms however
    few they are. Emptied past _MAX_HEADS heads (a launcher's timestamp makes every line's head new).

    Heads are asked for as a frame (:meth:`rows`, the general parser's) or as tuples (:meth:`tuples`, the
    fast paths', which ask for a file's new head or two and want no frame of them)."""

    def __init__(self, read: Callable[[pl.Series], pl.DataFrame | HeadRows]):
        self._read = read
        self._lock = threading.Lock()
        # The rows read, in order, joined only when a gather reads them: a directory of per-rank files brings
        # a head or two with every file, most of them asked for only as they are read.
        self._known: PrefixFields | None = None
        self._row: dict[str, int] = {}  # head → its row of _known
        self._tuple: dict[str, tuple] = {}  # head → its row as read in Python (HeadRows), while known
        self._reading: dict[str, threading.Event] = {}  # heads being read, set when their read is done

    def rows(self, heads: list[str]) -> pl.DataFrame:
        """The rows of ``heads``, in their order, as a frame."""
        return self._fetch(heads, as_tuples=False)

    def tuples(self, heads: list[str]) -> list[tuple]:
        """The rows of ``heads``, in their order, as tuples in the order of the frame's columns."""
        return self._fetch(heads, as_tuples=True)

    def _fetch(self, heads: list[str], as_tuples: bool) -> Any:
        """The rows of ``heads``, in their order.

        New heads are read outside the lock, so that a thread reading heads does not hold up another that
        asks for heads known already or reads others (the scanning threads of a directory of per-rank files
        meet new heads with every file, and a read takes ~8 ms); a thread that needs a head another is
        reading waits for that read, so each head is read once."""
        while True:
            with self._lock:
                missing = list(dict.fromkeys(head for head in heads if head not in self._row))
                if not missing:
                    return self._gather(heads, as_tuples)
                waits = {self._reading[head] for head in missing if head in self._reading}
                new = [head for head in missing if head not in self._reading]
                full = len(self._row) + len(missing) > _MAX_HEADS
                if full and not waits:  # all are forgotten when these are added: read every head asked for
                    new = list(dict.fromkeys(heads))
                done = threading.Event()
                for head in new:  # a head another thread reads too (read again here: all are) stays theirs
                    self._reading.setdefault(head, done)
            if new:
                try:
                    read = self._read(pl.Series(new, dtype=pl.String))
                    with self._lock:
                        self._add(new, read, full and not waits)
                        if not waits and new == heads:  # the rows asked for, as read (a new file's head)
                            return _shaped(read, as_tuples)
                        if not waits and all(head in self._row for head in heads):
                            return self._gather(heads, as_tuples)  # as added: another thread may forget them
                finally:
                    with self._lock:
                        for head in new:
                            if self._reading.get(head) is done:
                                del self._reading[head]
                    done.set()
            for wait in waits:
                wait.wait()

    def _add(self, new: list[str], read: pl.DataFrame | HeadRows, forget: bool) -> None:
        """Keep the rows ``read`` of heads ``new`` (with the lock held): all that were known are forgotten
        first when ``forget`` or when they would be too many."""
        if forget or len(self._row) + len(new) > _MAX_HEADS:
            self._known, self._row, self._tuple = None, {}, {}
        fresh = [n for n, head in enumerate(new) if head not in self._row]
        if fresh:
            if isinstance(read, HeadRows):
                added: pl.DataFrame | list[tuple] = [read.rows[n] for n in fresh]
                self._tuple.update((new[n], read.rows[n]) for n in fresh)
            else:
                added = read[fresh] if len(fresh) < len(new) else read
            if self._known is None:
                self._known = PrefixFields(pl.DataFrame(schema=read.schema))
            self._known.add(added)
            start = len(self._row)
            self._row.update((new[n], start + k) for k, n in enumerate(fresh))

    def _gather(self, heads: list[str], as_tuples: bool) -> pl.DataFrame | list[tuple]:
        """The rows of ``heads``, every one known (with the lock held)."""
        assert self._known is not None
        if as_tuples and all(head in self._tuple for head in heads):
            return [self._tuple[head] for head in heads]
        row = self._row
        return _shaped(self._known.frame[[row[head] for head in heads]], as_tuples)


def _shaped(read: pl.DataFrame | HeadRows, as_tuples: bool) -> pl.DataFrame | list[tuple]:
    if isinstance(read, HeadRows):
        return read.rows if as_tuples else read.frame()
    return read.rows() if as_tuples else read


class LineParser:
    """Turns :class:`LineChunk` s into per-table DataFrames with stable schemas."""

    def __init__(self, grammars: GrammarSet, keep_text: bool = True):
        self.grammars = grammars
        self.keep_text = keep_text
        self.state = ParseState()
        self._glued_ok = True
        built = _Compiled.of(grammars, keep_text)
        self.schemas = built.schemas
        self.empty_tables = built.empty_tables
        self._launchers, self._envelopes = built.launchers, built.envelopes
        self._anchors = built.anchors
        self._extractions = built.extractions
        # The schema of the claims of each set of patterns of one table (_claim_small): by the rows' type and
        # the ids of the patterns' extractions, which live as long as the parser.
        self._claims_schemas: dict[tuple, pl.Schema | None] = {}
        self._plain_test = built.plain_test
        self._heads = _Heads(self._read_heads)
        self._head_reader = _HeadReader(self._launchers, self._envelopes, self.schemas.prefix_columns)
        self._prefix_defaults = built.prefix_defaults
        # Set by an analysis: which plain lines (``lines`` rows) it drops whatever batch they come in
        # (``tables.PlainLines``); those are counted here and left out of the tables.
        self.plain_filter: PlainFilter | None = None

    def _plain_rows(self, frame: pl.DataFrame) -> pl.Series | None:
        """Which rows of ``frame``, their launcher prefixes stripped, are plain (:meth:`_plain`) and have
        no number out of range in those prefixes: nothing but the prefixes is left to parse in them (a
        training print, with or without an ``srun -l`` label). The regexes run only over the lines without
        the literals (every NCCL line has one)."""
        if self._plain_test is None:
            return None
        unmarked, regexes = self._plain_test
        apart = frame.select(unmarked & (pl.col(_UNFIT[Layer.LAUNCHER]) == 0)).to_series()
        if not apart.any():
            return None
        candidates = frame.get_column("rest").filter(apart).to_arrow()
        matched = functools.reduce(pc.or_, (pc.match_substring_regex(candidates, rx) for rx in regexes))
        plain = pl.Series(pc.invert(matched), dtype=pl.Boolean)
        return apart.scatter(apart.arg_true(), plain)

    def unlabeled_plain(self, text: pl.Series) -> np.ndarray | None:
        """Of lines as read (``text``, ANSI escapes and all), those the parser finds plain with no launcher
        prefix and no rule reads: ``PLAIN_TEXT`` or ``PLAIN_BLANK`` (their family), else 0. Once the plain
        filter drops such lines (``PlainFilter.unlabeled_known``) they need not be parsed at all; the
        scanning threads mark them (parse/chunks.py). None without a plain filter or a plain test.

        A line that none of the launcher and envelope heads starts has no launcher prefix to strip, so its
        ``rest`` is its text and :meth:`_plain_rows`' test reads the same bytes here."""
        code = self._plain_code()
        if code is None:
            return None
        if text.is_empty():
            return np.zeros(0, dtype=np.uint8)
        return text.to_frame("rest").select(code).to_series().to_numpy()

    def _plain_code(self) -> pl.Expr | None:
        if self._plain_test is None or self.plain_filter is None:
            return None
        _, regexes = self._plain_test
        rest = pl.col("rest")
        # One regex, in polars, which keeps each thread's regexes compiled (pyarrow compiled its seven
        # again at every call): the plain test's, the marks and the texts a rule reads in one alternation,
        # one pass over the lines (three passes, one a contains_any that built its automaton at every
        # call, took 1.5 ms for a chunk's 1,200 lines to test, one 0.85 ms).
        pattern = _joined((*regexes, *_PLAIN_MARK_PATTERNS, self.plain_filter.read_pattern()))
        plain = ~rest.str.contains(pattern)
        blank = rest.str.strip_chars() == ""
        code = pl.when(plain).then(pl.when(blank).then(PLAIN_BLANK).otherwise(PLAIN_TEXT)).otherwise(0)
        return code.cast(pl.UInt8)

    # ------------------------------------------------------------------ the pipeline of one chunk
    def parse(self, chunk: LineChunk) -> dict[str, pl.DataFrame]:
        return self._parse(chunk, plain_apart=True)[0]

    def parse_frame(self, chunk: LineChunk) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
        """As :meth:`parse`, and the frame the messages were matched in (each line's ``msg`` and ``rest``),
        which the grammar checks compare too."""
        tables, frame, _ = self._parse(chunk)
        return tables, frame

    def parse_unfit(self, chunk: LineChunk) -> tuple[dict[str, pl.DataFrame], pl.Series]:
        """As :meth:`parse`, and the line numbers of the lines with a number too large for its column
        (counted in ``values_out_of_range``)."""
        tables, _, unfit = self._parse(chunk, plain_apart=True)
        return tables, unfit

    def _parse(
        self, chunk: LineChunk, plain_apart: bool = False
    ) -> tuple[dict[str, pl.DataFrame], pl.DataFrame, pl.Series]:
        """The tables of ``chunk``, the frame its messages were matched in and the line numbers with a value
        out of range. ``plain_apart`` sets the plain lines (:meth:`_plain`) apart before the regexes run:
        the frame then lacks them."""
        frame = pl.DataFrame(
            {
                "row": pl.int_range(len(chunk), dtype=pl.UInt32, eager=True),
                "line_no": chunk.line_no,
                "byte_offset": chunk.byte_offset,
                "text": chunk.text,
            }
        ).with_columns(
            source_id=pl.lit(chunk.source_id, dtype=pl.UInt16),
            part=pl.lit(0, dtype=pl.UInt8),
            torn=pl.lit(False),
            rest=pl.when(pl.col("text").str.contains("\x1b", literal=True))
            .then(pl.col("text").str.replace_all(_ANSI, ""))
            .otherwise(pl.col("text")),
        )
        frame, headed = self._apart_by_head(frame)
        frame = self._strip_launchers(frame)
        apart = self._plain_rows(frame) if plain_apart else None
        plain = None
        if apart is not None and apart.any():
            plain, frame = frame.filter(apart), frame.filter(~apart)
        frame = self._match_envelopes(frame)
        if headed is not None:
            headed_rows = headed.lazy().select(frame.columns).cast(frame.schema)
            frame = pl.concat([frame.lazy(), headed_rows]).sort("row").collect(engine=ENGINE)
        if plain is not None:
            # Rows numbered again: the glued pieces are numbered from the frame's height on.
            frame = frame.with_columns(pl.int_range(pl.len(), dtype=pl.UInt32).alias("row"))
        if frame.height or plain is None:
            frame = self._split_glued(frame)
            tables, assigned = self._dispatch_messages(frame)
            lines = self._lines_table(frame, assigned)
        else:  # every line plain
            tables = {name: self.empty_tables[name] for name in self.schemas.tables}
            assigned = pl.DataFrame(schema=_ASSIGNED)
            lines = self.empty_tables["lines"]
        if plain is not None:
            family = (
                pl.when(pl.col("rest").str.strip_chars() == "")
                .then(pl.lit("blank"))
                .otherwise(pl.lit("text"))
            )
            plain_lines = conform(plain.with_columns(family=family), self.schemas.lines)
            if self.plain_filter is not None:
                plain_lines = self._without_known(plain_lines, self.plain_filter.known(plain_lines))
            lines = pl.concat([lines, plain_lines]).sort("line_no", "part")
        self._account(frame, lines)
        unfit = pl.sum_horizontal(*_UNFIT.values(), pl.col("__unfit").fill_null(0)) > 0
        unfit_lines = (
            frame.lazy()
            .join(assigned.lazy().select("row", "__unfit"), on="row", how="left")
            .filter(unfit)
            .select("line_no")
            .collect(engine=ENGINE)
        )
        return {"lines": lines, **tables}, frame, unfit_lines.get_column("line_no")

    def _without_known(self, plain: pl.DataFrame, known: pl.Series) -> pl.DataFrame:
        """The plain lines less those an analysis drops in any case (``known``), which are counted as
        :meth:`_account` counts the lines it is given: a training log's prints, past the first of each
        launcher label, cost their count, not their rows in every table and fold."""
        if not known.any():
            return plain
        self.state.count_unparsed(dict(plain.filter(known).group_by("family").len().iter_rows()))
        return plain.filter(~known)

    def account_fast(self, family: str, rows: int) -> None:
        """Count enveloped lines a fast path parsed (they never pass through :meth:`parse`)."""
        state = self.state
        state.lines += rows
        state.envelope_lines += rows
        state.family_counts[family] += rows

    # ------------------------------------------------------------------ prefixes
    def parse_prefixes(self, prefixes: list[str], learn: bool = True) -> ParsedPrefixes:
        """Launcher and envelope fields of line heads that stop right before `` NCCL INFO ``, in their order.

        The fast paths cut a line there and ask once per distinct head. A head is clean only when it is
        exactly one INFO envelope with nothing left over; otherwise its lines go to :meth:`parse`. Each head
        is read once per parser (:class:`_Heads`); ``learn`` adds the hosts of the clean ones to what the
        parser knows. No frame is made: a scanning thread asks for every per-rank file's new head.
        """
        rows = self._heads.tuples(prefixes)
        start = len(_HEAD_META)
        parsed = ParsedPrefixes(
            prefixes, [row[1] for row in rows], self.schemas.prefix_columns, [row[start:] for row in rows]
        )
        if learn:
            self.state.known_hosts.update(parsed.hosts())
        return parsed

    def _read_heads(self, heads: pl.Series) -> pl.DataFrame | HeadRows:
        """What the launcher and envelope steps make of line heads that stop right before `` NCCL INFO ``
        (``__head``): the launcher and envelope fields, whether the head is exactly one INFO envelope with
        nothing left over and no number too large for its column (``__clean``), and how many characters
        of it the launcher prefixes take (``__start``: the line's ``rest`` starts there) and where the
        message starts (``__msg``). A few heads are read in Python, as tuples (:class:`HeadRows`)."""
        if len(heads) <= _SMALL_HEADS:
            read = self._head_reader.read(heads.to_list())
            if read is not None:
                return read
        frame = pl.DataFrame({"__head": heads}).with_columns(rest=pl.col("__head") + _INFO.rstrip())
        frame = self._match_envelopes(self._strip_launchers(frame))
        fits = pl.sum_horizontal(list(_UNFIT.values())) == 0
        clean = (pl.col("producer") == "nccl") & (pl.col("level") == "INFO") & (pl.col("msg") == "") & fits
        start = pl.col("__head").str.len_chars() + len(_INFO.rstrip()) - pl.col("rest").str.len_chars()
        return frame.select(
            "__head",
            clean.fill_null(False).alias("__clean"),
            start.cast(pl.UInt32).alias("__start"),
            (pl.col("__head").str.len_chars() + len(_INFO)).cast(pl.UInt32).alias("__msg"),
            *self.schemas.prefix_columns,
        )

    def _apart_by_head(self, frame: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        """``frame`` without the NCCL INFO lines whose launcher prefixes and envelope are read from their
        head (the text before the first `` NCCL INFO ``), and those lines, enveloped as the launcher and
        envelope steps would have: each distinct head is read once (:class:`_Heads`), and its rows take
        its fields, ``rest`` from where its launcher prefixes end and ``msg`` from after `` NCCL INFO ``.
        None when there are none.

        A head is taken only when it is exactly one INFO envelope, with nothing left over and every number
        fitting its column, as the COLL fast path takes it (``parse_prefixes``); a line with an ANSI escape
        is left to the steps. On the whole line the envelope matches what it matched on the head: it ends
        at ``NCCL LEVEL`` and a space (or the end), and no part of it before that can hold ``" NCCL INFO "``
        (a function name in parentheses could, but then the head alone does not match, and the line is
        left to the steps). tests/parse/test_lineparser.py parses lines made to differ (launcher stacks, glued
        lines, heads that are not clean) with this step and without it and expects the same tables.
        """
        text = pl.col("text")
        # The text before the first " NCCL INFO " (null where there is none), cut at the byte where it is
        # found (str.find counts bytes, str.head characters): split into a struct of two strings, every
        # line's text was copied (23 to 10 ms for 75k init lines).
        head = text.cast(pl.Binary).bin.head(text.str.find(_INFO, literal=True)).cast(pl.String)
        keyed = frame.select(
            pl.when(~text.str.contains("\x1b", literal=True)).then(head).alias("__head")
        ).to_series()
        heads = [h for h in keyed.unique(maintain_order=True).to_list() if h is not None]
        if not heads:
            return frame, None
        known = self._heads.rows(heads)  # in the order of ``heads``
        clean = [n for n, is_clean in enumerate(known.get_column("__clean").to_list()) if is_clean]
        if not clean:
            return frame, None
        # Each row's head's place in ``known`` when the head is clean, else null: its fields follow by place.
        # Looked up and gathered row by row, not by joins and filters: a batch of a per-rank file's few
        # dozen lines spent ~6 ms on twelve queries here.
        at = keyed.replace_strict([heads[n] for n in clean], clean, default=None, return_dtype=pl.Float64)
        places = at.to_numpy()  # NaN where null
        taken = ~np.isnan(places)
        rows = np.flatnonzero(taken)
        if not len(rows):
            return frame, None
        fields = known[places[rows].astype(np.int64)]  # with __head and __clean, which _parse leaves out
        headed = (
            frame[rows]
            .hstack(fields)
            .with_columns(
                rest=text.str.slice(pl.col("__start")),
                msg=text.str.slice(pl.col("__msg")),
                producer=pl.lit("nccl"),
                **{name: pl.lit(0, pl.UInt32) for name in _UNFIT.values()},
            )
        )
        return frame[np.flatnonzero(~taken)], headed

    def _with_prefix_columns(self, frame: pl.DataFrame, **fixed: pl.Expr) -> pl.DataFrame:
        """``frame`` with the prefix columns it lacks as they are before any pattern set them, and the
        columns ``fixed`` set to their expressions, in one query; in the order the defaults have."""
        present = set(frame.columns)
        defaults = self._prefix_defaults
        columns = [
            (name, fixed.get(name, e)) for name, e in defaults.items() if name not in present or name in fixed
        ]
        columns += [(name, e) for name, e in fixed.items() if name not in defaults]
        return frame.with_columns(e.alias(name) for name, e in columns)

    def _strip_launchers(self, frame: pl.DataFrame) -> pl.DataFrame:
        # The prefixes are stripped from scratch.
        frame = self._with_prefix_columns(frame, **{_UNFIT[Layer.LAUNCHER]: pl.lit(0, pl.UInt32)})
        # Prefixes stack (k8s timestamp + torchrun tag + [rankN]:), in any order: strip in rounds.
        for _ in range(_LAUNCHER_ROUNDS):
            before = frame["rest"]
            frame = self._launchers.applied(frame)
            if frame["rest"].equals(before):
                break
        return frame

    def _match_envelopes(self, frame: pl.DataFrame) -> pl.DataFrame:
        unset = {"msg": pl.lit(None, dtype=pl.String), _UNFIT[Layer.ENVELOPE]: pl.lit(0, pl.UInt32)}
        return self._envelopes.applied(self._with_prefix_columns(frame, **unset))

    # ------------------------------------------------------------------ torn and glued lines
    def _split_glued(self, frame: pl.DataFrame) -> pl.DataFrame:
        """Cut lines where another process's NCCL line starts mid-line (grammar §9.2) into parts."""

        def glued(col: str) -> pl.Expr:  # a c10 glog head (".cpp:"): the splitter checks the rest
            return pl.any_horizontal(pl.col(col).str.contains(mark, literal=True) for mark in GLUE_MARKS)

        suspect = (pl.col("producer").is_not_null() & glued("msg")) | (
            pl.col("producer").is_null() & glued("rest")
        )
        lazy = frame.lazy()
        hosts, candidates = pl.collect_all(
            [
                lazy.filter(pl.col("producer") == "nccl").select(pl.col("host").unique().drop_nulls()),
                lazy.filter(suspect),
            ],
            engine=ENGINE,
        )
        self.state.known_hosts.update(hosts.get_column("host").to_list())
        if candidates.is_empty():
            return frame
        pieces = []
        next_row = frame.height
        for row in candidates.iter_rows(named=True):  # rare rows only
            cuts = self._cut_points(row["rest"])
            if not cuts:
                continue
            if len(cuts) >= MAX_PARTS:
                # ``part`` is a byte in every table and in the calls' sort keys (parse/calls.py seq_of): the
                # heads after the last part stay in its text, counted.
                self.state.glued_uncut += len(cuts) - (MAX_PARTS - 1)
                cuts = cuts[: MAX_PARTS - 1]
            bounds = [0, *cuts, len(row["rest"])]
            # Byte offsets piece by piece, each piece encoded once: encoding the whole prefix before every
            # piece cost n² for a line of n glued envelopes.
            offset = row["byte_offset"] + len(row["text"].encode()) - len(row["rest"].encode())
            for part, (start, end) in enumerate(zip(bounds, bounds[1:])):
                piece = dict(row)
                piece["msg"] = None  # matched again below; a copy of the line's message per piece costs n²
                piece["rest"] = row["rest"][start:end]
                # The first piece keeps the launcher prefix of the physical line; the others start at their
                # envelope.
                piece["text"] = (
                    row["text"][: len(row["text"]) - len(row["rest"]) + end] if part == 0 else piece["rest"]
                )
                piece["part"] = part
                piece["torn"] = True
                piece["byte_offset"] = row["byte_offset"] if part == 0 else offset
                offset += len(piece["rest"].encode())
                if part:
                    piece["row"] = next_row
                    next_row += 1
                pieces.append(piece)
        if not pieces:
            return frame
        split_rows = {p["row"] for p in pieces}
        fresh = pl.DataFrame(pieces, schema=frame.schema)
        # The first piece keeps the launcher prefix of the physical line and gets its envelope matched again;
        # the glued pieces belong to other processes, so their prefixes are stripped from scratch.
        launcher = self._launcher_fields()
        envelope = [c for c in self.schemas.prefix_columns if c not in launcher] + ["producer"]
        head = fresh.filter(pl.col("part") == 0).with_columns(
            [pl.lit(None, dtype=fresh.schema[c]).alias(c) for c in envelope]
        )
        glued_in = fresh.filter(pl.col("part") > 0).with_columns(
            [pl.lit(None, dtype=fresh.schema[c]).alias(c) for c in [*launcher, *envelope]]
        )
        fresh = pl.concat(
            [
                self._match_envelopes(head.drop("msg")).select(frame.columns),
                self._match_envelopes(self._strip_launchers(glued_in.drop("msg"))).select(frame.columns),
            ]
        )
        kept = frame.filter(~pl.col("row").is_in(list(split_rows)))
        return pl.concat([kept, fresh]).sort("row")

    def _launcher_fields(self) -> set[str]:
        return self._launchers.fields()

    def _cut_points(self, text: str) -> list[int]:
        cuts = []
        for m in _GLUED_HEAD.finditer(text):
            start = m.start()
            if m.group("torch"):
                if start > 0:
                    cuts.append(start)
                continue
            host = m.group("host")
            if host not in self.state.known_hosts:
                self.state.unknown_glued_hosts.add(host)
                # The torn tail of the previous line is glued to the host name
                # ("...CUMEM/rex3006c0s1b1n0:...").
                # Only the last HOST_CHARS characters can be a known host: a run of host characters can
                # be megabytes long, and each suffix tried is a copy.
                first = max(1, len(host) - HOST_CHARS)
                shift = next((k for k in range(first, len(host)) if host[k:] in self.state.known_hosts), None)
                if shift is None:
                    if start and not text[start - 1].isspace():
                        continue
                else:
                    start += shift
            if start > 0:
                cuts.append(start)
        return cuts

    # ------------------------------------------------------------------ message families
    def _dispatch_messages(self, frame: pl.DataFrame) -> tuple[dict[str, pl.DataFrame], pl.DataFrame]:
        """Each message's table, family and pattern: the tables of the batch, and which pattern claimed
        each row (``row``, ``family``, ``pattern``, ``__unfit``).

        The steps around the claims are lazy queries, collected once for the three kinds of message, once
        for each kind's distinct messages and once for the tables and claims: as eager steps they were ~45
        queries, ~10 ms of a small batch's ~30."""
        keys = [c for c in (*LOCATION, "byte_offset", *MESSAGE_KEYS) if c in frame.columns]
        selectors = {
            "nccl": pl.col("producer") == "nccl",
            "torch": pl.col("producer").is_in(TORCH_PRODUCERS),
            "text": pl.col("producer").is_null() & (pl.col("rest").str.strip_chars() != ""),
        }
        lazy = frame.lazy()
        sources, pools = [], []
        for source, selector in selectors.items():
            grammars = self.grammars.messages(source)
            if not grammars:
                continue
            body = pl.col("rest") if source == "text" else pl.col("msg")
            pool = lazy.filter(selector).select("row", body.alias("msg"), "level")
            anchors = [self._anchors[g.family] for g in grammars]
            # No message without an anchor is claimed, so a large pool keeps only those with one. A small
            # one is matched in Python (_claim_small), which tests each pattern's anchor anyway: the filter
            # builds its automaton of ~200 anchors at every query, ~1.5 ms of a per-rank file's ~40.
            if None not in anchors and frame.height > _SMALL_ROWS:
                every = sorted({anchor for some in anchors if some for anchor in some})
                pool = pool.filter(pl.col("msg").str.contains_any(every))
            sources.append(grammars)
            pools.append(pool)
        parts: dict[str, list[pl.LazyFrame]] = {}
        found = [(grammars, pool) for grammars, pool in zip(sources, pl.collect_all(pools, engine=ENGINE))]
        found = [(grammars, pool) for grammars, pool in found if pool.height]
        # What a pattern claims and extracts depends on the message and its level only: each distinct
        # pair is matched once (its number standing for ``row`` below), and its rows take its fields.
        # Ranks and repeats say the same message many times (the init lines of 4096 ranks: 2.3 rows a
        # distinct message; the leftovers of a training log: 13).
        distinct = pl.collect_all(
            [
                pool.lazy().select("msg", "level").unique(maintain_order=True).with_row_index("__u")
                for _, pool in found
            ],
            engine=ENGINE,
        )
        for (grammars, pool), messages in zip(found, distinct):
            rows_of = (
                pool.lazy().join(messages.lazy(), on=["msg", "level"], nulls_equal=True).select("row", "__u")
            )
            for table, pieces in self._claim(messages.rename({"__u": "row"}), grammars).items():
                claimed = pl.concat([p.lazy() for p in pieces], how="diagonal_relaxed").rename({"row": "__u"})
                parts.setdefault(table, []).append(rows_of.join(claimed, on="__u").drop("__u"))
        located = lazy.select("row", *keys)
        names = [name for name in self.schemas.tables if name in parts]
        merged = pl.collect_all(
            [
                # In line order, glued pieces (numbered after the batch's rows) beside their line.
                pl.concat(parts[name], how="diagonal_relaxed")
                .join(located, on="row", how="left")
                .sort("line_no", "part")
                for name in names
            ],
            engine=ENGINE,
        )
        claims = [table.select(list(_ASSIGNED)) for table in merged]
        assignments = pl.concat(claims) if claims else pl.DataFrame(schema=_ASSIGNED)
        self.state.values_out_of_range += int(assignments["__unfit"].sum())
        tables = {name: self.empty_tables[name] for name in self.schemas.tables}
        for name, table in zip(names, merged):
            tables[name] = conform(table, self.schemas.tables[name])  # without row and __unfit
        return tables, assignments

    def claim(
        self, messages: list[str], level: str = "INFO", source: str = "nccl"
    ) -> dict[str, pl.DataFrame]:
        """What the message grammars of ``source`` make of ``messages`` at ``level``, as they claim a line's
        message in :meth:`parse`: per table, the rows claimed (``row``: the message's index) with their
        fields, ``family``, ``pattern`` and ``__unfit``. Nothing is counted; safe in the scanning threads (the
        fast paths ask here once per distinct piece of a message)."""
        pool = pl.DataFrame(
            {
                "row": pl.Series(range(len(messages)), dtype=pl.UInt32),
                "msg": pl.Series(messages, dtype=pl.String),
                "level": pl.Series([level] * len(messages), dtype=pl.String),
            }
        )
        claimed = self._claim(pool, self.grammars.messages(source))
        return {table: pl.concat(frames, how="diagonal_relaxed") for table, frames in claimed.items()}

    def _claim(self, pool: pl.DataFrame, grammars: list[Grammar]) -> dict[str, list[pl.DataFrame]]:
        """Per table, the rows of ``pool`` (``row``, ``msg``, ``level``) that a pattern of ``grammars``
        claims, with the fields it extracts and the row's family, pattern and count of values too large for
        their column (``__unfit``). A row belongs to the first pattern, in the grammars' order, whose
        literal anchor it has, at its level (if any), and whose regex matches it.

        Two queries say which anchors the batch has at all, and over a large pool in which messages
        (:func:`_routes`). Over a pool of up to _TOGETHER_ROWS rows, grammar by grammar, the patterns whose
        anchor the batch has capture in one query (polars runs them side by side), each row keeps its first
        pattern's capture, and the rows a grammar claimed leave the pool before the next grammar looks. Over
        a larger pool the patterns capture one after the other, each over the messages with its anchor that
        no pattern before it claimed (:meth:`_claim_routed`): capturing a row again costs more there than a
        query. A batch used to spend ten eager queries on each pattern that matched (~0.3 ms each, whatever
        the rows), and compiled its regex twice.

        In a pool of at most _SMALL_ROWS rows, the messages of at most _SMALL_BYTES are matched in Python
        (:meth:`_claim_small`) and the longer ones in polars; all of them in polars when the Python
        searches run out of time. Each row's claim depends on its message and level alone, so the two
        halves give what the whole would."""
        claimed: dict[str, list[pl.DataFrame]] = {}
        if pool.height <= _SMALL_ROWS:
            short = pl.col("msg").str.len_bytes() <= _SMALL_BYTES
            small = self._claim_small(pool.filter(short), grammars)
            if small is not None:  # else it ran out of time: polars takes the whole pool
                claimed, pool = small, pool.filter(~short)
            if pool.is_empty():
                return claimed
        routes = _routes(pool, grammars, places=pool.height > _TOGETHER_ROWS)
        if routes.places is not None:
            return self._claim_routed(pool, grammars, routes, claimed)
        for grammar in grammars:
            candidates = routes.patterns(grammar)
            if not candidates or pool.is_empty():
                continue
            frames = self._claim_together(pool, grammar, candidates)
            if frames:
                rows = pl.concat([f.get_column("row") for f in frames])
                pool = pool.filter(~pl.col("row").is_in(rows.implode()))
                claimed.setdefault(grammar.table, []).extend(frames)
        return claimed

    def _claim_routed(
        self,
        pool: pl.DataFrame,
        grammars: list[Grammar],
        routes: _Routes,
        claimed: dict[str, list[pl.DataFrame]],
    ) -> dict[str, list[pl.DataFrame]]:
        """:meth:`_claim` over a large pool, into ``claimed``: pattern after pattern, each captures over the
        rows of ``pool`` that hold its anchor (``routes``) and that no pattern before it claimed, gathered
        by their place in the pool. The init lines of 4096 ranks leave ~40k distinct messages, most of them
        communicator inits, which the comm_init grammar claims after topology and network: each of the ~30
        patterns before it searched all of them for its anchor (~8 ms a query) to claim a few or none."""
        taken = np.zeros(pool.height, dtype=bool)
        rows = pool.get_column("row").to_numpy()
        order = np.argsort(rows, kind="stable")  # a row's place in the pool, from its number
        for grammar in grammars:
            for n in routes.patterns(grammar):
                places = routes.places_of(grammar.patterns[n].anchor)
                at = np.flatnonzero(~taken) if places is None else places[~taken[places]]
                if not len(at):
                    continue
                frame = self._extraction(grammar, n).captured(pool[at].lazy()).collect(engine=ENGINE)
                if frame.height:
                    claimed.setdefault(grammar.table, []).append(frame)
                    found = frame.get_column("row").to_numpy()
                    taken[order[np.searchsorted(rows, found, sorter=order)]] = True
        return claimed

    def _claim_small(
        self, pool: pl.DataFrame, grammars: list[Grammar]
    ) -> dict[str, list[pl.DataFrame]] | None:
        """:meth:`_claim` over a pool of at most _SMALL_ROWS rows of at most _SMALL_BYTES each: each message
        goes through the patterns in order in Python's ``regex``, and only the casts of the fields run in
        polars, in one query for all the patterns that claimed rows. A polars query costs ~0.2 ms however
        few its rows, and it compiles its regexes again (it keeps 32 per thread, the grammars hold ~400):
        75 init lines of a per-rank file took ~50 ms of queries. Python's ``regex`` reads the grammars'
        dialect as polars does (grammar/dialect.py; tests/grammar/test_dialect.py compares their captures on
        every sample).

        Python's engine backtracks: a pattern can take time quadratic (or worse) in a message's length,
        where Rust's engine is linear. Messages are short (_SMALL_BYTES), and all the searches of a call
        share _SMALL_SECONDS: past it (a grammar of the user's with a pattern that backtracks without end,
        say), None says so, and polars takes the pool."""
        messages = pool.get_column("msg").to_list()
        levels = pool.get_column("level").to_list()
        left = range(len(messages))
        found: dict[tuple[int, int], tuple[list[int], list[regex.Match]]] = {}
        deadline = time.monotonic() + _SMALL_SECONDS
        for number, grammar in enumerate(grammars):
            # A pattern is compiled when a message first has its anchor (~0.4 ms each, ~400 patterns).
            tests = [(n, p.anchor, p.level, p.regex) for n, p in enumerate(grammar.patterns)]
            unclaimed = []
            for i in left:
                message, level = messages[i], levels[i]
                for n, anchor, at_level, pattern in tests:
                    if anchor in message and (not at_level or at_level == level):
                        search = python_regex(pattern).search
                        try:
                            match = search(message, timeout=max(deadline - time.monotonic(), 1e-6))
                        except TimeoutError:
                            return None
                        if match is not None:
                            index, matches = found.setdefault((number, n), ([], []))
                            index.append(i)
                            matches.append(match)
                            break
                else:
                    unclaimed.append(i)
            left = unclaimed
            if not left:
                break
        if not found:
            return {}
        rows = pool.get_column("row")
        numbers = rows.to_numpy()  # gathered in numpy: a polars gather is a query (~0.2 ms) a pattern
        claims: dict[str, list[tuple[_Extraction, pl.Series, list[regex.Match]]]] = {}
        for number, n in sorted(found):  # in the grammars' and patterns' order
            at, matches = found[number, n]
            claimed_rows = pl.Series(rows.name, numbers[at], dtype=rows.dtype)
            extraction = self._extraction(grammars[number], n)
            claims.setdefault(grammars[number].table, []).append((extraction, claimed_rows, matches))
        # Each table's claims cast in Python as one frame; else (a pattern with many rows, a text the cast
        # does not vouch for) each pattern's in polars, all in one query.
        claimed: dict[str, list[pl.DataFrame]] = {}
        steps: dict[str, list[pl.LazyFrame]] = {}
        for table, parts in claims.items():
            cast = None
            if all(len(m) <= _CAST_ROWS for _, _, m in parts):
                # The schema of the patterns' columns together, found once (comparing types costs ~1 µs each).
                key = (rows.dtype, *(id(extraction) for extraction, _, _ in parts))
                if key not in self._claims_schemas:
                    self._claims_schemas[key] = _claims_schema(parts)
                schema = self._claims_schemas[key]
                cast = _cast_claims(parts, schema) if schema is not None else None
            if cast is not None:
                claimed[table] = [cast]
            else:
                steps[table] = [extraction.matched(r, m) for extraction, r, m in parts]
        if steps:
            frames = iter(pl.collect_all([step for parts in steps.values() for step in parts], engine=ENGINE))
            for table, parts in steps.items():
                claimed[table] = [next(frames) for _ in parts]
        return claimed

    def _extraction(self, grammar: Grammar, n: int) -> _Extraction:
        extraction = self._extractions.get((grammar.family, n))
        if extraction is None:
            extraction = self._extractions[grammar.family, n] = _Extraction.of(grammar, grammar.patterns[n])
        return extraction

    def _claim_together(
        self, pool: pl.DataFrame, grammar: Grammar, candidates: list[int]
    ) -> list[pl.DataFrame]:
        """What each pattern of ``candidates`` (their numbers in ``grammar``) claims of ``pool``, the patterns
        capturing side by side in one query and each row keeping its first pattern's capture."""
        lazy = pool.lazy()
        captures = [
            self._extraction(grammar, n).captured(lazy).with_columns(pl.lit(n, pl.UInt16).alias("__order"))
            for n in candidates
        ]
        frames = [f for f in pl.collect_all(captures, engine=ENGINE) if f.height]
        if len(frames) > 1:
            first = (
                pl.concat([f.select("row", "__order") for f in frames]).group_by("row").agg(pl.min("__order"))
            )
            frames = [f.join(first, on=["row", "__order"], how="semi") for f in frames]
        return [f.drop("__order") for f in frames]

    # ------------------------------------------------------------------ the lines table and counts
    def _lines_table(self, frame: pl.DataFrame, assigned: pl.DataFrame) -> pl.DataFrame:
        # A blank line, or an envelope with nothing after it (NCCL's empty WARN lines, "WARNING:torch...:").
        blank = (pl.col("rest").str.strip_chars() == "") | (
            pl.col("producer").is_not_null() & (pl.col("msg").str.strip_chars() == "")
        )
        lines = (
            frame.lazy()
            .drop("family", "pattern", strict=False)
            .join(assigned.lazy(), on="row", how="left")
            .with_columns(
                family=pl.when(pl.col("family").is_not_null())
                .then(pl.col("family"))
                .when(blank)
                .then(pl.lit("blank"))
                .when(pl.col("producer").is_null() & ~pl.col("torn"))
                .then(pl.lit("text"))
                .otherwise(pl.col("family"))
            )
            .sort("line_no", "part")
        )
        return conform(lines.collect(engine=ENGINE), self.schemas.lines)

    def _account(self, frame: pl.DataFrame, lines: pl.DataFrame) -> None:
        state = self.state
        state.lines += lines.height
        # A piece of a line that another process's output cut short is damage, not an unknown format: it is
        # counted as a torn fragment, and only the other enveloped lines no family claimed count as unparsed.
        # Counted per family in one query, with the values out of range (five queries took ~2.4 ms a batch).
        unfit, families = pl.collect_all(
            [
                frame.lazy().select(pl.sum_horizontal(list(_UNFIT.values())).sum().alias("unfit")),
                lines.lazy()
                .group_by("family")
                .agg(
                    pl.len().alias("lines"),
                    pl.col("producer").is_not_null().sum().alias("enveloped"),
                    UNPARSED.sum().alias("missing"),
                    (pl.col("torn") & pl.col("family").is_null()).sum().alias("torn"),
                ),
            ],
            engine=ENGINE,
        )
        state.values_out_of_range += int(unfit.item() or 0)
        state.family_counts.update(dict(zip(families["family"].to_list(), families["lines"].to_list())))
        state.envelope_lines += int(families["enveloped"].sum())
        missing_lines = int(families["missing"].sum())
        state.unparsed_envelope_lines += missing_lines
        state.torn_fragments += int(families["torn"].sum())
        if missing_lines:
            missing = lines.filter(UNPARSED)
            shapes = (
                frame.filter(pl.col("producer").is_not_null())
                .join(missing.select("line_no", "part"), on=["line_no", "part"], how="semi")
                .select(shape_of(pl.col("msg")).alias("shape"))
                .group_by("shape")
                .len()
            )
            state.unparsed_shapes.update(dict(shapes.iter_rows()))


@functools.cache
def python_regex(pattern: str) -> regex.Pattern:
    """A grammar pattern compiled in Python's ``regex``, once per process, read as polars reads it: "$"
    outside a class is the end of the text (Python's "$" also matches before a final newline)."""
    return regex.compile(end_of_text(pattern))


def _candidate(pattern: Pattern) -> pl.Expr:
    """The messages a pattern is worth trying on: those with its literal anchor (and of its level)."""
    candidate = pl.col("msg").str.contains(pattern.anchor, literal=True)
    if pattern.level:
        candidate = candidate & (pl.col("level") == pattern.level)
    return candidate


@dataclass(frozen=True)
class _Routes:
    """Which patterns of a pool's grammars are worth trying, and on which of its messages."""

    present: frozenset[tuple[str, int]]  # (family, number): the anchor is in some message, at the level
    # By anchor longer than two characters, the places in the pool of the messages that hold it (ascending);
    # None when not asked for.
    places: dict[str, np.ndarray] | None

    def patterns(self, grammar: Grammar) -> list[int]:
        return [n for n in range(len(grammar.patterns)) if (grammar.family, n) in self.present]

    def places_of(self, anchor: str) -> np.ndarray | None:
        """The places of the messages a pattern with ``anchor`` may match; None for every message (an anchor
        of one or two characters, looked for by the pattern's own query)."""
        assert self.places is not None
        return self.places.get(anchor, _NOWHERE) if len(anchor) > 2 else None


_NOWHERE = np.zeros(0, dtype=np.int64)


def _routes(pool: pl.DataFrame, grammars: list[Grammar], places: bool) -> _Routes:
    """The patterns (family, number) whose literal anchor some message of ``pool`` has, at the pattern's
    level if it has one; with ``places``, by anchor, which messages have it.

    Anchors of one or two characters (" ", ":") are looked for in the first _SHORT_FIRST messages in Python
    and, those not found there, one by one in one query: nearly every pool has them all in its first
    message, and the query read every message for each (~16 ms of 20k messages). The others are found in
    an Aho-Corasick pass that lists every anchor found at every place, over slices of the pool of at most
    _PRESENT_BYTES of text: over a batch of lines of a million spaces, a list of every short anchor found
    would have outgrown memory. The (message, anchor) pairs are grouped by anchor in numpy, by each
    anchor's number: sorting them by the anchor's text in polars took half of the time."""
    patterns = [(g.family, n, p) for g in grammars for n, p in enumerate(g.patterns)]
    msg = pl.col("msg")
    short = sorted({p.anchor for _, _, p in patterns if len(p.anchor) <= 2})
    long = sorted({p.anchor for _, _, p in patterns if len(p.anchor) > 2})
    first = pool.get_column("msg").head(_SHORT_FIRST).to_list()
    found = {a for a in short if any(m is not None and a in m for m in first)}
    tests = [pl.col("level").unique().implode().alias("__levels")]
    tests += [
        (msg.str.contains(a, literal=True).any() if a else pl.lit(True)).alias(a)
        for a in short
        if a not in found
    ]
    row = pool.select(tests).row(0, named=True)
    levels = set(row.pop("__levels"))
    found.update(a for a, has in row.items() if has)
    by_anchor: dict[str, np.ndarray] | None = {} if places else None
    if long:
        anchors = msg.str.extract_many(long, overlapping=True).alias("__anchor")
        sliced = pool.select(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("__place"),
            msg,
            (msg.str.len_bytes().cum_sum() // _PRESENT_BYTES).alias("__slice"),
        )
        number = pl.col("__anchor").replace_strict(long, range(len(long)), return_dtype=pl.UInt16)
        pairs = []
        for part in sliced.partition_by("__slice") if sliced["__slice"][-1] else [sliced]:
            if places:
                pairs.append(
                    part.select("__place", anchors).explode("__anchor").drop_nulls().select("__place", number)
                )
            else:
                found.update(part.select(anchors.explode().unique().drop_nulls()).to_series().to_list())
        if places and pairs:
            table = pl.concat(pairs)
            ids, at = table.get_column("__anchor").to_numpy(), table.get_column("__place").to_numpy()
            # The pairs come in place order; a stable sort by anchor keeps each anchor's places ascending,
            # and an anchor found twice in a message is kept once.
            order = np.argsort(ids, kind="stable")
            ids, at = ids[order], at[order]
            keep = (
                np.r_[True, (ids[1:] != ids[:-1]) | (at[1:] != at[:-1])]
                if len(ids)
                else np.zeros(0, dtype=bool)
            )
            ids, at = ids[keep], at[keep]
            starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else _NOWHERE
            bounds = [*starts.tolist(), len(at)]
            for anchor_id, start, stop in zip(ids[starts].tolist(), bounds, bounds[1:]):
                by_anchor[long[anchor_id]] = at[start:stop]
            found.update(by_anchor)
    present = frozenset(
        (f, n) for f, n, p in patterns if p.anchor in found and (not p.level or p.level in levels)
    )
    return _Routes(present, by_anchor)


def shape_of(msg: pl.Expr) -> pl.Expr:
    """A message with its values masked, so lines of one format count as one shape."""
    return (
        msg.str.replace_all(r"0x[0-9a-fA-F]+", "<ptr>")
        .str.replace_all(r"\b[0-9a-f]*\d[0-9a-f]*\b", "<n>")
        .str.slice(0, 160)
    )
