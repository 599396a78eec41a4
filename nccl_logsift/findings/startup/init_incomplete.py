"""LS201 init-incomplete: Communicator init never completed: some ranks never joined, the others wait for
them."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import evidence, rows_of
from nccl_logsift.findings.startup._absence import Absence, absent_at_init
from nccl_logsift.findings.wording import names_or_span, plural, rank_word, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.failures import failure_rows
from nccl_logsift.resolve.inits import InitState, lifecycle_instances, stalled_inits
from nccl_logsift.resolve.job import Job, per_job, rank_range
from nccl_logsift.resolve.processes import PROC
from nccl_logsift.resolve.ranks import with_job_rank


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
        began_more = (pl.col("selects") > pl.col("inits")) & (
            pl.col("last_complete").is_null() | (pl.col("last_select") > pl.col("last_complete"))
        )
        stuck = per.filter(began_more)
        if stuck.is_empty():
            return
        # A communicator the process called or destroyed, though no Init line of it was read (its COMPLETE
        # line lost its header in the interleaving, say), completed an init all the same.
        stuck = stuck.join(_unseen_inits(job, inst), on=PROC, how="left").with_columns(
            pl.col("inits") + pl.col("unseen").fill_null(0)
        )
        stuck = stuck.filter(began_more)
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


def _unseen_inits(job: Job, instances: pl.DataFrame) -> pl.DataFrame:
    """Per process (``PROC``), how many communicators it made calls on or destroyed without an Init line of
    theirs in ``instances``: inits that completed though the log does not show it."""
    used = [
        table.select(*PROC, "comm")
        for table in (job.table("collectives"), job.table("comms").filter(pl.col("what") == "Destroy"))
        if not table.is_empty() and "comm" in table.columns
    ]
    if not used:
        return pl.DataFrame(schema={"host": pl.String, "pid": pl.Int64, "unseen": pl.UInt32})
    return (
        pl.concat(used)
        .filter(pl.col("comm").is_not_null())
        .unique()
        .join(instances.select(*PROC, "comm"), on=[*PROC, "comm"], how="anti")
        .group_by(PROC)
        .agg(unseen=pl.len())
    )
