"""Rules about getting a job started: init that never completed, bootstrap failures, bad interfaces (LS2xx).

| code | name | kind | severity |
|---|---|---|---|
| LS201 | init-incomplete | init_incomplete | critical |
| LS202 | bootstrap-failure | bootstrap_failure | critical |
| LS203 | interface-misconfig | interface_misconfig | error |

Communicator init is judged per communicator (``comm_uid``): one member's ``Init COMPLETE`` means every
member took part in the bootstrap, so ranks can only be "missing" from a communicator that nobody finished.
Init instances are rebuilt here from the Init/Destroy/Abort rows alone, because a summary line between
START and COMPLETE (2.20.3+) would otherwise split one instance in two.

Ranks of processes that never logged an Init line (a rank that failed before Init START) come from PyTorch
or launcher labels, torchrun's failure summary, or, as a last resort, from the ranks the communicator lacks.
The helpers here are shared with the placement rules (LS4xx).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import EVIDENCE, evidence, rows_of
from nccl_logsift.findings.wording import names_or_span, plural, rank_word, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.failures import failure_rows
from nccl_logsift.resolve.hosts import nccl_host
from nccl_logsift.resolve.inits import InitState, lifecycle_instances, resolve_rows, stalled_inits
from nccl_logsift.resolve.interfaces import Iface, address_kind, interfaces, parse_ip, socket_ifname, subnet16
from nccl_logsift.resolve.job import Job, per_job, rank_range
from nccl_logsift.resolve.processes import PROC, launcher_hosts
from nccl_logsift.resolve.ranks import known_ranks, label_rank, with_job_rank
from nccl_logsift.resolve.transports import address_hosts, logged_hosts, n_nodes

REMOTE_ERROR = 6

# Interfaces that other hosts usually cannot reach (container bridges, loopback) — grammar §4.2, taxonomy C.
BAD_IFNAME = re.compile(r"^(?:lo|veth\w*|docker\w*|br-\w+|virbr\w*|cni\w*|flannel\.?\w*|cali\w+|vxlan\w*)$")


def chain_after(job: Job, rows: pl.DataFrame, window: int = 12) -> pl.DataFrame:
    """For each row (host, pid, tid, seq), the chain lines of the same thread that follow it closely."""
    errors = job.table("errors")
    if rows.is_empty() or errors.is_empty():
        return pl.DataFrame()
    chains = with_seq(errors.filter(pl.col("error_kind") == "chain")).select(
        *PROC, "tid", pl.col("seq").alias("chain_seq"), "chain_file", "result_code", *EVIDENCE
    )
    if chains.is_empty():
        return chains
    keyed = rows.select(*PROC, "tid", "seq").with_row_index("row")
    joined = keyed.join(chains, on=[*PROC, "tid"], how="inner").filter(pl.col("chain_seq") > pl.col("seq"))
    return joined.sort("chain_seq").group_by("row").head(window)


@per_job
def hang_signs(job: Job) -> bool:
    """Anything that says the job ended badly: a watchdog, an abort, a NCCL WARN, a failed process."""
    torch = job.table("torch")
    if (
        not torch.is_empty()
        and "event" in torch.columns
        and torch.filter(pl.col("event").str.contains("timeout")).height
    ):
        return True
    comms = job.table("comms")
    if not comms.is_empty() and comms.filter(pl.col("what") == "Abort").height:
        return True
    if not failure_rows(job).is_empty():
        return True
    exits = job.table("exits")
    if not exits.is_empty() and exits.filter(pl.col("exit_code").fill_null(0) != 0).height:
        return True
    apps = job.table("app_errors")
    return (
        not apps.is_empty()
        and apps.filter(pl.col("event").is_in(("nccl_error", "store_barrier_timeout", "cuda_oom"))).height > 0
    )


# ---------------------------------------------------------------------------------------------- LS201
# ProcessGroupNCCL/c10d store lines a rank prints before its NCCL communicator exists
# (grammars/torch/pg_init.toml, c10d_store.toml).
BEFORE_COMM_EVENTS = (
    "pg_options",
    "pg_environment",
    "device_guess",
    "c10d",
    "store_connect_failed",
    "store_connect_timeout",
    "store_server_failed",
    "store_socket_init_failed",
)


@dataclass(frozen=True)
class Absence:
    """Ranks that never reached the rendezvous, proved by the errors of the peers that waited for them."""

    absent: tuple[int, ...]
    waiting: tuple[int, ...]
    what: str  # what the waiting ranks did, for the title
    rows: pl.DataFrame  # the peers' error lines
    event: str  # the event of those lines
    hosts: tuple[str, ...] = ()  # hosts proved absent with the ranks (nothing in the logs comes from them)
    title: str = ""  # when the absent are nodes, not ranks: the whole title


@per_job
def absent_at_init(job: Job) -> Absence | None:
    """Who never arrived, named by absence: the ranks that waited for rank 0's ncclUniqueId in the c10d store
    (rank 0 publishes it when it creates the communicator; in the default group, group ranks are global)
    while rank 0 shows no sign of having been there (no NCCL line, no process-group line of its own); or the
    ranks missing from a store server's ``J/E clients joined``, when the ranks seen leave exactly E-J out; or
    rank 0, whose store its peers' clients timed out connecting to (:func:`_store_never_listened`)."""
    apps = job.table("app_errors")
    if apps.is_empty() or "event" not in apps.columns:
        return None
    default_pg = pl.col("barrier_key").fill_null("0") == "0"
    waited = apps.filter((pl.col("event") == "unique_id_store_error") & default_pg)
    if waited.height:
        who = with_job_rank(job, waited).select(
            pl.coalesce("job_rank", pl.col("barrier_rank").cast(pl.Int64))
        )
        waiting = sorted({int(r) for r in who.to_series().drop_nulls()})
        if waiting and 0 not in waiting and 0 not in _at_rendezvous(job):
            detail = waited["detail"].drop_nulls()
            why = f" ({detail[0]})" if detail.len() else ""
            what = f"waited for its ncclUniqueId in the c10d store and gave up{why}"
            return Absence((0,), tuple(waiting), what, waited, "unique_id_store_error")
    clients = apps.filter(pl.col("event") == "store_clients_timeout")
    if clients.height:
        joined, expected = int(clients["clients_joined"].min()), int(clients["clients_expected"].max())
        seen = _seen_ranks(job)
        absent = sorted(set(range(expected)) - seen)
        if absent and len(absent) == expected - joined:
            present = sorted(seen & set(range(expected)))
            what = f"joined the c10d store ({joined} of {expected} clients); the server timed out"
            return Absence(tuple(absent), tuple(present), what, clients, "store_clients_timeout")
    torch = job.table("torch")
    if not torch.is_empty() and "event" in torch.columns:
        timed_out = torch.filter(pl.col("event") == "store_connect_timeout")
        if timed_out.height:
            return _store_never_listened(job, timed_out)
    gave_up = apps.filter(pl.col("event") == "rendezvous_timeout")
    if gave_up.height:
        return _rendezvous_short_of_nodes(job, gave_up)
    return None


