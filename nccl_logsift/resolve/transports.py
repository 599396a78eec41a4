"""Connections and hosts: the transport lines with both ends' global ranks and hosts, the hosts the
logs show, and which host printed which address."""

from __future__ import annotations

import re

import polars as pl

from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.interfaces import interfaces
from nccl_logsift.resolve.job import Job, per_job
from nccl_logsift.resolve.processes import PROC
from nccl_logsift.resolve.ranks import with_job_rank


# ---------------------------------------------------------------------------------------------- helpers
def n_nodes(job: Job) -> int:
    """How many hosts the job spans: NCCL's nNodes when printed, or the hosts in the logs when there are more.

    nNodes counts the job's nodes, whose logs may not all be here (a per-node output file): compare with
    :func:`logged_hosts` before saying what the logs show."""
    counts = [1, len(logged_hosts(job))]
    comms = job.table("comms")
    if not comms.is_empty() and "n_nodes" in comms.columns and comms["n_nodes"].drop_nulls().len():
        counts.append(int(comms["n_nodes"].max()))
    return max(counts)


@per_job
def logged_hosts(job: Job) -> frozenset[str]:
    """The hosts in the logs: the processes' hosts (from their Init lines), and the hosts of the lines and of
    the kept COLL calls seen on more than one line of a process. A process that failed before its init
    completed (bootstrap) names its host in WARN lines only; a host seen once is the tail of a torn line
    (``x3005x3005c0s31b0n0``, ``xn0``), not a node. The job summary lists these hosts."""
    hosts = set(job.processes["host"].drop_nulls().to_list()) if not job.processes.is_empty() else set()
    for name in (
        "lines",
        "collectives",
    ):  # the lines hold every line but the COLL calls, connections included
        t = job.table(name)
        if t.is_empty() or "host" not in t.columns or "pid" not in t.columns:
            continue
        # The key columns first (a filter of the whole lines table would copy its text too), of the hosts not
        # known yet: with every process's init logged, none are left (a 4096-rank job's ~590k lines then
        # cost one lookup each, not a count per (host, pid)).
        keys = t.select("host", "pid", *(["producer"] if "producer" in t.columns else [])).filter(
            pl.col("host").is_not_null() & ~pl.col("host").is_in(sorted(hosts))
        )
        if "producer" in keys.columns:
            keys = keys.filter(pl.col("producer").is_not_null())
        hosts |= set(keys.group_by("host", "pid").len().filter(pl.col("len") > 1)["host"].to_list())
    return frozenset(hosts)


@per_job
def transport_rows(job: Job) -> pl.DataFrame:
    """Connection lines with the logging process's global rank (``job_rank``), the peer's global rank and
    host (``peer_global``, ``peer_host``) and whether both ends are on one host (``same_host``).

    The lines are matched to their communicator instance on their key columns alone, and the results are
    attached to the whole table once: sorting and joining every column of a 4096-rank job's ~321k lines
    five times cost ~150 MB and ~1 s."""
    t = job.table("transports")
    if t.is_empty() or "transport" not in t.columns:
        return pl.DataFrame()
    t = with_job_rank(job, with_seq(t))
    local_is_to = pl.col("direction") == "receive"
    t = t.with_columns(
        peer_comm_rank=pl.when(local_is_to)
        .then(pl.col("from_rank"))
        .otherwise(pl.col("to_rank"))
        .cast(pl.Int64),
    )
    inst = job.table("communicators")
    if inst.is_empty() or "start_seq" not in inst.columns:
        return t.with_columns(
            peer_global=pl.lit(None, pl.Int64),
            peer_host=pl.lit(None, pl.String),
            same_host=pl.lit(None, pl.Boolean),
        )
    world = job.world_size
    # A pre-2.16 uid (n<size>#<k>) is shared by disjoint groups of that size; trust it for the world only.
    trusted = (
        pl.col("uid_exact").fill_null(False) | (pl.col("nranks") == world)
        if "uid_exact" in inst.columns
        else pl.lit(True)
    )
    # A line belongs to the instance whose init window it falls in: from Init START, or (before 2.18.3, no
    # START line) from just after the process's previous Init COMPLETE; later lines go to the last instance.
    done = pl.coalesce("complete_seq", "start_seq")
    owners = (
        inst.drop_nulls(["host", "pid", "start_seq"])
        .sort("start_seq")
        .with_columns(
            comm_uid=pl.when(trusted).then(pl.col("comm_uid")),
            open_seq=pl.when(pl.col("init_started").fill_null(False))
            .then(pl.col("start_seq"))
            .otherwise(done.shift(1).over(["host", "pid"], order_by="start_seq").fill_null(-1) + 1),
        )
        .select("host", "pid", "open_seq", "comm_uid", pl.col("nranks").alias("owner_nranks"))
        .sort(
            "open_seq", "host", "pid", "comm_uid", "owner_nranks", nulls_last=True
        )  # a total order: ties reach the output
    )
    keys = (
        t.select("seq", "host", "pid", "from_rank", "to_rank", "peer_comm_rank")
        .with_row_index("_row")
        .sort("seq", maintain_order=True)
        .join_asof(
            owners,
            left_on="seq",
            right_on="open_seq",
            by=["host", "pid"],
            strategy="backward",
            check_sortedness=False,
        )
    )
    # From NCCL 2.22 connections are made at a communicator's first collective (runtime connect), which may
    # come after the process created smaller split communicators: a line naming a rank beyond the latest
    # instance's size belongs to the latest earlier instance that is large enough.
    top = pl.max_horizontal("from_rank", "to_rank")
    misfit = keys.filter(top >= pl.col("owner_nranks").fill_null(1 << 40))
    if misfit.height:
        fits = (
            misfit.select("seq", "host", "pid", top.alias("top"))
            .join(owners, on=["host", "pid"], maintain_order="right")
            .filter((pl.col("open_seq") <= pl.col("seq")) & (pl.col("owner_nranks") > pl.col("top")))
            .group_by("seq", "host", "pid")
            .agg(pl.col("comm_uid").last().alias("fit_uid"))
        )
        keys = keys.join(fits, on=["seq", "host", "pid"], how="left", maintain_order="left").with_columns(
            comm_uid=pl.when(top >= pl.col("owner_nranks").fill_null(1 << 40))
            .then("fit_uid")
            .otherwise("comm_uid")
        )
    members = (
        inst.group_by("comm_uid", "rank")
        .agg(peer_global=pl.col("global_rank").unique(), peer_host=pl.col("host").unique())
        .with_columns(
            peer_global=pl.when(pl.col("peer_global").list.len() == 1).then(
                pl.col("peer_global").list.first()
            ),
            peer_host=pl.when(pl.col("peer_host").list.len() == 1).then(pl.col("peer_host").list.first()),
        )
        .rename({"rank": "peer_comm_rank"})
        .with_columns(pl.col("peer_comm_rank").cast(pl.Int64))
    )
    keys = keys.join(members, on=["comm_uid", "peer_comm_rank"], how="left", maintain_order="left")
    # The lines come in seq order already unless several sources interleave; only then is the table gathered.
    order = keys["_row"]
    if not order.equals(pl.int_range(t.height, dtype=order.dtype, eager=True), check_names=False):
        t = t[order]
    t = t.with_columns(keys.select("open_seq", "comm_uid", "peer_global", "peer_host").get_columns())
    # Two ranks of one host never print the same device bracket (busId / nvmlDev) on a NET line.
    same_dev = (
        (pl.col("from_dev") == pl.col("to_dev")).fill_null(False)
        if "from_dev" in t.columns
        else pl.lit(False)
    )
    return t.with_columns(
        same_host=pl.when(pl.col("peer_host").is_not_null()).then(
            (pl.col("peer_host") == pl.col("host")) & ~same_dev
        )
    )


