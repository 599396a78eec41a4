"""Parse a live input in a worker thread and hand the batches over a queue, so the caller keeps a timer.

The parser only yields when lines arrive, and a stalled job writes nothing; the caller of :class:`Feed`
therefore waits on the queue with a timeout and judges stalls and redraws between batches.

Standard input is read through a pipe of our own (:class:`StdinRelay`): a blocked ``read`` cannot be
interrupted from another thread, but closing our end of the pipe gives the reader an ordinary end of
input. That is how Ctrl-C ends the stream cleanly, so the final verdict covers everything read so far.
"""

from __future__ import annotations

import fcntl
import os
import queue
import select
import sys
import threading
from typing import Self

from nccl_logsift.pipeline import Batch, TableStream

_READ_BYTES = 1 << 20
# Batches parsed ahead of the caller. Each holds its tables and, from standard input, the chunks its calls'
# text is in (up to 16 MiB each): `watch -` on 1 GB of a 4096-rank job peaked at 1.21-1.75 GB with 16 (the
# more, the further the caller fell behind) and at 1.20-1.25 GB with 2, in the same 6.9-7.5 s. The input
# keeps its own slack ahead of the parser (the reader's queue of 64 MiB and the pipes).
BACKLOG = 2
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_END = object()


class Feed:
    """The batches of ``stream``, parsed in a daemon thread; use as a context manager.

    :meth:`take` returns what arrived within a timeout (possibly nothing); :attr:`ended` turns true once
    the stream is exhausted. An exception in the worker (an unreadable input) is raised by :meth:`take`.
    """

    def __init__(self, stream: TableStream, backlog: int = BACKLOG):
        self.stream = stream
        self.ended = False
        self._queue: queue.Queue = queue.Queue(maxsize=backlog)
        self._relay: StdinRelay | None = None
        self._worker = threading.Thread(target=self._run, name="logsift-watch", daemon=True)

    def __enter__(self) -> Self:
        if _reads_real_stdin(self.stream):
            self._relay = StdinRelay()
        self._worker.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._relay:
            self._relay.close()

    def take(self, timeout: float) -> list[Batch]:
        """Every batch waiting, after blocking up to ``timeout`` seconds for the first one."""
        batches: list[Batch] = []
        try:
            item = self._queue.get(timeout=timeout)
            while True:
                if item is _END:
                    self.ended = True
                    break
                if isinstance(item, BaseException):
                    raise item
                batches.append(item)
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return batches

    def stop(self) -> bool:
        """End standard input now (what was read is still parsed); False when the input cannot be cut
        short."""
        if not self._relay:
            return False
        self._relay.stop()
        return True

    def _run(self) -> None:
        try:
            for batch in self.stream:
                self._queue.put(batch)
        except BaseException as exc:
            self._queue.put(exc)
        else:
            self._queue.put(_END)


class StdinRelay:
    """Copy the real standard input into a pipe that replaces file descriptor 0, until stopped.

    Only the copying thread writes to or closes the pipe, so stopping is race-free: :meth:`stop` wakes it
    through a second pipe and it closes the write end, which the reader sees as the end of input.
    """

    def __init__(self) -> None:
        self._upstream = os.dup(0)
        read_end, self._write_end = os.pipe()
        for fd in (self._upstream, self._write_end):
            widen_pipe(fd)
        os.dup2(read_end, 0)
        os.close(read_end)
        self._wake_read, self._wake_write = os.pipe()
        self._copier = threading.Thread(target=self._copy, name="logsift-stdin", daemon=True)
        self._copier.start()

    def stop(self) -> None:
        os.write(self._wake_write, b"x")

    def close(self) -> None:
        """Stop copying and give file descriptor 0 back its original input.

        A copier still blocked writing (nobody reads the pipe any more) keeps its descriptors: closing them
        under it could let a new file reuse their numbers. It is a daemon thread and ends with the process.
        """
        self.stop()
        self._copier.join(timeout=1.0)
        os.dup2(self._upstream, 0)
        if not self._copier.is_alive():
            for fd in (self._upstream, self._wake_read, self._wake_write):
                os.close(fd)

    def _copy(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._upstream, self._wake_read], [], [])
                if self._wake_read in ready:
                    return
                data = os.read(self._upstream, _READ_BYTES)
                if not data:
                    return
                view = memoryview(data)
                while view:
                    view = view[os.write(self._write_end, view) :]
        except OSError:  # the reader went away: nothing left to copy to
            return
        finally:
            os.close(self._write_end)


def widen_pipe(fd: int) -> None:
    """Let a pipe hold 1 MiB instead of 64 KiB (Linux), so a 50 MB/s input is copied in 50 reads a second,
    not 800: each read and write costs a turn of the interpreter. Not a pipe, or not allowed: as it was."""
    try:
        fcntl.fcntl(fd, _F_SETPIPE_SZ, _READ_BYTES)
    except OSError:
        pass


def _reads_real_stdin(stream: TableStream) -> bool:
    """True when a source is standard input and that is file descriptor 0 (not a test's stand-in)."""
    if not any(source.is_stdin for source in stream.sources):
        return False
    try:
        return sys.stdin.fileno() == 0
    except (AttributeError, ValueError, OSError):
        return False