def _rendezvous_short_of_nodes(job: Job, rows: pl.DataFrame) -> Absence:
    """torchrun's dynamic rendezvous raises RendezvousTimeoutError when fewer than ``min_nodes`` node agents
    joined before its join timeout: the nodes that never arrived are the cause, the agents that logged
    ``attempts to join`` only waited. Which hosts are missing no line says; how many, the launch configs do
    when they were logged (``min_nodes : N``)."""
    torch = job.table("torch")
    came: list[str] = []
    run = min_nodes = None
    if not torch.is_empty() and "rdzv_host" in torch.columns:
        joins = torch.filter(pl.col("event") == "rdzv_join_attempt")
        came = sorted(set(joins["rdzv_host"].drop_nulls().to_list()))
        runs = joins["rdzv_run"].drop_nulls()
        run = runs[-1] if runs.len() else None
        config = torch.filter((pl.col("event") == "elastic_config") & (pl.col("config_key") == "min_nodes"))
        values = [int(v) for v in config["config_value"].drop_nulls().to_list() if v.isdigit()]
        min_nodes = max(values) if values else None
    missing = min_nodes - len(came) if min_nodes is not None and min_nodes > len(came) else None
    who = plural(missing, "node") if missing else "A node"
    of = f" of the {min_nodes} it needs" if min_nodes else ""
    came_text = f"{plural(len(came), 'node')} ({', '.join(came[:4])}{' …' if len(came) > 4 else ''}){of}"
    title = (
        f"{who} never joined torchrun's rendezvous{f' {run!r}' if run else ''}: "
        + (f"only {came_text} arrived" if came else "the node agents")
        + " and timed out waiting (RendezvousTimeoutError)"
    )
    return Absence((), (), "", rows, "rendezvous_timeout", title=title)


def _store_never_listened(job: Job, rows: pl.DataFrame) -> Absence | None:
    """Rank 0, named by absence from its peers' store connections: the c10d TCPStore of ``init_process_group``
    (env:// or tcp://) and of torchrun's static rendezvous listens on MASTER_ADDR:MASTER_PORT, in rank 0's
    process (or node 0's agent). Clients that time out connecting to it (socket.cpp ``The client socket has
    timed out after T while trying to connect to (host, port).``) while rank 0 printed nothing at all never
    had a store to join. When no line comes from the store's host either, its node never came up."""
    waiting = sorted({int(r) for r in with_job_rank(job, rows)["job_rank"].drop_nulls()})
    stores = rows.select("store_host", "store_port").unique()
    if 0 in waiting or 0 in _seen_ranks(job) or stores.height != 1:
        return None  # rank 0 was there (a firewall, a wrong MASTER_ADDR), or the ranks disagree on the store
    host, port = stores.row(0)
    local = host in ("localhost", None) or address_kind(host) == "loopback"
    silent = not local and not _host_logged(job, host)
    what = f"timed out connecting to the c10d store on {host}:{port}" + (
        ", a host no line of these logs comes from" if silent else ""
    )
    named = (nccl_host(host),) if silent and parse_ip(host) is None else ()
    return Absence((0,), tuple(waiting), what, rows, "store_connect_timeout", named)


def _host_logged(job: Job, host: str) -> bool:
    """Some process of the logs ran on ``host``: a name NCCL or a launcher's exit report printed, or an
    address a logged process printed."""
    name = nccl_host(host)
    return name in logged_hosts(job) or name in launcher_hosts(job) or bool(address_hosts(job).get(host))


def _at_rendezvous(job: Job) -> set[int]:
    """Ranks with a sign of having reached communicator creation: an NCCL line of their process, or a line of
    ProcessGroupNCCL in the default group from after it (the options a ProcessGroupNCCL prints when it is
    constructed come before: with lazy init the communicator is created at the first collective)."""
    torch = job.table("torch")
    ranks: set[int] = set()
    if not torch.is_empty() and "pg_rank" in torch.columns:
        after = torch.filter((pl.col("pg_id").fill_null(0) == 0) & ~pl.col("event").is_in(BEFORE_COMM_EVENTS))
        ranks |= {int(r) for r in after["pg_rank"].drop_nulls()}
    if not job.processes.is_empty():
        ranks |= {int(r) for r in job.processes["global_rank"].drop_nulls()}
    return ranks


def _seen_ranks(job: Job) -> set[int]:
    """Every global rank with any line in the logs: processes, launcher labels, PyTorch rank prefixes."""
    seen = _at_rendezvous(job) | set(known_ranks(job)["rank"].to_list())
    seen |= set(job.torch_ranks["rank"].to_list())
    lines = job.lines
    labels = [label_rank(job, c) for c in ("task", "mpi_rank") if c in lines.columns]
    if labels:
        seen |= {int(r) for r in lines.select(pl.coalesce(*labels)).to_series().drop_nulls().unique()}
    return seen


