"""The grammar file format (schema ``nccl-logsift/grammar/v1``) as frozen dataclasses, read with tomllib.

A grammar file describes one line family::

    schema = "nccl-logsift/grammar/v1"
    family = "coll"                 # defaults to the file name
    layer = "message"               # launcher | envelope | message
    source = "nccl"                 # message layer: which envelope's message it reads (nccl | torch | text)
    table = "collectives"           # message layer: the table its rows go to
    priority = 10                   # lower runs first (frequent families first keeps dispatch cheap)
    title = "..."
    reference = "nccl-log-grammar.md §5.1"

    [fields]
    op = { kind = "str", doc = "collective name as NCCL prints it" }

    [[patterns]]
    name = "coll"
    anchor = " opCount "            # literal every matching message contains (cheap pre-filter)
    versions = "2.4.2 - 2.30.7"
    regex = '''^(?P<op>[A-Za-z]+): opCount (?P<opcount>[0-9a-f]+) ...$'''
    set = { event = "start" }       # constant columns written when this pattern matches
    level = "WARN"                  # optional: only try lines of this level

    [[samples]]
    line = '''host:1:1 [0] NCCL INFO AllReduce: opCount 1a4 ...'''   # a full raw line
    version = "2.21.5"
    expect = { op = "AllReduce", opcount = 420 }
    fast = false                    # COLL only: a form the compiled scan leaves to this parser on purpose

    [[near_misses]]
    line = '''...'''                # a full raw line this family must not claim
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

SCHEMA_ID = "nccl-logsift/grammar/v1"

# Columns every message table carries from the line's location and envelope; a message field may not
# reuse these names, or it would overwrite them.
MESSAGE_KEYS = (
    "collector_ts",
    "host",
    "pid",
    "tid",
    "dev",
    "level",
    "severity",
    "ts",
    "src_file",
    "src_line",
    "logger",
    "torch_rank",
    "task",
    "local_rank",
    "mpi_rank",
)
LOCATION_COLUMNS = ("source_id", "line_no", "part")
# Columns the resolver adds to tables (the world rank of the line's process, the comm instance of a call).
RESOLVED_COLUMNS = ("global_rank", "generation", "comm_uid", "ordinal")
RESERVED_MESSAGE_COLUMNS = frozenset(
    (*LOCATION_COLUMNS, "byte_offset", *MESSAGE_KEYS, *RESOLVED_COLUMNS, "family", "pattern", "row")
)


class Layer(StrEnum):
    LAUNCHER = "launcher"  # outer prefixes added by launchers and log collectors, stripped repeatedly
    ENVELOPE = "envelope"  # the producer's own prefix: NCCL host:pid:tid [dev] LEVEL, c10 glog, ...
    MESSAGE = "message"  # what follows the envelope (or the whole line, for source = "text")


class FieldKind(StrEnum):
    INT = "int"  # decimal integer
    HEX = "hex"  # hexadecimal integer, with or without 0x
    PTR = "ptr"  # C pointer as printed by %p: 0x... or (nil); stored as an unsigned integer
    FLOAT = "float"
    STR = "str"


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    kind: FieldKind
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Pattern:
    name: str
    regex: str
    anchor: str
    versions: str = ""
    set: dict[str, Any] = field(default_factory=dict)
    level: str = ""  # message layer: only lines of this envelope level (e.g. WARN) are tried


@dataclass(frozen=True, slots=True)
class Sample:
    line: str
    expect: dict[str, Any]
    version: str = ""
    # COLL samples only: False for a form the compiled COLL scan leaves to the general parser on purpose
    # (parse/fastcoll.py); tests/parse/test_fast_path_coverage.py holds every other COLL sample to the scan.
    fast: bool = True


# What an error kind means to the diagnosis (the ``[kinds]`` table of grammars/nccl/errors.toml).
ROLES = ("failure", "cascade", "benign", "teardown")
_OWNER = re.compile(r"^(?:LS\d{3})?$")


@dataclass(frozen=True, slots=True)
class ErrorKind:
    name: str
    role: str  # one of ROLES
    owner: str  # the code of the rule that reports it, "" when none does
    doc: str = ""


@dataclass(frozen=True, slots=True)
class Grammar:
    path: Path
    family: str
    layer: Layer
    source: str
    table: str
    priority: int
    title: str
    reference: str
    fields: tuple[Field, ...]
    patterns: tuple[Pattern, ...]
    samples: tuple[Sample, ...]
    near_misses: tuple[str, ...]
    kinds: tuple[ErrorKind, ...] = ()

    @property
    def field_kinds(self) -> dict[str, FieldKind]:
        return {f.name: f.kind for f in self.fields}

    @property
    def constant_columns(self) -> set[str]:
        return {key for p in self.patterns for key in p.set}


_TOP_KEYS = {
    "schema",
    "family",
    "layer",
    "source",
    "table",
    "priority",
    "title",
    "reference",
    "fields",
    "patterns",
    "samples",
    "near_misses",
    "kinds",
}
_PATTERN_KEYS = {"name", "regex", "anchor", "versions", "set", "level"}
_SAMPLE_KEYS = {"line", "expect", "version", "fast"}
_SOURCES = {"nccl", "torch", "text"}


def read_grammar(path: Path) -> tuple[Grammar | None, list[str]]:
    """Parse one grammar file; return it with the problems found (G1: schema id and keys)."""
    problems: list[str] = []
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return None, [f"not valid TOML: {exc}"]
    if doc.get("schema") != SCHEMA_ID:
        problems.append(f'schema must be "{SCHEMA_ID}", found {doc.get("schema")!r}')
    problems += [f"unknown key {k!r}" for k in sorted(set(doc) - _TOP_KEYS)]
    try:
        layer = Layer(doc.get("layer", ""))
    except ValueError:
        return None, problems + [f"layer must be one of {', '.join(Layer)}, found {doc.get('layer')!r}"]
    source = doc.get("source", "text" if layer is not Layer.MESSAGE else "")
    if layer is Layer.MESSAGE and source not in _SOURCES:
        problems.append(f"source must be one of {sorted(_SOURCES)}, found {source!r}")
    if layer is Layer.MESSAGE and not doc.get("table"):
        problems.append("a message grammar must name its table")
    fields = []
    for name, spec in doc.get("fields", {}).items():
        try:
            fields.append(Field(name, FieldKind(spec.get("kind", "str")), spec.get("doc", "")))
        except ValueError:
            problems.append(f"field {name!r}: kind must be one of {', '.join(FieldKind)}")
    patterns = []
    for i, spec in enumerate(doc.get("patterns", [])):
        problems += [f"patterns[{i}]: unknown key {k!r}" for k in sorted(set(spec) - _PATTERN_KEYS)]
        if not spec.get("regex") or not spec.get("anchor"):
            problems.append(f"patterns[{i}] ({spec.get('name', '?')}): needs both regex and anchor")
            continue
        patterns.append(
            Pattern(
                spec.get("name", f"p{i}"),
                ascii_classes(spec["regex"]),  # the engines read the class escapes alike (grammar/dialect.py)
                spec["anchor"],
                spec.get("versions", ""),
                spec.get("set", {}),
                spec.get("level", ""),
            )
        )
    samples = []
    for i, spec in enumerate(doc.get("samples", [])):
        problems += [f"samples[{i}]: unknown key {k!r}" for k in sorted(set(spec) - _SAMPLE_KEYS)]
        if "line" not in spec:
            problems.append(f"samples[{i}]: needs a line")
            continue
        fast = spec.get("fast", True)
        if not isinstance(fast, bool):
            problems.append(f"samples[{i}]: fast must be true or false")
            fast = True
        samples.append(Sample(spec["line"], spec.get("expect", {}), str(spec.get("version", "")), fast))
    near = tuple(m["line"] if isinstance(m, dict) else m for m in doc.get("near_misses", []))
    kinds, kind_problems = _kinds(doc.get("kinds", {}))
    problems += kind_problems
    grammar = Grammar(
        path=path,
        family=doc.get("family", path.stem),
        layer=layer,
        source=source,
        table=doc.get("table", ""),
        priority=int(doc.get("priority", 50)),
        title=doc.get("title", ""),
        reference=doc.get("reference", ""),
        fields=tuple(fields),
        patterns=tuple(patterns),
        samples=tuple(samples),
        near_misses=near,
        kinds=kinds,
    )
    return grammar, problems


def _kinds(table: dict) -> tuple[tuple[ErrorKind, ...], list[str]]:
    """The ``[kinds]`` table: ``name = { role = ..., owner = ..., doc = ... }`` per error kind."""
    kinds, problems = [], []
    for name, spec in table.items():
        if not isinstance(spec, dict):
            problems.append(f"kinds.{name}: must be a table")
            continue
        problems += [f"kinds.{name}: unknown key {k!r}" for k in sorted(set(spec) - {"role", "owner", "doc"})]
        role, owner = spec.get("role"), spec.get("owner", "")
        if role not in ROLES:
            problems.append(f"kinds.{name}: role must be one of {', '.join(ROLES)}")
        if not isinstance(owner, str) or not _OWNER.match(owner):
            problems.append(f"kinds.{name}: owner must be a rule code (LS123) or empty")
            continue
        kinds.append(ErrorKind(name, str(role), owner, str(spec.get("doc", ""))))
    return tuple(kinds), problems


# The ASCII class of each class escape, as it is written inside a character class.
_ASCII_CLASSES = {"d": "0-9", "w": "0-9A-Za-z_", "s": "\\t\\n\\x0B\\f\\r "}


def _tokens(pattern: str) -> Iterator[tuple[str, bool]]:
    """The characters and escapes of ``pattern``, each with whether it is inside a character class."""
    i, in_class = 0, False
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            yield pattern[i : i + 2], in_class
            i += 2
            continue
        ch = pattern[i]
        yield ch, in_class
        i += 1
        if ch == "[" and not in_class:
            in_class = True
            # A "]" right after "[" or "[^" is a member, not the end of the class.
            for lead in ("^", "]"):
                if pattern.startswith(lead, i):
                    yield lead, True
                    i += 1
        elif ch == "]" and in_class:
            in_class = False


def ascii_classes(pattern: str) -> str:
    """``pattern`` with ``\\d``, ``\\w``, ``\\s`` and their negations written out as ASCII classes
    (``[0-9]``, ``[^0-9]``; inside a class, its members). A negated escape inside a class (``[\\S:]``) is
    left as it is, since no list of ASCII members says it: :func:`class_escapes` finds it."""
    out = []
    for token, in_class in _tokens(pattern):
        members = _ASCII_CLASSES.get(token[1:].lower()) if len(token) == 2 else None
        if members is None:
            out.append(token)
        elif token[1].islower():
            out.append(members if in_class else f"[{members}]")
        elif not in_class:
            out.append(f"[^{members}]")
        else:
            out.append(token)
    return "".join(out)


def end_of_text(pattern: str) -> str:
    """``pattern`` with every "$" outside a character class written ``\\Z``: the end of the text, as Rust and
    RE2 read "$" (Python's "$" also matches before a newline that ends the text)."""
    return "".join("\\Z" if token == "$" and not in_class else token for token, in_class in _tokens(pattern))


def class_escapes(pattern: str) -> list[str]:
    """The class escapes (``\\d``, ``\\S``, ...) in ``pattern``."""
    return [token for token, _ in _tokens(pattern) if len(token) == 2 and token[1] in "dwsDWS"]


_GROUP = re.compile(r"\(\?P<(\w+)>")


@functools.cache
def group_names(pattern: str) -> tuple[str, ...]:
    """Named groups of a pattern in order, read from its text (compiling it in ``regex`` is far slower)."""
    return tuple(dict.fromkeys(_GROUP.findall(pattern)))
