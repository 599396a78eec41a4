"""Loaded dumps → Arrow tables keyed like the log tables (``rank`` is the global rank).

``flight_recorder`` has one row per entry (a collective, p2p or coalesced op one rank enqueued),
``flight_dumps`` one row per dump file (or per file that failed to load, with its ``problem``), and
``flight_pg_status`` one row per process group of a dump (its last enqueued / started / completed
collective, which survive the ring buffer wrapping).

Fields came in over versions of the format, and a field a dump's version lacks is null here. Format 1.x
(``TraceUtils.h``, 1.1 to 1.4) had one ``seq_id`` where 2.x has ``collective_seq_id`` and ``p2p_seq_id``;
2.7 records the collectives of coalesced groups (fr_trace's ``utils.py``,
``match_coalesced_groups_with_non_p2p``); 2.10 renamed ``nccl_version`` ``comm_lib_version`` and added
``thread_id``/``thread_name`` (research/landscape-2026.md, PyTorch 2.9-2.11). The reader requires none of
the entry fields, so the fields in between (dtypes, ``is_p2p``, ``timeout_ms``) are read when present.
"""

from __future__ import annotations

import ast
from typing import Any

import polars as pl

from nccl_logsift.flight.dump import FlightDump, normalise_op

ENTRY_SCHEMA: dict[str, pl.DataType] = {
    "dump_id": pl.UInt32(),
    "entry": pl.UInt32(),
    "rank": pl.Int64(),
    "record_id": pl.Int64(),
    "pg_id": pl.Int64(),
    "pg_name": pl.String(),
    "pg_desc": pl.String(),
    "collective_seq_id": pl.Int64(),
    "p2p_seq_id": pl.Int64(),
    "op_id": pl.Int64(),
    "profiling_name": pl.String(),
    "op": pl.String(),
    "is_p2p": pl.Boolean(),
    "state": pl.String(),
    "retired": pl.Boolean(),
    "input_sizes": pl.List(pl.List(pl.Int64())),
    "output_sizes": pl.List(pl.List(pl.Int64())),
    "input_dtypes": pl.List(pl.String()),
    "output_dtypes": pl.List(pl.String()),
    "time_created_ns": pl.Int64(),
    "time_discovered_started_ns": pl.Int64(),
    "time_discovered_completed_ns": pl.Int64(),
    "timeout_ms": pl.Int64(),
    "call_site": pl.String(),
}
DUMP_SCHEMA: dict[str, pl.DataType] = {
    "dump_id": pl.UInt32(),
    "path": pl.String(),
    "rank": pl.Int64(),
    "format": pl.String(),
    "version": pl.String(),
    "comm_lib_version": pl.String(),
    "entries": pl.Int64(),
    "first_record_id": pl.Int64(),
    "problem": pl.String(),
}
PG_STATUS_SCHEMA: dict[str, pl.DataType] = {
    "dump_id": pl.UInt32(),
    "rank": pl.Int64(),
    "pg_id": pl.Int64(),
    "pg_name": pl.String(),
    "pg_desc": pl.String(),
    "pg_ranks": pl.List(pl.Int64()),
    "last_enqueued_collective": pl.Int64(),
    "last_started_collective": pl.Int64(),
    "last_completed_collective": pl.Int64(),
}
COLUMN_DOCS = {
    "flight_recorder": {
        "dump_id": "row of flight_dumps this entry came from",
        "entry": "0-based index of the entry in the dump's entries (what evidence cites)",
        "rank": "global rank of the process that wrote the dump",
        "record_id": "the entry's id in the rank's ring buffer (grows by one per op; the oldest are "
        "overwritten)",
        "pg_id": "the process group's local id on this rank (ProcessGroupNCCL uid)",
        "pg_name": "the process group's GUID (its name in pg_config): the same on every member",
        "pg_desc": "the process group's description (default_pg, or what new_group was given)",
        "collective_seq_id": "PyTorch's SeqNum of the collective on the process group (seq_id in format 1.x)",
        "p2p_seq_id": "sequence number of point-to-point ops on the process group",
        "op_id": "sequence number counting the ops inside coalesced groups too",
        "profiling_name": "the op as recorded, with its backend (nccl:all_reduce)",
        "op": "the op without the backend prefix (nccl:, ncclx:, nccl2:, gloo: removed)",
        "is_p2p": "a send/recv entry",
        "state": "scheduled (enqueued), started (running on the GPU) or completed",
        "retired": "the watchdog had retired the work",
        "input_sizes": "shape of each input tensor",
        "output_sizes": "shape of each output tensor",
        "input_dtypes": "dtype of each input tensor (Float, BFloat16, ...)",
        "output_dtypes": "dtype of each output tensor",
        "time_created_ns": "when the op was enqueued (ns since the epoch)",
        "time_discovered_started_ns": "when the watchdog saw it start (null unless timing was enabled)",
        "time_discovered_completed_ns": "when the watchdog saw it complete",
        "timeout_ms": "the process group's timeout for this op",
        "call_site": "innermost frame of the Python stack outside torch (file:line function)",
    },
    "flight_dumps": {
        "dump_id": "row number, referred to by the other flight tables",
        "path": "the dump file",
        "rank": "global rank (file name's trailing number, the dump's rank key, or the log line naming it)",
        "format": "pickle or json",
        "version": "Flight Recorder format version (2.0 to 2.10; 1.x and newer 2.x read with a note)",
        "comm_lib_version": "NCCL (or other library) version the dump records (nccl_version before 2.10)",
        "entries": "entries in the dump",
        "first_record_id": "record_id of the oldest entry: above 0 when the ring buffer wrapped",
        "problem": "why the file could not be read as a dump (its other columns are then null), or a note "
        "on one read anyway",
    },
    "flight_pg_status": {
        "dump_id": "row of flight_dumps",
        "rank": "global rank of the process that wrote the dump",
        "pg_id": "the process group's local id on this rank",
        "pg_name": "the process group's GUID",
        "pg_desc": "the process group's description",
        "pg_ranks": "global ranks of the process group's members",
        "last_enqueued_collective": "SeqNum of the last collective the rank enqueued on the group",
        "last_started_collective": "SeqNum of the last one seen started (-1: timing not enabled)",
        "last_completed_collective": "SeqNum of the last one completed",
    },
    "flight_named": {
        "rank": "global rank of the process whose log line names the file",
        "path": "the file PyTorch said it wrote the rank's dump to (null on a dump_succeeded line)",
        "source_id": "the input holding the line",
        "line_no": "the line (1-based)",
        "event": "dump_writing ('dumping nccl trace to') or dump_written ('Finished writing NCCLPG debug "
        "info to')",
    },
}
NAMED_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int64(),
    "path": pl.String(),
    "source_id": pl.UInt16(),
    "line_no": pl.UInt32(),
    "event": pl.String(),
}
TABLES = {
    "flight_recorder": "one row per Flight Recorder entry: an op a rank enqueued, as its dump recorded it",
    "flight_dumps": "one row per Flight Recorder dump read (or that could not be read, with its problem)",
    "flight_pg_status": "one row per process group per dump: its last enqueued, started and completed "
    "collective",
    "flight_named": "one row per log line that names the file a rank dumped its Flight Recorder to, or "
    "says the dump was written",
}
SCHEMAS = {
    "flight_recorder": ENTRY_SCHEMA,
    "flight_dumps": DUMP_SCHEMA,
    "flight_pg_status": PG_STATUS_SCHEMA,
    "flight_named": NAMED_SCHEMA,
}


