"""LS101 rank-behind: Some ranks stopped before the collective their peers are waiting in."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.wording import describe_rank, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import line_of_seq
from nccl_logsift.resolve.failures import hang_evidence
from nccl_logsift.resolve.job import Job, rank_range
from nccl_logsift.resolve.positions import (
    CommProgress,
    members_last_calls,
    positioned,
    progress_of,
)
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.work import DEFAULT_PG, timeouts, work_states


def stack_advice(job: Job, ranks: list[int]) -> str:
    dumps = []
    for rank in ranks[:4]:
        proc = job.process_of(rank)
        if proc:
            dumps.append(f"`py-spy dump --pid {proc['pid']}` on {proc['host']}")
    where = "; ".join(dumps) if dumps else "`py-spy dump --pid <pid>` on each lagging rank's host"
    return (
        f"While the job still hangs, dump the Python stack of the lagging rank(s): {where}. "
        "A rank that never reaches the collective is usually in a data loader, checkpoint I/O, a "
        "rank-dependent "
        "branch or an early exit; a rank that reached it but never finished points at its GPU or network."
    )


LEFT_ADVICE = (
    "The rank ended its loop early and tore down its communicators while its peers went on, so there is "
    "no stack to dump. Most often its data ran out first: give every rank the same number of steps "
    "(DistributedSampler with drop_last=True, or an equal number of batches per rank), or wrap the loop in "
    "torch.distributed.algorithms.Join when inputs are uneven. Otherwise look for a rank-dependent return or "
    "break, or an exception caught and swallowed on that rank."
)


class RankBehind(Rule):
    """Some ranks stopped before the collective their peers are waiting in.

    What it means:
        The listed ranks never reached (or never finished) the collective that the other members of the
        same communicator or process group already entered. Their peers block there until a watchdog fires.

    Why it matters:
        A collective completes only when every member joins. One slow or stuck rank hangs the whole job, and
        the errors appear on the healthy ranks (watchdog timeouts), not on the culprit.

    How it is detected:
        Per communicator, the last COLL line of every member is compared by call number (``logsift explain
        --numbering``); members whose last call number is lower than the others' are behind.
        From PyTorch lines: the ranks of a process group whose watchdog did not fire while most others timed
        out at the same SeqNum, or whose "last enqueued" work is lower than their peers'. When a member of a
        sub-group (tensor or pipeline parallel) is stuck, its peers time out in that group and the other
        ranks later in theirs, so no group holds most of the world: then the few ranks of the world that
        timed out nowhere and raised nothing of their own are the ones the others wait for. A minority only:
        when most ranks are behind, the few ahead are not a hang's cause; exactly half when every member
        ahead timed out and none behind did. Members behind that destroyed the communicator themselves
        (``comm … - Destroy COMPLETE``) left it: their loop ended early (uneven data), and they are named
        however many they are, in one finding for every communicator they left. A rank behind in its
        tensor-parallel pair, its data-parallel group and the world is told once, by the largest, and
        communicators alike (one per replica, stopped at the same call) are told together. Without any sign
        of a failure (watchdog, abort, WARN, non-zero exit) a gap of one call at the end of a log is treated
        as the normal tail of a run and not reported.

    Example:
        ``[rank0]:[E… ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout:
        WorkNCCL(SeqNum=8, OpType=ALLREDUCE, …)`` on ranks 0, 2–7, while rank 1's last COLL line is
        AllReduce #7.

    What to do:
        A rank that left: give every rank the same number of steps (or use
        ``torch.distributed.algorithms.Join``). Otherwise dump the stack of the lagging rank while the job
        hangs (``py-spy dump --pid PID`` on its host) and look for data loading, checkpointing or a
        rank-dependent branch. If the rank reached the collective
        but never finished, check its GPU (``nvidia-smi``, dmesg Xid) and its network links.
    """

    code = "LS101"
    name = "rank-behind"
    kind = Kind.RANK_BEHIND
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        failing = hang_evidence(job)
        waiting = waiting_ranks(job)
        lagging = lagging_communicators(job, failing, waiting)
        # Only the lagging communicators are split out (one group each took ~0.05 ms: 0.2 s over a 4096-rank
        # job's thousands); in the order of members_last_calls, as comm_progress gives them.
        last = members_last_calls(job)
        stops: list[Gap] = []
        departures: list[Gap] = []
        for progress in (
            progress_of(last.filter(pl.col("comm_uid").is_in(sorted(lagging)))) if lagging else []
        ):
            gap = gap_of(progress, failing, waiting)
            if gap is not None:
                (departures if gap.left else stops).append(gap)
        groups = _alike(_covering(_not_waiting(stops, waiting)))
        named = {r for gaps, _ in groups for g in gaps for r in g.ranks}
        named |= {r for g in departures for r in g.ranks}
        # A rank whose COLL lines show it called the world's collective its peers went on to joined it,
        # whatever its watchdog's lines say (or fail to say).
        joined = {
            int(r)
            for g in (*stops, *departures)
            if g.progress.nranks == job.world_size
            for r in g.ahead["global_rank"].drop_nulls()
        }
        silent = list(self._from_torch(job, named | joined))
        for gaps, covered in groups:
            # The world's watchdog names members of the world that logged no call at all where this gap's
            # ranks stopped (their lines lost, or never written): the same stop, told once.
            also = [
                f
                for f in silent
                if gaps[0].progress.nranks == job.world_size
                and (f.pg or "").split(" ")[0] == DEFAULT_PG
                and f.seq == gaps[0].stuck_at + 1
            ]
            silent = [f for f in silent if f not in also]
            finding = self.from_gaps(job, gaps, covered, failing, also=[r for f in also for r in f.ranks])
            if also:
                finding = dataclasses.replace(finding, evidence=finding.evidence + also[0].evidence[:2])
            yield finding
        if departures:
            yield self.from_departures(job, departures, failing)
        yield from silent

    def from_gaps(
        self, job: Job, gaps: list[Gap], covered: bool, failing: bool, also: list[int] | None = None
    ) -> Finding:
        """Ranks stuck before the same next call of one communicator, or of several alike (one per
        parallel replica); ``covered``: they are behind in other communicators too; ``also``: ranks of the
        same stop that the watchdog's view adds."""
        gap = gaps[0]
        ranks = sorted({r for g in gaps for r in g.ranks} | set(also or ()))
        missing_op = _next_op(job, gap.progress.uid, gap.stuck_at)
        where = (
            f"communicator {gap.progress.uid} ({gap.progress.nranks} ranks)"
            if len(gaps) == 1
            else f"{len(gaps)} communicators of {gap.progress.nranks} ranks ({gap.progress.uid}, …)"
        )
        title = (
            f"{_names(job, ranks)} never called {_call(gap.stuck_at + 1, missing_op)} on {where}: last call "
            f"#{gap.stuck_at}, while {sum(g.ahead.height for g in gaps)} rank(s) went on to #{gap.front + 1}"
            # Not how many others: a log cut short loses the smaller gaps first.
            + ("; behind in other communicators too" if covered else "")
        )
        behind = pl.concat([g.behind.select("source_id", "line_no", "part") for g in gaps])
        return self.finding(
            job,
            title,
            evidence_rows=_rows(behind.head(max(3, gap.behind.height)), gap.ahead.head(2)),
            ranks=ranks,
            severity=Severity.CRITICAL if failing else Severity.ERROR,
            advice=stack_advice(job, ranks),
            comm=gap.progress.uid,
            seq=gap.stuck_at + 1,
            op=missing_op,
        )

    def from_departures(self, job: Job, departures: list[Gap], failing: bool) -> Finding:
        """Ranks that destroyed their communicators while their peers went on: one finding for all of them
        (a data-parallel replica that ran out of data leaves its data-parallel pairs and the world alike),
        told by the largest communicator they left."""
        head = max(departures, key=lambda d: (d.progress.nranks, len(d.ranks)))
        ranks = sorted({r for d in departures for r in d.ranks})
        names = _names(job, ranks)
        missing_op = _next_op(job, head.progress.uid, head.stuck_at)
        reached = f"#{head.front + 1}" if head.front > head.stuck_at else _call(head.stuck_at + 1, missing_op)
        others = len(departures) - 1
        title = (
            f"{names} left communicator {head.progress.uid} ({head.progress.nranks} ranks) after call "
            f"#{head.stuck_at}: {'it' if len(ranks) == 1 else 'they'} destroyed it while "
            f"{head.ahead.height} rank(s) went on to {reached}"
            + (", and left other communicators the same way" if others else "")
        )
        ends = head.behind.filter(pl.col("left_seq").is_not_null()).select(line_of_seq(pl.col("left_seq")))
        return self.finding(
            job,
            title,
            evidence_rows=_rows(head.behind.head(3), ends.head(3), head.ahead.head(2)),
            ranks=ranks,
            severity=Severity.CRITICAL if failing else Severity.ERROR,
            advice=LEFT_ADVICE,
            comm=head.progress.uid,
            seq=head.stuck_at + 1,
            op=missing_op,
        )

    def _from_torch(self, job: Job, reported: set[int]) -> Iterator[Finding]:
        timed_out = timeouts(job)
        states = work_states(job)
        world = job.world_size
        if timed_out.is_empty() and states.is_empty():
            return
        waiting = set(timed_out["job_rank"].drop_nulls().to_list()) if not timed_out.is_empty() else set()
        named = False
        for (pg,), group in _by_pg(timed_out, states):
            t_rows, s_rows = group
            reporters = set(t_rows["job_rank"].drop_nulls().to_list()) | set(
                s_rows["job_rank"].drop_nulls().to_list()
            )
            laggards: list[int] = []
            evidence = t_rows.select("source_id", "line_no", "part").head(3)
            seq = (
                int(t_rows["seq"].mode().sort(nulls_last=True).first())
                if t_rows.height and t_rows["seq"].drop_nulls().len()
                else None
            )
            op = (
                t_rows["op_type"].mode().sort(nulls_last=True).first()
                if t_rows.height and t_rows["op_type"].drop_nulls().len()
                else None
            )
            # Each rank's first report: the state when the failure began. A rank stuck outside NCCL (a
            # data loader) that wakes after its peers timed out goes on enqueuing, and its later reports
            # catch up with theirs.
            enq = (
                s_rows.filter(pl.col("last_enqueued").is_not_null())
                .sort("source_id", "line_no", "part")
                .group_by("job_rank", maintain_order=True)
                .agg(pl.col("last_enqueued").first())
            )
            if enq.height >= 2 and enq["last_enqueued"].n_unique() > 1:
                low = enq["last_enqueued"].min()
                candidates = enq.filter(pl.col("last_enqueued") == low)
                if candidates.height * 2 < enq.height:
                    laggards = sorted(candidates["job_rank"].to_list())
                    evidence = pl.concat(
                        [
                            s_rows.filter(pl.col("job_rank").is_in(laggards))
                            .select("source_id", "line_no", "part")
                            .head(3),
                            evidence,
                        ]
                    )
            if not laggards and pg.split(" ")[0] == DEFAULT_PG and world and len(reporters) * 2 > world:
                # A rank whose watchdog fired in another group was waiting there, not stuck outside NCCL.
                laggards = sorted(set(rank_range(world)) - reporters - waiting)
            laggards = [r for r in laggards if r not in reported]
            if not laggards:
                continue
            names = ", ".join(describe_rank(job, r) for r in laggards[:4]) + (
                " …" if len(laggards) > 4 else ""
            )
            where = (
                f"{op} #{seq}"
                if op and seq
                else (f"work #{seq}" if seq else "the collective its peers wait in")
            )
            waited = len(reporters - set(laggards))
            title = f"{names} never joined {where} of process group {pg}; {waited} rank(s) timed out waiting"
            named = True
            yield self.finding(
                job,
                title,
                evidence_rows=evidence,
                ranks=laggards,
                advice=stack_advice(job, laggards),
                pg=pg,
                seq=seq,
                op=op,
            )
        if not named:
            yield from self._silent_across_groups(job, timed_out, waiting, reported)

    def _silent_across_groups(
        self, job: Job, timed_out: pl.DataFrame, waiting: set[int], reported: set[int]
    ) -> Iterator[Finding]:
        """The member of a stuck sub-group who never reports. Its group's peers time out in that group
        (tensor or pipeline parallel), the ranks of the other groups later in another one, so no single
        process group holds most of the world; but nearly every rank of the world timed out somewhere,
        and the few that did not, though they logged, raised nothing of their own: they are the ranks the
        others wait for, stuck outside NCCL (a data loader, I/O). Evidence: the first timeouts, in the
        group where they came first."""
        world = job.world_size
        if not world or timed_out.is_empty() or len(waiting) * 2 <= world:
            return
        silent = set(rank_range(world)) - waiting - reported - _failed_on_their_own(job)
        # Alive: it logged, or the world group's timeouts came after calls every rank had joined.
        seen = set(job.torch_ranks["rank"].to_list()) if not job.torch_ranks.is_empty() else set()
        world_seq = timed_out.filter(pl.col("pg").str.split(" ").list.first() == DEFAULT_PG)["seq"].max()
        joined = isinstance(world_seq, int) and world_seq > 1
        if not silent or len(silent) > max(1, world // 8) or not (joined or silent <= seen):
            return
        ranks = sorted(silent)
        first = timed_out.sort("source_id", "line_no", "part").row(0, named=True)
        groups = timed_out["pg"].drop_nulls().unique(maintain_order=True).to_list()
        names = ", ".join(describe_rank(job, r) for r in ranks)
        title = (
            f"{names} never joined the collective its group waits in: {len(waiting)} of {world} ranks hit "
            f"the watchdog timeout (first in process group {first['pg']}, then "
            f"{len(groups) - 1} other group(s)), and {'it' if len(ranks) == 1 else 'they'} reported none"
        )
        early = timed_out.filter(pl.col("pg") == first["pg"]).select("source_id", "line_no", "part")
        yield self.finding(
            job,
            title,
            evidence_rows=early.head(3),
            ranks=ranks,
            advice=stack_advice(job, ranks),
            pg=first["pg"],
            seq=first.get("seq"),
            op=first.get("op_type"),
        )


def _failed_on_their_own(job: Job) -> set[int]:
    """Ranks with a failure of their own in the logs: an exception, a NCCL WARN, an exit that was not the
    launcher's kill. A silent rank is none of these."""
    failed: set[int] = set()
    for name in ("app_errors", "errors"):
        rows = job.table(name)
        if not rows.is_empty():
            failed |= set(with_job_rank(job, rows)["job_rank"].drop_nulls().to_list())
    return failed


@dataclass(frozen=True)
class Gap:
    """Members of one communicator behind the others: their last calls, and the members ahead."""

    progress: CommProgress
    behind: pl.DataFrame
    ahead: pl.DataFrame
    front: int  # the position (0-based) the members ahead reached

    @property
    def stuck_at(self) -> int:
        """The 1-based number of the last call the members behind made."""
        return int(self.behind["ordinal"].min()) + 1

    @property
    def left(self) -> bool:
        """Every member behind destroyed the communicator itself (a clean Destroy): it left."""
        return bool(self.behind["left"].all())

    @property
    def ranks(self) -> list[int]:
        return [int(r) for r in self.behind["global_rank"].fill_null(self.behind["rank"]).drop_nulls()]


def gap_of(progress: CommProgress, failing: bool, waiting: set[int]) -> Gap | None:
    """The members of ``progress`` behind the others, when they are a cause: a minority (when most ranks are
    behind, the few ahead are not a hang's cause); exactly half, when every member ahead timed out waiting
    (``waiting``: the ranks whose watchdog fired) and none behind did; or ranks that all left the
    communicator on purpose (their loop ended: they are the cause however many they are). Without a sign of
    failure, a gap of one call is the normal tail of a log."""
    last = progress.last
    if last.height < 2:
        return None
    front = int(last["ordinal"].max())
    behind = last.filter(pl.col("ordinal") < front)
    if behind.is_empty():
        return None
    gap = Gap(progress, behind, last.filter(pl.col("ordinal") == front), front)
    half = (
        behind.height * 2 == last.height
        and last.select(_waited_for(pl.col("ordinal") < front, waiting)).item()
    )
    if behind.height * 2 >= last.height and not (gap.left or half):
        return None
    if not failing and front - int(behind["ordinal"].max()) < 2:
        return None
    return gap


def waiting_ranks(job: Job) -> set[int]:
    """The ranks whose watchdog fired: they were waiting for a peer."""
    timed_out = timeouts(job)
    return set(timed_out["job_rank"].drop_nulls().to_list()) if not timed_out.is_empty() else set()


def _waited_for(behind: pl.Expr, waiting: set[int]) -> pl.Expr:
    """Over a communicator's members: every member not ``behind`` timed out (is ``waiting``) and none behind
    did, so the members ahead wait for those behind."""
    waits = pl.col("global_rank").is_in(sorted(waiting)).fill_null(False)
    return (waits | behind).all() & ~(waits & behind).any()


def _not_waiting(gaps: list[Gap], waiting: set[int]) -> list[Gap]:
    """``gaps`` less the members behind that wait elsewhere: those ahead in another gap (they called a
    collective their peers there never joined) and those whose watchdog fired (``waiting``). Such a rank is
    held up, not the holder: on a large job the ranks waiting for a stuck one stop in a chain of
    communicators. All of them when that would leave none."""
    ahead = waiting | {int(r) for g in gaps for r in g.ahead["global_rank"].drop_nulls()}
    kept = [
        dataclasses.replace(
            g, behind=g.behind.filter(~pl.col("global_rank").is_in(sorted(ahead)).fill_null(False))
        )
        for g in gaps
    ]
    kept = [g for g in kept if g.behind.height]
    return kept or gaps


def _covering(gaps: list[Gap]) -> list[tuple[Gap, bool]]:
    """The gaps to report, in their order, each with whether it covers others. A gap whose ranks are all
    behind in another communicator with more ranks behind is told by that one (a dead node's ranks lag in
    their pipeline pairs and in the world alike). Of gaps with the same ranks behind (a stuck rank lags in
    its tensor-parallel pair, its data-parallel group and the world), the one where the others got furthest
    ahead is told: it is the strongest evidence, and the last a cut-off tail takes away."""
    sets = [frozenset(g.ranks) for g in gaps]
    preferred = sorted(
        range(len(gaps)), key=lambda i: (gaps[i].stuck_at - gaps[i].front, -gaps[i].progress.nranks, i)
    )
    order = {i: k for k, i in enumerate(preferred)}

    def covers(j: int, i: int) -> bool:
        return sets[i] < sets[j] or (sets[i] == sets[j] and order[j] < order[i])

    heads = [i for i in preferred if not any(covers(j, i) for j in range(len(gaps)) if j != i)]
    covering = dict.fromkeys(heads, False)
    for i in range(len(gaps)):
        if i not in covering:
            covering[next(h for h in heads if sets[i] <= sets[h])] = True
    return [(gaps[i], covering[i]) for i in sorted(covering)]


def _names(job: Job, ranks: list[int]) -> str:
    """Up to four ranks each with its host, pid and GPU; more as a count and their spans."""
    if len(ranks) <= 4:
        return ", ".join(describe_rank(job, r) for r in ranks)
    return f"{len(ranks)} ranks ({ranks_text(ranks)})"


def _alike(heads: list[tuple[Gap, bool]]) -> list[tuple[list[Gap], bool]]:
    """``heads`` (of :func:`_covering`) gathered where they are alike: communicators of one size whose
    members behind stopped at the same call while the others reached the same one, as every data- or
    pipeline-parallel replica of a dead node's ranks does. In the order of their first."""
    groups: dict[tuple[int, int, int], tuple[list[Gap], list[bool]]] = {}
    for gap, covering in heads:
        gaps, covers = groups.setdefault((gap.progress.nranks, gap.stuck_at, gap.front), ([], []))
        gaps.append(gap)
        covers.append(covering)
    return [(gaps, any(covers)) for gaps, covers in groups.values()]


def _call(number: int, op: str | None) -> str:
    return f"#{number}{f' ({op})' if op else ''}"


def _rows(*frames: pl.DataFrame) -> pl.DataFrame:
    """The evidence lines of ``frames``, in their order."""
    rows = pl.concat([f.select("source_id", "line_no", "part") for f in frames])
    return rows.filter(pl.col("line_no").is_not_null())


def _next_op(job: Job, uid: str, position: int) -> str | None:
    """The op the ranks that went ahead called at ``position`` (1-based) of communicator ``uid``."""
    coll = job.table("collectives")
    coll = positioned(coll.filter(pl.col("comm_uid") == uid), job.table("coll_stats"))
    at = coll.filter(pl.col("position") == position)
    return at["op"].mode().sort(nulls_last=True).first() if at.height else None


def _by_pg(timed_out: pl.DataFrame, states: pl.DataFrame):
    keys = set()
    for frame in (timed_out, states):
        if not frame.is_empty():
            keys |= set(frame["pg"].to_list())
    for key in sorted(keys, key=str):
        t = timed_out.filter(pl.col("pg") == key) if not timed_out.is_empty() else timed_out
        s = states.filter(pl.col("pg") == key) if not states.is_empty() else states
        if t.is_empty():
            t = pl.DataFrame(
                schema={
                    "job_rank": pl.Int64,
                    "seq": pl.Int64,
                    "op_type": pl.String,
                    "source_id": pl.UInt16,
                    "line_no": pl.UInt32,
                    "part": pl.UInt8,
                }
            )
        if s.is_empty():
            s = pl.DataFrame(
                schema={
                    "job_rank": pl.Int64,
                    "last_enqueued": pl.Int64,
                    "source_id": pl.UInt16,
                    "line_no": pl.UInt32,
                    "part": pl.UInt8,
                }
            )
        yield (key,), (t, s)


def lagging_communicators(job: Job, failing: bool, waiting: set[int]) -> set[str]:
    """The communicators :meth:`RankBehind.check` reports (those :func:`gap_of` finds a gap in), found in one
    pass over every member's last call instead of filtering each communicator's members (thousands of
    communicators on a large job)."""
    ordinal = pl.col("ordinal")
    front = ordinal.max()
    behind = ordinal < front
    screen = (
        members_last_calls(job)
        .group_by("comm_uid")
        .agg(
            members=pl.len(),
            behind=behind.sum(),
            gap=front - ordinal.filter(behind).max(),
            left=pl.col("left").filter(behind).all(),
            # Exactly half behind is a gap when every member ahead timed out and none behind did.
            waited_for=_waited_for(behind, waiting),
        )
    )
    half = (pl.col("behind") * 2 == pl.col("members")) & pl.col("waited_for")
    return set(
        screen.filter(
            (pl.col("members") >= 2)
            & (pl.col("behind") > 0)
            & ((pl.col("behind") * 2 < pl.col("members")) | pl.col("left") | half)
            & (pl.lit(failing) | (pl.col("gap") >= 2))
        )["comm_uid"].to_list()
    )
