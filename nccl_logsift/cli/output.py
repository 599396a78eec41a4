"""Where a command's output goes, and what happens when it cannot go there.

* Output paths are checked before the work starts (:func:`check_file`, :func:`check_directory`): a report
  that cannot be written is said at once, not after minutes of analysis.
* A file that fails while written (a full disk) raises :class:`~nccl_logsift.errors.OutputError`
  (:func:`writing`).
* Standard output is a stream whose failures the CLI can tell apart (:func:`guard_standard_streams`): a reader
  that went away (``| head``) raises :class:`ReaderGone`, which ends the run quietly; any other failure
  (``>/dev/full``, a closed stdout) raises ``OutputError``. Without this, such an ``OSError`` would be
  indistinguishable from one of logsift's own bugs, and rich turns a broken pipe into ``SystemExit(1)``.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import click

from nccl_logsift.errors import OutputError

DEFAULT_WIDTH = 120  # columns of a text report written to a pipe or a file when nothing says otherwise
MIN_WIDTH = 40  # narrower, the rank table cannot hold a row: COLUMNS below it is raised to it


def text_width(width: int | None, terminal: bool) -> int | None:
    """Columns for a text report: ``--width`` when given; on a terminal None (rich asks the terminal,
    which ``COLUMNS`` overrides); to a pipe or a file ``COLUMNS`` when it is a number, else
    :data:`DEFAULT_WIDTH`."""
    if width is not None:
        return width
    if terminal:
        return None
    columns = os.environ.get("COLUMNS", "").strip()
    return max(int(columns), MIN_WIDTH) if columns.isdigit() else DEFAULT_WIDTH


class ReaderGone(Exception):
    """The reader of standard output closed its end. Not an OSError, so that no library on the way (rich
    catches ``BrokenPipeError`` and exits 1) handles it before ``cli.main``, which ends the run quietly."""


def check_file(path: Path) -> None:
    """Raise OutputError now when ``path`` cannot be written: its directory is missing, it is a directory,
    or the file cannot be opened for writing. Opened without truncating, and removed again when this made
    it."""
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory")
    if not path.parent.is_dir():
        missing = "is not a directory" if path.parent.exists() else "does not exist"
        raise OutputError(f"cannot write {path}: {path.parent} {missing}")
    existed = path.exists()
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror}") from None
    if not existed:
        path.unlink(missing_ok=True)


def check_directory(path: Path) -> None:
    """Create ``path`` (and its parents) when missing, and raise OutputError now when a file cannot be
    made in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".logsift-probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write into directory {path}: {exc.strerror}") from None


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn a failure to write ``path`` inside the block into OutputError (use it around writes only)."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror or exc}") from None


def write_text(text: str, output: Path | None) -> None:
    """``text`` to ``output`` (through :func:`replacing`), or to standard output when there is none."""
    if output is None:
        click.echo(text, nl=False)
        return
    with replacing(output) as handle:
        handle.write(text)


@contextmanager
def replacing(path: Path) -> Iterator[TextIO]:
    """A text file to write ``path`` through: written beside it and renamed over it when the block ends
    well, so that an interrupted or failed write leaves the file as it was (never half a report). A
    path that is not a regular file (``/dev/stdout``, a FIFO) is written directly. Write errors become
    OutputError."""
    with writing(path):
        if path.exists() and not path.is_file():
            with path.open("w", encoding="utf-8") as handle:
                yield handle
            return
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        # Made with the mode a new file gets (the umask applies), not the 0600 of a private temporary.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                yield handle
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise


def guard_standard_streams() -> None:
    """Replace ``sys.stdout`` by the same stream whose write errors say what happened (see the module's
    docstring), and stand in for standard streams that were closed when the process started.

    A closed descriptor 0, 1 or 2 gets ``/dev/null`` on it first: the next file opened would take that
    number, and anything writing to "standard output" would write into it. ``sys.stdin`` stays None (the
    commands that read it say that it is closed); a closed stdout fails on the first write; a closed stderr
    is ``/dev/null``.
    """
    closed = {name: getattr(sys, name) is None for name in ("stdin", "stdout", "stderr")}
    for fd, name in enumerate(closed):
        if closed[name]:
            _occupy(fd)
    if closed["stderr"]:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    old = sys.stdout
    raw = _Stdout(None if closed["stdout"] else old.fileno())
    encoding, errors = ("utf-8", "strict") if old is None else (old.encoding, old.errors)
    sys.stdout = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=encoding,
        errors=errors,
        line_buffering=raw.isatty(),
    )


def silence_stdout() -> None:
    """After stdout failed: drop what is still buffered for it, so the exit flushes fail no more."""
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process


def _occupy(fd: int) -> None:
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


class _Stdout(io.RawIOBase):
    """File descriptor 1, writable, with the failures of a write told apart; ``fd`` None: closed at start."""

    def __init__(self, fd: int | None) -> None:
        super().__init__()
        self._fd = fd

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        if self._fd is None:
            raise io.UnsupportedOperation("standard output is closed")
        return self._fd

    def isatty(self) -> bool:
        return self._fd is not None and os.isatty(self._fd)

    def write(self, data) -> int:
        if self._fd is None:
            raise OutputError("cannot write to standard output: it is closed")
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            raise ReaderGone from None
        except OSError as exc:
            raise OutputError(f"cannot write to standard output: {exc.strerror or exc}") from None