class InitIncomplete(Rule):
    """Communicator init never completed: some ranks never joined, the others wait for them.

    What it means:
        A communicator (usually the world communicator that ``init_process_group`` creates) was started by
        some ranks but no rank ever logged ``Init COMPLETE``. NCCL init is collective: every rank must take
        part in the bootstrap, so the ranks that arrived wait, without a timeout, for those that did not.

    Why it matters:
        Nothing after init can run; the job hangs at start-up until a launcher or PyTorch timeout kills it
        (often 30 minutes later). The ranks that print the most are the ones that wait; the culprits are the
        ranks that never arrived, and they may print nothing at all.

    How it is detected:
        Init instances are grouped by communicator (commId, or split parent/color). For a communicator
        that no member completed, ranks with ``Init START`` (NCCL 2.18.3+) and no error are waiting; ranks
        of the communicator that appear in no Init line never joined, unless they are processes that failed
        before Init START (a WARN or ``-> N`` chain, matched through labels, torchrun's summary, or by count).
        Absent ranks are only reported while someone waits for them (otherwise their output may simply be
        missing from the logs), and one COMPLETE on any member proves every member joined, so partial logs
        of a healthy job (one node's output) never look incomplete. The waiting ranks are a separate finding,
        an error when the ranks they wait for are known, critical when nobody failed or is missing.
        Stalled subgroup communicators (new_group, point-to-point pairs) are summed up in one finding.
        From PyTorch's store-based barrier (``Waiting in store based barrier
        … (world_size=W, worker_count=K …)``, ≤ 2.1): the W-K ranks that never reported are named when the
        reporters leave exactly that many out. Named by absence from the peers' rendezvous errors: ranks that
        gave up waiting for rank 0's ncclUniqueId in the c10d store (``[2] is setting up NCCL communicator and
        retrieving ncclUniqueId from [0] … got error: Socket Timeout``) while rank 0 logged no NCCL or
        ProcessGroupNCCL line make rank 0 the culprit; a store server's ``Timed out after N seconds waiting
        for clients. J/E clients joined`` names the ranks no line of the logs comes from when they are exactly
        E-J; clients that time out connecting to the c10d store (``[c10d] The client socket has timed out
        after T while trying to connect to (host, port).``) while rank 0, which hosts it, logged nothing make
        rank 0 the culprit, with the store's host when no line of the logs (nor a launcher's exit report)
        comes from it; torchrun agents that raise RendezvousTimeoutError after ``The node '<host>_<pid>_0'
        attempts to join the next round of the rendezvous`` make the nodes that never joined the culprits,
        counted from the launch configs' ``min_nodes`` when logged. The peers' errors are then consequences.
        Before 2.18.3 there is no START line: a process that printed
        ``Using network …`` (once per communicator init) more often than it completed inits is still in init.

    Example:
        ``ncclCommInitRankConfig comm 0x5509e7ccfed0 rank 0 nranks 4 …
        commId 0x7bbff3add302d34a - Init START``
        from ranks 0 and 1 only, no Init COMPLETE anywhere: ranks 2 and 3 never joined.

    What to do:
        Look at the ranks that never joined: did their processes start at all (launcher output, node
        health, ``nvidia-smi``), are they stuck before ``init_process_group`` (data loading, a hung CUDA
        init: ``py-spy dump --pid PID``), or did they fail (their own errors are reported separately)? Check
        that every node got the same MASTER_ADDR/MASTER_PORT and world size.
    """

    code = "LS201"
    name = "init-incomplete"
    kind = Kind.INIT_INCOMPLETE
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        yield from self._from_absence(job)
        yield from self._from_init_lines(job)
        yield from self._from_store_barrier(job)
        yield from self._from_pre_start_versions(job)

    # ------------------------------------------------------------------ named by the peers that waited
    def _from_absence(self, job: Job) -> Iterator[Finding]:
        found = absent_at_init(job)
        if found is None:
            return
        waiting = (
            f"{plural(len(found.waiting), 'rank')} ({ranks_text(found.waiting)})"
            if found.waiting
            else plural(found.rows.height, "process")
        )
        where = f" on {', '.join(found.hosts)}" if found.hosts else ""
        title = found.title or (
            f"{rank_word(found.absent)}{where} never arrived at the rendezvous: {waiting} {found.what}"
        )
        yield self.finding(
            job,
            title,
            evidence_rows=evidence(found.rows.head(4)),
            ranks=list(found.absent),
            hosts=list(found.hosts),
            advice=self._advice_absent(found),
        )

    @staticmethod
    def _advice_absent(found: Absence) -> str:
        if found.event == "rendezvous_timeout":
            return (
                "Find the node(s) whose torchrun never reached the rendezvous endpoint: compare the nodes "
                "the scheduler allocated with those that attempted to join; check that torchrun started on "
                "each (launcher output, node health) with the same --rdzv-endpoint, --rdzv-id and --nnodes, "
                "and that the endpoint's port is reachable from it."
            )
        if found.event == "store_connect_timeout":
            return (
                "Rank 0 hosts the c10d store the others connect to (MASTER_ADDR:MASTER_PORT): find out why "
                "it never started listening. Check that rank 0's process (or, with torchrun, node 0's agent) "
                "was started at all (launcher output, node health"
                + (f" of {', '.join(found.hosts)}" if found.hosts else "")
                + "), that MASTER_ADDR names the node that runs rank 0, and that nothing before "
                "init_process_group held it up."
            )
        if found.absent == (0,):
            return (
                "Find out what rank 0 was doing instead of creating the communicator: work done on rank 0 "
                "only after init_process_group (a dataset download or preprocessing, a checkpoint "
                "conversion) while the others start training; dump its stack (py-spy dump --pid PID), and "
                "move such work before init_process_group or behind a barrier with a long enough timeout."
            )
        return (
            f"Find out why {rank_word(found.absent)} never connected: check that their processes were "
            "started (launcher output, node health) and reach MASTER_ADDR:MASTER_PORT with the same "
            "WORLD_SIZE."
        )

    # ------------------------------------------------------------------ NCCL Init START without COMPLETE
    def _from_init_lines(self, job: Job) -> Iterator[Finding]:
        states = stalled_inits(job)
        for state in (s for s in states if s.world):
            yield from self._world(job, state)
        others = [s for s in states if not s.world and s.waiting]
        if others:
            yield self._sub_communicators(job, others)

    def _world(self, job: Job, state: InitState) -> Iterator[Finding]:
        waiting_rows = state.members.filter(pl.col("global_rank").is_in(state.waiting))
        failed = state.failed + state.failed_elsewhere
        if state.unexplained and state.waiting:
            # Without a rank waiting for them, absent ranks may just be output missing from these logs.
            failed_note = (
                f"; {names_or_span(job, failed)} failed during init (see their errors)" if failed else ""
            )
            title = (
                f"{rank_word(state.unexplained)} never joined communicator {state.uid} ({state.nranks} "
                "ranks): no Init "
                f"line from them; {plural(len(state.waiting), 'rank')} ({ranks_text(state.waiting)}) started "
                "init and "
                f"wait for them{failed_note}"
            )
            yield self.finding(
                job,
                title,
                evidence_rows=evidence(waiting_rows.head(3)),
                ranks=state.unexplained,
                comm=state.uid,
                advice=self._advice_missing(job, state),
            )
        if not state.waiting:
            return
        if state.unexplained:
            why = f"waiting for {rank_word(state.unexplained)} (never joined)"
        elif failed:
            why = f"waiting for {names_or_span(job, failed)}, which failed during init"
        else:
            why = "no rank logged an error: the bootstrap or the connection setup hangs"
        title = (
            f"{names_or_span(job, state.waiting)} started init of communicator {state.uid} "
            f"({state.nranks} ranks) and never completed it: {why}"
        )
        explained = bool(state.unexplained or failed)
        yield self.finding(
            job,
            title,
            evidence_rows=evidence(waiting_rows),
            ranks=state.waiting,
            comm=state.uid,
            severity=Severity.ERROR if explained else Severity.CRITICAL,
            advice="These ranks were waiting; look at the ranks they wait for first."
            if explained
            else self._advice_hang(),
        )

    def _sub_communicators(self, job: Job, states: list[InitState]) -> Finding:
        """Smaller communicators (process subgroups, point-to-point pairs) that never completed init: one
        finding."""
        ranks = sorted({r for s in states for r in s.waiting})
        groups = "; ".join(
            f"{ranks_text(s.waiting)}" + (f" (+{len(s.missing)} absent)" if s.missing else "")
            for s in states[:6]
        ) + (" …" if len(states) > 6 else "")
        sizes = sorted({s.nranks for s in states})
        failed = sorted({r for s in states for r in s.failed})
        title = (
            f"{plural(len(states), 'communicator')} of {'/'.join(str(n) for n in sizes)} ranks never "
            "completed init "
            f"(waiting ranks per communicator: {groups})"
        )
        if failed:
            title += f"; {names_or_span(job, failed)} failed during their init"
        explained = bool(failed) or any(s.missing for s in states) or hang_signs(job)
        if explained and not failed:
            title += "; other failures or timeouts in the job may explain it"
        rows = pl.concat(
            [evidence(s.members.filter(pl.col("global_rank").is_in(s.waiting)).head(2)) for s in states]
        )
        return self.finding(
            job,
            title,
            evidence_rows=rows,
            ranks=ranks,
            comm=states[0].uid if len(states) == 1 else None,
            severity=Severity.ERROR if explained else Severity.CRITICAL,
            advice=(
                "A subgroup communicator is created when its members first use it (new_group, a send/recv "
                "pair): "
                "a member that never arrives leaves the others in init. Look at the other findings for the "
                "rank "
                "that stopped; otherwise " + self._advice_hang()[0].lower() + self._advice_hang()[1:]
            ),
        )

    @staticmethod
    def _advice_hang() -> str:
        return (
            "Dump the stacks of the waiting ranks (py-spy dump --pid PID) and rerun with NCCL_DEBUG=INFO "
            "NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,NET to see where init stops; check that every host can reach "
            "the "
            "others on the bootstrap interface."
        )

    @staticmethod
    def _advice_missing(job: Job, state: InitState) -> str:
        return (
            f"Find out why {rank_word(state.unexplained)} never reached ncclCommInitRank: check that their "
            "processes were started (launcher output, node health), dump their stacks if they run "
            "(py-spy dump --pid PID: data loading, a hung CUDA init, a rank-dependent branch before "
            "init_process_group), and that every node uses the same MASTER_ADDR, MASTER_PORT and world size."
        )

    # ------------------------------------------------------------------ PyTorch store-based barrier
    def _from_store_barrier(self, job: Job) -> Iterator[Finding]:
        apps = job.table("app_errors")
        if apps.is_empty() or "event" not in apps.columns:
            return
        rows = apps.filter(
            pl.col("event").is_in(
                ("store_barrier", "store_barrier_timeout", "store_barrier_done", "store_barrier_key")
            )
        )
        if not rows.is_empty():
            for (key,), group in rows.group_by("barrier_key"):
                finding = self._barrier(job, key, group)
                if finding:
                    yield finding
        clients = apps.filter(pl.col("event") == "store_clients_timeout")
        if clients.height and absent_at_init(job) is None:
            joined = int(clients["clients_joined"].min())
            expected = int(clients["clients_expected"].max())
            title = (
                f"The c10d store server timed out waiting for clients: {joined} of {expected} joined, "
                f"{expected - joined} never connected"
            )
            yield self.finding(
                job,
                title,
                evidence_rows=evidence(clients.head(3)),
                advice="Check that every rank was launched and can reach MASTER_ADDR:MASTER_PORT (firewall, "
                "wrong address).",
            )

    def _barrier(self, job: Job, key, group: pl.DataFrame) -> Finding | None:
        if group.filter(pl.col("event") == "store_barrier_done").height:
            return None
        waits = group.filter(pl.col("event").is_in(("store_barrier", "store_barrier_timeout")))
        if waits.is_empty():
            return None
        world, count = waits["world_size"].max(), waits["worker_count"].max()
        if world is None or count is None:  # too large for their column (parse/kinds.py): nothing to compare
            return None
        timed_out = waits.filter(pl.col("event") == "store_barrier_timeout")
        if count >= world:
            return None
        reporters = {int(r) for r in group["barrier_rank"].drop_nulls()}
        absent = sorted(set(rank_range(world)) - reporters)
        ranks = absent if len(absent) == world - count else []
        who = rank_word(ranks) if ranks else plural(world - count, "rank")
        state = "timed out" if timed_out.height else "waited"
        title = (
            f"{who} never reached the store-based barrier of init_process_group (key {key}): "
            f"{count} of {world} ranks joined; {plural(len(reporters), 'rank')} ({ranks_text(reporters)}) "
            f"{state} for them"
        )
        ev = pl.concat([rows_of(timed_out.head(2)), rows_of(waits.sort("line_no").head(2))])
        return self.finding(
            job,
            title,
            evidence_rows=ev,
            ranks=ranks,
            advice=(
                "The missing ranks never called init_process_group: check that they were launched, that they "
                "use "
                "the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE, and dump their stacks if they run."
            ),
        )

    # ------------------------------------------------------------------ NCCL < 2.18.3: no START line
    def _from_pre_start_versions(self, job: Job) -> Iterator[Finding]:
        comms = job.table("comms")
        if not comms.is_empty() and comms.filter(pl.col("phase") == "START").height:
            return  # START lines exist: handled by _from_init_lines
        net = job.table("network")
        if net.is_empty() or "event" not in net.columns:
            return
        selected = with_seq(net.filter((pl.col("event") == "net_selected") & pl.col("host").is_not_null()))
        if selected.is_empty():
            return
        inst = lifecycle_instances(job)
        done = inst.group_by(PROC).agg(inits=pl.len(), last_complete=pl.col("complete_seq").max())
        per = (
            selected.group_by(PROC)
            .agg(
                selects=pl.len(),
                last_select=pl.col("seq").max(),
                source_id=pl.col("source_id").last(),
                line_no=pl.col("line_no").last(),
                part=pl.col("part").last(),
            )
            .join(done, on=PROC, how="left")
            .with_columns(pl.col("inits").fill_null(0))
        )
        stuck = per.filter(
            (pl.col("selects") > pl.col("inits"))
            & (pl.col("last_complete").is_null() | (pl.col("last_select") > pl.col("last_complete")))
        )
        if stuck.is_empty():
            return
        failures = failure_rows(job)
        failed = (
            stuck.join(failures.select(*PROC, pl.col("seq").alias("fail_seq")), on=PROC, how="inner")
            .filter(pl.col("fail_seq") > pl.col("last_select"))
            .select(PROC)
            .unique()
        )
        waiting = with_job_rank(job, stuck.join(failed, on=PROC, how="anti"))
        if waiting.is_empty():
            return  # every process that began init failed: their own errors say why
        failed = with_job_rank(job, failed)
        ranks = sorted(int(r) for r in waiting["job_rank"].drop_nulls())
        hosts = sorted(set(waiting["host"].to_list()))
        none_completed = inst.is_empty()
        if ranks and len(ranks) == waiting.height:
            who = names_or_span(job, ranks, hosts=hosts)
        else:
            who = f"{plural(waiting.height, 'process')} on {', '.join(hosts[:4])}"
        if failed.height:
            failed_ranks = sorted(int(r) for r in failed["job_rank"].drop_nulls())
            failed_word = (
                rank_word(failed_ranks)
                if len(failed_ranks) == failed.height
                else plural(failed.height, "process")
            )
            why = f"; {failed_word} failed during init (see their errors)"
        elif none_completed:
            why = "; no communicator of the job completed init, and the ranks that never joined print nothing"
        else:
            why = ""
        title = f"{who} began NCCL communicator init ('Using network …') and never logged Init COMPLETE{why}"
        explained = failed.height > 0
        yield self.finding(
            job,
            title,
            evidence_rows=evidence(waiting),
            ranks=ranks,
            hosts=hosts,
            severity=Severity.ERROR
            if explained or not (none_completed or hang_signs(job))
            else Severity.CRITICAL,
            advice=(
                "These ranks were waiting; look at the ranks that failed first."
                if explained
                else "This NCCL release prints no Init START line, so which ranks never arrived cannot be "
                "read from "
                "the log. Compare the processes here with the launched world size, and rerun with "
                "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP on every rank."
            ),
        )


