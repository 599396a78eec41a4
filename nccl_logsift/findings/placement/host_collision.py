"""LS403 host-collision: Two different machines report the same host name."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import evidence
from nccl_logsift.findings.wording import ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.inits import lifecycle_instances
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.processes import PROC
from nccl_logsift.resolve.ranks import known_ranks
from nccl_logsift.resolve.transports import bootstrap_addresses


# ---------------------------------------------------------------------------------------------- LS403
class HostCollision(Rule):
    """Two different machines report the same host name.

    What it means:
        Processes that print the same host name bootstrap from different IP addresses on the same interface
        name, i.e. they run on different machines (cloned images, containers with a fixed hostname, FQDNs
        that differ only after the first dot). When NCCL itself takes them for one node, it connects them
        with intra-node transports (P2P/SHM) that cannot work across machines.

    Why it matters:
        If NCCL merged the machines (``nNodes`` too small, ``localRanks`` too large, ``via P2P`` between
        them) the first collective never completes and the job hangs with no error. Even when NCCL kept
        them apart, anything that reasons per host (including these findings) mixes two machines.

    How it is detected:
        Per host name, the bootstrap (or IB OOB, or NET/Socket) address of every process. A name with
        several addresses on one interface name, or one GPU busId at two addresses, is a collision
        (addresses on different interface names alone are one machine with several NICs). It is critical
        when NCCL treated the machines as one — a P2P/SHM connection between ranks whose addresses differ
        (ranks mapped through the communicator being initialised), or a ``comm … nRanks N nNodes M
        localRanks L`` line whose localRanks exceeds the processes at that address — and a warning
        otherwise. Without addresses: a host whose processes share busIds although NCCL completed init for
        them (it would have refused a real duplicate GPU).

    Example:
        ``gpu-node-180:1560332 … Bootstrap : Using eth0:10.16.26.180<0>`` and ``gpu-node-180:2378708 …
        Bootstrap : Using eth0:10.16.26.181<0>``, then ``Channel 00/0 : 3[3] -> 4[0] via P2P/CUMEM/read``.

    What to do:
        Give every machine a unique host name (``hostnamectl set-hostname``; in containers do not pin
        ``--hostname``), or set NCCL_HOSTID per machine so NCCL tells them apart; then rerun.
    """

    code = "LS403"
    name = "host-collision"
    kind = Kind.HOST_COLLISION
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        addr = bootstrap_addresses(job)
        reported = set()
        if not addr.is_empty():
            for finding in self._from_addresses(job, addr):
                reported |= set(finding.hosts)
                yield finding
        for finding in self._from_bus_ids(job, reported):
            yield finding

    def _from_addresses(self, job: Job, addr: pl.DataFrame) -> Iterator[Finding]:
        multi = addr.group_by("host").agg(n=pl.col("address").n_unique()).filter(pl.col("n") > 1)
        if multi.is_empty():
            return
        ranks_of = known_ranks(job)
        cross = _cross_machine_transports(job, addr)
        merged = _merged_summaries(job, addr)
        for host in sorted(multi["host"].to_list()):
            procs = addr.filter(pl.col("host") == host).join(
                ranks_of, on=PROC, how="left", maintain_order="left"
            )
            same_if = (
                procs.group_by("ifname").agg(pl.col("address").n_unique().alias("n")).filter(pl.col("n") > 1)
            )
            x = cross.filter(pl.col("host") == host) if not cross.is_empty() else cross
            m = merged.filter(pl.col("host") == host) if not merged.is_empty() else merged
            if same_if.is_empty() and not _bus_shared_across_addresses(job, procs):
                # Different interface names: one machine with several NICs looks the same (and its GPUs then
                # rightly talk P2P), so only a GPU that would exist twice proves two machines.
                continue
            addresses = sorted(procs["address"].unique().to_list())
            ranks = sorted(int(r) for r in procs["rank"].drop_nulls())
            per_addr = procs.group_by("address").agg(pl.col("rank").drop_nulls().sort()).sort("address")
            split = "; ".join(
                f"{a}: ranks {ranks_text(r)}" if len(r) else f"{a}" for a, r in per_addr.iter_rows()
            )
            if x.height or m.height:
                how = []
                if x.height:
                    row = x.row(0, named=True)
                    how.append(
                        f"{row['transport']} between rank {row['a_rank']} ({row['a_addr']}) and rank "
                        f"{row['b_rank']} ({row['b_addr']})"
                    )
                if m.height:
                    row = m.row(0, named=True)
                    how.append(
                        f"NCCL counts {row['local_ranks']} local ranks where {row['at_addr']} processes "
                        "share an address"
                    )
                title = (
                    f"{len(addresses)} machines share the host name {host} ({split}) and NCCL treats them as "
                    "one node: " + "; ".join(how)
                )
                severity = Severity.CRITICAL
            else:
                title = (
                    f"{len(addresses)} machines report the host name {host} ({split}); NCCL kept them apart, "
                    "but "
                    "per-host diagnostics mix them"
                )
                severity = Severity.WARNING
            ev = pl.concat(
                [
                    evidence(
                        procs.sort("address", maintain_order=True).unique(
                            "address", keep="first", maintain_order=True
                        )
                    ),
                    evidence(x.head(2)) if x.height else evidence(pl.DataFrame()),
                    evidence(m.head(1)) if m.height else evidence(pl.DataFrame()),
                ]
            )
            yield self.finding(
                job,
                title,
                evidence_rows=ev,
                ranks=ranks,
                hosts=[host],
                severity=severity,
                comm=(x["comm_uid"][0] if x.height and "comm_uid" in x.columns else None),
                advice=self._advice(),
            )

    def _from_bus_ids(self, job: Job, reported: set) -> Iterator[Finding]:
        inst = lifecycle_instances(job)
        if inst.is_empty():
            return
        errors = job.table("errors")
        if (
            not errors.is_empty()
            and "error_kind" in errors.columns
            and errors.filter(pl.col("error_kind") == "duplicate_gpu").height
        ):
            return
        rows = inst.filter(
            pl.col("bus_id").is_not_null() & pl.col("global_rank").is_not_null() & pl.col("init_completed")
        )
        dup = (
            rows.group_by("comm_uid", "host", "bus_id")
            .agg(
                ranks=pl.col("global_rank").unique().sort(),
                pids=pl.col("pid").n_unique(),
                source_id=pl.col("source_id"),
                line_no=pl.col("line_no"),
            )
            .filter((pl.col("ranks").list.len() > 1) & (pl.col("pids") > 1))
        )
        for (host,), group in dup.sort("host", "bus_id", "comm_uid").group_by("host", maintain_order=True):
            if host in reported:
                continue
            ranks = sorted({int(r) for rs in group["ranks"] for r in rs})
            all_ranks = sorted(
                int(r) for r in inst.filter(pl.col("host") == host)["global_rank"].drop_nulls().unique()
            )
            first = group.row(0, named=True)
            frame = pl.DataFrame({"source_id": first["source_id"], "line_no": first["line_no"]}).with_columns(
                part=pl.lit(0, pl.UInt8)
            )
            title = (
                f"Processes on host {host} share GPUs (ranks {ranks_text(ranks)} on busId {first['bus_id']}) "
                "and NCCL "
                "accepted them: the name probably covers more than one machine"
            )
            yield self.finding(
                job,
                title,
                evidence_rows=frame,
                ranks=all_ranks,
                hosts=[host],
                severity=Severity.WARNING,
                advice=self._advice(),
            )

    @staticmethod
    def _advice() -> str:
        return (
            "Give every machine a unique host name (hostnamectl set-hostname; in containers do not pin "
            "--hostname / hostNetwork names), or set NCCL_HOSTID differently per machine, then rerun."
        )


def _bus_shared_across_addresses(job: Job, procs: pl.DataFrame) -> bool:
    """Two processes at different addresses of one host name report the same GPU busId."""
    inst = lifecycle_instances(job)
    if inst.is_empty():
        return False
    gpus = (
        inst.filter(pl.col("bus_id").is_not_null())
        .select(*PROC, "bus_id")
        .unique()
        .join(procs.select(*PROC, "address"), on=PROC, how="inner")
    )
    return (
        gpus.group_by("bus_id").agg(pl.col("address").n_unique().alias("n")).filter(pl.col("n") > 1).height
        > 0
    )


def _cross_machine_transports(job: Job, addr: pl.DataFrame) -> pl.DataFrame:
    """P2P/SHM connections whose two ranks bootstrap from different addresses under one host name."""
    transports = job.table("transports")
    inst = lifecycle_instances(job)
    if transports.is_empty() or inst.is_empty() or "transport" not in transports.columns:
        return pl.DataFrame()
    local = with_seq(
        transports.filter(pl.col("transport").is_in(("P2P", "SHM")) & pl.col("host").is_not_null())
    )
    if local.is_empty():
        return pl.DataFrame()
    windows = (
        inst.with_columns(close_seq=pl.coalesce("complete_seq", pl.lit(1 << 62)))
        .select(*PROC, "close_seq", "comm_uid", "nranks")
        .sort("close_seq")
    )
    located = (
        local.sort("seq")
        .join_asof(
            windows, left_on="seq", right_on="close_seq", by=PROC, strategy="forward", check_sortedness=False
        )
        .filter(pl.col("comm_uid").is_not_null())
    )
    if located.is_empty():
        return pl.DataFrame()
    members = (
        inst.select("comm_uid", "rank", *PROC)
        .unique(["comm_uid", "rank"], keep="first", maintain_order=True)
        .join(addr.select(*PROC, "address"), on=PROC, how="left", maintain_order="left")
    )
    a = members.rename({"rank": "from_rank", "host": "a_host", "pid": "a_pid", "address": "a_addr"})
    b = members.rename({"rank": "to_rank", "host": "b_host", "pid": "b_pid", "address": "b_addr"})
    pairs = located.join(a, on=["comm_uid", "from_rank"], how="inner", maintain_order="left").join(
        b, on=["comm_uid", "to_rank"], how="inner", maintain_order="left"
    )
    pairs = pairs.filter(
        (pl.col("a_host") == pl.col("b_host"))
        & pl.col("a_addr").is_not_null()
        & pl.col("b_addr").is_not_null()
        & (pl.col("a_addr") != pl.col("b_addr"))
    )
    if pairs.is_empty():
        return pairs
    ranks = known_ranks(job)
    pairs = (
        pairs.join(
            ranks.rename({"host": "a_host", "pid": "a_pid", "rank": "a_rank"}),
            on=["a_host", "a_pid"],
            how="left",
            maintain_order="left",
        )
        .join(
            ranks.rename({"host": "b_host", "pid": "b_pid", "rank": "b_rank"}),
            on=["b_host", "b_pid"],
            how="left",
            maintain_order="left",
        )
        .with_columns(host=pl.col("a_host"))
    )
    return pairs.sort("seq", maintain_order=True)


def _merged_summaries(job: Job, addr: pl.DataFrame) -> pl.DataFrame:
    """``comm … nNodes M localRanks L`` lines whose L exceeds the processes at the logging process's
    address."""
    comms = job.table("comms")
    if comms.is_empty() or "local_ranks" not in comms.columns:
        return pl.DataFrame()
    summary = comms.filter(
        (pl.col("what") == "Summary") & pl.col("local_ranks").is_not_null() & pl.col("host").is_not_null()
    )
    if summary.is_empty():
        return pl.DataFrame()
    at = addr.group_by("host", "address").agg(at_addr=pl.len())
    rows = summary.join(addr.select(*PROC, "address"), on=PROC, how="inner").join(
        at, on=["host", "address"], how="inner"
    )
    # Only meaningful for the world communicator (local ranks of a sub-communicator are fewer anyway).
    world = job.world_size
    if world is not None:
        rows = rows.filter(pl.col("nranks") == world)
    return rows.filter(pl.col("local_ranks") > pl.col("at_addr"))
