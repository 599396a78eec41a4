"""Edits of grammar regexes on their group structure, to compose them into PCRE patterns for other tools.

A grammar regex is written for Python ``regex`` and polars (``(?P<name>...)``, no look-around). Composing
several into one pattern for a PCRE tool (lnav) needs a few edits that work on the groups, found by a scan
that skips escapes and character classes: rename a group, make an optional group required, turn a group into
a plain or look-ahead group, and spell named groups the PCRE way.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

_NAMED = regex.compile(r"\(\?P<(\w+)>")


@dataclass(frozen=True, slots=True)
class Group:
    start: int  # index of its "("
    end: int  # index of its ")"
    name: str  # "" unless a (?P<name>...) group

    @property
    def head(self) -> int:
        """Length of the opening ``(?P<name>``, ``(?:`` or ``(``: where its contents start."""
        return len(f"(?P<{self.name}>") if self.name else 1


def groups(pattern: str) -> list[Group]:
    """Every group of ``pattern`` in the order they open."""
    found, opened, i, in_class = [], [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            # A "]" right after "[" or "[^" is a member of the class, not its end.
            i += 1 + (pattern[i + 1 : i + 2] == "^")
            i += pattern[i : i + 1] == "]"
            continue
        elif c == "(":
            opened.append(i)
        elif c == ")":
            start = opened.pop()
            name = _NAMED.match(pattern, start)
            found.append(Group(start, i, name.group(1) if name else ""))
        i += 1
    return sorted(found, key=lambda g: g.start)


def capture_names(pattern: str) -> list[str]:
    return [g.name for g in groups(pattern) if g.name]


def unanchored(pattern: str) -> str:
    return pattern.removeprefix("^")


def named_group(pattern: str, name: str) -> Group:
    for g in groups(pattern):
        if g.name == name:
            return g
    raise ValueError(f"no group {name!r} in {pattern!r}")


def _reopen(pattern: str, group: Group, opening: str) -> str:
    """``pattern`` with ``group`` opened by ``opening`` (``(?:``, ``(?=``, ``(?P<x>``) instead."""
    return pattern[: group.start] + opening + pattern[group.start + group.head :]


def rename(pattern: str, old: str, new: str) -> str:
    """Group ``old`` named ``new``; ``pattern`` itself when it has no group ``old``."""
    if old == new or old not in capture_names(pattern):
        return pattern
    return _reopen(pattern, named_group(pattern, old), f"(?P<{new}>")


def require(pattern: str, name: str) -> str:
    """``pattern`` with the ``?`` dropped from group ``name`` and from every group around it."""
    target = named_group(pattern, name)
    optional = [
        g.end + 1
        for g in groups(pattern)
        if g.start <= target.start and g.end >= target.end and pattern[g.end + 1 : g.end + 2] == "?"
    ]
    for at in sorted(optional, reverse=True):  # from the right, so the other offsets stay valid
        if pattern[at + 1 : at + 2] in ("?", "+"):
            raise ValueError(f"group {name!r} sits in a lazy or possessive optional group: {pattern!r}")
        pattern = pattern[:at] + pattern[at + 1 :]
    return pattern


def as_lookahead(pattern: str, name: str) -> str:
    """Group ``name`` as a look-ahead: matched, but left for what follows (a grammar's ``keep`` group)."""
    if name not in capture_names(pattern):
        return pattern
    return _reopen(pattern, named_group(pattern, name), "(?=")


def plain(pattern: str) -> str:
    """``pattern`` with every named group made a plain group (inside a look-around nobody reads them)."""
    return _NAMED.sub("(?:", pattern)


def first_names_only(pattern: str) -> str:
    """Every group of a name already captured to its left made a plain group: PCRE refuses a name twice."""
    while True:
        seen: set[str] = set()
        again = next((g for g in groups(pattern) if g.name and (g.name in seen or seen.add(g.name))), None)
        if again is None:
            return pattern
        pattern = _reopen(pattern, again, "(?:")


def to_pcre(pattern: str) -> str:
    """Python's ``(?P<name>`` spelled as PCRE's ``(?<name>``."""
    return _NAMED.sub(r"(?<\1>", pattern)


def from_pcre(pattern: str) -> str:
    """PCRE's ``(?<name>`` spelled as Python's ``(?P<name>``; look-behind ``(?<=``, ``(?<!`` stays."""
    return regex.sub(r"\(\?<(\w+)>", r"(?P<\1>", pattern)
