"""Single key presses for ``logsift watch``, read from the controlling terminal without waiting.

watch's standard input is the job's log, so keys cannot come from there: they are read from ``/dev/tty``,
put in cbreak mode (each key arrives as it is pressed, and is not echoed over the view; Ctrl-C still
interrupts) and given back as they were on exit. Without a terminal (a batch job, a pipe to a file, a
system without termios) there are no keys, and nothing else changes.
"""

from __future__ import annotations

import os
from typing import Self

try:
    import termios
    import tty
except ImportError:  # not a POSIX system: no keys
    termios = tty = None  # type: ignore[assignment]

TERMINAL = "/dev/tty"


class Keys:
    """``with Keys() as keys: keys.pressed()``: the keys pressed since the last call, "" when none."""

    def __init__(self, path: str = TERMINAL) -> None:
        self.path = path
        self._fd: int | None = None
        self._saved: list | None = None

    @property
    def available(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> Self:
        if termios is None:
            return self
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        except OSError:
            return self
        try:
            self._saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
        except termios.error:  # not a terminal after all
            os.close(fd)
            return self
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is None:
            return
        try:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
        finally:
            os.close(self._fd)
            self._fd = None

    def pressed(self) -> str:
        if self._fd is None:
            return ""
        try:
            return os.read(self._fd, 64).decode("utf-8", errors="ignore")
        except (BlockingIOError, InterruptedError):
            return ""
        except OSError:  # the terminal went away (a closed ssh session): no more keys
            return ""
