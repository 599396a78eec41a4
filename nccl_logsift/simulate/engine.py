"""Run the ranks' programs against each other: who issued what when, what completed, who hung, who died.

The model is the one that makes real hangs look the way they do:

* the host issues collectives asynchronously (the COLL line is printed at the call) and only waits at a
  sync point (``loss.item()``) or in a blocking communicator init;
* each GPU runs its operations in issue order; the k-th operation of a communicator completes when
  every member has issued its k-th operation, the calls agree, and each member's previous operation is
  done (positions, not opCount, align ranks — nccl-log-grammar.md §9.7);
* a rank whose operations never complete is found by PyTorch's watchdog ``timeout`` seconds after it
  enqueued the oldest stuck one, and takes the process down; a launcher that kills on failure
  (torchrun, mpirun) stops everyone else shortly after the first death.

The engine knows nothing about log formats; ``story.py`` turns its :class:`Timeline` into lines.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field

from nccl_logsift.simulate.cluster import Cluster
from nccl_logsift.simulate.program import Item, Op

# The items that stop a process's program, each its run's state: "stall" (waits forever outside NCCL),
# "crash" (killed by a signal), "vanish" (the node is gone: no exit, no report, its GPU work lost), "raise"
# (an uncaught Python exception, or an abort; exit code 1, text in story.raised), "store_wait" (waits in
# init_process_group's store barrier, then gives up) and "exit".
STOPS = ("stall", "crash", "vanish", "raise", "store_wait", "exit")


@dataclass(slots=True)
class Issue:
    """One call as it happened: an init or a collective/p2p operation of one rank."""

    rank: int
    item: Item
    comm: int
    pos: int  # 0 = the init; 1.. = the operations on this communicator (the ordinal a parser counts)
    t: float
    seq: int = 0  # PyTorch SeqNum on the process group
    pg: int = 0
    opcount: int = 0
    first: bool = False  # the rank's first operation on this communicator (lazy connection output)
    done: float | None = None
    prev: Issue | None = None
    nxt: Issue | None = None

    @property
    def op(self) -> Op | None:
        return self.item.op


@dataclass(slots=True)
class Watchdog:
    pg: int
    issue: Issue  # the oldest operation that did not complete
    t: float  # when the watchdog reported it
    last_enqueued: int
    last_completed: int


@dataclass(slots=True)
class RankRun:
    rank: int
    issues: list[Issue] = field(default_factory=list)
    steps: list[tuple[int, float]] = field(default_factory=list)  # (step, time the step's sync returned)
    state: str = "running"  # exit | crash | raise | vanish | stall | sync | init | init_fail | bulk
    t: float = 0.0
    pc: int = 0
    end: float | None = None  # when the process ended (None: still hanging when the log stops)
    # exit | crash | exception | raised | vanished | init_fail | nccl_error | async_error | watchdog | killed
    # | cancelled
    end_kind: str = ""
    exit_code: int = 0  # >= 0 exit status, < 0 killed by that signal
    watchdogs: list[Watchdog] = field(default_factory=list)
    failed_issue: Issue | None = None  # the init that failed, or the op whose transport failed
    extra: list[tuple[float, str, dict]] = field(default_factory=list)  # scenario events (time, kind, data)
    bulk_opcount: dict[int, int] = field(default_factory=dict)  # comm -> opCount when the --size block starts
    bulk_pos: dict[int, int] = field(default_factory=dict)  # comm -> ops issued before the block
    bulk_seq: dict[int, int] = field(default_factory=dict)  # pg -> SeqNum before the block


@dataclass(slots=True)
class Faults:
    """What scenarios inject below the program level."""

    broken: dict[tuple[int, int], tuple[int, int]] = field(
        default_factory=dict
    )  # (comm, pos) -> (reporter, peer)
    init_fail: dict[tuple[int, int], str] = field(default_factory=dict)  # (rank, comm) -> failure kind
    closed_peers: dict[int, list[int]] = field(default_factory=dict)  # dead rank -> peers that see it close
    dead_comms: set[int] = field(default_factory=set)  # communicators on which no operation ever completes
    net_peer: dict[int, int] = field(default_factory=dict)  # rank reporting a transport error -> its peer
    async_delay: float = 1.2  # seconds from an async NCCL error to the watchdog noticing it
    watchdog: bool = True  # a PyTorch watchdog reports operations that never complete (not in nccl-tests)


@dataclass(slots=True)
class Timeline:
    runs: list[RankRun]
    start: float
    end: float
    first_failure: float | None
    bulk_at: float | None = None  # when every rank reached the --size block
    bulk_steps: int = 0
    killer: str = ""  # what stopped the survivors: "launcher" | "cancel" | ""


class Engine:
    def __init__(
        self,
        cluster: Cluster,
        programs: dict[int, list[Item]],
        faults: Faults,
        *,
        timeout: float,
        kill_on_failure: bool,
        rng: random.Random,
        bulk_steps: int = 0,
        bulk_period: float = 0.8,
        opcount_rule: str = "plan",
        bulk_shape: dict[int, list[Item]] | None = None,
    ):
        self.cluster = cluster
        self.programs = programs
        self.faults = faults
        self.timeout = timeout
        self.kill_on_failure = kill_on_failure
        self.rng = rng
        self.bulk_steps = bulk_steps
        self.bulk_period = bulk_period
        self.opcount_rule = opcount_rule
        self.pg_of_comm = {c.index: c.pg for c in cluster.comms}
        self.bulk_shape = bulk_shape or {}
        n = len(cluster.procs)
        self.runs = [RankRun(r) for r in range(n)]
        self.slots: dict[tuple[int, int], dict[int, Issue]] = {}
        self.pos: list[Counter] = [Counter() for _ in range(n)]
        self.seq: list[Counter] = [Counter() for _ in range(n)]
        self.opc: list[Counter] = [Counter() for _ in range(n)]
        self.last: list[Issue | None] = [None] * n
        self.bulk_waiting: set[int] = set()
        self.bulk_at: float | None = None
        # NCCL's own view: a comm spans several nodes when its ranks have different host names (§9.6 f).
        self.multi_node = {c.index: len(c.nodes) > 1 for c in cluster.comms}
        self.queue: deque[int] = deque()
        self.stack: list[tuple[int, int]] = []
        self.members = {c.index: len(c.ranks) for c in cluster.comms}

    # ------------------------------------------------------------------------------------- issuing
    def run(self) -> Timeline:
        start = 0.0
        for run in self.runs:
            run.t = start + self.rng.uniform(0.0, 0.4)
            self.queue.append(run.rank)
        self._drain()
        if self.bulk_waiting:
            self._release_bulk()
            self._drain()
        return self._finish(start)

    def _drain(self) -> None:
        while self.queue or self.stack:
            while self.stack:
                self._check(*self.stack.pop())
            if self.queue:
                self._advance(self.queue.popleft())

    def _advance(self, rank: int) -> None:
        run = self.runs[rank]
        prog = self.programs[rank]
        while run.pc < len(prog):
            it = prog[run.pc]
            if it.kind == "sync":
                last = self.last[rank]
                if last is not None and last.done is None:
                    run.state = "sync"
                    return
                run.t = max(run.t, last.done if last else run.t) + it.gap
                if it.step >= 0:
                    run.steps.append((it.step, run.t))
            elif it.kind == "init":
                if run.state == "init":  # woken up: the init completed
                    run.state = "running"
                    run.t = max(run.t, self.last[rank].done)  # type: ignore[union-attr]
                else:
                    run.t += it.gap
                    issue = self._issue(rank, it, it.comm, 0)
                    if (rank, it.comm) in self.faults.init_fail:
                        run.state = "init_fail"
                        run.failed_issue = issue
                        run.pc += 1
                        return
                    self._check(it.comm, 0)
                    self._drain_stack()
                    if issue.done is None:
                        run.state = "init"
                        return
                    run.t = max(run.t, issue.done)
            elif it.kind == "op":
                run.t += it.gap
                op = it.op
                assert op is not None
                self.pos[rank][op.comm] += 1
                issue = self._issue(rank, it, op.comm, self.pos[rank][op.comm])
                if it.fail == "net_error":
                    self.faults.broken[(op.comm, issue.pos)] = (rank, self.faults.net_peer.get(rank, -1))
                self._check(op.comm, issue.pos)
            elif it.kind in STOPS:
                run.t += it.gap
                run.state = it.kind
                run.pc += 1
                return
            elif it.kind == "print":
                run.t += it.gap
                run.extra.append((run.t, "print", {"text": it.text}))
            elif it.kind == "bulk":
                run.state = "bulk"
                self.bulk_waiting.add(rank)
                run.pc += 1
                return
            run.pc += 1
        run.state = "exit"

    def _issue(self, rank: int, it: Item, comm: int, pos: int) -> Issue:
        run = self.runs[rank]
        issue = Issue(rank, it, comm, pos, run.t, prev=self.last[rank])
        if it.kind == "op":
            pg = self.pg_of_comm[comm]
            self.seq[rank][pg] += 1
            issue.seq = self.seq[rank][pg]
            issue.pg = pg
            issue.first = pos == 1
            issue.opcount = self.opc[rank][comm]
            if self._counts(comm):
                self.opc[rank][comm] += 1
        if self.last[rank] is not None:
            self.last[rank].nxt = issue  # type: ignore[union-attr]
        self.last[rank] = issue
        run.issues.append(issue)
        self.slots.setdefault((comm, pos), {})[rank] = issue
        return issue

    def _counts(self, comm: int) -> bool:
        """Whether this call bumps comm->opCount (§5.2): every launch, or only launches with network ops."""
        if self.opcount_rule == "plan":
            return True
        return self.multi_node[comm]

    # ------------------------------------------------------------------------------------ completing
    def _drain_stack(self) -> None:
        while self.stack:
            self._check(*self.stack.pop())

    def _check(self, comm: int, pos: int) -> None:
        slot = self.slots.get((comm, pos))
        if slot is None or len(slot) < self.members[comm]:
            return
        if next(iter(slot.values())).done is not None:
            return
        issues = list(slot.values())
        members = issues
        if any(i.prev is not None and i.prev.done is None for i in issues):
            return
        if (comm, pos) in self.faults.broken or (pos > 0 and comm in self.faults.dead_comms):
            return
        if any(self.runs[i.rank].state == "vanish" for i in issues):
            return  # a member's node died: the collective never completes anywhere
        if pos == 0:
            if any((i.rank, comm) in self.faults.init_fail for i in issues):
                return
            dur = 0.8 + 0.002 * len(members) + self.rng.uniform(0.0, 0.6)
        else:
            first = issues[0].op
            if any(not first.matches(i.op) for i in issues[1:]):  # type: ignore[arg-type, union-attr]
                return
            dur = max(i.op.dur for i in issues)  # type: ignore[union-attr]
        t0 = max(
            max(i.t for i in issues), max((i.prev.done for i in issues if i.prev is not None), default=0.0)
        )
        done = t0 + dur
        for i in issues:
            i.done = done
        following = {(i.nxt.comm, i.nxt.pos) for i in issues if i.nxt is not None}
        self.stack.extend(sorted(following))
        for i in issues:
            run = self.runs[i.rank]
            if run.state in ("sync", "init") and self.last[i.rank] is i:
                run.state = "running"
                if i.pos == 0:
                    run.state = "init"
                self.queue.append(i.rank)

    def _release_bulk(self) -> None:
        """Every rank reached the --size block: jump the clocks and counters past its steps."""
        if len(self.bulk_waiting) != len(self.runs):
            return  # someone never got there (a failure before training): there is no block
        at = max(run.t for run in self.runs)
        self.bulk_at = at
        for run in self.runs:
            rank = run.rank
            per_comm = Counter(it.op.comm for it in self.bulk_shape.get(rank, []) if it.op is not None)
            run.bulk_opcount = dict(self.opc[rank])
            run.bulk_pos = dict(self.pos[rank])
            run.bulk_seq = dict(self.seq[rank])
            for comm, n in per_comm.items():
                self.pos[rank][comm] += n * self.bulk_steps
                self.seq[rank][self.pg_of_comm[comm]] += n * self.bulk_steps
                if self._counts(comm):
                    self.opc[rank][comm] += n * self.bulk_steps
            run.t = at + self.bulk_steps * self.bulk_period + self.rng.uniform(0.0, 0.05)
            run.state = "running"
            self.queue.append(rank)
        self.bulk_waiting.clear()

    # ---------------------------------------------------------------------------------- the endings
    def _raised_with(self, run: RankRun):
        """The ``together`` key of the raise item a rank stopped at (None if it did not stop at one)."""
        if run.state != "raise":
            return None
        return (self.programs[run.rank][run.pc - 1].what or {}).get("together")

    def _finish(self, start: float) -> Timeline:
        candidates: list[tuple[float, int, str]] = []
        for run in self.runs:
            if run.state == "exit":
                run.end, run.end_kind, run.exit_code = run.t, "exit", 0
            elif run.state == "crash":
                sig = self.programs[run.rank][run.pc - 1].signal or 11
                run.end, run.end_kind, run.exit_code = run.t, "crash", -sig
                candidates.append((run.t, run.rank, "crash"))
            elif run.state == "vanish":
                # Nothing on the node reports it (no launcher line, no exit code): not a first failure the
                # launchers react to; the others find out by their timeouts (and NCCL's RAS, 2.24.3+).
                run.end, run.end_kind, run.exit_code = run.t, "vanished", -9
            elif run.state == "raise" and self.programs[run.rank][run.pc - 1].what is None:
                # An uncaught Python exception whose last line is the item's text.
                run.end, run.end_kind, run.exit_code = run.t, "exception", 1
                candidates.append((run.t, run.rank, "exception"))
            elif run.state == "raise":
                it = self.programs[run.rank][run.pc - 1]
                what = it.what or {}
                t = run.t
                if what.get("together") is not None:
                    # A check every member takes part in (a gloo all-gather) fails on all of them at once.
                    t = max(r.t for r in self.runs if self._raised_with(r) == what["together"])
                    t += self.rng.uniform(0.001, 0.03)
                code = -it.signal if it.signal else what.get("exit_code", 1)
                run.end, run.end_kind, run.exit_code = t, "raised", code
                candidates.append((t, run.rank, "raised"))
            elif run.state == "store_wait":
                t = run.t + self.timeout + self.rng.uniform(0.0, 0.2)
                run.end, run.end_kind, run.exit_code = t, "init_fail", 1
                candidates.append((t, run.rank, "init_fail"))
            elif run.state == "init_fail":
                issue = run.failed_issue
                kind = self.faults.init_fail.get((run.rank, issue.comm)) if issue is not None else None
                # store->get of the ncclUniqueId gives up at the process group's timeout; NCCL fails at once.
                t = run.t + (self.timeout if kind == "unique_id" else 0.0) + self.rng.uniform(0.3, 1.5)
                run.end, run.end_kind, run.exit_code = t, "init_fail", 1
                candidates.append((t, run.rank, "init_fail"))
        # Transport failures: the reporter's op never completes and its watchdog sees the async error.
        for (comm, pos), (reporter, _peer) in self.faults.broken.items():
            issue = self.slots.get((comm, pos), {}).get(reporter)
            run = self.runs[reporter]
            if issue is None or run.end is not None:
                continue
            others = [i.t for i in self.slots[(comm, pos)].values()]
            t_err = max(others) + self.rng.uniform(0.05, 0.4)
            run.failed_issue = issue
            run.extra.append((t_err, "net_error", {"comm": comm, "pos": pos}))
            t = t_err + self.faults.async_delay
            run.end, run.end_kind, run.exit_code = t, "async_error", -6
            candidates.append((t, reporter, "async_error"))
        # Watchdogs on every rank left with operations that never completed.
        for run in self.runs:
            if run.end is not None or not self.faults.watchdog:
                continue
            pending = [i for i in run.issues if i.done is None and i.pos > 0]
            if not pending:
                continue
            by_pg: dict[int, Issue] = {}
            for i in pending:
                by_pg.setdefault(i.pg, i)
            deadlines = sorted((i.t + self.timeout, pg, i) for pg, i in by_pg.items())
            first = deadlines[0][0]
            for deadline, pg, oldest in deadlines:
                if deadline > first + 0.5:
                    break
                mine = [i for i in run.issues if i.pg == pg and i.pos > 0]
                last_enq = max(i.seq for i in mine)
                done = [i.seq for i in mine if i.done is not None]
                t_report = deadline + self.rng.uniform(0.001, 0.09)
                run.watchdogs.append(Watchdog(pg, oldest, t_report, last_enq, max(done) if done else 0))
            run.end = run.watchdogs[-1].t + self.rng.uniform(0.05, 0.3)
            run.end_kind, run.exit_code = "watchdog", -6
            candidates.append((run.watchdogs[0].t, run.rank, "watchdog"))
        candidates.sort()
        first_failure = candidates[0][0] if candidates else None
        killer = ""
        # Peers that see a dead process's sockets close fail shortly after it.
        for t, rank, _ in candidates:
            for peer in self.faults.closed_peers.get(rank, []):
                prun = self.runs[peer]
                if prun.end is None or prun.end > t + 0.2:
                    t_close = t + self.rng.uniform(0.01, 0.2)
                    prun.extra.append((t_close, "peer_closed", {"peer": rank}))
                    prun.watchdogs.clear()
                    prun.end, prun.end_kind, prun.exit_code = (
                        t_close + self.rng.uniform(0.2, 0.8),
                        "nccl_error",
                        1,
                    )
        if first_failure is not None and self.kill_on_failure:
            t_kill = first_failure + self.rng.uniform(0.5, 2.0)
            for run in self.runs:
                if run.end is None or run.end > t_kill:
                    killed_at = t_kill + self.rng.uniform(0.0, 0.3)
                    run.watchdogs = [w for w in run.watchdogs if w.t < killed_at]
                    run.extra = [e for e in run.extra if e[0] < killed_at]
                    run.end, run.end_kind, run.exit_code = killed_at, "killed", -15
                    killer = "launcher"
        last_event = max(
            [run.end or 0.0 for run in self.runs]
            + [run.t for run in self.runs]
            + [i.t for run in self.runs for i in run.issues[-1:]]
        )
        hung = [run for run in self.runs if run.end is None]
        end = last_event
        if hung:
            end = last_event + max(60.0, min(self.timeout, 900.0))
            for run in hung:
                run.end, run.end_kind, run.exit_code = end, "cancelled", -15
            killer = killer or "cancel"
        return Timeline(self.runs, start, end, first_failure, self.bulk_at, self.bulk_steps, killer)
