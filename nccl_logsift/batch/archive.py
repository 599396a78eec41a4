"""Find the jobs in an archive of logs: which files belong to which job, and a fingerprint of each job's
inputs.

An ARCHIVE argument is read one of three ways:

* a file: one job, named after the file;
* a directory, without ``--job-pattern``: every directory directly inside it is one job (all its files,
  read recursively, as ``logsift analyze DIR`` reads them), and every file directly inside it is a job
  of its own; hidden entries (``.name``) are ignored;
* a directory, with ``--job-pattern GLOB``: every file under it whose path relative to ARCHIVE matches
  GLOB; the part matched by ``{job}`` names the job, and files with the same name form one job. ``*``
  and ``?`` stay within one path component, ``**/`` spans directories, ``[...]`` is a character class.
  Example: ``--job-pattern '{job}.rank*.log*'`` groups ``train42.rank0.log.gz, train42.rank1.log.gz``.

Compressed files (.gz, .zst, .bz2) need nothing special: the reader recognises them by content.

A job's fingerprint hashes the path, size and modification time of each of its files, so a job is
analysed again when a file is added, removed, rewritten or touched, and not when nothing changed.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from nccl_logsift.errors import InputError

JOB_FIELD = "{job}"


@dataclass(frozen=True, slots=True)
class JobFile:
    path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class JobInput:
    """One job to analyse: where it came from, its files, and what identifies this version of them."""

    archive: str  # the ARCHIVE argument, absolute
    job_id: str  # unique within its archive
    files: tuple[JobFile, ...]

    @property
    def key(self) -> str:
        """A short stable name for the job's files in the dataset, unique over archives."""
        return hashlib.sha256(f"{self.archive}\0{self.job_id}".encode()).hexdigest()[:20]

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def fingerprint(self) -> str:
        digest = hashlib.sha256()
        for f in sorted(self.files, key=lambda f: f.path):
            digest.update(f"{f.path}\0{f.size}\0{f.mtime_ns}\n".encode())
        return digest.hexdigest()

    @property
    def run_date(self) -> str | None:
        """The day (UTC) the job last wrote a log: the newest modification time of its files (None without
        files, rather than the epoch's 1970-01-01)."""
        if not self.files:
            return None
        newest = max(f.mtime_ns for f in self.files)
        return datetime.fromtimestamp(newest / 1e9, UTC).date().isoformat()


def find_jobs(archives: Sequence[str], pattern: str | None = None) -> list[JobInput]:
    """Every job in the archives, in a stable order; raise InputError for a missing archive or a bad
    pattern."""
    if not archives:
        raise InputError("no ARCHIVE given")
    matcher = compile_pattern(pattern) if pattern else None
    jobs: list[JobInput] = []
    for raw in archives:
        root = Path(raw).absolute()
        if not root.exists():
            raise InputError(f"{raw}: no such file or directory")
        if root.is_file():
            jobs.append(JobInput(str(root), root.name, (_job_file(root),)))
        elif matcher is not None:
            jobs.extend(_by_pattern(root, matcher))
        else:
            jobs.extend(_by_entry(root))
    return jobs


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The regular expression of a --job-pattern GLOB, with ``{job}`` as the named group ``job``."""
    if pattern.count(JOB_FIELD) > 1:
        raise InputError(f"--job-pattern {pattern!r}: {JOB_FIELD} may appear once")
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith(JOB_FIELD, i):
            out.append(r"(?P<job>[^/]+?)")
            i += len(JOB_FIELD)
        elif pattern.startswith("**/", i):
            out.append(r"(?:[^/]+/)*")
            i += 3
        elif pattern[i] == "*":
            out.append(r"[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append(r"[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                raise InputError(f"--job-pattern {pattern!r}: '[' without a closing ']'")
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + re.escape(body[1:]) if body.startswith("!") else re.escape(body)) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _by_entry(root: Path) -> list[JobInput]:
    jobs = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            files = tuple(
                _job_file(p)
                for p in sorted(entry.rglob("*"))
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(entry).parts)
            )
            jobs.append(JobInput(str(root), entry.name, files))
        elif entry.is_file():
            jobs.append(JobInput(str(root), entry.name, (_job_file(entry),)))
    return jobs


def _by_pattern(root: Path, matcher: re.Pattern[str]) -> list[JobInput]:
    groups: dict[str, list[JobFile]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            relative = path.relative_to(root).as_posix()
            match = matcher.match(relative)
            if match is None or name.startswith("."):
                continue
            job_id = match.groupdict().get("job") or relative
            groups.setdefault(job_id, []).append(_job_file(path))
    return [JobInput(str(root), job_id, tuple(files)) for job_id, files in sorted(groups.items())]


def _job_file(path: Path) -> JobFile:
    stat = path.stat()
    return JobFile(str(path), stat.st_size, stat.st_mtime_ns)
