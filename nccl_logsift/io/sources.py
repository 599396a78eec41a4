"""Expand the PATH arguments of a command into an ordered list of readable sources."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

from nccl_logsift.errors import InputError

STDIN = "-"


@dataclass(frozen=True, slots=True)
class Source:
    """One input stream: a file on disk or standard input."""

    source_id: int
    path: str  # as given or as found while walking a directory; "-" for stdin
    size: int | None  # bytes on disk (compressed size for .gz/.zst/.bz2); None for stdin

    @property
    def is_stdin(self) -> bool:
        return self.path == STDIN

    def open(self) -> BinaryIO:
        if self.is_stdin:
            return sys.stdin.buffer
        return open(self.path, "rb")


@dataclass(frozen=True, slots=True)
class SourceProblem:
    """A path that was skipped, with the reason in words a user can act on."""

    path: str
    reason: str


def expand_paths(paths: Sequence[str]) -> tuple[list[Source], list[SourceProblem]]:
    """Turn files, directories (walked in sorted order) and ``-`` into sources.

    No path at all means standard input. Missing or unreadable paths are returned as problems rather
    than raised, so one bad path does not stop the others; the caller decides when nothing is left.
    """
    found: list[tuple[str, int | None]] = []
    problems: list[SourceProblem] = []
    for raw in paths or [STDIN]:
        if raw == STDIN:
            found.append((STDIN, None))
            continue
        path = Path(raw)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and not _is_hidden(p, path))
            if not files:
                problems.append(SourceProblem(raw, "directory contains no files"))
            found.extend((str(p), p.stat().st_size) for p in files)
        elif path.is_file():
            found.append((raw, path.stat().st_size))
        elif path.exists():
            problems.append(SourceProblem(raw, "not a regular file or directory"))
        else:
            problems.append(SourceProblem(raw, "no such file or directory"))
    sources = []
    for path_text, size in found:
        if path_text != STDIN and not os.access(path_text, os.R_OK):
            problems.append(SourceProblem(path_text, "permission denied"))
            continue
        sources.append(Source(len(sources), path_text, size))
    return sources, problems


def require_sources(paths: Sequence[str]) -> tuple[list[Source], list[SourceProblem]]:
    """Like :func:`expand_paths`, but raise :class:`InputError` when nothing readable remains."""
    sources, problems = expand_paths(paths)
    if not sources:
        detail = "; ".join(f"{p.path}: {p.reason}" for p in problems) or "no input given"
        raise InputError(f"nothing to read ({detail})")
    return sources, problems


def _is_hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)