def table_docs() -> list[str]:
    """Markdown sections for the flight tables, in the form of parse/schema.py's ``table_docs``."""
    out = []
    for name, what in TABLES.items():
        extra = {"host": pl.String(), "pid": pl.Int64()} if name == "flight_dumps" else {}
        out += [f"## `{name}`", "", what, "", "| column | type | meaning |", "|---|---|---|"]
        docs = {
            **COLUMN_DOCS[name],
            "host": "host of the rank's process, from its logs",
            "pid": "pid of the rank's process, from its logs",
        }
        out += [f"| `{c}` | {t} | {docs.get(c, '')} |" for c, t in {**SCHEMAS[name], **extra}.items()]
        out.append("")
    return out


def tables(dumps: list[FlightDump], problems: list[tuple[str, int | None, str]]) -> dict[str, pl.DataFrame]:
    """The three tables of these dumps; ``problems`` are (path, rank, why) of files that did not load."""
    entries: list[dict[str, Any]] = []
    files: list[dict[str, Any]] = []
    status: list[dict[str, Any]] = []
    for dump_id, dump in enumerate(dumps):
        names = _pg_names(dump)
        first = dump.entries[0].get("record_id") if dump.entries else None
        files.append(
            {
                "dump_id": dump_id,
                "path": dump.path,
                "rank": dump.rank,
                "format": dump.format,
                "version": dump.version,
                "comm_lib_version": dump.comm_lib_version,
                "entries": len(dump.entries),
                "first_record_id": _int(first),
                "problem": dump.note,
            }
        )
        entries.extend(_entry_row(dump_id, index, dump.rank, e) for index, e in enumerate(dump.entries))
        status.extend(_status_rows(dump_id, dump, names))
    for path, rank, why in problems:
        files.append(
            {
                "dump_id": len(files),
                "path": path,
                "rank": rank,
                "format": None,
                "version": None,
                "comm_lib_version": None,
                "entries": None,
                "first_record_id": None,
                "problem": why,
            }
        )
    return {
        "flight_recorder": pl.DataFrame(entries, schema=ENTRY_SCHEMA, strict=False),
        "flight_dumps": pl.DataFrame(files, schema=DUMP_SCHEMA, strict=False),
        "flight_pg_status": pl.DataFrame(status, schema=PG_STATUS_SCHEMA, strict=False),
    }


