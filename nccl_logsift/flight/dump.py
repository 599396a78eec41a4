"""One Flight Recorder dump: recognised by its content, loaded without running anything it holds.

A dump is what ``ProcessGroupNCCL`` writes to ``<TORCH_FR_DUMP_TEMP_FILE><rank>`` on a timeout: a pickle
(``DebugInfoWriter``) or, through ``_dump_nccl_trace_json``, the same dict as JSON. The pickle holds only
dicts, lists, tuples, strings, numbers, booleans and None (``FlightRecorder.cpp`` builds it from
``c10::Dict``/``c10::List`` of those), so the unpickler here refuses every global: a pickle that names a
class or a function (``os.system``, ``builtins.eval``) is refused before anything in it is called.
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nccl_logsift.errors import InputError

SNIFF_BYTES = 4096
# Versions of the dump format this reader knows (FlightRecorder.hpp ``version_val``: "minor when adding
# fields, major when changing existing fields"): 2.0 to 2.10 only added fields, so a newer 2.x is read the
# same way, with a note. 1.x (TraceUtils.h 1.1 to 1.4: ``seq_id``, no p2p ids) is read with a note too.
KNOWN_VERSIONS = tuple(f"2.{minor}" for minor in range(11))
# The key every version writes; a dump also has ``entries`` or ``pg_config`` (1.1 had no pg_config).
REQUIRED_KEYS = ("version",)
# ``profiling_name`` is "<backend>:<op>" ("nccl:all_reduce", "gloo:broadcast", "ncclx:..." on Meta's
# fork); the op alone is what ranks of different backends compare on.
BACKEND_PREFIX = re.compile(r"^(?:nccl2|ncclx|nccl|gloo|xccl|ucc|mpi|custom)\s*:\s*")
_TRAILING_RANK = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?$")


class DumpError(InputError):
    """A file that looks like a Flight Recorder dump and cannot be read as one."""


class _Refused(pickle.UnpicklingError):
    """The pickle names a global: not a dump, and possibly an attack."""


class _RefusingUnpickler(pickle.Unpickler):
    """An unpickler that builds only the built-in containers and scalars pickle encodes by opcode.

    Every class, function or module a pickle names goes through ``find_class``; refusing them all means a
    malicious pickle (a ``__reduce__`` that calls ``os.system``) fails while loading, before any call.
    """

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"refused to load {module}.{name}: a Flight Recorder dump holds only plain data")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("refused a persistent id: a Flight Recorder dump holds only plain data")


@dataclass(frozen=True, slots=True)
class FlightDump:
    """A loaded dump: where it came from, for which global rank, and its top-level values."""

    path: str
    format: str  # "pickle" | "json"
    rank: int | None  # global rank: from the file name's trailing number, a "rank" key, or a log line
    version: str
    comm_lib_version: str | None
    pg_config: dict
    pg_status: dict
    entries: tuple[dict, ...]
    note: str | None = None  # something worth telling (an unknown newer version)


def sniff_format(head: bytes) -> str | None:
    """'pickle' or 'json' when these first bytes of a file look like a dump, else None.

    A pickle of protocol 2+ starts with PROTO (0x80) and its protocol number, then a dict opcode soon after;
    a JSON dump is an object naming ``pg_config`` or ``entries`` near its start. Log text never starts with
    0x80, which is not valid UTF-8 as a first byte.
    """
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    text = head.lstrip()
    if text.startswith(b"{") and (b'"pg_config"' in text or b'"entries"' in text) and b'"version"' in text:
        return "json"
    return None


def sniff_path(path: str | Path) -> str | None:
    """:func:`sniff_format` of a file's first bytes (None when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            return sniff_format(handle.read(SNIFF_BYTES))
    except OSError:
        return None


def rank_from_name(path: str | Path) -> int | None:
    """The global rank PyTorch appended to the dump prefix (``nccl_trace_rank_5`` → 5), as fr_trace reads it
    (``flight_recorder/components/loader.py``: the file name's trailing digits)."""
    match = _TRAILING_RANK.search(Path(path).name)
    return int(match.group(1)) if match else None


def normalise_op(profiling_name: str | None) -> str | None:
    """``nccl:all_reduce`` → ``all_reduce``: the op without the backend that ran it."""
    if profiling_name is None:
        return None
    return BACKEND_PREFIX.sub("", profiling_name).strip()


def load(path: str | Path, rank: int | None = None) -> FlightDump:
    """Read one dump; raise :class:`DumpError` (with the path and what to do) when it is not one."""
    path = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DumpError(f"{path}: cannot read the Flight Recorder dump ({exc.strerror or exc})") from exc
    kind = sniff_format(data[:SNIFF_BYTES])
    if kind == "pickle":
        try:
            raw = _RefusingUnpickler(io.BytesIO(data)).load()
        except _Refused as exc:
            raise DumpError(f"{path}: not loaded: {exc}") from exc
        except Exception as exc:  # a truncated or corrupt pickle raises EOFError, ValueError, ...
            raise DumpError(
                f"{path}: not a readable Flight Recorder pickle ({type(exc).__name__}: {exc})"
            ) from exc
    elif kind == "json":
        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DumpError(f"{path}: not a readable Flight Recorder JSON dump ({exc})") from exc
    else:
        raise DumpError(
            f"{path}: not a Flight Recorder dump (neither a pickle nor a JSON object with pg_config)"
        )
    return _checked(path, kind, raw, rank)


def _checked(path: str, kind: str, raw: Any, rank: int | None) -> FlightDump:
    if not isinstance(raw, dict) or "version" not in raw or not ("entries" in raw or "pg_config" in raw):
        raise DumpError(f"{path}: a {kind} without the keys of a Flight Recorder dump (version, entries)")
    version = str(raw["version"])
    major, _, minor = version.partition(".")
    if major not in ("1", "2") or not minor.isdigit():
        raise DumpError(
            f"{path}: Flight Recorder format {version} is not one this reader knows (2.0 to 2.10, or 1.x)"
        )
    if major == "1":
        note = f"format {version} predates 2.0: one seq_id for collectives and p2p ops"
    else:
        note = None if version in KNOWN_VERSIONS else f"format {version} is newer than 2.10; read as 2.10"
    entries = raw.get("entries") or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise DumpError(f"{path}: its entries are not a list of records")
    if rank is None and isinstance(raw.get("rank"), int):
        rank = raw["rank"]  # control-plane dumps set it (FlightRecorder ``setRank``)
    if rank is None:
        rank = rank_from_name(path)
    return FlightDump(
        path=path,
        format=kind,
        rank=rank,
        version=version,
        # ``nccl_version`` was renamed ``comm_lib_version`` when other backends began to write dumps (2.10).
        comm_lib_version=_text(raw.get("comm_lib_version", raw.get("nccl_version"))),
        pg_config=raw.get("pg_config") if isinstance(raw.get("pg_config"), dict) else {},
        pg_status=raw.get("pg_status") if isinstance(raw.get("pg_status"), dict) else {},
        entries=tuple(entries),
        note=note,
    )


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
