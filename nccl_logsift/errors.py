"""The exceptions nccl-logsift raises, each carrying the exit code the CLI uses.

    LogsiftError                 exit 2 unless stated
    ├── InputError               a path is missing, unreadable, or holds nothing that can be read
    ├── OutputError              an output path or standard output cannot be written (missing directory,
    │                            no permission, disk full, stdout closed)
    └── GrammarError             a grammar file is malformed (carries rustc-style diagnostics)

The library never calls ``sys.exit``; ``cli.main`` maps these to ``Error: ...`` on stderr. Every exit
status of the ``logsift`` command is one of :class:`ExitCode`:

    0    the command ran (also when the reader of its output went away, as under ``| head``)
    1    only under ``--fail-on SEVERITY``: a finding of that severity or worse was found
    2    a usage error, or an input or output the user can fix (any LogsiftError)
    3    an internal error: a bug in logsift; one line on stderr, the traceback under ``--debug``
    130  interrupted (Ctrl-C)
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FAIL_ON = 1
    USAGE = 2
    INTERNAL = 3
    INTERRUPTED = 130


class LogsiftError(Exception):
    """Base class: a problem the user can act on, reported without a traceback."""

    exit_code = ExitCode.USAGE


class InputError(LogsiftError):
    """An input path could not be read at all."""


class OutputError(LogsiftError):
    """An output could not be written: checked before the work starts where it can be, else when writing."""


class GrammarError(LogsiftError):
    """One or more grammar files are invalid."""

    def __init__(self, diagnostics: list[str]):
        self.diagnostics = diagnostics
        super().__init__(f"{len(diagnostics)} grammar problem(s):\n  " + "\n  ".join(diagnostics))