def _entry_row(dump_id: int, index: int, rank: int | None, e: dict) -> dict[str, Any]:
    group = e.get("process_group") or (None, None)
    seq = e.get("collective_seq_id", e.get("seq_id"))
    return {
        "dump_id": dump_id,
        "entry": index,
        "rank": rank,
        "record_id": _int(e.get("record_id")),
        "pg_id": _int(e.get("pg_id")),
        "pg_name": _str(group[0] if len(group) > 0 else None),
        "pg_desc": _str(group[1] if len(group) > 1 else None),
        "collective_seq_id": _int(seq),
        "p2p_seq_id": _int(e.get("p2p_seq_id")),
        "op_id": _int(e.get("op_id")),
        "profiling_name": _str(e.get("profiling_name")),
        "op": normalise_op(_str(e.get("profiling_name"))),
        "is_p2p": e.get("is_p2p"),
        "state": _str(e.get("state")),
        "retired": e.get("retired"),
        "input_sizes": _shapes(e.get("input_sizes")),
        "output_sizes": _shapes(e.get("output_sizes")),
        "input_dtypes": _strs(e.get("input_dtypes")),
        "output_dtypes": _strs(e.get("output_dtypes")),
        "time_created_ns": _int(e.get("time_created_ns")),
        "time_discovered_started_ns": _int(e.get("time_discovered_started_ns")),
        "time_discovered_completed_ns": _int(e.get("time_discovered_completed_ns")),
        "timeout_ms": _int(e.get("timeout_ms")),
        "call_site": _call_site(e.get("frames")),
    }


def _pg_names(dump: FlightDump) -> dict[str, tuple[str | None, str | None]]:
    """pg_status is keyed by the local pg id, pg_config by the GUID: the entries link the two."""
    names: dict[str, tuple[str | None, str | None]] = {}
    for e in dump.entries:
        group = e.get("process_group") or ()
        if e.get("pg_id") is not None and len(group) >= 2:
            names.setdefault(str(e["pg_id"]), (_str(group[0]), _str(group[1])))
    return names


def _status_rows(dump_id: int, dump: FlightDump, names: dict) -> list[dict[str, Any]]:
    rows = []
    for key, values in dump.pg_status.items():
        if not isinstance(values, dict):
            continue
        name, desc = names.get(str(key), (None, None))
        if name is None and str(key) == "0":  # the default group is the first on every rank
            name = "0"
        config = dump.pg_config.get(name, {}) if name is not None else {}
        rows.append(
            {
                "dump_id": dump_id,
                "rank": dump.rank,
                "pg_id": int(key) if str(key).isdigit() else None,
                "pg_name": name,
                "pg_desc": desc or _str(config.get("desc")),
                "pg_ranks": _ranks(config.get("ranks")),
                "last_enqueued_collective": _int(values.get("last_enqueued_collective")),
                "last_started_collective": _int(values.get("last_started_collective")),
                "last_completed_collective": _int(values.get("last_completed_collective")),
            }
        )
    return rows


def _ranks(value: Any) -> list[int] | None:
    # pg_config writes the member list as the text "[0, 1, 2, 3]" (builder.py notes the same).
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)) and all(isinstance(r, int) for r in value):
        return list(value)
    return None


def _call_site(frames: Any) -> str | None:
    if not isinstance(frames, list):
        return None
    for frame in frames:
        if isinstance(frame, dict) and "/torch/" not in str(frame.get("filename", "")):
            return f"{frame.get('filename')}:{frame.get('line')} {frame.get('name')}"
    return None


def _shapes(value: Any) -> list[list[int]] | None:
    if not isinstance(value, (list, tuple)):
        return None
    return [[int(d) for d in shape] if isinstance(shape, (list, tuple)) else [] for shape in value]


def _strs(value: Any) -> list[str] | None:
    return [str(v) for v in value] if isinstance(value, (list, tuple)) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