# ---------------------------------------------------------------------------------------------- LS202
BOOTSTRAP_KINDS = ("no_interface", "bootstrap")
CONNECT_KINDS = ("socket_connect", "socket_handshake", "socket_truncated")
STORE_EVENTS = ("store_connect_timeout", "store_server_failed")


class BootstrapFailure(Rule):
    """A rank could not bootstrap: no usable interface, a refused or timed-out connection, a bad root.

    What it means:
        The listed ranks failed in NCCL's bootstrap (the TCP rendezvous every rank does before anything
        else) or in PyTorch's rendezvous store: no socket interface matched, connecting to the root or to a
        ring neighbour was refused or timed out, the root saw inconsistent ranks, or the c10d store could
        not be reached.

    Why it matters:
        The communicator cannot be created: the failing ranks raise (DistBackendError, "unhandled system
        error", "internal error"), and every other rank waits in init until a timeout.

    How it is detected:
        NCCL WARNs of the errors table: ``Bootstrap : no socket interface found`` and the other "no
        interface" messages, ``Bootstrap Root : …`` mismatches, and ``connect to … failed`` / retries
        exhausted when the ``file:line -> N`` chain that follows goes through ``bootstrap.cc`` (or, with no
        chain, when the process had not completed an init yet). ``Connection closed by remote peer`` and
        ``-> 6`` chains are what a rank sees when a *peer* died, so they never make a rank a culprit here.
        PyTorch: ``[c10d] The client socket has timed out … while trying to connect``, a store server that
        failed to bind, ``retrieving ncclUniqueId … got error``. The ranks are those that logged the error;
        for processes that failed before any Init line the rank comes from labels, torchrun's summary, or
        the world ranks missing from init.

    Example:
        ``node0065:3204049:3204049 [1] bootstrap.cc:62 NCCL WARN Bootstrap : no socket interface found``
        after ``NCCL_SOCKET_IFNAME set by environment to ens1f0np0``.

    What to do:
        For "no interface": make NCCL_SOCKET_IFNAME match the interface names of every node (a prefix such
        as ``ens`` or an exclusion list ``^docker,lo``; ``ip -br addr`` on the failing node). For refused or
        timed-out connections: check firewalls and routes between the nodes on the bootstrap interface and
        that the address NCCL prints (``Bootstrap : Using if:ip``) is reachable from the others.
    """

    code = "LS202"
    name = "bootstrap-failure"
    kind = Kind.BOOTSTRAP_FAILURE
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        rows = bootstrap_errors(job)
        if not rows.is_empty():
            rows = resolve_rows(job, rows)
            settings = socket_ifname(job)
            for (cause,), group in rows.group_by("cause", maintain_order=True):
                ranks = sorted({int(r) for r in group["job_rank"].drop_nulls()})
                hosts = sorted(set(group["host"].drop_nulls().to_list()))
                ifname = settings.get(hosts[0]) if hosts else None
                unranked = group.filter(pl.col("job_rank").is_null()).select(*PROC).unique().height
                who = names_or_span(job, ranks, hosts=hosts) if ranks else ""
                if unranked:
                    who = (
                        who + " and " if who else ""
                    ) + f"{plural(unranked, 'process')} on {', '.join(hosts[:3])}"
                title = f"{who} could not bootstrap: {cause}"
                if ifname and group["error_kind"].is_in(["no_interface"]).any():
                    title += f" (NCCL_SOCKET_IFNAME={ifname})"
                comm = _comm_of(job, group)
                yield self.finding(
                    job,
                    title,
                    evidence_rows=evidence(group.sort("seq").head(4)),
                    ranks=ranks,
                    hosts=hosts,
                    comm=comm,
                    advice=_bootstrap_advice(group),
                )
        yield from self._from_torch(job)

    def _from_torch(self, job: Job) -> Iterator[Finding]:
        frames = []
        torch = job.table("torch")
        if not torch.is_empty() and "event" in torch.columns:
            frames.append(torch.filter(pl.col("event").is_in(STORE_EVENTS)))
        apps = job.table("app_errors")
        if not apps.is_empty() and "event" in apps.columns:
            frames.append(apps.filter(pl.col("event") == "unique_id_store_error"))
        for rows in frames:
            if rows.is_empty():
                continue
            rows = with_job_rank(job, rows)
            if "barrier_rank" in rows.columns:
                rows = rows.with_columns(
                    job_rank=pl.coalesce("job_rank", pl.col("barrier_rank").cast(pl.Int64))
                )
            for (event,), group in rows.group_by("event", maintain_order=True):
                ranks = sorted({int(r) for r in group["job_rank"].drop_nulls()})
                first = group.row(0, named=True)
                if event == "store_connect_timeout":
                    cause = (
                        f"the c10d store at {first.get('store_host')}:{first.get('store_port')} could not be "
                        f"reached ({first.get('detail')} timeout)"
                    )
                elif event == "store_server_failed":
                    cause = f"the c10d store server failed to {first.get('detail')}"
                else:
                    cause = (
                        "getting the ncclUniqueId from rank 0 through the c10d store failed: "
                        f"{first.get('detail')}"
                    )
                who = names_or_span(job, ranks) if ranks else f"{plural(group.height, 'process')}"
                absence = absent_at_init(job)
                if absence is not None and absence.event == event:
                    # Rank 0 never came to publish the id, or to listen as the store: these ranks only
                    # waited for it.
                    yield self.finding(
                        job,
                        f"{who}: rendezvous failed, {cause}, as {rank_word(absence.absent)} never arrived",
                        evidence_rows=evidence(group.head(4)),
                        ranks=ranks,
                        severity=Severity.ERROR,
                        advice="These ranks waited; look at the rank that never arrived first.",
                    )
                    continue
                yield self.finding(
                    job,
                    f"{who}: rendezvous failed, {cause}",
                    evidence_rows=evidence(group.head(4)),
                    ranks=ranks,
                    advice=(
                        "Check MASTER_ADDR/MASTER_PORT on every rank, that rank 0's host is reachable on "
                        "that port "
                        "(firewall, wrong interface), and that no stale process holds the port."
                    ),
                )


