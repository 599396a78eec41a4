"""How the job's nodes, GPUs and NICs are connected, as NCCL's init lines describe it.

Hosts come with their GPUs (rank, CUDA device, bus id from the communicator init lines) and the NICs NCCL
chose (``NET/IB : Using [0]mlx5_0:1/IB …``, ``NET/Socket : Using [0]eth0:10.0.0.1<0>``). Links come from the
``Channel xx/y : a[b] -> c[d] via …`` lines: between hosts they are summarised per host pair and network
(IB or Socket, GPUDirect RDMA or not), within a host per transport (P2P/CUMEM, SHM, …). A link is a fallback
when it runs over sockets, or over a NIC without GPUDirect RDMA while other links of the job have it; a host
is flagged when a transport finding names it.
"""

from __future__ import annotations

import polars as pl

from nccl_logsift.model import Finding, GpuNode, HostLink, HostNode, Kind, Topology
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.transports import transport_rows

MAX_RING_CHANNELS = 4
MAX_RING_RANKS = 64


def topology(job: Job, findings: list[Finding], culprits: frozenset[int]) -> Topology | None:
    procs = job.processes
    t = transport_rows(job)
    if procs.is_empty() and t.is_empty():
        return None
    flagged = {h for f in findings if f.kind is Kind.TRANSPORT_FALLBACK for h in f.hosts}
    links = _links(t)
    intra = _intra(t)
    nics = _nics(job)
    gpus: dict[str, list[GpuNode]] = {}
    if not procs.is_empty():
        for row in procs.sort("host", "global_rank", "pid", nulls_last=True).iter_rows(named=True):
            gpus.setdefault(row["host"] or "?", []).append(
                GpuNode(
                    rank=row["global_rank"],
                    cuda_dev=row["cuda_dev"],
                    bus_id=row["bus_id"],
                    culprit=row["global_rank"] in culprits,
                )
            )
    names = sorted(
        set(gpus) | set(nics) | set(intra) | {h for link in links for h in (link.a, link.b)},
        key=lambda h: (min((g.rank for g in gpus.get(h, []) if g.rank is not None), default=1 << 30), h),
    )
    hosts = tuple(
        HostNode(
            name=name,
            gpus=tuple(gpus.get(name, ())),
            nics=nics.get(name, ()),
            intra=intra.get(name, ()),
            culprit=any(g.culprit for g in gpus.get(name, ())),
            fallback=name in flagged,
        )
        for name in names
    )
    note = (
        ""
        if not t.is_empty()
        else "No channel connection lines (NCCL prints them at INFO level during init)."
    )
    return Topology(hosts=hosts, links=links, rings=_rings(job), note=note)


def _links(t: pl.DataFrame) -> tuple[HostLink, ...]:
    if t.is_empty():
        return ()
    net = t.filter(
        (pl.col("transport") == "NET")
        & pl.col("peer_host").is_not_null()
        & (pl.col("peer_host") != pl.col("host"))
    )
    if net.is_empty():
        return ()
    pairs = (
        net.with_columns(
            a=pl.min_horizontal("host", "peer_host"),
            b=pl.max_horizontal("host", "peer_host"),
            network=pl.format("NET/{}", pl.col("net_name").fill_null("?")),
            gdr=pl.col("gdr").is_not_null(),
        )
        .group_by("a", "b", "network")
        .agg(
            gdr=pl.col("gdr").all(),
            connections=pl.len(),
            channels=pl.col("channel").n_unique(),
        )
        .sort("a", "b", "network")
    )
    any_gdr = bool(pairs["gdr"].any())
    return tuple(
        HostLink(
            a=row["a"],
            b=row["b"],
            transport=row["network"],
            gdr=row["gdr"],
            connections=row["connections"],
            channels=row["channels"],
            fallback=row["network"] == "NET/Socket" or (any_gdr and not row["gdr"]),
        )
        for row in pairs.iter_rows(named=True)
    )


def _intra(t: pl.DataFrame) -> dict[str, tuple[str, ...]]:
    """Per host: its intra-node transports as printed (P2P/CUMEM/read, SHM/direct/direct) with counts."""
    if t.is_empty():
        return {}
    local = t.filter(
        pl.col("transport").is_in(["P2P", "SHM"])
        | ((pl.col("transport") == "NET") & pl.col("same_host").fill_null(False))
    )
    if local.is_empty():
        return {}
    counts = local.group_by("host", "path").agg(n=pl.len()).sort("host", "n", descending=[False, True])
    out: dict[str, tuple[str, ...]] = {}
    for (host,), group in counts.group_by("host", maintain_order=True):
        out[host] = tuple(f"{path} × {n}" for path, n in group.select("path", "n").iter_rows())
    return out


def _nics(job: Job) -> dict[str, tuple[str, ...]]:
    net = job.table("network")
    if net.is_empty() or "interfaces" not in net.columns:
        return {}
    rows = net.filter(pl.col("interfaces").is_not_null() & pl.col("host").is_not_null())
    if rows.is_empty():
        return {}
    listed = (
        rows.select("host", nic=pl.col("interfaces").str.extract_all(r"\[\d+\]\S+"))
        .explode("nic")
        .drop_nulls("nic")
        .with_columns(pl.col("nic").str.replace(r"^\[\d+\]", ""))
        .unique(maintain_order=True)
    )
    return {
        host: tuple(group["nic"].to_list()) for (host,), group in listed.group_by("host", maintain_order=True)
    }


def _rings(job: Job) -> tuple[str, ...]:
    """The ring order of the first channels of the largest communicator, hops between nodes counted."""
    topo = job.table("topology")
    inst = job.table("communicators")
    if topo.is_empty() or "ring_order" not in topo.columns or inst.is_empty():
        return ()
    # A rank too large for 64 bits is null, as the parser reads numbers (parse/kinds.py).
    ranks = pl.col("ring_order").str.extract_all(r"\d+").cast(pl.List(pl.Int64), strict=False)
    dumps = topo.filter(pl.col("ring_order").is_not_null()).select("host", "pid", "channel", ranks=ranks)
    dumps = dumps.with_columns(n=pl.col("ranks").list.len())
    if dumps.is_empty():
        return ()
    largest = int(dumps["n"].max())
    dumps = dumps.filter(pl.col("n") == largest)
    first = dumps.row(0, named=True)
    owner = inst.filter(
        (pl.col("host") == first["host"]) & (pl.col("pid") == first["pid"]) & (pl.col("nranks") == largest)
    )
    host_of: dict[int, str] = {}
    if owner.height:
        members = inst.filter(pl.col("comm_uid") == owner["comm_uid"].first())
        host_of = dict(members.select("rank", "host").iter_rows())
    out = []
    mine = (
        dumps.filter((pl.col("host") == first["host"]) & (pl.col("pid") == first["pid"]))
        .unique("channel", keep="first", maintain_order=True)
        .sort("channel")
    )
    for channel, ranks in mine.select("channel", "ranks").head(MAX_RING_CHANNELS).iter_rows():
        cycle = ranks + ranks[:1]
        hops = sum(
            1
            for a, b in zip(cycle, cycle[1:])
            if host_of.get(a) and host_of.get(b) and host_of[a] != host_of[b]
        )
        shown = " → ".join(str(r) for r in ranks[:MAX_RING_RANKS]) + (
            " → …" if len(ranks) > MAX_RING_RANKS else f" → {ranks[0]}"
        )
        across = f" ({hops} hop(s) between nodes)" if host_of else ""
        out.append(f"ring channel {channel}: {shown}{across}")
    return tuple(out)
