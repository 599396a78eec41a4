"""LS202 bootstrap-failure: A rank could not bootstrap: no usable interface, a refused or timed-out
connection, a bad root."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import EVIDENCE, evidence
from nccl_logsift.findings.startup._absence import absent_at_init
from nccl_logsift.findings.vocabulary import CONNECT_KINDS
from nccl_logsift.findings.wording import names_or_span, plural, rank_word
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.inits import lifecycle_instances, resolve_rows, stalled_inits
from nccl_logsift.resolve.interfaces import socket_ifname
from nccl_logsift.resolve.job import Job, per_job
from nccl_logsift.resolve.processes import PROC
from nccl_logsift.resolve.ranks import with_job_rank

REMOTE_ERROR = 6


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


# ---------------------------------------------------------------------------------------------- LS202
BOOTSTRAP_KINDS = ("no_interface", "bootstrap")
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
