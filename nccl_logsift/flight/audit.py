"""The dump audit: whose Flight Recorder dumps were read, which ranks should have dumped, where dumps went.

A rank is expected to dump when its log says it was asked to (a timeout on this rank, a peer's signal
through the TCPStore, a dump under way), and every rank of the job is expected once any rank's dump was
read or a rank observed a peer's signal: PyTorch broadcasts the dump signal to all ranks
(``ProcessGroupNCCL.cpp``, "Observed flight recorder dump signal from another rank via TCPStore").
"""

from __future__ import annotations

import os

import polars as pl

from nccl_logsift.flight.discover import SIGNAL_EVENTS
from nccl_logsift.model import DumpAudit, DumpFile, Evidence, NamedDump
from nccl_logsift.resolve.job import Job


def signalled_ranks(job: Job) -> tuple[set[int], bool]:
    """Ranks whose logs say they were asked to dump, and whether any observed a peer's signal (broadcast)."""
    torch = job.table("torch")
    if torch.is_empty() or "event" not in torch.columns:
        return set(), False
    rows = torch.filter(pl.col("event").is_in(SIGNAL_EVENTS))
    rank_columns = [
        pl.col(c).cast(pl.Int64) for c in ("global_rank", "torch_rank", "pg_rank") if c in rows.columns
    ]
    ranks = (
        set(rows.select(pl.coalesce(*rank_columns)).to_series().drop_nulls().to_list())
        if rank_columns
        else set()
    )
    return ranks, bool(rows["event"].is_in(["dump_observed"]).any())


def audit(job: Job) -> DumpAudit:
    files = job.table("flight_dumps")
    file_rows = [] if files.is_empty() else files.sort("rank", "path", nulls_last=True).iter_rows(named=True)
    listed = tuple(
        DumpFile(
            r["rank"], r["path"], r["entries"], r["version"], r["problem"] if r["format"] is None else None
        )
        for r in file_rows
    )
    dumped = sorted({f.rank for f in listed if f.problem is None and f.rank is not None})
    asked, broadcast = signalled_ranks(job)
    known = (
        set(job.processes["global_rank"].drop_nulls().to_list()) if not job.processes.is_empty() else set()
    )
    known |= set(job.torch_ranks["rank"].to_list())
    written = _written(job)
    expected = set(asked) | set(dumped) | written
    if broadcast or dumped:
        expected |= known
    missing = sorted(expected - set(dumped))
    read_paths = {os.path.abspath(f.path) for f in listed if f.problem is None}
    named = _named(job, read_paths)
    summary = _summary(dumped, sorted(expected), missing, listed, named, asked)
    lost = sorted(written - set(dumped))
    if lost:
        summary += f" The logs say rank(s) {_list(lost)} finished writing a dump not among these inputs."
    return DumpAudit(
        tuple(dumped), tuple(sorted(expected)), tuple(missing), tuple(sorted(written)), listed, named, summary
    )


def _written(job: Job) -> set[int]:
    named = job.table("flight_named")
    if named.is_empty():
        return set()
    return set(named.filter(pl.col("event") == "dump_succeeded")["rank"].drop_nulls().to_list())


def _named(job: Job, read_paths: set[str]) -> tuple[NamedDump, ...]:
    named = job.table("flight_named")
    named = named.filter(pl.col("path").is_not_null()) if not named.is_empty() else named
    if named.is_empty():
        return ()
    lines = {
        (e.path, e.line): e for e in job.evidence(named.select("source_id", "line_no"), limit=named.height)
    }
    out = []
    for row in named.sort("rank", "line_no", nulls_last=True).iter_rows(named=True):
        path = job.paths[row["source_id"]] if row["source_id"] < len(job.paths) else "?"
        line = lines.get((path, row["line_no"]), Evidence(path, row["line_no"], ""))
        out.append(NamedDump(row["rank"], row["path"], os.path.abspath(row["path"]) in read_paths, line))
    return tuple(out)


def _list(ranks) -> str:
    ranks = list(ranks)
    return ", ".join(map(str, ranks[:16])) + (f" and {len(ranks) - 16} more" if len(ranks) > 16 else "")


def _summary(dumped, expected, missing, files, named, asked) -> str:
    parts = []
    if dumped:
        parts.append(
            f"Flight Recorder dumps read for {len(dumped)} of {len(expected)} expected rank(s) "
            f"({_list(dumped)})"
        )
    elif expected:
        parts.append(
            f"No Flight Recorder dump read, though {len(expected)} rank(s) were asked to dump "
            f"({_list(expected)})"
        )
    else:
        parts.append("No Flight Recorder dump given or found, and no log line says one was written")
    if missing and dumped:
        parts.append(
            f"missing: rank(s) {_list(missing)}"
            + (" (their logs say they were asked to dump)" if set(missing) & asked else "")
        )
    bad = [f for f in files if f.problem]
    if bad:
        parts.append(f"{len(bad)} file(s) could not be read as dumps")
    if named:
        unread = [n for n in named if not n.read]
        where = sorted({os.path.dirname(n.path) or "." for n in named})
        parts.append(
            f"logs say dumps went to {', '.join(where[:3])}"
            + (
                f"; {len(unread)} of those were not read here (pass them, or the folder, as inputs)"
                if unread
                else ""
            )
        )
    elif expected:
        parts.append("no log line says where the dumps went (PyTorch prints it at INFO)")
    return "; ".join(parts) + "."
