"""The rank × collective grid: how far each member of a communicator got, and where members disagree.

Two sources give positions that can be compared across ranks (resolve/positions.py and resolve/work.py
explain them): NCCL COLL lines, numbered per communicator, and PyTorch's work SeqNum per process group
("last enqueued / last completed" lines and watchdog timeouts). A grid shows the last positions up to the
front, the positions around where the laggards stopped and around the first divergence, and folds the rest
into gap columns, so a hang at call 2,847 stays one screen wide. Past ``NODE_ROWS_ABOVE`` members, rows are
nodes: each cell shows the worst state of the node's ranks, so a 1024-rank job is 128 rows.

The grid reads as the verdict does (findings/triage.py ``diagnose``): a row is a root-cause rank, a
consequence, or neither. When the verdict has a root cause, a rank that stopped behind its peers without being
named by it was held up by it: its missing calls are ``HELD``, not the culprit's ``MISSING``. An IB error on
one link leaves most ranks of the ring short of the front, and painting them all as laggards would say the
opposite of the verdict.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import polars as pl

from nccl_logsift.findings.triage import diagnose
from nccl_logsift.model import CellState, Finding, Grid, GridColumn, GridRow, Kind, RankRole
from nccl_logsift.resolve.job import Job, rank_range
from nccl_logsift.resolve.positions import comm_progress, positioned
from nccl_logsift.resolve.work import timeouts, work_states

MAX_GRIDS = 6
NODE_ROWS_ABOVE = 64
TAIL = 16  # positions shown up to the front
AROUND = 4  # positions shown on each side of where laggards stopped, or of a divergence
# Worst first: a node's cell takes the worst state of its ranks.
WORST = (
    CellState.MISMATCH,
    CellState.MISSING,
    CellState.HELD,
    CellState.UNKNOWN,
    CellState.PENDING,
    CellState.REACHED,
    CellState.ALL,
)
_CODES = {state: code for code, state in enumerate(reversed(WORST))}  # higher code = worse
_STATES = list(reversed(WORST))


@dataclass(frozen=True)
class _Members:
    """One communicator or process group: per member, how far it got (1-based positions, 0 = nothing)."""

    title: str
    source: str
    ranks: np.ndarray  # global rank per member (-1 unknown)
    hosts: list[str | None]
    reached: np.ndarray  # NCCL: last call made; PyTorch: last work completed
    enqueued: np.ndarray  # PyTorch: last work enqueued (== reached for NCCL)
    known: np.ndarray  # False: no line from this member says where it is
    ops: dict[int, str]  # position -> what most members called there
    own_ops: dict[tuple[int, int], str]  # (member index, position) -> what this member called
    divergence: int | None
    odd: frozenset[int]  # global ranks on the minority side of the divergence
    finding: bool


@dataclass(frozen=True)
class _Verdict:
    """The verdict's split of the ranks: those its root causes name, those its consequences name, and whether
    it has a root cause at all (a healthy job's laggards are shown as they are)."""

    culprits: frozenset[int]
    named: frozenset[int]
    has_cause: bool

    @classmethod
    def of(cls, findings: list[Finding]) -> _Verdict:
        diagnosis = diagnose(findings)
        return cls(
            culprits=frozenset(r for f in diagnosis.causes for r in f.ranks),
            named=frozenset(r for f in diagnosis.consequences for r in f.ranks),
            has_cause=not diagnosis.healthy,
        )

    def role(self, ranks: Iterable[int], behind: bool) -> RankRole:
        ranks = set(ranks)
        if ranks & self.culprits:
            return RankRole.ROOT_CAUSE
        if self.has_cause and (behind or ranks & self.named):
            return RankRole.CONSEQUENCE
        return RankRole.BYSTANDER


def grids(job: Job, findings: list[Finding]) -> tuple[tuple[Grid, ...], tuple[str, ...]]:
    """The grids worth drawing, those a finding names first; and notes on what was left out."""
    verdict = _Verdict.of(findings)
    named = {f.comm for f in findings if f.ranks}
    # Choose the communicators before looking at their calls: a 4096-rank job has hundreds of them.
    progress = sorted(comm_progress(job), key=lambda c: (c.uid not in named, -c.nranks, c.uid))
    groups = _nccl_groups(job, findings, progress[:MAX_GRIDS]) + _torch_groups(job, findings)
    groups.sort(key=lambda g: (not g.finding, -len(g.ranks)))
    hidden = len(groups) + max(len(progress) - MAX_GRIDS, 0) - MAX_GRIDS
    notes = ()
    if hidden > 0:
        notes = (
            f"{hidden} more communicator(s) or process group(s) not drawn: "
            "those a finding names and the largest come first.",
        )
    return tuple(_grid(g, verdict) for g in groups[:MAX_GRIDS] if g.enqueued.max(initial=0) > 0), notes


def culprit_ranks(findings: list[Finding]) -> frozenset[int]:
    """Global ranks the root-cause findings name."""
    return frozenset(r for f in findings if f.primary for r in f.ranks)


# ---------------------------------------------------------------------------------------------- sources
def _nccl_groups(job: Job, findings: list[Finding], progress) -> list[_Members]:
    if not progress:
        return []
    uids = [comm.uid for comm in progress]
    coll = job.table("collectives").filter(pl.col("comm_uid").is_in(uids))
    calls = positioned(coll, job.table("coll_stats")).select("comm_uid", "rank", pl.col("position") + 1, "op")
    out = []
    for comm in progress:
        last = comm.last
        mine = calls.filter(pl.col("comm_uid") == comm.uid)
        # A rank that did not fit its column is null (parse/kinds.py): that member has no calls of its own.
        member = {int(r): i for i, r in enumerate(last["rank"].to_list()) if r is not None}
        own = {
            (member[r], p): op
            for r, p, op in mine.select("rank", "position", "op").iter_rows()
            if r in member and op is not None
        }
        reached = (last["ordinal"].fill_null(-1) + 1).to_numpy().astype(np.int64)
        divergence, odd = _divergence(findings, comm=comm.uid)
        out.append(
            _Members(
                title=f"communicator {comm.uid} ({comm.nranks} ranks)",
                source="nccl",
                ranks=last["global_rank"].fill_null(last["rank"]).fill_null(-1).to_numpy().astype(np.int64),
                hosts=last["host"].to_list(),
                reached=reached,
                enqueued=reached,
                known=np.ones(len(reached), bool),
                ops=_majority_ops(mine),
                own_ops=own,
                divergence=divergence,
                odd=odd,
                finding=any(f.comm == comm.uid for f in findings if f.ranks),
            )
        )
    return out


def _torch_groups(job: Job, findings: list[Finding]) -> list[_Members]:
    states = work_states(job)
    timed = timeouts(job)
    frames = []
    if not states.is_empty():
        frames.append(
            states.select(
                "pg",
                "job_rank",
                "host",
                "last_completed",
                "last_enqueued",
                pl.lit(None, pl.Int64).alias("timeout_seq"),
            )
        )
    if not timed.is_empty():
        frames.append(
            timed.select(
                "pg",
                "job_rank",
                "host",
                pl.lit(None, pl.Int64).alias("last_completed"),
                pl.lit(None, pl.Int64).alias("last_enqueued"),
                pl.col("seq").alias("timeout_seq"),
            )
        )
    if not frames:
        return []
    rows = (
        pl.concat(frames, how="vertical_relaxed")
        .drop_nulls("job_rank")
        .group_by("pg", "job_rank")
        .agg(
            pl.col("host").drop_nulls().first(),
            pl.col("last_completed").max(),
            pl.col("last_enqueued").max(),
            pl.col("timeout_seq").max(),
        )
        # A rank that timed out in work #s had enqueued it and not completed it.
        .with_columns(
            last_enqueued=pl.max_horizontal("last_enqueued", "timeout_seq"),
            last_completed=pl.coalesce("last_completed", pl.col("timeout_seq") - 1),
        )
        .sort("pg", "job_rank")
    )
    procs = job.processes
    if not procs.is_empty():  # PyTorch lines often carry no host: take it from the rank's process
        hosts = (
            procs.select(pl.col("global_rank").alias("job_rank"), pl.col("host").alias("proc_host"))
            .drop_nulls()
            .unique("job_rank", keep="first", maintain_order=True)
        )
        rows = (
            rows.join(hosts, on="job_rank", how="left", maintain_order="left")
            .with_columns(host=pl.coalesce("host", "proc_host"))
            .drop("proc_host")
        )
    out = []
    world = job.world_size
    for (pg,), group in rows.group_by("pg", maintain_order=True):
        ranks = group["job_rank"].to_list()
        hosts = group["host"].to_list()
        known = [True] * len(ranks)
        finding = [f for f in findings if f.pg == pg and f.ranks]
        named = {r for f in finding for r in f.ranks}
        if world and str(pg).split(" ")[0] == "0":  # the default group holds every rank of the world
            named |= set(rank_range(world))
        silent = sorted(named - set(ranks))
        if silent:
            for rank in silent:  # a rank that printed nothing about this group
                ranks.append(rank)
                hosts.append(job.hosts_of([rank])[0] if job.hosts_of([rank]) else None)
                known.append(False)
        order = np.argsort(np.array(ranks, dtype=np.int64), kind="stable")
        pick = lambda values: [values[i] for i in order]  # noqa: B023  (used within this iteration only)
        completed = group["last_completed"].fill_null(0).clip(0).to_list() + [0] * len(silent)
        enqueued = group["last_enqueued"].fill_null(group["last_completed"]).fill_null(0).clip(
            0
        ).to_list() + [0] * len(silent)
        divergence, odd = _divergence(findings, pg=pg)
        out.append(
            _Members(
                title=f"process group {pg} ({len(ranks)} ranks, PyTorch work numbers)",
                source="pytorch",
                ranks=np.array(pick(ranks), dtype=np.int64),
                hosts=pick(hosts),
                reached=np.array(pick(completed), dtype=np.int64),
                enqueued=np.array(pick(enqueued), dtype=np.int64),
                known=np.array(pick(known), bool),
                ops={},
                own_ops={},
                divergence=divergence,
                odd=odd,
                finding=bool(finding),
            )
        )
    return out


def _majority_ops(calls: pl.DataFrame) -> dict[int, str]:
    if calls.is_empty():
        return {}
    ops = calls.drop_nulls("op").group_by("position").agg(pl.col("op").mode().sort().first())
    return dict(ops.iter_rows())


def _divergence(findings: list[Finding], comm: str | None = None, pg: str | None = None):
    for f in findings:
        if (
            f.kind is Kind.COLLECTIVE_MISMATCH
            and f.seq is not None
            and ((comm is not None and f.comm == comm) or (pg is not None and f.pg == pg))
        ):
            return f.seq, frozenset(f.ranks)
    return None, frozenset()


# ---------------------------------------------------------------------------------------------- layout
def _grid(m: _Members, verdict: _Verdict) -> Grid:
    columns = _columns(m)
    shown = [c.position for c in columns]
    # A gap column stands for the positions up to the next one shown.
    positions = np.array([p if p else shown[i + 1] - 1 for i, p in enumerate(shown)], dtype=np.int64)
    states = _states(m, positions, verdict)
    by_node = len(m.ranks) > NODE_ROWS_ABOVE
    rows = _node_rows(m, columns, states, verdict) if by_node else _rank_rows(m, columns, states, verdict)
    return Grid(
        title=m.title,
        source=m.source,
        columns=columns,
        rows=tuple(rows),
        by_node=by_node,
        summary=_summary(m),
        culprit=bool(verdict.culprits & set(m.ranks.tolist())),
    )


def _columns(m: _Members) -> tuple[GridColumn, ...]:
    front = int(m.enqueued.max(initial=0))
    known = m.reached[m.known]
    floor = int(known.min()) if known.size else 0
    wanted = set(range(max(1, front - TAIL + 1), front + 1))
    if floor < front:
        wanted |= set(range(max(1, floor - AROUND + 1), min(front, floor + AROUND) + 1))
    if m.divergence:
        wanted |= set(range(max(1, m.divergence - AROUND), min(front, m.divergence + AROUND) + 1))
    marks = {}
    if m.divergence:
        marks[m.divergence] = "divergence"
        marks[m.divergence - 1] = "last-common"
    elif floor < front:
        marks[floor + 1] = "stuck"
        marks[floor] = "last-common"
    columns: list[GridColumn] = []
    previous = 0
    for p in sorted(wanted):
        if p > previous + 1:
            columns.append(GridColumn(position=None, op=None, skipped=p - previous - 1))
        columns.append(GridColumn(position=p, op=m.ops.get(p), mark=marks.get(p)))
        previous = p
    return tuple(columns)


def _states(m: _Members, positions: np.ndarray, verdict: _Verdict) -> np.ndarray:
    """State codes, members × columns; a gap column takes the state of the last position it stands for."""
    p = positions[None, :]
    known = m.reached[m.known]
    floor = int(known.min()) if known.size else 0
    reached, enqueued = m.reached[:, None], m.enqueued[:, None]
    code = np.full((len(m.ranks), len(positions)), _CODES[CellState.MISSING], dtype=np.int8)
    code[p <= enqueued] = _CODES[CellState.PENDING]
    code[p <= reached] = _CODES[CellState.REACHED]
    code[(p <= floor) & (p <= reached)] = _CODES[CellState.ALL]
    if verdict.has_cause:  # what a non-culprit missed, the root cause held it up from
        held = ~np.isin(m.ranks, list(verdict.culprits))[:, None] & (code == _CODES[CellState.MISSING])
        code[held] = _CODES[CellState.HELD]
    code[~m.known, :] = _CODES[CellState.UNKNOWN]
    if m.divergence and m.odd:
        odd_rows = np.isin(m.ranks, list(m.odd))
        code[np.ix_(odd_rows, positions == m.divergence)] = _CODES[CellState.MISMATCH]
    return code


def _rank_rows(m: _Members, columns, states: np.ndarray, verdict: _Verdict) -> list[GridRow]:
    rows = []
    for i, rank in enumerate(m.ranks.tolist()):
        host = m.hosts[i]
        cells = tuple(_STATES[c] for c in states[i])
        notes = tuple(_note(m, i, col, cell) for col, cell in zip(columns, cells))
        last = int(m.reached[i]) if m.known[i] else None
        behind = _behind(cells)
        rows.append(
            GridRow(
                label=f"rank {rank}" if rank >= 0 else f"member {i}",
                host=host,
                ranks=(rank,) if rank >= 0 else (),
                last=last or None,
                role=verdict.role([rank], behind),
                behind=behind,
                cells=cells,
                notes=notes,
            )
        )
    return rows


def _node_rows(m: _Members, columns, states: np.ndarray, verdict: _Verdict) -> list[GridRow]:
    hosts = np.array([h or "?" for h in m.hosts], dtype=object)
    order = sorted(set(hosts.tolist()), key=lambda h: (int(m.ranks[hosts == h].min()), h))
    rows = []
    for host in order:
        mask = hosts == host
        ranks = sorted(int(r) for r in m.ranks[mask] if r >= 0)
        block = states[mask]
        worst = block.max(axis=0)
        cells = tuple(_STATES[c] for c in worst)
        notes = []
        for j, col in enumerate(columns):
            counts = np.bincount(block[:, j], minlength=len(_STATES))
            parts = [f"{n} {_STATES[c].value}" for c, n in reversed(list(enumerate(counts))) if n]
            notes.append(f"{host} · {_where(col)}: " + ", ".join(parts))
        behind = _behind(cells)
        rows.append(
            GridRow(
                label=f"{host} ({_span(ranks)})",
                host=None if host == "?" else host,
                ranks=tuple(ranks),
                last=int(m.reached[mask].min()) or None,
                role=verdict.role(ranks, behind),
                behind=behind,
                cells=cells,
                notes=tuple(notes),
            )
        )
    return rows


def _behind(cells: tuple[CellState, ...]) -> bool:
    return any(c not in (CellState.ALL, CellState.REACHED) for c in cells)


def _note(m: _Members, i: int, col: GridColumn, cell: CellState) -> str:
    who = f"rank {m.ranks[i]}" + (f" on {m.hosts[i]}" if m.hosts[i] else "")
    if col.position is None:
        return f"{who} · {col.skipped:,} positions not shown"
    op = m.own_ops.get((i, col.position)) or col.op
    what = {
        CellState.ALL: "every rank got here",
        CellState.REACHED: "reached here; some ranks did not",
        CellState.PENDING: "enqueued, not completed",
        CellState.MISSING: "never reached" if m.source == "nccl" else "never enqueued",
        CellState.HELD: ("never reached" if m.source == "nccl" else "never enqueued")
        + ", held up by the root cause",
        CellState.MISMATCH: "called something else than the others",
        CellState.UNKNOWN: "no line from this rank says",
    }[cell]
    return f"{who} · {_where(col)}{f' {op}' if op else ''}: {what}"


def _where(col: GridColumn) -> str:
    if col.position is None:
        return f"{col.skipped:,} positions"
    return f"call #{col.position:,}"  # PyTorch's SeqNum is the call number (call_numbers.py)


def _summary(m: _Members) -> str:
    known = m.known
    if not known.any():
        return "no rank says where it is"
    front = int(m.enqueued.max())
    floor = int(m.reached[known].min())
    unit = "call" if m.source == "nccl" else "work"
    behind = m.ranks[known & (m.reached == floor)]
    parts = []
    if m.divergence:
        parts.append(f"first divergence at {unit} #{m.divergence:,} (ranks {_span(sorted(m.odd))} differ)")
    if m.source == "pytorch":
        parts.append(
            f"completed: up to #{floor:,} on {len(behind)} rank(s) ({_span(sorted(behind.tolist()))}), "
            f"#{int(m.reached[known].max()):,} at most; enqueued: up to #{front:,}"
        )
    elif floor < front:
        parts.append(
            f"{len(behind)} rank(s) stopped at #{floor:,} ({_span(sorted(behind.tolist()))}); "
            f"the front is #{front:,}"
        )
    else:
        parts.append(f"every rank reached #{front:,}")
    silent = m.ranks[~known]
    if silent.size:
        parts.append(f"no line from rank(s) {_span(sorted(silent.tolist()))}")
    return "; ".join(parts)


def _span(ranks: list[int]) -> str:
    """0, 1, 2, 5 -> 'ranks 0–2, 5' style text, without the word."""
    if not ranks:
        return "?"
    runs, start, prev = [], ranks[0], ranks[0]
    for r in ranks[1:]:
        if r != prev + 1:
            runs.append((start, prev))
            start = r
        prev = r
    runs.append((start, prev))
    text = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs[:6])
    return text + (" …" if len(runs) > 6 else "")