# The address of each "[0]eth0:10.0.0.1<0>": a try starts at a "[" and stops at the next, so a long list costs
# its length once (a try from every ":" that read to the end of the text cost its square).
_IFACE_ADDRESS = re.compile(r"\[\d+\][^\s:\[<]+:([^\s<\[]+)<\d+>")


def address_hosts(job: Job) -> dict[str, set[str]]:
    """IP address (or host name) -> hosts that printed it as a bootstrap, socket or OOB interface."""
    out: dict[str, set[str]] = {}
    net = job.table("network")
    if not net.is_empty() and "address" in net.columns:
        for host, addr, ifaces in net.select("host", "address", "interfaces").iter_rows():
            if not host:
                continue
            for a in [addr] + _IFACE_ADDRESS.findall(ifaces or ""):
                if a:
                    out.setdefault(a, set()).add(host)
    for host in job.processes["host"].to_list() if not job.processes.is_empty() else []:
        out.setdefault(host, set()).add(host)
    return out


def peer_ranks_on(job: Job, host: str | None, logger: int | None, t: pl.DataFrame) -> list[int]:
    """Ranks on ``host``; narrowed to the NET peers of rank ``logger`` there when the connection lines say."""
    if host is None or job.processes.is_empty():
        return []
    on_host = sorted(int(r) for r in job.processes.filter(pl.col("host") == host)["global_rank"].drop_nulls())
    if logger is not None and len(on_host) > 1 and not t.is_empty() and "peer_global" in t.columns:
        peers = t.filter(
            (pl.col("job_rank") == logger) & (pl.col("transport") == "NET") & (pl.col("peer_host") == host)
        )
        narrowed = sorted({int(r) for r in peers["peer_global"].drop_nulls()} & set(on_host))
        if narrowed:
            return narrowed
    return on_host


@per_job
def bootstrap_addresses(job: Job) -> pl.DataFrame:
    """(host, pid) → the address it bootstraps on (Bootstrap line, else IB OOB, else first NET/Socket one)."""
    prio = {"bootstrap": 0, "oob": 1, "socket": 2}
    rows = [
        (i.host, i.pid, i.ifname, i.address, prio[i.role], i.source_id, i.line_no, i.part)
        for i in interfaces(job)
        if i.role in prio and i.address
    ]
    if not rows:
        return pl.DataFrame(
            schema={"host": pl.String, "pid": pl.Int64, "ifname": pl.String, "address": pl.String}
        )
    frame = pl.DataFrame(
        rows,
        schema={
            "host": pl.String,
            "pid": pl.Int64,
            "ifname": pl.String,
            "address": pl.String,
            "prio": pl.Int32,
            "source_id": pl.UInt16,
            "line_no": pl.UInt32,
            "part": pl.UInt8,
        },
        orient="row",
    )
    return (
        frame.sort("prio", "source_id", "line_no")
        .unique(PROC, keep="first", maintain_order=True)
        .drop("prio")
    )
