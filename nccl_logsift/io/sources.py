"""Expand the PATH arguments of a command into an ordered list of readable sources."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from nccl_logsift.errors import InputError

STDIN = "-"


@dataclass(frozen=True, slots=True)
class Source:
    """One input stream: a file on disk, standard input, or a pipe named by a path (a FIFO, ``/dev/stdin``,
    a shell's ``<(zcat job.log.gz)``)."""

    source_id: int
    path: str  # as given or as found while walking a directory; "-" for stdin
    size: int | None  # bytes on disk (compressed size for .gz/.zst/.bz2); None for a stream
    stream: bool = False  # a pipe: read once, front to back; never opened again

    @property
    def is_stdin(self) -> bool:
        return self.path == STDIN

    @property
    def is_stream(self) -> bool:
        """Whether the input can be read only once, in order (stdin or a pipe): no second look at it."""
        return self.is_stdin or self.stream

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

    No path at all means standard input. A pipe named on the command line (a FIFO, ``/dev/stdin``,
    ``<(zcat job.log.gz)``) is read as a stream. Missing or unreadable paths, and whatever a directory
    holds that cannot be read (a subdirectory or file without permission, a broken link, a FIFO or
    device), are returned as problems rather than raised or left out, so one bad path does not stop the
    others and none goes unreported; the caller decides when nothing is left.
    """
    found: list[tuple[str, int | None, bool]] = []
    problems: list[SourceProblem] = []
    for raw in paths or [STDIN]:
        if raw == STDIN:
            found.append((STDIN, None, True))
            continue
        path = Path(raw)
        mode = _mode(path)
        if mode is not None and stat.S_ISDIR(mode):
            files, skipped = _walk(path)
            if not files and not skipped:
                problems.append(SourceProblem(raw, "directory contains no files"))
            problems.extend(skipped)
            found.extend((str(p), size, False) for p, size in files)
        elif mode is not None and stat.S_ISREG(mode):
            found.append((raw, path.stat().st_size, False))
        elif mode is not None and stat.S_ISFIFO(mode):
            found.append((raw, None, True))
        elif mode is not None:
            problems.append(SourceProblem(raw, "not a regular file, pipe or directory (pipe it into -)"))
        else:
            problems.append(SourceProblem(raw, "no such file or directory"))
    sources = []
    for path_text, size, stream in found:
        if path_text != STDIN and not os.access(path_text, os.R_OK):
            problems.append(SourceProblem(path_text, "permission denied"))
            continue
        sources.append(Source(len(sources), path_text, size, stream and path_text != STDIN))
    return sources, problems


def require_sources(paths: Sequence[str]) -> tuple[list[Source], list[SourceProblem]]:
    """Like :func:`expand_paths`, but raise :class:`InputError` when nothing readable remains."""
    sources, problems = expand_paths(paths)
    if not sources:
        detail = "; ".join(f"{p.path}: {p.reason}" for p in problems) or "no input given"
        raise InputError(f"nothing to read ({detail})")
    return sources, problems


def _mode(path: Path) -> int | None:
    """The type and permissions of what ``path`` names (links followed), or None when nothing is there."""
    try:
        return path.stat().st_mode
    except OSError:
        return None


def _walk(root: Path) -> tuple[list[tuple[Path, int]], list[SourceProblem]]:
    """The regular files under ``root`` (hidden ones left out) with their sizes, in sorted order, and what
    could not be read there: a directory that cannot be listed, a broken link, a FIFO, socket or device.
    Links to directories are not followed (a loop would never end)."""
    files: list[tuple[Path, int]] = []
    problems: list[SourceProblem] = []

    def unlistable(error: OSError) -> None:
        reason = f"directory cannot be read: {error.strerror or error}"
        problems.append(SourceProblem(str(error.filename), reason))

    for folder, subfolders, names in os.walk(root, onerror=unlistable):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        for name in names:
            path = Path(folder, name)
            if _is_hidden(path, root):
                continue
            mode = _mode(path)
            if mode is None:
                problems.append(SourceProblem(str(path), "broken symbolic link"))
            elif stat.S_ISREG(mode):
                files.append((path, path.stat().st_size))
            else:
                problems.append(SourceProblem(str(path), "not a regular file (a FIFO, socket or device)"))
    files.sort()
    return files, sorted(problems, key=lambda p: p.path)


def _is_hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)
