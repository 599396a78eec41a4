"""Run every grammar's sample lines through the real parser and report what does not come out as declared.

Checks (numbered as in grammars/README.md):
  G5  each sample lands in its own family, through exactly one pattern of it;
  G6  every pattern is exercised by at least one sample;
  G7  each expected field has the typed value the parser produces;
  G8  no other family of the same source has a pattern that would claim the sample (same level, anchor and
      regex): overlaps must not be hidden by dispatch order;
  G9  near-miss lines are not claimed by the family.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
import regex

from nccl_logsift.grammar.registry import GrammarSet
from nccl_logsift.grammar.schema import Grammar, Layer
from nccl_logsift.io.lines import LineChunk
from nccl_logsift.parse.kinds import typed_value


@dataclass(frozen=True, slots=True)
class SampleResult:
    grammar: Grammar
    index: int  # position among the grammar's samples; -1 for a grammar-level problem
    problems: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.grammar.path.parent.name}/{self.grammar.path.name}#{self.index}"


def _chunk(lines: list[str]) -> LineChunk:
    return LineChunk(
        source_id=0,
        line_no=pl.Series("line_no", range(1, len(lines) + 1), dtype=pl.UInt32),
        byte_offset=pl.Series("byte_offset", [0] * len(lines), dtype=pl.UInt64),
        text=pl.Series("text", lines, dtype=pl.String),
    )


def check_samples(grammars: GrammarSet) -> list[SampleResult]:
    """Parse all samples and near-misses in one chunk and compare with their expectations."""
    from nccl_logsift.parse.lineparser import LineParser  # the parser depends on this package

    parser = LineParser(grammars, keep_text=True)
    entries: list[tuple[Grammar, int, str]] = []
    for g in grammars.grammars:
        entries += [(g, i, s.line) for i, s in enumerate(g.samples)]
    misses = [(g, m) for g in grammars.grammars for m in g.near_misses]
    texts = [line for _, _, line in entries] + [m for _, m in misses]
    tables, frame = parser.parse_frame(_chunk(texts))
    lines = tables["lines"].filter(pl.col("part") == 0)
    rows = {r["line_no"]: r for r in lines.iter_rows(named=True)}
    msgs = {
        r["line_no"]: r
        for r in frame.filter(pl.col("part") == 0).select("line_no", "msg", "rest").iter_rows(named=True)
    }
    results: list[SampleResult] = []
    used_patterns: dict[str, set[str]] = {}
    for line_no, (g, i, _) in enumerate(entries, start=1):
        row = rows[line_no]
        problems: list[str] = []
        expect = g.samples[i].expect
        if g.layer is Layer.MESSAGE:
            if row["family"] != g.family:
                problems.append(f"parsed as family {row['family']!r}, not {g.family!r}")
            else:
                used_patterns.setdefault(g.family, set()).add(row["pattern"])
                table = tables[g.table].filter(pl.col("line_no") == line_no)
                problems += _compare(expect, table.row(0, named=True), _kinds(grammars, g))
            problems += _overlaps(grammars, g, msgs[line_no], row["level"])
        else:
            problems += _compare(expect, {**row, "msg": msgs[line_no]["msg"]}, _kinds(grammars, g))
            used_patterns.setdefault(g.family, set()).update(_prefix_patterns_matching(g, g.samples[i].line))
        results.append(SampleResult(g, i, tuple(problems)))
    for offset, (g, miss) in enumerate(misses, start=len(entries) + 1):
        row = rows[offset]
        claimed = (
            row["family"] == g.family
            if g.layer is Layer.MESSAGE
            else bool(_prefix_patterns_matching(g, miss))
        )
        if claimed:
            results.append(SampleResult(g, -1, (f"near miss is claimed by the family: {miss!r}",)))
    for g in grammars.grammars:
        problems = []
        if not g.samples:
            problems.append("no samples (G4)")
        unused = [p.name for p in g.patterns if p.name not in used_patterns.get(g.family, set())]
        if unused:
            problems.append(f"patterns {unused} match none of the samples (G6)")
        if problems:
            results.append(SampleResult(g, -1, tuple(problems)))
    return results


def _kinds(grammars: GrammarSet, g: Grammar) -> dict:
    kinds = {}
    for other in grammars.grammars:  # launcher and envelope fields appear in expectations too
        if other.layer is not Layer.MESSAGE or other is g:
            kinds.update(other.field_kinds)
    kinds.update(g.field_kinds)
    return kinds


def _compare(expect: dict, row: dict, kinds: dict) -> list[str]:
    problems = []
    for name, want in expect.items():
        if name not in row:
            problems.append(f"expected field {name!r} is not a column of the result")
            continue
        want = typed_value(want, kinds[name]) if name in kinds else want
        got = row[name]
        if isinstance(want, float) and isinstance(got, float):
            same = abs(want - got) < 1e-9
        else:
            same = want == got
        if not same:
            problems.append(f"{name}: expected {want!r}, parsed {got!r}")
    return problems


def _overlaps(grammars: GrammarSet, g: Grammar, parsed: dict, level: str | None) -> list[str]:
    message = parsed["msg"] if g.source != "text" else parsed["rest"]
    if message is None:
        return []
    others = [
        f"{o.family}:{p.name}"
        for o in grammars.messages(g.source)
        if o is not g
        for p in o.patterns
        if (not p.level or p.level == level) and p.anchor in message and regex.search(p.regex, message)
    ]
    return [f"also matched by {others} (G8)"] if others else []


def _prefix_patterns_matching(g: Grammar, line: str) -> set[str]:
    return {p.name for p in g.patterns if regex.search(p.regex, line) or _matches_after_prefix(p.regex, line)}


def _matches_after_prefix(pattern: str, line: str) -> bool:
    # Stacked prefixes: a pattern may match only after outer prefixes were stripped.
    body = pattern[1:] if pattern.startswith("^") else pattern
    return bool(regex.search(body, line))
