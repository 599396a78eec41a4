"""What a running job is doing, batch by batch: how far each rank got, who stalled, which WARNs appeared.

:class:`LiveState` keeps one row per (communicator, rank) with the last collective that rank logged and
the wall-clock time its position last advanced. Each batch is folded into that table with polars
expressions over the batch, so the work per batch grows with the batch and not with the job; the rules
of ``analyze`` are not re-run. Stalls are judged on the small table whenever :meth:`LiveState.check` is
called. The caller calls it on a timer, because a stalled job writes nothing that could trigger it.

Positions are those ``analyze`` compares (findings/progress.py ``positioned``): the opCount where it
rose on every call of every member of a communicator, else the parser's per-instance ``ordinal``
(opCount does not count calls in 2.8 and stays 0 on single-node communicators from 2.27, grammar §5.2).

Events are early warnings: the verdict at the end (``pipeline.Analysis``) runs every rule on the whole job.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import polars as pl

from nccl_logsift.findings import rule_for, vocabulary
from nccl_logsift.findings.vocabulary import BENIGN_KINDS
from nccl_logsift.model import Evidence, Finding, Kind, Severity
from nccl_logsift.parse.calls import NO_RANK, Calls, nullable
from nccl_logsift.pipeline import Batch

KEY = ["comm_uid", "rank"]
STDIO_BLOCK = 4096  # bytes of a C stdio buffer on a pipe or file (glibc BUFSIZ)
BUFFERED_FROM = (2, 13, 4)  # the first NCCL that stops flushing stdout after each line
LINE_KEY = ["source_id", "line_no", "part"]
MEMBER_SCHEMA = {
    "comm_uid": pl.String,
    "rank": pl.Int64,
    "host": pl.String,
    "pid": pl.Int64,
    "nranks": pl.Int64,
    "ordinal": pl.Int64,
    "opcount": pl.Int64,
    "rising": pl.Boolean,
    "calls": pl.Int64,
    "op": pl.String,
    "path": pl.String,
    "line_no": pl.Int64,
    "text": pl.String,
    "advanced_at": pl.Float64,
}
PROCESS_SCHEMA = {
    "host": pl.String,
    "pid": pl.Int64,
    "comm_rank": pl.Int64,
    "nranks": pl.Int64,
    "cuda_dev": pl.Int64,
    "label": pl.Int64,
}
STALL_CODE = "LS101"
RECENT_EVENTS = 50
# What _last_calls gives per member (then its line's text and path).
_LAST_SCHEMA = {
    "comm_uid": pl.String,
    "rank": pl.Int64,
    "host": pl.String,
    "pid": pl.Int64,
    "ordinal": pl.Int64,
    "opcount": pl.Int64,
    "op": pl.String,
    "source_id": pl.UInt16,
    "line_no": pl.UInt32,
    "part": pl.UInt8,
    "nranks": pl.Int64,
    "first_opcount": pl.Int64,
    "rising": pl.Boolean,
    "calls": pl.UInt32,
}


class EventKind(StrEnum):
    """A live finding (a stall or a WARN), or a stalled rank that advanced again."""

    FINDING = "finding"
    RECOVERED = "recovered"


@dataclass(frozen=True, slots=True)
class LiveEvent:
    kind: EventKind
    at: float  # seconds since the watch started
    finding: Finding  # for RECOVERED: the stall finding that ended
    note: str = ""  # for RECOVERED: where the rank is now


@dataclass(frozen=True, slots=True)
class RankRow:
    """One rank of one communicator as the live table shows it."""

    comm: str
    rank: int | None  # global rank, when known
    comm_rank: int
    host: str | None
    pid: int | None
    op: str | None
    call: int  # 1-based number of its last call (the position analyze prints)
    behind: int  # calls behind the front of its communicator
    idle: float  # seconds since its position last advanced
    stalled: bool


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    """Everything the live view shows, computed once per refresh (renderers only lay it out)."""

    elapsed: float
    bytes_read: int
    ranks_seen: int
    world_size: int | None
    calls_per_second: float
    stall_after: float
    block_buffered: bool  # NCCL writes its lines in 4 KiB blocks: lags shorter than a block are not stalls
    rows: tuple[RankRow, ...]  # the most important first
    more_rows: int  # rows left out of ``rows``
    events: tuple[LiveEvent, ...]  # the most recent last


@dataclass(frozen=True, slots=True)
class _Episode:
    ordinal: int  # where the rank stood when the stall was reported
    finding: Finding


class LiveState:
    """Per-rank progress of a running job, fed with :meth:`add` and judged with :meth:`check`.

    ``clock`` gives wall-clock seconds (``time.monotonic`` by default); tests pass a fake one.
    """

    def __init__(
        self, stall_after: float, clock: Callable[[], float] = time.monotonic, rate_window: float = 5.0
    ):
        self.stall_after = stall_after
        self._clock = clock
        self._started = clock()
        self._rate_window = rate_window
        self._members = pl.DataFrame(schema=MEMBER_SCHEMA)
        self._processes = pl.DataFrame(schema=PROCESS_SCHEMA)
        self._calls: deque[tuple[float, int]] = deque()
        self._episodes: dict[tuple[str, int], _Episode] = {}
        self._warn_signatures: set[str] = set()
        self._block_buffered = False  # NCCL's own lines reach the stream in 4 KiB blocks (see _judged)
        self._pending: list[LiveEvent] = []
        self._recent: deque[LiveEvent] = deque(maxlen=RECENT_EVENTS)
        self.bytes_read = 0

    # ----------------------------------------------------------------------------------------- input
    def add(self, batch: Batch) -> None:
        """Fold one batch in: progress per rank, the process → rank map, the call rate, new WARNs."""
        now = self._clock()
        tables = batch.tables
        self.bytes_read = batch.bytes_read
        self._block_buffered = self._block_buffered or _block_buffered(tables["versions"])
        last = _last_calls(batch.calls, tables["lines"], batch.source.path)
        self._processes = _fold_processes(self._processes, tables, last)
        if last.height:
            self._members = _fold_calls(self._members, last, now)
        self._calls.append((now, len(batch.calls)))
        self._pending.extend(self._warn_events(tables, batch.source.path, now))

    # ---------------------------------------------------------------------------------------- output
    def warnings(self) -> list[LiveEvent]:
        """The WARN findings added since they were last asked for: cheap enough to ask after every batch."""
        events, self._pending = self._pending, []
        self._recent.extend(events)
        return events

    def check(self) -> list[LiveEvent]:
        """The WARN findings added meanwhile, and the stalls that began or ended by now (call on a timer)."""
        events = self.warnings()
        stalls = self._stall_events(self._clock())
        self._recent.extend(stalls)
        return events + stalls

    def snapshot(self, max_rows: int = 200) -> LiveSnapshot:
        """The numbers and rows of the live view: stalled and lagging ranks first, at most ``max_rows``."""
        now = self._clock()
        judged = self._judged(now).sort(
            "stalled", "behind", "idle", "comm_uid", "rank", descending=[True, True, True, False, False]
        )
        rows = tuple(_rank_row(r) for r in judged.head(max_rows).iter_rows(named=True))
        world = self._processes["nranks"].max()
        return LiveSnapshot(
            elapsed=now - self._started,
            bytes_read=self.bytes_read,
            ranks_seen=self._processes.height,
            world_size=int(world) if world is not None else None,
            calls_per_second=self._rate(now),
            stall_after=self.stall_after,
            block_buffered=self._block_buffered,
            rows=rows,
            more_rows=max(0, judged.height - len(rows)),
            events=tuple(self._recent),
        )

    # ---------------------------------------------------------------------------------------- stalls
    def _judged(self, now: float) -> pl.DataFrame:
        """Members with their position, the front of their communicator, idle time and the stall verdict."""
        members = self._members
        use_opcount = pl.col("rising").all().over("comm_uid") & (pl.col("calls").max().over("comm_uid") > 1)
        members = members.with_columns(position=pl.when(use_opcount).then("opcount").otherwise("ordinal"))
        members = members.with_columns(front=pl.col("position").max().over("comm_uid"))
        judged = members.with_columns(
            behind=pl.col("front") - pl.col("position"),
            idle=pl.lit(now) - pl.col("advanced_at"),
            at_front=(pl.col("position") == pl.col("front")).sum().over("comm_uid"),
            size=pl.coalesce(pl.col("nranks").max().over("comm_uid"), pl.len().over("comm_uid")),
        ).with_columns(
            stalled=(pl.col("behind") > self._hidden_calls()) & (pl.col("idle") > self.stall_after)
        )
        return _with_global_ranks(judged, self._processes)

    def _hidden_calls(self) -> pl.Expr:
        """How many calls a member's stdio buffer may still hold, unseen. From 2.13.4 NCCL no longer flushes
        stdout after each line, so a pipe receives each process's lines in 4 KiB blocks (nccl-log-grammar.md
        §1.6, §9.2): a rank may look a block behind its peers while it is not, and catch up at its next
        flush. Only a lag longer than a block of its own lines is a stall; a shorter one is not knowable
        live."""
        if not self._block_buffered:
            return pl.lit(0)
        # Rounded up, plus the line that may straddle the block's end.
        line = (pl.col("text").str.len_bytes().fill_null(0) + 1).clip(lower_bound=1)
        return (pl.lit(STDIO_BLOCK) + line - 1) // line + 1

    def _stall_events(self, now: float) -> list[LiveEvent]:
        at = now - self._started
        judged = self._judged(now)
        events = [self._recovery(row, at) for row in self._recovered(judged).iter_rows(named=True)]
        for row in judged.filter("stalled").iter_rows(named=True):
            key = (row["comm_uid"], row["rank"])
            if key not in self._episodes:
                front = judged.filter(
                    (pl.col("comm_uid") == row["comm_uid"]) & (pl.col("position") == row["front"])
                )
                finding = _stall_finding(row, front.sort("rank").row(0, named=True))
                self._episodes[key] = _Episode(row["ordinal"], finding)
                events.append(LiveEvent(EventKind.FINDING, at, finding))
        return events

    def _recovered(self, judged: pl.DataFrame) -> pl.DataFrame:
        """Members of an open stall episode whose position advanced since it was reported."""
        if not self._episodes:
            return judged.clear()
        open_ = pl.DataFrame(
            [(uid, rank, e.ordinal) for (uid, rank), e in self._episodes.items()],
            schema={"comm_uid": pl.String, "rank": pl.Int64, "ordinal_reported": pl.Int64},
            orient="row",
        )
        return judged.join(open_, on=KEY).filter(pl.col("ordinal") > pl.col("ordinal_reported"))

    def _recovery(self, row: dict, at: float) -> LiveEvent:
        episode = self._episodes.pop((row["comm_uid"], row["rank"]))
        note = (
            f"{_who(row)} is advancing again: last call #{row['position'] + 1} ({row['op']}) "
            f"on communicator {row['comm_uid']}"
        )
        return LiveEvent(EventKind.RECOVERED, at, episode.finding, note)

    def _rate(self, now: float) -> float:
        """Collectives per second over the last ``rate_window`` seconds (or since the start, if shorter)."""
        while self._calls and self._calls[0][0] < now - self._rate_window:
            self._calls.popleft()
        span = min(self._rate_window, now - self._started)
        return sum(n for _, n in self._calls) / span if span > 0 else 0.0

    # ------------------------------------------------------------------------------------------ WARNs
    def _warn_events(self, tables: dict[str, pl.DataFrame], path: str, now: float) -> list[LiveEvent]:
        """One finding per new kind of WARN (numbers masked), the first time any rank prints it."""
        rows = _warn_rows(tables)
        if rows.is_empty():
            return []
        rows = rows.filter(~pl.col("sig").is_in(list(self._warn_signatures)))
        self._warn_signatures.update(rows["sig"].to_list())
        rows = _with_global_ranks(rows, self._processes)
        at = now - self._started
        return [LiveEvent(EventKind.FINDING, at, _warn_finding(r, path)) for r in rows.iter_rows(named=True)]


# --------------------------------------------------------------------------------------- batch folds
def _last_calls(calls: Calls, lines: pl.DataFrame, path: str) -> pl.DataFrame:
    """Each (comm_uid, rank)'s last call in the batch (its highest ordinal; the first such call), its line,
    and whether its opCount rose on every call.

    Found on the calls' arrays, and rows are built for those last calls only: building every call's row
    and grouping them took most of ``watch``'s time (~0.2 of a core at 50 MB/s).
    """
    c = calls.columns
    member = np.flatnonzero((c["uid"] >= 0) & (c["rank"] != NO_RANK)) if len(calls) else np.zeros(0, np.int64)
    if not len(member):
        return pl.DataFrame(schema=_LAST_SCHEMA)
    uid, rank, ordinal = c["uid"][member], c["rank"][member], c["ordinal"][member]
    # By member, then ordinal; among calls of one ordinal, in line order (the sort is stable).
    order = np.lexsort((ordinal, rank, uid))
    uid, rank, ordinal = uid[order], rank[order], ordinal[order]
    at = member[order]  # each sorted call's place in the batch
    n = len(order)
    starts = np.flatnonzero(np.r_[True, (uid[1:] != uid[:-1]) | (rank[1:] != rank[:-1])])
    ends = np.r_[starts[1:], n]
    # The first call of the highest ordinal: where the group's last run of equal ordinals begins.
    run = np.r_[True, (ordinal[1:] != ordinal[:-1])]
    run[starts] = True
    run_start = np.maximum.accumulate(np.where(run, np.arange(n), 0))
    latest, earliest = at[run_start[ends - 1]], at[starts]
    opcount, has_opcount = c["opcount"][at], c["has_opcount"][at]
    # Rising: every step from one call to the next of the same member (in ordinal order) increases opCount.
    step_ok = np.r_[opcount[1:] > opcount[:-1], True]
    step_ok[ends - 1] = True
    rising = np.logical_and.reduceat(step_ok & has_opcount, starts)
    nranks = np.maximum.reduceat(c["nranks"][at], starts)
    first = c["opcount"][earliest]
    # The rows of the last calls, in line order; the members' aggregates follow the same order.
    by_line = np.argsort(latest, kind="stable")
    keep = np.zeros(len(calls), dtype=bool)
    keep[latest] = True
    rows = calls.take(keep).frame()
    nranks, first, first_known = nranks[by_line], first[by_line], c["has_opcount"][earliest][by_line]
    aggregates = pl.DataFrame(
        [
            nullable("nranks", nranks, nranks == 0),  # 0: no nranks on any of the member's lines
            nullable("first_opcount", first, ~first_known),
            pl.Series("rising", rising[by_line], dtype=pl.Boolean),
            pl.Series("calls", (ends - starts)[by_line], dtype=pl.UInt32),
        ]
    )
    last = pl.concat(
        [rows.select(*KEY, "host", "pid", "ordinal", "opcount", "op", *LINE_KEY), aggregates],
        how="horizontal",
    )
    if "text" in rows.columns:  # calls of an input that cannot be read again keep their line's text
        return last.with_columns(rows["text"], path=pl.lit(path))
    return _with_text(last, lines).with_columns(path=pl.lit(path))


def _fold_calls(members: pl.DataFrame, last: pl.DataFrame, now: float) -> pl.DataFrame:
    """Merge a batch's last calls into the member table; a member advanced when its ordinal grew."""
    new = last.select(*KEY, *(pl.col(c).alias(f"{c}_new") for c in last.columns if c not in KEY))
    merged = members.join(new, on=KEY, how="full", coalesce=True)
    seen, known = pl.col("ordinal_new").is_not_null(), pl.col("ordinal").is_not_null()
    rising = (
        pl.when(~seen)
        .then(pl.col("rising"))
        .when(~known)
        .then(pl.col("rising_new") & (pl.col("first_opcount_new") <= 1))
        .otherwise(
            pl.col("rising") & pl.col("rising_new") & (pl.col("first_opcount_new") > pl.col("opcount"))
        )
    )
    kept = ("host", "pid", "nranks", "ordinal", "opcount", "op", "path", "line_no", "text")
    return merged.with_columns(
        advanced_at=pl.when(seen & (~known | (pl.col("ordinal_new") > pl.col("ordinal"))))
        .then(pl.lit(now))
        .otherwise("advanced_at"),
        rising=rising,
        calls=pl.col("calls").fill_null(0) + pl.col("calls_new").fill_null(0),
        **{c: pl.coalesce(f"{c}_new", c) for c in kept},
    ).select(*(pl.col(c).cast(t) for c, t in MEMBER_SCHEMA.items()))


