"""LS501 process-exit: A training process died: crashed, was killed, aborted or exited with an error code."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import rows_of
from nccl_logsift.findings.wording import describe_rank, names, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.exits import SIGNAL_NAMES, assemble_exits
from nccl_logsift.resolve.failures import nccl_tests_failures, uncaught_exceptions
from nccl_logsift.resolve.hosts import nccl_host
from nccl_logsift.resolve.inits import stalled_inits
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.ranks import label_maps, with_job_rank
from nccl_logsift.resolve.transports import address_hosts
from nccl_logsift.resolve.work import FAILURE_EVENTS

# Signals that mean the process itself crashed.
CRASH_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE")
# Signals a launcher, the scheduler or a user sends to stop a process.
STOP_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
# PyTorch events that say the process is tearing itself down after a watchdog timeout or an NCCL error.
TEARDOWN_TORCH_EVENTS = (
    *FAILURE_EVENTS,
    "heartbeat_kill",
    "watchdog_stuck",
    "comm_aborted",
    "remote_abort",
    "desync_timeout",
)
# Exceptions whose cause another rule reports (NCCL errors: LS901/LS302, CUDA and OOM: LS401).
NCCL_OR_CUDA = r"(?i)DistBackendError|NCCL|OutOfMemory|CUDA|cuda|ProcessGroup"
# Exceptions of a process that gave up waiting for its peers at the rendezvous (c10d store, torchrun): what
# it waited for is the cause (LS201, LS202), not its exit.
GAVE_UP_WAITING = (
    r"DistNetworkError|DistStoreError|RendezvousTimeoutError|client socket has timed out|"
    r"Timed out after \d+ seconds waiting for clients"
)


def order_key(source_id: int | None, line_no: int | None) -> int:
    return ((source_id or 0) << 40) + ((line_no or 0) << 8)


# ---------------------------------------------------------------------------------------------- LS501
@dataclass
class Death:
    """One failed process, merged from every report that names it."""

    key: tuple
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    local_rank: int | None = None
    signal: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    root_cause: bool = False
    origins: set[str] = field(default_factory=set)
    first: int = 1 << 62
    rows: list[tuple[int, int, int]] = field(default_factory=list)
    category: str = ""
    severity: Severity = Severity.ERROR
    because: str = ""

    def label(self, job: Job) -> str:
        if self.rank is not None:
            return describe_rank(job, self.rank)
        where = [
            f"local rank {self.local_rank}" if self.local_rank is not None else None,
            self.host,
            f"pid {self.pid}" if self.pid is not None else None,
        ]
        return "process " + ", ".join(w for w in where if w) if any(where) else "a process"

    def how(self) -> str:
        if self.category == "oom":
            return "was killed by the out-of-memory killer (SIGKILL)"
        if self.signal:
            code = (
                f" (exit code {self.exit_code})" if self.exit_code is not None and self.exit_code < 0 else ""
            )
            return f"died from {self.signal}{code}"
        if self.exit_code is not None:
            return f"exited with code {self.exit_code}"
        return f"failed ({self.reason})" if self.reason else "failed"


class ProcessExit(Rule):
    """A training process died: crashed, was killed, aborted or exited with an error code.

    What it means:
        The launcher (torchrun, srun, mpirun, PALS, bash, torch.multiprocessing.spawn) reported that a
        worker process ended abnormally: a crash signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE), SIGKILL (the
        kernel or cgroup out-of-memory killer, or a hard kill), SIGABRT, SIGTERM, or a non-zero exit code.
        Slurm's node failures and time-limit cancellations are reported here too, and so are the processes
        NCCL's RAS thread declares dead (2.24.3+): a node that went away without any exit report.

    Why it matters:
        When one rank dies its peers cannot finish their collectives: they see closed sockets, remote errors
        or watchdog timeouts, and are then torn down. The process that died first is usually the cause;
        SIGABRT is mostly PyTorch's watchdog taking the process down after a timeout or an NCCL error, and
        SIGTERM is mostly the launcher stopping the survivors, so those are consequences.

    How it is detected:
        The exit reports (torchrun ChildFailedError entries, elastic "failed (exitcode: N)", "srun: error:
        host: task N: reason", job-control lines such as "Aborted (core dumped)", PALS "rank N died from
        signal S", mpirun "exited on signal", ProcessExitedException) are merged per process (global rank,
        else pid, else local rank) with assemble_exits. Negative torchrun exit codes are signals. An abort is
        a teardown when the same rank logged a watchdog timeout, "taking the entire process down", an NCCL
        communicator abort or a DistBackendError before; an exit code after an NCCL or CUDA exception is that
        exception's consequence. Crashes, OOM kills and unexplained failures that came first (torchrun's root
        cause, or the earliest report) are critical; exits after an NCCL/CUDA exception and later unexplained
        failures are errors; watchdog-teardown aborts and launcher terminations are warnings, so that they are
        never taken for the cause. An exit after giving up at the rendezvous (DistNetworkError,
        DistStoreError, RendezvousTimeoutError, a store client's connect timeout) is an error: the process
        waited for a peer, and what it waited for is the cause. With no launcher report at all, a Python
        traceback that starts at the script's top level (``in <module>``) counts as the process ending with
        that exception (in an unlabelled stream, k such processes are the k world ranks that never logged an
        NCCL Init line, when the counts agree); with one, such a traceback names why the launcher's exit code
        came (an ImportError at startup), and the ranks that failed of the same exception as the first are all
        causes. RAS lines (``RAS declaring peer ip<port> as DEAD``, ``RAS handling deadPeer (addr ip<port>)``,
        NCCL_DEBUG_SUBSYS with RAS) name the dead processes by address: mapped to their host through the
        bootstrap and socket addresses, they are every process of that host when RAS declared as many dead
        (else those of it that logged nothing in RAS), are critical, and the ranks that reported them are
        never named as culprits. A process that logged its communicators' Destroy ended normally and is not
        taken as dead.

    Example:
        ``exitcode  : -11 (pid: 2346374)`` / ``traceback : Signal 11 (SIGSEGV) received by PID 2346374`` in
        torchrun's summary for rank 2; or ``srun: error: node-001: task 5: Out Of Memory`` followed by
        ``Aborted (core dumped)`` for the seven other tasks.

    What to do:
        Start from the first process that died. SIGSEGV/SIGBUS: get a core dump or run with
        ``TORCH_SHOW_CPP_STACKTRACES=1`` / ``faulthandler`` to find the crashing library (custom CUDA
        extensions, data loader workers, mismatched libraries). SIGKILL/OOM: check ``dmesg`` for the OOM
        killer and reduce host memory use (data loader workers, pinned memory). Aborts and terminations of
        the other ranks follow from it; fix the first failure and they disappear.
    """

    code = "LS501"
    name = "process-exit"
    kind = Kind.PROCESS_EXIT
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        exits = job.table("exits")
        deaths = self._deaths(job, exits)
        teardown = _teardown_ranks(job)
        exceptions = _exception_ranks(job)
        oom_rows = exits.filter(pl.col("event") == "slurm_oom_kill") if "event" in exits.columns else exits
        # The launcher's root cause (torchrun's "first observed failure") beats the order of the reports.
        roots = [d for d in deaths if d.root_cause]
        first = min((d.first for d in roots or deaths), default=None)
        # Ranks that raised the same exception as the first failure (a package missing on a whole node)
        # failed of the same cause at about the same time: none of them is the echo of another.
        lead = next((d for d in deaths if d.first == first), None)
        for death in deaths:
            same = bool(lead and lead.because and death.because == lead.because)
            self._classify(death, teardown, exceptions, oom_rows, first, bool(roots), same)
        yield from self._group(job, deaths, oom_rows)
        yield from self._scheduler(job, exits)
        yield from self._ras_dead(job)

    # -------------------------------------------------------------------------------------- NCCL RAS
    def _ras_dead(self, job: Job) -> Iterator[Finding]:
        """The processes NCCL's RAS declared dead, per host: the culprit is the node RAS names, not the ranks
        whose RAS threads reported it (they are alive: they log)."""
        ras = job.table("ras")
        if ras.is_empty() or not {"event", "peer"} <= set(ras.columns):
            return
        dead = ras.filter((pl.col("event") == "dead_peer") & pl.col("peer").is_not_null()).with_columns(
            peer_addr=pl.col("peer").str.extract(r"^([^<\s]+)<")
        )
        if dead.is_empty():
            return
        addresses = address_hosts(job)
        hosts_of = {a: next(iter(h)) for a, h in addresses.items() if len(h) == 1}
        dead = dead.with_columns(dead_host=pl.col("peer_addr").replace_strict(hosts_of, default=None))
        reporters = with_job_rank(job, dead)
        alive = set(reporters["job_rank"].drop_nulls().to_list()) | set(_ras_loggers(job))
        procs = job.processes
        ended = _destroyed_ranks(job)
        named = dead.filter(pl.col("dead_host").is_not_null())
        for (host,), rows in named.group_by("dead_host", maintain_order=True):
            mine = procs.filter(pl.col("host") == host)["global_rank"] if procs.height else pl.Series([])
            on_host = sorted(int(r) for r in mine.drop_nulls())
            peers = rows["peer"].n_unique()
            ranks = on_host if peers >= len(on_host) else [r for r in on_host if r not in alive]
            if len(ranks) != min(peers, len(on_host)):
                ranks = []  # RAS names addresses, not ranks: without a one-to-one match, name the host only
            if set(ranks or on_host) <= ended and (ranks or on_host):
                continue  # they tore their communicators down: a normal end that RAS saw as a lost peer
            who = rows.join(
                reporters.select("source_id", "line_no", "job_rank"), on=["source_id", "line_no"], how="left"
            )
            told = sorted({int(r) for r in who["job_rank"].drop_nulls()})
            all_of = bool(ranks) and ranks == on_host
            whole = f"every process on {host}" if all_of else f"{peers} process(es) on {host}"
            which = ranks_text(ranks) if ranks else "ranks not known"
            declared = pl.col("pattern") != "dead-peer"  # the declarations first: deadPeer lines pass them on
            title = (
                f"NCCL's RAS declared {whole} dead ({which}): the node or its network went away "
                f"without an exit report; {len(told)} rank(s) on other hosts reported it and waited"
            )
            advice = (
                f"Find out what happened to {host}: the scheduler's node state (sinfo / scontrol show "
                "node), its kernel log and BMC (power, kernel panic, Xid or ECC errors), its network "
                "links. The other ranks' timeouts and aborts follow from its loss; exclude the node."
            )
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(rows.sort(declared, "source_id", "line_no")).head(4),
                ranks=ranks,
                hosts=[host],
                severity=Severity.CRITICAL,
                advice=advice,
            )

    # -------------------------------------------------------------------------------------- assembly
    def _deaths(self, job: Job, exits: pl.DataFrame) -> list[Death]:
        rows = assemble_exits(exits) if not exits.is_empty() and "event" in exits.columns else pl.DataFrame()
        spawn = job.table("app_errors")
        if not spawn.is_empty() and "event" in spawn.columns:
            spawn = spawn.filter(pl.col("event") == "spawn_exited")
        by_pid: dict[int, dict] = {}
        if not job.processes.is_empty():
            for p in job.processes.iter_rows(named=True):
                by_pid.setdefault(p["pid"], p)
        deaths: dict[tuple, Death] = {}
        alias: dict[tuple, tuple] = {}
        by_pid_keys: dict[int, set[tuple]] = {}

        def add(rank, host, pid, local_rank, signal, exit_code, reason, root, origin, sid, line, part):
            host = nccl_host(host)
            if (
                rank is None
                and pid is not None
                and pid in by_pid
                and (host is None or by_pid[pid]["host"] == host)
            ):
                rank = by_pid[pid]["global_rank"]
                host = host or by_pid[pid]["host"]
            if host is None and rank is not None:
                proc = job.process_of(rank)
                host = proc["host"] if proc else None
            # pids repeat across hosts (containers): a pid names a process with its host, or alone when a
            # report omits the host and only one process of the job had that pid.
            pid_key = ("pid", host, pid) if pid is not None else None
            if pid is not None and host is None and len(by_pid_keys.get(pid, ())) == 1:
                pid_key = next(iter(by_pid_keys[pid]))
            keys = [
                k
                for k in (
                    ("rank", rank) if rank is not None else None,
                    pid_key,
                    ("local", host, local_rank)
                    if local_rank is not None and rank is None and pid is None
                    else None,
                )
                if k
            ]
            if not keys:
                keys = [("line", sid, line)]
            if pid is not None and host is not None and ("pid", None, pid) in alias:
                keys.append(("pid", None, pid))
            if pid is not None:
                by_pid_keys.setdefault(pid, set()).add(pid_key)
            key = next((alias[k] for k in keys if k in alias), keys[0])
            for k in keys:
                alias.setdefault(k, key)
            d = deaths.setdefault(key, Death(key))
            d.rank = d.rank if d.rank is not None else rank
            d.host = d.host or host
            d.pid = d.pid if d.pid is not None else pid
            d.local_rank = d.local_rank if d.local_rank is not None else local_rank
            d.signal = d.signal or signal
            if exit_code is not None and d.exit_code is None:
                d.exit_code = exit_code
            if reason and (not d.reason or reason == "Out Of Memory"):
                d.reason = reason
            d.root_cause |= bool(root)
            d.origins.add(origin)
            d.first = min(d.first, order_key(sid, line))
            d.rows.append((sid, line, part or 0))

        # srun's exit reports name tasks ("nodeB: task 1"): a task is a rank only as label_maps proves it.
        tasks = label_maps(job)["task"]
        for r in rows.iter_rows(named=True) if not rows.is_empty() else ():
            task_named = tasks is not None and r["origin"] == "slurm" and r["rank"] is not None
            add(
                tasks.get(r["rank"]) if task_named else r["rank"],
                r["host"],
                r["pid"],
                r["local_rank"],
                r["signal"],
                r["exit_code"],
                r["reason"],
                r["root_cause"],
                r["origin"],
                r["source_id"],
                r["line_no"],
                0,
            )
        for r in with_job_rank(job, spawn).iter_rows(named=True) if not spawn.is_empty() else ():
            signal = r.get("signal_name")
            code = r.get("exit_code")
            if signal is None and code is not None and code < 0:
                signal = SIGNAL_NAMES.get(-code)
            local = r.get("spawn_index")
            rank = _rank_of_local(job, local)
            add(
                rank,
                r.get("host"),
                None,
                local,
                signal,
                code,
                None,
                False,
                "spawn",
                r["source_id"],
                r["line_no"],
                r["part"],
            )
        found = [d for d in deaths.values() if d.signal or d.exit_code not in (None, 0) or d.reason]
        if found:
            # An exit code the launcher reports says that a process failed, its traceback says why: a rank
            # that raised at the top level (an ImportError at startup) is named with its exception.
            failed = [d for d in found if not d.signal and d.exit_code not in (None, 0)]
            coded = {d.rank: d for d in failed if d.rank is not None}
            # A traceback labelled by local rank only (torchrun's [defaultN]: on a multi-node stream) belongs
            # to the one failed process of that local rank, when there is one.
            local = {k: v[0] for k, v in _by_local_rank(failed).items() if len(v) == 1}
            for r in uncaught_exceptions(job) if failed else ():
                d = coded.get(r["job_rank"]) if r["job_rank"] is not None else local.get(r.get("local_rank"))
                if d is not None and not d.because:
                    d.because = r["what"]
                    d.first = min(d.first, order_key(r["source_id"], r["line_no"]))
                    d.rows.insert(0, (r["source_id"], r["line_no"], r["part"] or 0))
        if not found:
            for r in uncaught_exceptions(job):
                add(
                    r["job_rank"],
                    r.get("host"),
                    r.get("pid"),
                    r.get("local_rank"),
                    None,
                    None,
                    r["what"],
                    False,
                    "traceback",
                    r["source_id"],
                    r["line_no"],
                    r["part"],
                )
            found = list(deaths.values())
            for d in found:
                d.category = "uncaught"
            _rank_by_absence(job, found)
        return found

    # -------------------------------------------------------------------------------------- classification
    def _classify(
        self,
        d: Death,
        teardown: dict[int, int],
        exceptions: dict[int, tuple[int, str]],
        oom_rows: pl.DataFrame,
        first: int | None,
        by_root: bool,
        same_as_first: bool = False,
    ) -> None:
        came_first = (d.root_cause if by_root else d.first == first) or same_as_first
        if d.category == "uncaught":
            related = re.search(NCCL_OR_CUDA, d.reason or "") or re.search(GAVE_UP_WAITING, d.reason or "")
            d.severity = Severity.ERROR if related or not came_first else Severity.CRITICAL
        elif d.reason == "Out Of Memory" or (d.signal == "SIGKILL" and not oom_rows.is_empty()):
            d.category, d.severity = "oom", Severity.CRITICAL
        elif d.signal in CRASH_SIGNALS:
            d.category, d.severity = "crash", Severity.CRITICAL
        elif d.signal == "SIGKILL":
            d.category, d.severity = "killed", Severity.CRITICAL
        elif d.signal == "SIGABRT":
            if d.rank is not None and d.rank in teardown:
                d.category, d.severity = "teardown", Severity.WARNING
                d.because = "PyTorch's watchdog teardown after a timeout or NCCL error on this rank"
            elif came_first:
                d.category, d.severity = "abort", Severity.CRITICAL
            else:
                d.category, d.severity = "abort-later", Severity.ERROR
        elif d.signal in STOP_SIGNALS:
            d.category, d.severity = "stopped", Severity.WARNING

        else:
            exc = exceptions.get(d.rank) if d.rank is not None else None
            if exc is not None:
                d.category, d.severity = "after-exception", Severity.ERROR
                d.because = exc[1]
            elif d.because and re.search(GAVE_UP_WAITING, d.because):
                d.category, d.severity = "gave-up", Severity.ERROR
            elif came_first:
                d.category, d.severity = "exit-first", Severity.CRITICAL
            else:
                d.category, d.severity = "exit-later", Severity.ERROR

    # -------------------------------------------------------------------------------------- findings
    def _group(self, job: Job, deaths: list[Death], oom_rows: pl.DataFrame) -> Iterator[Finding]:
        groups: dict[tuple, list[Death]] = {}
        for d in sorted(deaths, key=lambda d: d.first):
            detail = d.reason.split(" ", 1)[0] if d.category == "uncaught" and d.reason else None
            groups.setdefault((d.category, d.signal, d.exit_code if not d.signal else detail), []).append(d)
        roots = [d for d in deaths if d.root_cause]
        first_death = min(roots or deaths, key=lambda d: d.first) if deaths else None
        for (category, _, _), members in groups.items():
            many = len(members) > 1
            ranks = sorted({d.rank for d in members if d.rank is not None})
            hosts = sorted({d.host for d in members if d.host})
            if len(ranks) == len(members) and len(ranks) > 2:
                who = f"{len(ranks)} ranks ({ranks_text(ranks)})" + (
                    f" on {', '.join(hosts[:4])}" if hosts else ""
                )
            elif len(ranks) == len(members):
                who = names(job, ranks)
            elif not ranks and all(d.label(job) == "a process" for d in members):
                who = f"{len(members)} process(es)" if many else "a process"
            else:
                who = "; ".join(d.label(job) for d in members[:4]) + (" …" if len(members) > 4 else "")
            lead = members[0]
            how = lead.how()
            title, advice = self._wording(category, who, how, lead, first_death, job)
            evidence = pl.DataFrame(
                [r for d in members for r in d.rows],
                schema={"source_id": pl.UInt16, "line_no": pl.UInt32, "part": pl.UInt8},
                orient="row",
            )
            if category == "oom" and not oom_rows.is_empty():
                evidence = pl.concat([rows_of(oom_rows).head(2), evidence])
            yield self.finding(
                job,
                title,
                evidence_rows=evidence,
                ranks=ranks,
                hosts=hosts,
                severity=max(d.severity for d in members),
                advice=advice,
            )

    def _wording(
        self, category: str, who: str, how: str, lead: Death, first: Death | None, job: Job
    ) -> tuple[str, str]:
        earlier = ""
        if first is not None and first is not lead and first.first < lead.first:
            earlier = f", after {first.label(job)} {first.how()}"
        if category == "crash":
            return (
                f"{who} {how}: the process crashed",
                "Find what crashed: enable core dumps (ulimit -c unlimited) or faulthandler / "
                "TORCH_SHOW_CPP_STACKTRACES=1, and check custom CUDA extensions, data loader workers and "
                "library versions. Its peers' timeouts and aborts follow from this crash.",
            )
        if category == "oom":
            return (
                f"{who} {how}: host memory ran out",
                "Check dmesg / the Slurm job record for the OOM killer and reduce host memory use (data "
                "loader workers, pinned memory, prefetching, large CPU copies) or request more memory.",
            )
        if category == "killed":
            return (
                f"{who} {how}: the out-of-memory killer or a hard kill (kill -9, a scheduler) ended it",
                "Check dmesg for the OOM killer and the scheduler's record for a kill; the other ranks' "
                "failures follow from this one.",
            )
        if category == "teardown":
            return (
                f"{who} aborted (SIGABRT){earlier}: PyTorch's watchdog took the process down after a timeout "
                "or NCCL error (a consequence)",
                "These aborts are the watchdog's teardown; look at the finding that explains the timeout "
                "or NCCL error first.",
            )
        if category == "abort":
            return (
                f"{who} aborted (SIGABRT) with no watchdog timeout or NCCL error logged before it",
                "An abort without a watchdog timeout is usually a failed assertion or std::terminate in "
                "native code: look at the lines just before the abort on this rank and enable core dumps.",
            )
        if category == "abort-later":
            return (
                f"{who} aborted (SIGABRT){earlier}",
                "These aborts came after another process failed; start from the first failure.",
            )
        if category == "stopped":
            return (
                f"{who} {how}{earlier}: stopped by the launcher or the scheduler (a consequence)",
                "Launchers terminate the remaining workers once one fails; start from the first failure.",
            )
        if category == "after-exception":
            return (
                f"{who} {how} after {lead.because}",
                "The exception is the cause: see the NCCL or CUDA error finding for this rank.",
            )
        if category == "gave-up":
            return (
                f"{who} {how} after giving up waiting for their peers at the rendezvous: uncaught "
                f"{lead.because} (a consequence)",
                "These processes waited for a peer or the c10d store that never came: see the finding that "
                "names who never arrived.",
            )
        if category == "uncaught":
            return (
                f"{who} ended with an uncaught {lead.reason} (a Python traceback from the top level of the "
                "script; no launcher exit report)",
                "The exception is what ended the process: read its traceback; if it is an NCCL or CUDA "
                "error, the finding for that error explains the cause.",
            )
        if category == "exit-first" and lead.because:
            return (
                f"{who} {how}, the first process to fail: uncaught {lead.because} at the top level "
                "of the script",
                "The exception ended the process before or while the job started, and the other ranks "
                "waited for it: fix what its traceback names (a missing package or module on that node's "
                "image, a bad path or argument); the others' timeouts follow from it.",
            )
        if category == "exit-first":
            return (
                f"{who} {how}, the first process to fail",
                "Look at this rank's Python traceback (or its error file) for the exception that ended it.",
            )
        return (
            f"{who} {how}{earlier}",
            "These exits came after another process failed; start from the first failure.",
        )

    def _scheduler(self, job: Job, exits: pl.DataFrame) -> Iterator[Finding]:
        if exits.is_empty() or "event" not in exits.columns:
            return
        nodes = exits.filter(pl.col("event") == "slurm_node_failure")
        if nodes.height:
            hosts = sorted({nccl_host(h) for h in nodes["exit_host"].drop_nulls().to_list()})
            ranks = (
                [
                    int(r)
                    for r in job.processes.filter(pl.col("host").is_in(hosts))["global_rank"].drop_nulls()
                ]
                if not job.processes.is_empty()
                else []
            )
            yield self.finding(
                job,
                f"Slurm reported a node failure on {', '.join(hosts)}: every process on it died",
                evidence_rows=rows_of(nodes),
                ranks=ranks,
                hosts=hosts,
                severity=Severity.CRITICAL,
                advice="Drain the node and check its hardware and kernel logs (GPU Xid, ECC, power, "
                "network).",
            )
        cancelled = exits.filter(pl.col("event") == "slurm_cancelled")
        if "cancel_reason" in cancelled.columns:
            reasons = cancelled.filter(pl.col("cancel_reason").is_not_null())
            for (reason,), group in reasons.group_by("cancel_reason", maintain_order=True):
                hosts = sorted({nccl_host(h) for h in group["exit_host"].drop_nulls().to_list()})
                when = group["cancel_time"].drop_nulls().first() if "cancel_time" in group.columns else None
                if reason == "TIME LIMIT":
                    title = (
                        f"Slurm cancelled the job at its time limit{f' ({when})' if when else ''}: every "
                        "process was killed; the job had stopped making progress or needed more time"
                    )
                    advice = (
                        "If the job was hanging, the other findings say where; otherwise raise the time "
                        "limit. Dump the stacks (py-spy dump) of a job that stops progressing before the "
                        "limit kills it."
                    )
                    severity = Severity.ERROR
                else:
                    title = (
                        f"Slurm cancelled the job due to {reason.lower()} on {', '.join(hosts) or 'a node'}"
                    )
                    advice = "Check the Slurm controller log (sacct, scontrol show job) for why."
                    severity = Severity.CRITICAL if "NODE FAILURE" in reason else Severity.ERROR
                yield self.finding(
                    job, title, evidence_rows=rows_of(group), hosts=hosts, severity=severity, advice=advice
                )


def _rank_of_local(job: Job, local: int | None) -> int | None:
    procs = job.processes
    if local is None or procs.is_empty() or procs["host"].n_unique() != 1:
        return None
    match = procs.filter(pl.col("cuda_dev") == local)
    return int(match["global_rank"][0]) if match.height == 1 and match["global_rank"][0] is not None else None


def _ras_loggers(job: Job) -> list[int]:
    """Ranks whose processes logged any RAS line: their RAS thread was alive."""
    ras = job.table("ras")
    if ras.is_empty():
        return []
    return [int(r) for r in with_job_rank(job, ras)["job_rank"].drop_nulls().unique()]


def _destroyed_ranks(job: Job) -> set[int]:
    """Ranks whose process logged a communicator Destroy: they reached the normal end of the job."""
    comms = job.table("comms")
    if comms.is_empty() or "what" not in comms.columns or job.processes.is_empty():
        return set()
    done = comms.filter(pl.col("what") == "Destroy").select("host", "pid").unique()
    ended = job.processes.join(done, on=["host", "pid"], how="semi")["global_rank"]
    return {int(r) for r in ended.drop_nulls()}


def _by_local_rank(deaths: list[Death]) -> dict[int, list[Death]]:
    out: dict[int, list[Death]] = {}
    for d in deaths:
        if d.local_rank is not None:
            out.setdefault(int(d.local_rank), []).append(d)
    return out


def _rank_by_absence(job: Job, deaths: list[Death]) -> None:
    """Give the deaths without a rank the world ranks that never logged an Init line, when they are exactly as
    many (k processes died at the top level before NCCL init, k ranks of the world never joined it): the set
    of ranks is certain; with several, the pairing follows the order of the tracebacks."""
    unranked = [d for d in deaths if d.rank is None]
    if not unranked:
        return
    world = next((s for s in stalled_inits(job) if s.world), None)
    if world is None:
        return
    named = {d.rank for d in deaths if d.rank is not None}
    missing = [r for r in world.missing if r not in named]
    if len(missing) == len(unranked):
        for d, rank in zip(sorted(unranked, key=lambda d: d.first), missing):
            d.rank = rank


def _teardown_ranks(job: Job) -> dict[int, int]:
    """Ranks that logged a watchdog timeout, a teardown message, an NCCL abort or a fatal NCCL exception."""
    found: dict[int, int] = {}

    def note(frame: pl.DataFrame) -> None:
        for rank, sid, line in (
            with_job_rank(job, frame).select("job_rank", "source_id", "line_no").iter_rows()
        ):
            if rank is not None:
                found.setdefault(int(rank), order_key(sid, line))

    torch = job.table("torch")
    if not torch.is_empty() and "event" in torch.columns:
        rows = torch.filter(pl.col("event").is_in(TEARDOWN_TORCH_EVENTS))
        if "pg_rank" in rows.columns:
            rows = rows.with_columns(
                torch_rank=pl.coalesce(
                    *[
                        pl.col(c).cast(pl.Int64)
                        for c in ("torch_rank", "task", "mpi_rank", "pg_rank")
                        if c in rows.columns
                    ]
                )
            )
        note(rows)
    comms = job.table("comms")
    if not comms.is_empty() and "what" in comms.columns:
        note(comms.filter(pl.col("what") == "Abort"))
    apps = job.table("app_errors")
    if not apps.is_empty() and "event" in apps.columns:
        note(apps.filter(pl.col("event").is_in(["cpp_terminate", "nccl_error", "nccl_error_code"])))
    errors = job.table("errors")
    if not errors.is_empty() and "error_kind" in errors.columns:
        note(errors.filter(pl.col("error_kind").is_in(["async_error", "fatal", "ib_completion"])))
    return found


def _exception_ranks(job: Job) -> dict[int, tuple[int, str]]:
    """Ranks that raised an NCCL or CUDA exception (or failed an nccl-tests check), with its name."""
    found: dict[int, tuple[int, str]] = {}
    apps = job.table("app_errors")
    if not apps.is_empty() and "error_class" in apps.columns:
        rows = with_job_rank(job, apps.filter(pl.col("error_class").is_not_null()))
        for r in rows.iter_rows(named=True):
            text = " ".join(
                str(r.get(c) or "") for c in ("error_class", "nccl_error", "cuda_error", "detail")
            )
            if r["job_rank"] is not None and pl.Series([text]).str.contains(NCCL_OR_CUDA)[0]:
                what = (
                    "raising " + r["error_class"] + (f" ({r['nccl_error']})" if r.get("nccl_error") else "")
                )
                found.setdefault(int(r["job_rank"]), (order_key(r["source_id"], r["line_no"]), what))
    failed_tests = nccl_tests_failures(job)
    if "job_rank" in failed_tests.columns:
        failed_tests = failed_tests.filter(pl.col("job_rank").is_not_null())
    for r in failed_tests.iter_rows(named=True):
        what = f"an NCCL error in nccl-tests ({r.get('test_error') or 'test failure'})"
        found.setdefault(int(r["job_rank"]), (order_key(r["source_id"], r["line_no"]), what))
    tests = job.table("nccltests")
    if (
        not tests.is_empty()
        and "event" in tests.columns
        and "test_pid" in tests.columns
        and not job.processes.is_empty()
    ):
        failures = (
            tests.filter(pl.col("event").is_in(["test_nccl_failure", "test_cuda_failure", "test_failure"]))
            .sort("source_id", "line_no")
            .with_columns(pl.col("test_error").forward_fill().over("source_id", "test_host"))
            .filter(pl.col("test_pid").is_not_null())
            .select("source_id", "line_no", "test_pid", "test_host", "test_error")
        )
        procs = job.processes.select(
            pl.col("pid").alias("test_pid"), pl.col("host").alias("_host"), "global_rank"
        )
        for r in failures.join(procs, on="test_pid", how="inner").iter_rows(named=True):
            if r["global_rank"] is not None and (
                r["test_host"] is None or nccl_host(r["test_host"]) == r["_host"]
            ):
                what = f"an NCCL error in nccl-tests ({r.get('test_error') or 'test failure'})"
                found.setdefault(int(r["global_rank"]), (order_key(r["source_id"], r["line_no"]), what))
    return found