@per_job
def bootstrap_errors(job: Job) -> pl.DataFrame:
    """Bootstrap failures a rank logged about itself, with a ``cause`` text to group them by."""
    errors = job.table("errors")
    if errors.is_empty() or "error_kind" not in errors.columns:
        return pl.DataFrame()
    rows = with_seq(
        errors.filter(
            (pl.col("level") == "WARN")
            & pl.col("error_kind").is_in(BOOTSTRAP_KINDS + CONNECT_KINDS)
            & pl.col("host").is_not_null()
        )
    )
    if rows.is_empty():
        return rows
    rows = rows.with_row_index("row")
    connect = rows.filter(pl.col("error_kind").is_in(CONNECT_KINDS))
    if connect.height:
        chains = chain_after(job, connect)
        via_bootstrap = set()
        with_chain = set()
        if not chains.is_empty():
            for row_idx, files, codes in (
                chains.group_by("row").agg(pl.col("chain_file"), pl.col("result_code")).iter_rows()
            ):
                rid = int(connect["row"][row_idx])
                with_chain.add(rid)
                if any(f and "bootstrap" in f for f in files) and not all(
                    c == REMOTE_ERROR for c in codes if c is not None
                ):
                    via_bootstrap.add(rid)
        inst = lifecycle_instances(job)
        first_done = (
            inst.filter(pl.col("init_completed")).group_by(PROC).agg(done_seq=pl.col("complete_seq").min())
        )
        early = (
            connect.join(first_done, on=PROC, how="left")
            .filter(pl.col("done_seq").is_null() | (pl.col("seq") < pl.col("done_seq")))["row"]
            .to_list()
        )
        keep = via_bootstrap | {r for r in early if r not in with_chain}
        rows = rows.filter(~pl.col("error_kind").is_in(CONNECT_KINDS) | pl.col("row").is_in(list(keep)))
    rows = _with_last_retry(errors, rows)
    errno = pl.col("errno_text").fill_null("")
    peer = pl.col("peer_ip")
    exhausted = pl.col("errno_text").is_in(("retries", "timeouts")) | pl.col("retry_max").is_not_null()
    text = pl.col("error_text") if "error_text" in rows.columns else pl.lit(None, pl.String)
    return rows.with_columns(
        cause=pl.when(pl.col("error_kind").is_in(CONNECT_KINDS) & exhausted)
        .then(
            pl.format(
                "connect{} gave up after its retries{}",
                pl.when(peer.is_not_null()).then(pl.format(" to {}", peer)).otherwise(pl.lit("")),
                pl.when(pl.col("retry_errno").is_not_null())
                .then(pl.format(" ({})", pl.col("retry_errno")))
                .otherwise(pl.lit("")),
            )
        )
        .when(pl.col("error_kind").is_in(CONNECT_KINDS) & peer.is_not_null())
        .then(pl.format("connect to {} failed: {}", peer, errno))
        .when(pl.col("error_kind").is_in(CONNECT_KINDS))
        .then(pl.format("bootstrap connection failed: {}", errno))
        .when(text.is_not_null())
        .then(text)
        .when(pl.col("rank").is_not_null())
        .then(
            pl.format(
                "Bootstrap Root : rank {} of {} ranks has already checked in (a duplicate rank or a reused "
                "unique id)",
                pl.col("rank"),
                pl.col("nranks"),
            )
        )
        .when(pl.col("received").is_not_null())
        .then(
            pl.format(
                "bootstrap message truncated: received {} bytes instead of {}",
                pl.col("received"),
                pl.col("expected"),
            )
        )
        .otherwise(pl.lit("bootstrap error"))
    ).drop("row", "retry_errno")