def _fold_processes(
    processes: pl.DataFrame, tables: dict[str, pl.DataFrame], last: pl.DataFrame
) -> pl.DataFrame:
    """Every process seen (in Init lines, labelled lines, or ``last``: the batch's callers), with its rank in
    the largest communicator it joined and any launcher label."""
    comms, lines = tables["comms"], tables["lines"]
    if comms.is_empty() and lines.is_empty() and _known(processes, last):  # a running job's usual batch
        return processes
    comms = comms.filter(
        pl.col("host").is_not_null() & pl.col("pid").is_not_null() & pl.col("rank").is_not_null()
    )
    label = pl.coalesce(pl.col("torch_rank"), pl.col("mpi_rank"), pl.col("task"))
    found = [
        comms.select("host", "pid", comm_rank="rank", nranks="nranks", cuda_dev="cuda_dev"),
        lines.filter(label.is_not_null() & pl.col("host").is_not_null() & pl.col("pid").is_not_null())
        .select("host", "pid", label=label)
        .unique(["host", "pid"]),
        last.select("host", "pid"),
    ]
    found = [f for f in found if f.height]
    if not found:
        return processes
    merged = pl.concat([processes, *found], how="diagonal_relaxed")
    per_process = merged.group_by("host", "pid", maintain_order=True).agg(
        nranks=pl.col("nranks").max(),
        process_dev=pl.col("cuda_dev").drop_nulls().first(),
        label=pl.col("label").drop_nulls().first(),
    )
    # A row per rank the process holds in its largest communicator: one, unless it drives several GPUs.
    ranks = (
        merged.filter(
            (pl.col("nranks") == pl.col("nranks").max().over("host", "pid"))
            & pl.col("comm_rank").is_not_null()
        )
        .group_by("host", "pid", "comm_rank", maintain_order=True)
        .agg(rank_dev=pl.col("cuda_dev").drop_nulls().first())
    )
    return (
        per_process.join(ranks, on=["host", "pid"], how="left", maintain_order="left")
        .with_columns(cuda_dev=pl.coalesce("rank_dev", "process_dev"))
        .select(*(pl.col(c).cast(t) for c, t in PROCESS_SCHEMA.items()))
    )


