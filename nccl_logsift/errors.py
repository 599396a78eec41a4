"""The exceptions nccl-logsift raises, each carrying the exit code the CLI uses.

    LogsiftError                 exit 2 unless stated
    ├── InputError               a path is missing, unreadable, or holds nothing that can be read
    └── GrammarError             a grammar file is malformed (carries rustc-style diagnostics)

The library never calls ``sys.exit``; ``cli.main`` maps these to ``Error: ...`` on stderr.
"""

from __future__ import annotations


class LogsiftError(Exception):
    """Base class: a problem the user can act on, reported without a traceback."""

    exit_code = 2


class InputError(LogsiftError):
    """An input path could not be read at all."""


class GrammarError(LogsiftError):
    """One or more grammar files are invalid."""

    def __init__(self, diagnostics: list[str]):
        self.diagnostics = diagnostics
        super().__init__(f"{len(diagnostics)} grammar problem(s):\n  " + "\n  ".join(diagnostics))
