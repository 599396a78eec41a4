"""Find the grammar files (installed package data, or the source checkout) and load them once."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from nccl_logsift.errors import GrammarError
from nccl_logsift.grammar.cache import cached_grammars
from nccl_logsift.grammar.dialect import dialect_problems
from nccl_logsift.grammar.schema import RESERVED_MESSAGE_COLUMNS, Grammar, Layer, group_names, read_grammar

_PACKAGED = Path(__file__).resolve().parent.parent / "grammars"
_CHECKOUT = Path(__file__).resolve().parents[2] / "grammars"


def grammar_root() -> Path:
    """The directory holding the grammar files: package data in a wheel, ``grammars/`` in a checkout."""
    return _PACKAGED if _PACKAGED.is_dir() else _CHECKOUT


@dataclass(frozen=True, slots=True)
class GrammarSet:
    """All grammars, grouped the way the parser runs them."""

    grammars: tuple[Grammar, ...]

    def layer(self, layer: Layer) -> list[Grammar]:
        return [g for g in self.grammars if g.layer is layer]

    def messages(self, source: str) -> list[Grammar]:
        """Message grammars reading ``source``, in dispatch order (priority, then family)."""
        found = [g for g in self.layer(Layer.MESSAGE) if g.source == source]
        return sorted(found, key=lambda g: (g.priority, g.family))

    def family(self, name: str) -> Grammar:
        for g in self.grammars:
            if g.family == name:
                return g
        raise KeyError(name)

    @property
    def tables(self) -> dict[str, list[Grammar]]:
        out: dict[str, list[Grammar]] = {}
        for g in self.layer(Layer.MESSAGE):
            out.setdefault(g.table, []).append(g)
        return out


def load_grammars(root: Path | None = None, check_dialect: bool | None = None) -> GrammarSet:
    """Load and structurally check every ``*.toml`` below ``root``; raise GrammarError on any problem.

    Compiling every regex in both engines (the dialect check) takes longer than the rest of startup, so
    it runs for grammars a user points at (``root``) and on request; the shipped grammars are checked by
    the test suite. Without the dialect check, a set that passed is kept on disk for the next run
    (``grammar/cache.py``).
    """
    return _load(str(root or grammar_root()), root is not None if check_dialect is None else check_dialect)


@functools.lru_cache(maxsize=4)
def _load(root: str, check_dialect: bool) -> GrammarSet:
    base = Path(root)
    paths = sorted(base.rglob("*.toml"))
    if check_dialect:  # a check asked for runs in full
        return _read_all(base, paths, check_dialect)
    return cached_grammars(base, paths, lambda: _read_all(base, paths, check_dialect))


def _read_all(base: Path, paths: list[Path], check_dialect: bool) -> GrammarSet:
    grammars, diagnostics = [], []
    for path in paths:
        grammar, problems = read_grammar(path)
        if grammar is not None:
            problems += structural_problems(grammar, check_dialect)
            grammars.append(grammar)
        diagnostics += [f"{path.relative_to(base.parent)}: {p}" for p in problems]
    families = [g.family for g in grammars]
    diagnostics += [
        f"family {f!r} is defined more than once"
        for f in sorted({f for f in families if families.count(f) > 1})
    ]
    diagnostics += _table_kind_conflicts(grammars)
    if not grammars:
        diagnostics.append(f"no grammar files found under {base}")
    if diagnostics:
        raise GrammarError(diagnostics)
    return GrammarSet(tuple(grammars))


def _table_kind_conflicts(grammars: list[Grammar]) -> list[str]:
    """Families writing to one table must agree on the kind of every column they share."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    problems = []
    for g in grammars:
        if g.layer is not Layer.MESSAGE:
            continue
        for f in g.fields:
            first = seen.setdefault((g.table, f.name), (f.kind, g.family))
            if first[0] != f.kind:
                problems.append(
                    f"table {g.table!r}: column {f.name!r} is {f.kind} in {g.family!r} "
                    f"but {first[0]} in {first[1]!r}"
                )
    return problems


def structural_problems(grammar: Grammar, check_dialect: bool = True) -> list[str]:
    """G2 (named groups are declared fields) and G3 (the regex dialect both engines accept)."""
    problems = []
    declared = set(grammar.field_kinds)
    captured: set[str] = set()
    for p in grammar.patterns:
        problems += [
            f"pattern {p.name!r}: {msg}" for msg in (dialect_problems(p.regex) if check_dialect else ())
        ]
        groups = set(group_names(p.regex))
        captured |= groups
        undeclared = sorted(groups - declared - {"keep"})
        if undeclared:
            problems.append(f"pattern {p.name!r}: groups {undeclared} are not declared in [fields]")
        if grammar.layer is Layer.MESSAGE and not (p.regex.startswith("^") and p.regex.endswith("$")):
            problems.append(f"pattern {p.name!r}: a message pattern must match the whole message (^...$)")
        if grammar.layer is not Layer.MESSAGE and not p.regex.startswith("^"):
            problems.append(f"pattern {p.name!r}: a prefix pattern must be anchored with ^")
    if grammar.layer is Layer.MESSAGE:
        clash = sorted((declared | grammar.constant_columns) & RESERVED_MESSAGE_COLUMNS)
        if clash:
            problems.append(f"fields {clash} clash with the key columns every table carries; rename them")
    unused = sorted(declared - captured - grammar.constant_columns)
    if unused:
        problems.append(f"fields {unused} are declared but no pattern captures or sets them")
    if not grammar.samples:
        problems.append("a grammar needs at least one sample line (G4)")
    return problems
