"""nccl-logsift: read NCCL, PyTorch and launcher logs and say why a distributed job hung or failed."""

import os
from pathlib import Path

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed metadata on first use: importlib.metadata costs ~20 ms of
    every run, which most never need."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version("nccl-logsift")
    except PackageNotFoundError:  # running from a source tree that was never installed
        value = "0.0.0+source"
    globals()["__version__"] = value
    return value


def cache_dir() -> Path:
    """Where logsift keeps what it can rebuild (parsed grammars): $XDG_CACHE_HOME/nccl-logsift."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nccl-logsift"