def _with_last_retry(errors: pl.DataFrame, rows: pl.DataFrame) -> pl.DataFrame:
    """Add ``retry_errno`` (and fill a missing peer) from the last 'connect … retrying' line of the thread."""
    for c, t in (
        ("errno_text", pl.String),
        ("peer_ip", pl.String),
        ("retry_max", pl.Int64),
        ("rank", pl.Int64),
        ("nranks", pl.Int64),
        ("received", pl.String),
        ("expected", pl.String),
    ):
        if c not in rows.columns:
            rows = rows.with_columns(pl.lit(None, t).alias(c))
    retries = (
        errors.filter(pl.col("error_kind") == "socket_retry")
        if "error_kind" in errors.columns
        else errors.clear()
    )
    if retries.is_empty():
        return rows.with_columns(retry_errno=pl.lit(None, pl.String))
    retries = (
        with_seq(retries)
        .select(
            *PROC,
            "tid",
            pl.col("seq").alias("retry_seq"),
            pl.col("errno_text").alias("retry_errno"),
            pl.col("peer_ip").alias("retry_peer"),
        )
        .sort("retry_seq")
    )
    joined = rows.sort("seq").join_asof(
        retries,
        left_on="seq",
        right_on="retry_seq",
        by=[*PROC, "tid"],
        strategy="backward",
        check_sortedness=False,
    )
    return joined.with_columns(peer_ip=pl.coalesce("peer_ip", "retry_peer")).drop("retry_seq", "retry_peer")