def _known(processes: pl.DataFrame, last: pl.DataFrame) -> bool:
    """Whether every (host, pid) of ``last`` is a row of ``processes`` already (compared in Python: both are
    a row per process or member, and a polars query per batch costs more)."""
    if last.is_empty():
        return True
    known = set(zip(processes["host"].to_list(), processes["pid"].to_list()))
    return all(key in known for key in zip(last["host"].to_list(), last["pid"].to_list()))


def _global_ranks(processes: pl.DataFrame) -> pl.DataFrame:
    """host, pid → global rank: the rank in a communicator as large as the world, else the launcher's label.
    A process that drives several GPUs has a row for each.

    The batch tables carry no global rank (it is attached when the stream finishes), so the live view
    works it out from the Init lines seen so far.
    """
    world = pl.col("nranks").max()
    return processes.select(
        "host",
        "pid",
        "cuda_dev",
        global_rank=pl.when(pl.col("nranks") == world).then("comm_rank").otherwise("label"),
    )


def _with_global_ranks(rows: pl.DataFrame, processes: pl.DataFrame) -> pl.DataFrame:
    """``rows`` (with host and pid) with ``global_rank`` and ``cuda_dev``: their process's first. In a process
    that holds several world ranks (one per GPU), a member of a communicator as large as the world (``rank``,
    ``nranks``) is its own rank there, on that rank's GPU; a line with a device in its prefix (``dev``: a
    WARN) is the rank of that GPU."""
    ranks = _global_ranks(processes)
    out = rows.join(
        ranks.unique(["host", "pid"], keep="first", maintain_order=True),
        on=["host", "pid"],
        how="left",
        maintain_order="left",
    )
    several = ranks.filter(pl.len().over("host", "pid") > 1)
    if several.is_empty():  # one rank per process: the usual case
        return out
    if "dev" in rows.columns:
        on_device = several.select("host", "pid", pl.col("cuda_dev").alias("dev"), _device_rank="global_rank")
        out = (
            out.join(on_device, on=["host", "pid", "dev"], how="left", maintain_order="left")
            .with_columns(
                global_rank=pl.coalesce("_device_rank", "global_rank"),
                cuda_dev=pl.when(pl.col("_device_rank").is_not_null())
                .then(pl.col("dev"))
                .otherwise("cuda_dev"),
            )
            .drop("_device_rank")
        )
    if not {"rank", "nranks"} <= set(rows.columns):
        return out
    own = several.select("host", "pid", rank="global_rank", _own_dev="cuda_dev", _own=pl.lit(True))
    is_own = pl.col("_own").fill_null(False) & (pl.col("nranks") == processes["nranks"].max())
    return (
        out.join(own, on=["host", "pid", "rank"], how="left", maintain_order="left")
        .with_columns(
            global_rank=pl.when(is_own).then(pl.col("rank")).otherwise("global_rank"),
            cuda_dev=pl.when(is_own).then(pl.col("_own_dev")).otherwise("cuda_dev"),
        )
        .drop("_own", "_own_dev")
    )


