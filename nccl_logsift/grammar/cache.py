"""A grammar directory's parsed set, kept on disk between runs.

Reading the grammar files with tomllib is ~30 ms of every command that parses logs (and of every
worker process), most of a short run's set-up; unpickling the parsed set takes ~4 ms. One file per
grammar directory is kept in ``$XDG_CACHE_HOME/nccl-logsift`` (``~/.cache`` by default), headed by a
digest of every grammar file's path and bytes and of the code that reads and checks them, so an edited,
added or removed grammar, or a new version of the reader, is read afresh and the file overwritten.
Only sets that passed every check are kept. When the cache cannot be read or written, the grammars
are parsed as if it did not exist; the user's own cache directory is the only place tried, since a
pickle is code to whoever can write it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from nccl_logsift import cache_dir

if TYPE_CHECKING:
    from nccl_logsift.grammar.registry import GrammarSet

log = logging.getLogger(__name__)

# The modules whose code decides what a parsed set holds and whether it is accepted.
_READER = tuple(Path(__file__).with_name(name) for name in ("schema.py", "registry.py", "cache.py"))
_DIGEST_BYTES = hashlib.sha256().digest_size


def cached_grammars(root: Path, paths: Sequence[Path], parse: Callable[[], GrammarSet]) -> GrammarSet:
    """The set ``parse`` builds from ``paths`` under ``root``, from the cache when it holds that set."""
    try:
        stamp = _stamp(paths)
        file = cache_dir() / f"grammars-{hashlib.sha256(str(root).encode()).hexdigest()[:16]}.pickle"
    except (OSError, RuntimeError) as exc:  # an unreadable file (parse reports it), or no home directory
        log.debug("grammar cache not used: %s", exc)
        return parse()
    grammars = _read(file, stamp)
    if grammars is None:
        grammars = parse()  # a GrammarError propagates, and nothing is kept
        _write(file, stamp, grammars)
    return grammars


def _stamp(paths: Sequence[Path]) -> bytes:
    digest = hashlib.sha256()
    for path in (*_READER, *paths):
        data = path.read_bytes()
        digest.update(f"{path}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.digest()


def _read(file: Path, stamp: bytes) -> GrammarSet | None:
    try:
        with file.open("rb") as handle:
            if handle.read(_DIGEST_BYTES) != stamp:
                return None
            return pickle.load(handle)
    except FileNotFoundError:
        return None
    except Exception as exc:  # unreadable or damaged: whatever unpickling raised, parse afresh
        log.debug("grammar cache %s not read: %s", file, exc)
        return None


def _write(file: Path, stamp: bytes, grammars: GrammarSet) -> None:
    """Replace ``file`` atomically, so that a process reading it meanwhile sees the old set or the new."""
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        # Kept open past this block: it is written, then renamed into place.
        handle = tempfile.NamedTemporaryFile(dir=file.parent, prefix=file.name, suffix=".tmp", delete=False)  # noqa: SIM115
    except OSError as exc:
        log.debug("grammar cache %s not written: %s", file, exc)
        return
    try:
        with handle:
            handle.write(stamp)
            pickle.dump(grammars, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(handle.name, file)
    except OSError as exc:
        log.debug("grammar cache %s not written: %s", file, exc)
        Path(handle.name).unlink(missing_ok=True)