def _comm_of(job: Job, group: pl.DataFrame) -> str | None:
    """The communicator the failing processes were initialising (their latest Init START before the error)."""
    inst = lifecycle_instances(job)
    if inst.is_empty():
        return None
    mine = (
        group.select(*PROC, "seq")
        .join(inst.select(*PROC, "start_seq", "comm_uid"), on=PROC, how="inner")
        .filter(pl.col("start_seq") <= pl.col("seq"))
    )
    if mine.height:
        return mine.sort("start_seq").tail(1)["comm_uid"][0]
    stalled = [s for s in stalled_inits(job) if s.world]
    return stalled[0].uid if len(stalled) == 1 else None


def _bootstrap_advice(group: pl.DataFrame) -> str:
    kinds = set(group["error_kind"].to_list())
    if "no_interface" in kinds:
        return (
            "NCCL found no interface to bootstrap on: make NCCL_SOCKET_IFNAME (or NCCL_OOB_NET_IFNAME) match "
            "the "
            "interface names of every node — list them with `ip -br addr` on the failing host; a prefix "
            "(e.g. 'ens') or an exclusion list ('^docker,lo') is more robust than one exact name."
        )
    if "bootstrap" in kinds:
        return (
            "The bootstrap root saw inconsistent ranks: check that every rank uses the same world size and a "
            "fresh unique id (no reused NCCL_COMM_ID, no duplicate RANK values from the launcher)."
        )
    return (
        "Check that the address in the failed connect is reachable from the failing host on the bootstrap "
        "interface (firewall, routing, an unreachable container or link-local address), and pin the "
        "interface with NCCL_SOCKET_IFNAME if NCCL picked the wrong one."
    )


def _iface_lines(used: list[Iface]) -> pl.DataFrame:
    """The process and line of each interface line, as a frame ranks can be attached to."""
    return pl.DataFrame(
        {
            "host": [u.host for u in used],
            "pid": [u.pid for u in used],
            "source_id": [u.source_id for u in used],
            "line_no": [u.line_no for u in used],
            "part": [u.part for u in used],
        },
        schema={
            "host": pl.String,
            "pid": pl.Int64,
            "source_id": pl.UInt16,
            "line_no": pl.UInt32,
            "part": pl.UInt8,
        },
    )


