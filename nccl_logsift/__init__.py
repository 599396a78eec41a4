"""nccl-logsift: read NCCL, PyTorch and launcher logs and say why a distributed job hung or failed.

The library's entry point is :func:`analyze`, which returns a frozen :class:`Report`::

    from nccl_logsift import analyze
    report = analyze(["job.log"])
    for finding in report.findings:
        print(finding.severity.label, finding.code, finding.title)

The names below are imported on first use, so ``import nccl_logsift`` costs nothing the CLI does not need.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nccl_logsift.errors import GrammarError, InputError, LogsiftError
    from nccl_logsift.model import Diagnosis, Evidence, Finding, Kind, RankState, Report, Severity
    from nccl_logsift.pipeline import ParseOptions, analyze

__all__ = [
    "Diagnosis",
    "Evidence",
    "Finding",
    "GrammarError",
    "InputError",
    "Kind",
    "LogsiftError",
    "ParseOptions",
    "RankState",
    "Report",
    "Severity",
    "__version__",
    "analyze",
]
_PUBLIC = {
    "analyze": "nccl_logsift.pipeline",
    "ParseOptions": "nccl_logsift.pipeline",
    "Report": "nccl_logsift.model",
    "Diagnosis": "nccl_logsift.model",
    "Finding": "nccl_logsift.model",
    "Evidence": "nccl_logsift.model",
    "RankState": "nccl_logsift.model",
    "Severity": "nccl_logsift.model",
    "Kind": "nccl_logsift.model",
    "LogsiftError": "nccl_logsift.errors",
    "InputError": "nccl_logsift.errors",
    "GrammarError": "nccl_logsift.errors",
}


def __getattr__(name: str) -> Any:
    """The public names, imported when first asked for; ``__version__`` from the installed metadata (which
    costs ~20 ms of every run that asks)."""
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("nccl-logsift")
        except PackageNotFoundError:  # running from a source tree that was never installed
            value = "0.0.0+source"
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def cache_dir() -> Path:
    """Where logsift keeps what it can rebuild (parsed grammars): $XDG_CACHE_HOME/nccl-logsift."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nccl-logsift"
