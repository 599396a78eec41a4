"""nccl-logsift: read NCCL, PyTorch and launcher logs and say why a distributed job hung or failed."""

import hashlib
import os
import tempfile
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

# The modules with loops compiled by numba, and the decorator that compiles them (tests/test_compiled.py
# checks the list is complete).
COMPILED_MODULES = ("compiled.py", "keymap.py", "io/split.py", "parse/collscan.py", "parse/calls.py", "resolve/progress.py", "findings/digest.py")


def cache_dir() -> Path:
    """Where logsift keeps what it can rebuild (compiled loops, parsed grammars): $XDG_CACHE_HOME/nccl-logsift."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nccl-logsift"


def _numba_cache_dir() -> None:
    """Keep numba's compiled-code cache in a directory named after the kernels' source.

    numba checks a cached function against its own file only, so a kernel that inlines a helper from
    another module (``keymap.find`` in the digest) would run stale code after that module changed; and
    an installed package's ``__pycache__`` may not be writable. One directory per version of the source
    avoids both. Set NUMBA_CACHE_DIR to choose another place; this runs before numba is imported.
    """
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in COMPILED_MODULES:
        try:
            digest.update((here / name).read_bytes())
        except OSError:
            return
    for root in (cache_dir(), Path(tempfile.gettempdir()) / "nccl-logsift"):
        target = root / f"numba-{digest.hexdigest()[:16]}"
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(target, os.W_OK):
            os.environ["NUMBA_CACHE_DIR"] = str(target)
            return


_numba_cache_dir()