def _warn_rows(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """The batch's WARN (or glog E/F) rows of the errors table, with message, line text and a signature."""
    errors = tables["errors"]
    if errors.is_empty():
        return errors
    rows = errors.filter((pl.col("level") == "WARN") | pl.col("severity").is_in(["E", "F"]))
    if rows.is_empty():
        return rows
    device = ["dev"] if "dev" in rows.columns else []
    rows = _with_text(
        rows.select("host", "pid", *device, "error_kind", "error_text", *LINE_KEY), tables["lines"]
    )
    message = pl.coalesce(pl.col("text").str.replace(r"^.*?NCCL WARN ", ""), pl.col("error_text"), pl.lit(""))
    masked = pl.col("message").str.replace_all(r"0x[0-9a-fA-F]+", "0x").str.replace_all(r"\d+", "N")
    return (
        rows.with_columns(message=message.str.strip_chars())
        .with_columns(sig=pl.concat_str(pl.col("error_kind").fill_null("?"), masked, separator="|"))
        .unique("sig", keep="first", maintain_order=True)
    )


def _with_text(rows: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """Add each row's line text: null when the stream keeps no text, or no lines rows for COLL calls
    (``ParseOptions.every_line=False``, as ``watch`` and ``analyze`` parse)."""
    if "text" not in lines.columns or lines.is_empty():  # most batches of a running job: COLL lines only
        return rows.with_columns(text=pl.lit(None, pl.String))
    wanted = lines.filter(pl.col("line_no").is_in(rows["line_no"].implode())).select(*LINE_KEY, "text")
    return rows.join(wanted, on=LINE_KEY, how="left")


# ------------------------------------------------------------------------------------------ findings
def _who(row: dict) -> str:
    """A rank as analyze names it: ``rank 1 (gpu-node-009, pid 3602651, GPU 1)``."""
    rank = f"rank {row['global_rank']}" if row.get("global_rank") is not None else "a rank"
    where = [row.get("host"), f"pid {row['pid']}" if row.get("pid") is not None else None]
    if row.get("cuda_dev") is not None:
        where.append(f"GPU {row['cuda_dev']}")
    where = [w for w in where if w]
    return f"{rank} ({', '.join(where)})" if where else rank


def _evidence(row: dict) -> Evidence:
    return Evidence(row["path"], int(row["line_no"]), row["text"] or "")


def _block_buffered(versions: pl.DataFrame) -> bool:
    """Whether a banner names an NCCL that leaves its stdout lines in a stdio buffer."""
    if versions.is_empty() or "version" not in versions.columns:
        return False
    parts = versions["version"].drop_nulls().str.extract_groups(r"^(\d+)\.(\d+)\.(\d+)").struct.unnest()
    return any(tuple(int(x) for x in row) >= BUFFERED_FROM for row in parts.drop_nulls().iter_rows())


def _stall_finding(row: dict, front: dict) -> Finding:
    """LS101 in analyze's words, for a rank that has not advanced for ``idle`` seconds."""
    rule = rule_for(STALL_CODE)
    position = int(row["position"])
    title = (
        f"{_who(row)} has not called #{position + 2} on communicator {row['comm_uid']} ({row['size']} ranks) "
        f"for {row['idle']:.0f} s: last call #{position + 1} ({row['op']}), while {row['at_front']} rank(s) "
        f"went on to #{int(row['front']) + 1}"
    )
    advice = (
        f"While it hangs, dump its Python stack: `py-spy dump --pid {row['pid']}` on {row['host']}. "
        "A rank that "
        "stops calling collectives while its peers wait is usually in a data loader, checkpoint I/O or a "
        "rank-dependent branch. The verdict at the end of the input confirms or revises this."
    )
    return Finding(
        # The grade analyze gives the same finding: a rank that stopped while its peers wait hangs the job.
        code=rule.code,
        name=rule.name,
        kind=Kind.RANK_BEHIND,
        severity=Severity.CRITICAL,
        title=title,
        ranks=(row["global_rank"],) if row["global_rank"] is not None else (),
        hosts=(row["host"],),
        comm=row["comm_uid"],
        seq=position + 2,
        evidence=(_evidence(row), _evidence(front)),
        advice=advice,
    )


def _warn_finding(row: dict, path: str) -> Finding:
    """A WARN as a live finding of the rule that reports its kind; probe and fallback WARNs are warnings."""
    kind = row["error_kind"]
    rule = rule_for(vocabulary.owner(kind))  # the rule of analyze that reports it
    severity = Severity.WARNING if kind in BENIGN_KINDS else Severity.ERROR
    return Finding(
        code=rule.code,
        name=rule.name,
        kind=rule.kind,
        severity=severity,
        title=f"{_who(row)}: NCCL WARN {row['message']}",
        ranks=(row["global_rank"],) if row["global_rank"] is not None else (),
        hosts=(row["host"],) if row["host"] else (),
        evidence=(Evidence(path, int(row["line_no"]), row["text"] or ""),),
        advice=f"`logsift explain {rule.code}` says what this kind of error means and what to do; "
        "the verdict "
        "at the end of the input weighs it against the rest of the job.",
    )


def _rank_row(row: dict) -> RankRow:
    return RankRow(
        comm=row["comm_uid"],
        rank=row["global_rank"],
        comm_rank=row["rank"],
        host=row["host"],
        pid=row["pid"],
        op=row["op"],
        call=int(row["position"]) + 1,
        behind=int(row["behind"]),
        idle=float(row["idle"]),
        stalled=bool(row["stalled"]),
    )