class InterfaceMisconfig(Rule):
    """NCCL uses (or cannot find) the wrong network interface for bootstrap or socket traffic.

    What it means:
        The interface NCCL chose for its bootstrap / out-of-band connections or NET/Socket traffic is one
        that other hosts usually cannot reach — a container bridge or veth pair (``docker0``, ``veth…``,
        ``br-…``, ``virbr…``), loopback, a link-local address (169.254.x.x, fe80::) — or
        NCCL_SOCKET_IFNAME matches no interface on some hosts, or the hosts' bootstrap addresses lie in
        different networks.

    Why it matters:
        Peers connect to the address a rank advertises. An unreachable one makes init hang or fail with
        connection timeouts on *other* ranks, far from the misconfigured host. On a single machine such an
        interface works, but the same setting breaks as soon as the job spans nodes.

    How it is detected:
        ``Bootstrap : Using <if>:<ip>``, ``NET/Socket : Using [0]<if>:<ip> …`` and the OOB interface of
        ``NET/IB : Using … ; OOB <if>:<ip>``, per process: names matching veth*/docker*/br-*/virbr*/lo/cni*,
        loopback and link-local addresses. NCCL_SOCKET_IFNAME (ENV line) together with ``no socket
        interface found`` / ``no device found matching``. Hosts whose bootstrap address is in a different
        /16 than the other hosts'. Severity: critical when a peer's connection to such an address failed,
        error on multi-node jobs and for a NCCL_SOCKET_IFNAME that matches nothing, warning on a single
        node (it works there) and for subnet differences (error if a connection into the odd subnet failed).

    Example:
        ``node0081:4907:4907 [0] NCCL INFO Bootstrap : Using veth0d5eefd:172.18.0.1<0>`` on one node, while
        ``node0080 … socketStartConnect: Connect to 172.18.0.1<51307> failed : Connection timed out``.

    What to do:
        Pin the interface on every node: NCCL_SOCKET_IFNAME=<the fabric or management interface> (a prefix
        such as ``ens`` or ``ib``, or exclusions ``^docker,veth,lo``), and for IB jobs also check
        NCCL_IB_HCA. Verify with ``ip -br addr`` that the name exists on every node.
    """

    code = "LS203"
    name = "interface-misconfig"
    kind = Kind.INTERFACE_MISCONFIG
    severity = Severity.ERROR

    def check(self, job: Job) -> Iterator[Finding]:
        ifaces = interfaces(job)
        nodes = n_nodes(job)
        failed_peers = _failed_connect_peers(job)
        yield from self._bad_interfaces(job, ifaces, nodes, failed_peers)
        yield from self._no_interface(job)
        yield from self._subnets(job, ifaces, failed_peers)

    def _bad_interfaces(
        self, job: Job, ifaces: list[Iface], nodes: int, failed_peers: pl.DataFrame
    ) -> Iterator[Finding]:
        bad: dict[tuple, list[Iface]] = {}
        for i in ifaces:
            if i.role == "listed" and nodes <= 1:
                continue
            why = None
            if i.ifname and BAD_IFNAME.match(i.ifname):
                why = "loopback" if i.ifname == "lo" else "a container/virtual bridge interface"
            elif address_kind(i.address):
                why = f"a {address_kind(i.address)} address"
            if why:
                bad.setdefault((i.ifname, i.address, why), []).append(i)
        if not bad:
            return
        # One finding per set of processes: 'lo for bootstrap and docker0 for sockets' is one problem.
        by_users: dict[tuple, list[tuple]] = {}
        for key, used in bad.items():
            users = tuple(sorted({(u.host, u.pid) for u in used}))
            by_users.setdefault(users, []).append(key)
        ranks_of = known_ranks(job)
        for users, keys in by_users.items():
            used = [u for k in keys for u in bad[k]]
            frame = _iface_lines(used)
            frame = with_job_rank(job, frame, ranks=ranks_of)
            ranks = sorted({int(r) for r in frame["job_rank"].drop_nulls()})
            hosts = sorted({u.host for u in used})
            addresses = [a for _, a, _ in keys if a]
            hits = (
                failed_peers.filter(pl.col("peer_ip").is_in(addresses))
                if addresses and not failed_peers.is_empty()
                else pl.DataFrame()
            )
            parts = []
            for ifname, address, why in keys:
                roles = sorted({u.role for u in bad[(ifname, address, why)]})
                parts.append(f"{ifname}:{address} for {'/'.join(roles)} ({why})")
            if hits.height:
                severity = Severity.CRITICAL
                consequence = (
                    f"; peers failed to connect to {hits['peer_ip'][0]} "
                    f"({hits['errno_text'].drop_nulls().first() or 'error'})"
                )
            elif nodes > 1:
                severity, consequence = (
                    Severity.ERROR,
                    f"; the job spans {nodes} nodes, and other hosts cannot reach it",
                )
            else:
                severity, consequence = Severity.WARNING, " — works on this single node, breaks across nodes"
            who = (
                names_or_span(job, ranks, limit=2, hosts=hosts)
                if ranks
                else f"{plural(len(users), 'process')} on {', '.join(hosts[:4])}"
            )
            title = f"{who} use{'s' if len(users) == 1 else ''} {' and '.join(parts)}{consequence}"
            first_if = keys[0][0]
            yield self.finding(
                job,
                title,
                evidence_rows=evidence(frame.head(3), hits.head(2) if hits.height else pl.DataFrame()),
                ranks=ranks,
                hosts=hosts,
                severity=severity,
                advice=(
                    "Set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on (e.g. the fabric "
                    "or "
                    f"management NIC; exclusions such as '^docker,veth,lo' also work) so that {first_if} is "
                    "never "
                    "picked; check `ip -br addr` on every node."
                ),
            )

    def _no_interface(self, job: Job) -> Iterator[Finding]:
        errors = job.table("errors")
        if errors.is_empty() or "error_kind" not in errors.columns:
            return
        rows = errors.filter((pl.col("error_kind") == "no_interface") & pl.col("host").is_not_null())
        if rows.is_empty():
            return
        rows = resolve_rows(job, with_seq(rows))
        setting = socket_ifname(job)
        bad_hosts = sorted(set(rows["host"].to_list()))
        ranks = sorted({int(r) for r in rows["job_rank"].drop_nulls()})
        values = sorted({setting[h] for h in bad_hosts if h in setting})
        good = [i for i in interfaces(job) if i.role == "bootstrap" and i.host not in bad_hosts]
        elsewhere = (
            f"; elsewhere it selects {good[0].ifname}:{good[0].address} ({good[0].host})" if good else ""
        )
        who = names_or_span(job, ranks) if ranks else f"processes on {', '.join(bad_hosts[:4])}"
        if values:
            title = (
                f"NCCL_SOCKET_IFNAME={'/'.join(values)} matches no interface on {', '.join(bad_hosts[:4])} "
                f"({who}){elsewhere}"
            )
        else:
            title = (
                f"No usable socket interface on {', '.join(bad_hosts[:4])} ({who}): "
                f"{rows['error_text'].drop_nulls().first()}"
            )
        settings = job.table("settings")
        env_rows = (
            settings.filter((pl.col("name") == "NCCL_SOCKET_IFNAME") & pl.col("host").is_in(bad_hosts)).head(
                1
            )
            if not settings.is_empty() and "name" in settings.columns
            else pl.DataFrame()
        )
        yield self.finding(
            job,
            title,
            evidence_rows=evidence(env_rows, rows.sort("seq").head(3)),
            ranks=ranks,
            hosts=bad_hosts,
            advice=(
                "Use a value that matches the interface on every node (`ip -br addr`): a common prefix (e.g. "
                "'ens' or 'ib') or an exclusion list ('^docker,lo') instead of one exact name, or per-node "
                "values "
                "from the launcher."
            ),
        )

    def _subnets(self, job: Job, ifaces: list[Iface], failed_peers: pl.DataFrame) -> Iterator[Finding]:
        per_host: dict[str, set] = {}
        for i in ifaces:
            if (
                i.role != "bootstrap"
                or not i.address
                or address_kind(i.address)
                or (i.ifname and BAD_IFNAME.match(i.ifname))
            ):
                continue
            ip = parse_ip(i.address)
            if ip is None or ip.version != 4:
                continue
            per_host.setdefault(i.host, set()).add(subnet16(ip))
        if len(per_host) < 2:
            return
        counts: dict = {}
        for nets in per_host.values():
            for n in nets:
                counts[n] = counts.get(n, 0) + 1
        if len(counts) < 2:
            return
        main = max(counts, key=lambda n: counts[n])
        odd_hosts = sorted(h for h, nets in per_host.items() if main not in nets)
        if not odd_hosts or len(odd_hosts) * 2 >= len(per_host) + (1 if len(per_host) == 2 else 0):
            # Half the hosts on each side (two hosts, two /16s): no majority to blame, report both.
            odd_hosts = sorted(per_host)
        used = [i for i in ifaces if i.role == "bootstrap" and i.host in odd_hosts]
        addrs = sorted({i.address for i in used if i.address})
        hits = (
            failed_peers.filter(pl.col("peer_ip").is_in(addrs))
            if not failed_peers.is_empty()
            else pl.DataFrame()
        )
        frame = _iface_lines(used)
        frame = with_job_rank(job, frame)
        ranks = sorted({int(r) for r in frame["job_rank"].drop_nulls()})
        nets = ", ".join(sorted(str(n) for n in counts))
        title = (
            f"Bootstrap addresses of the job's hosts lie in different networks ({nets}): "
            f"{', '.join(odd_hosts[:4])} use{'s' if len(odd_hosts) == 1 else ''} {', '.join(addrs[:4])}"
        )
        yield self.finding(
            job,
            title,
            evidence_rows=evidence(frame.head(3), hits.head(2) if hits.height else pl.DataFrame()),
            ranks=ranks,
            hosts=odd_hosts,
            severity=Severity.ERROR if hits.height else Severity.WARNING,
            advice=(
                "Check that every node bootstraps on the same network (NCCL_SOCKET_IFNAME) and that the "
                "networks "
                "are routed to each other; a host that picked another NIC than its peers is the usual cause."
            ),
        )


@per_job
def _failed_connect_peers(job: Job) -> pl.DataFrame:
    errors = job.table("errors")
    if errors.is_empty() or "peer_ip" not in errors.columns:
        return pl.DataFrame(schema={"peer_ip": pl.String, "errno_text": pl.String})
    rows = errors.filter(pl.col("error_kind").is_in(CONNECT_KINDS) & pl.col("peer_ip").is_not_null())
    return rows


RULES = (InitIncomplete, BootstrapFailure, InterfaceMisconfig)
