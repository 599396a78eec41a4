"""Ranks that never arrived at the rendezvous, proved by the peers that waited for them (LS201 and LS202)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nccl_logsift.findings.wording import plural
from nccl_logsift.resolve.hosts import nccl_host
from nccl_logsift.resolve.interfaces import address_kind, parse_ip
from nccl_logsift.resolve.job import Job, per_job
from nccl_logsift.resolve.processes import launcher_hosts
from nccl_logsift.resolve.ranks import known_ranks, label_rank, with_job_rank
from nccl_logsift.resolve.transports import address_hosts, logged_hosts

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
