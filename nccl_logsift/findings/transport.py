"""Rules about the data path between GPUs: slower transports chosen at init, and network errors (LS3xx).

| code | name | kind | severity |
|---|---|---|---|
| LS301 | transport-fallback | transport_fallback | warning |
| LS302 | net-error | net_error | critical |

Transports are compared across ranks and nodes, because asymmetry is the tell: one node on TCP sockets
while the others use InfiniBand, one rank without GPUDirect RDMA, one host whose GPUs talk through host
memory. A connection line names ranks of its communicator; :func:`transport_rows` maps them to global
ranks and hosts through the communicator instances the line belongs to (grammar §4.1).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import rows_of
from nccl_logsift.findings.wording import names, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.exits import assemble_exits
from nccl_logsift.resolve.hosts import nccl_host
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.transports import (
    address_hosts,
    logged_hosts,
    n_nodes,
    peer_ranks_on,
    transport_rows,
)

# ibv_wc_status (libibverbs), grammar §6.1.
IB_STATUS = {
    0: "SUCCESS",
    1: "LOC_LEN_ERR",
    2: "LOC_QP_OP_ERR",
    3: "LOC_EEC_OP_ERR",
    4: "LOC_PROT_ERR",
    5: "WR_FLUSH_ERR",
    6: "MW_BIND_ERR",
    7: "BAD_RESP_ERR",
    8: "LOC_ACCESS_ERR",
    9: "REM_INV_REQ_ERR",
    10: "REM_ACCESS_ERR",
    11: "REM_OP_ERR",
    12: "RETRY_EXC_ERR",
    13: "RNR_RETRY_EXC_ERR",
    14: "LOC_RDD_VIOL_ERR",
    15: "REM_INV_RD_REQ_ERR",
    16: "REM_ABORT_ERR",
    17: "INV_EECN_ERR",
    18: "INV_EEC_STATE_ERR",
    19: "FATAL_ERR",
    20: "RESP_TIMEOUT_ERR",
    21: "GENERAL_ERR",
}
IB_MEANING = {
    12: "retries exhausted, the peer never acknowledged: link down or flapping, routing, a wrong RoCE GID "
    "index, or a dead peer",
    13: "receiver not ready: the peer stopped posting receives (stalled or dead)",
    4: "local protection error: GPUDirect RDMA blocked by PCIe ACS or the IOMMU, or a bad memory "
    "registration",
    5: "flushed because the queue pair was already in error (a consequence, not the cause)",
    10: "remote access error: the peer rejected the RDMA access (memory key or registration)",
    11: "remote operation error: the peer could not complete the request",
    7: "bad response from the peer",
    8: "local access error (memory registration)",
    9: "invalid request at the peer",
    20: "response timeout",
    21: "general error",
}
IB_ADVICE = {
    12: "Check the link and switch port of both NICs (ibstat / ibstatus rate and state, port error counters "
    "with perfquery, dmesg for link flaps), the routing between the two hosts, and for RoCE the GID "
    "index (show_gids, NCCL_IB_GID_INDEX). If the peer process or node died, start from that failure.",
    13: "The peer stopped posting receives: look at what the peer process was doing (it may have died or "
    "stalled); for RoCE also check PFC / lossless configuration.",
    4: "GPUDirect RDMA is being blocked: disable PCIe ACS on the switches between GPU and NIC (or set "
    "iommu=pt / disable the IOMMU), check nvidia-peermem or DMA-BUF support; NCCL_NET_GDR_LEVEL=LOC "
    "avoids GDR as a workaround.",
    5: "Flushed requests follow an earlier error on the same queue pair: find the first completion error or "
    "the failure of the peer.",
}
SOCKET_KINDS = ("socket_closed", "socket_io", "socket_truncated")
IB_CALLS = r"^(?:ibv_|mlx5dv_|rdma_)"


def _settings(job: Job, name: str) -> pl.DataFrame:
    s = job.table("settings")
    if s.is_empty() or "name" not in s.columns:
        return pl.DataFrame()
    return s.filter(pl.col("name") == name)


def _errors(job: Job, *kinds: str) -> pl.DataFrame:
    e = job.table("errors")
    if e.is_empty() or "error_kind" not in e.columns:
        return pl.DataFrame()
    return with_job_rank(job, e.filter(pl.col("error_kind").is_in(kinds)))


def _message(job: Job, rows: pl.DataFrame) -> str:
    """The message text of the first row (the line without its prefix)."""
    if rows.is_empty():
        return ""
    first = (
        rows.sort("source_id", "line_no")
        .head(1)
        .select("source_id", "line_no", *(["part"] if "part" in rows.columns else []))
    )
    text = (
        job.lines.join(first, on=first.columns, how="inner")["text"]
        if not job.lines.is_empty()
        else pl.Series([])
    )
    if not text.len():
        return ""
    return re.sub(r"^.*?NCCL (?:WARN|ATTN|INFO|TRACE) ", "", text[0]).strip()


def _texts(job: Job, rows: pl.DataFrame) -> pl.DataFrame:
    """Rows with ``message`` (line text after the NCCL prefix) and ``sig`` (the same, numbers blanked)."""
    lines = (
        job.lines.select("source_id", "line_no", "part", "text")
        if not job.lines.is_empty()
        else pl.DataFrame(
            schema={"source_id": pl.UInt16, "line_no": pl.UInt32, "part": pl.UInt8, "text": pl.String}
        )
    )
    out = rows.sort("source_id", "line_no").join(
        lines, on=["source_id", "line_no", "part"], how="left", maintain_order="left"
    )
    return out.with_columns(
        message=pl.col("text").str.replace(r"^.*?NCCL (?:WARN|ATTN|INFO|TRACE) ", "").str.strip_chars()
    ).with_columns(sig=pl.col("message").str.replace_all(r"\d+", "N"))


def _ranks(frame: pl.DataFrame, column: str = "job_rank") -> list[int]:
    if frame.is_empty() or column not in frame.columns:
        return []
    return sorted({int(r) for r in frame[column].drop_nulls()})


def _deaths_reported(job: Job) -> bool:
    """A launcher reported a process that crashed, was killed or exited with an error."""
    exits = job.table("exits")
    if exits.is_empty() or "event" not in exits.columns:
        return False
    rows = assemble_exits(exits)
    return rows.filter(pl.col("signal").is_not_null() | (pl.col("exit_code").fill_null(0) != 0)).height > 0


# ---------------------------------------------------------------------------------------------- LS301
class TransportFallback(Rule):
    """Some ranks move data over a slower path than the hardware allows.

    What it means:
        NCCL picked a fallback transport: TCP sockets (NET/Socket) between nodes instead of InfiniBand,
        RoCE or the cluster's network plugin; InfiniBand without GPUDirect RDMA (data staged through host
        memory); host shared memory (SHM) or the network between GPUs of one host instead of P2P; or
        CollNet/SHARP/NVLS collectives that could not be set up.

    Why it matters:
        A fallback rarely fails the job, it makes it slow: sockets are an order of magnitude slower than
        RDMA, host staging costs bandwidth and CPU, and one slow link slows every collective of the ring.
        When only some ranks fall back, the others wait for them at every step; very slow links can also
        push collectives past the watchdog timeout.

    How it is detected:
        From the connection lines (``Channel 02/0 : 3[3] -> 4[0] [send] via NET/Socket/0``), compared
        across ranks and hosts: NET/Socket on a multi-node job (with ``Using network Socket``, ``NET/IB :
        No device found``, ``NCCL_IB_DISABLE set by environment to 1.`` or a missing net plugin as the
        reason); NET lines without ``/GDRDMA`` on some ranks while others have it, or on all ranks while
        ``GPU Direct RDMA`` lines show capable NICs or a disabled decision; ``via SHM/…`` or NET between
        ranks of one host (``NCCL_P2P_DISABLE``, ``NCCL_P2P_LEVEL``, ``P2P is disabled between …``); and
        the CollNet/SHARP/NVLS setup WARNs (``Cannot initialize CollNet``, ``SHARP coll init error``, NVLS
        bind failures) and plugin errors. The ranks are the ones on the slower path. A job on a slower path
        works, so by the severity policy this is never a root cause: a warning when NCCL fell back on its own
        (no usable RDMA device, P2P failing, some nodes or hosts only, CollNet/SHARP not set up); info when
        the job chose the path (``NCCL_IB_DISABLE``, ``NCCL_NET=Socket``, socket tuning, ``NCCL_P2P_DISABLE``
        or ``NCCL_P2P_LEVEL``, ``NCCL_NET_GDR_LEVEL`` for GDR everywhere, as echoed by ``… set by environment
        to …``), when NCCL's first network plugin
        failed and it went on with another (``Failed to initialize NET plugin IB``), when a mix follows the
        PCIe topology, or when nothing shows GDR was possible. Only a requested network that does not exist
        and that leaves the processes with no network at all is an error.

    Example:
        ``NCCL INFO NET/IB : No device found.`` then ``NCCL INFO Using network Socket`` and ``Channel 00 :
        1[3d000] -> 2[1b000] [send] via NET/Socket/0`` on both nodes of a two-node job.

    What to do:
        For sockets: make the RDMA devices visible to the job (container ``--device=/dev/infiniband``,
        rdma-core / libibverbs in the image, the right ``NCCL_IB_HCA``; unset ``NCCL_IB_DISABLE``; install
        the network plugin the cluster needs, e.g. aws-ofi-nccl for EFA or Slingshot). For GPUDirect RDMA:
        load nvidia-peermem or use DMA-BUF, and check ``NCCL_NET_GDR_LEVEL`` against the GPU–NIC distance.
        For SHM inside a node: unset ``NCCL_P2P_DISABLE`` / ``NCCL_P2P_LEVEL`` and check ``nvidia-smi topo
        -m`` and PCIe ACS. For CollNet/SHARP: check the SHARP aggregation manager, or disable CollNet.
    """

    code = "LS301"
    name = "transport-fallback"
    kind = Kind.TRANSPORT_FALLBACK
    severity = Severity.WARNING

    def check(self, job: Job) -> Iterator[Finding]:
        t = transport_rows(job)
        nodes = n_nodes(job)
        yield from self._socket(job, t, nodes)
        yield from self._gdr(job, t)
        yield from self._intra_node(job, t)
        yield from self._collective_offload(job)
        yield from self._plugin(job)

    # -------------------------------------------------------------------------------------- sockets
    def _socket(self, job: Job, t: pl.DataFrame, nodes: int) -> Iterator[Finding]:
        net = t.filter(pl.col("transport") == "NET") if not t.is_empty() else t
        if not net.is_empty():
            net = net.filter(pl.col("same_host").fill_null(False).not_())
        sock = net.filter(pl.col("net_name") == "Socket") if not net.is_empty() else net
        other = net.filter(pl.col("net_name") != "Socket") if not net.is_empty() else net
        network = job.table("network")
        selected = (
            with_job_rank(job, network.filter(pl.col("event") == "net_selected"))
            if not network.is_empty() and "event" in network.columns
            else pl.DataFrame()
        )
        if sock.is_empty():
            if net.is_empty() and nodes > 1 and not selected.is_empty():
                sock = selected.filter(pl.col("net_name") == "Socket")
                other = selected.filter(pl.col("net_name") != "Socket")
                sock = sock.join(other.select("host", "pid"), on=["host", "pid"], how="anti")
            if sock.is_empty():
                return
        elif nodes < 2 and not (sock["peer_host"].is_not_null() & (sock["peer_host"] != sock["host"])).any():
            return
        whole = other.is_empty()
        ranks = _ranks(sock)
        if whole and not selected.is_empty():
            ranks = sorted(set(ranks) | set(_ranks(selected.filter(pl.col("net_name") == "Socket"))))
        hosts = sorted(set(sock["host"].drop_nulls().to_list()))
        reasons, reason_rows = self._socket_reasons(job, sock)
        tuned = self._socket_tuning(job)
        carriers = (
            f"{len(ranks)} rank(s) ({ranks_text(ranks)}) on "
            f"{', '.join(hosts[:4])}{' …' if len(hosts) > 4 else ''}"
        )
        if whole:
            # nNodes counts the job's nodes; a per-node output file holds one node's lines only.
            logged = len(logged_hosts(job))
            partial = f" (these logs show {logged} of its nodes)" if 0 < logged < nodes else ""
            title = (
                f"All inter-node traffic of this {nodes}-node job{partial} runs over TCP sockets "
                "(NET/Socket) "
                f"instead of RDMA ({carriers})"
            )
        else:
            nets = ", ".join(sorted(other["net_name"].drop_nulls().unique().to_list()))
            title = (
                f"Inter-node traffic of {carriers} runs over TCP sockets (NET/Socket) while "
                f"{len(_ranks(other))} rank(s) use {nets}"
            )
        if reasons:
            title += ": " + "; ".join(reasons)
        # Severity policy: sockets that carry the traffic keep a job working, slower, so this is never an
        # error. Sockets chosen on purpose (NCCL_IB_DISABLE, NCCL_NET=Socket, socket tuning) are info; sockets
        # because no RDMA device was usable, or on some nodes only, are a warning. RDMA devices that exist
        # and fail are reported by LS302; this finding stays as their evidence.
        chosen = [r for r in reasons if r.startswith(("NCCL_IB_DISABLE", "NCCL_NET selects"))]
        deliberate = whole and bool(chosen or tuned) and _errors(job, "ib_device").is_empty()
        if deliberate:
            title += f"; the job chose sockets on purpose ({', '.join(chosen) or tuned})"
        rows = pl.concat([rows_of(reason_rows).head(3), rows_of(sock).head(3)])
        yield self.finding(
            job,
            title,
            evidence_rows=rows,
            ranks=ranks,
            hosts=hosts,
            severity=Severity.INFO if deliberate else Severity.WARNING,
            advice=(
                "If RDMA is wanted, make the devices usable by NCCL: unset NCCL_IB_DISABLE / NCCL_NET, "
                "expose /dev/infiniband and install rdma-core/libibverbs in the container, pick the right "
                "NCCL_IB_HCA, and install the network plugin the cluster needs (aws-ofi-nccl for EFA or "
                "Slingshot). `ibv_devinfo` on each node shows whether a usable device exists."
            ),
        )

    @staticmethod
    def _socket_tuning(job: Job) -> str:
        """How the job configured NCCL's sockets on purpose: several NICs in NCCL_SOCKET_IFNAME, or the
        socket thread/socket counts set. Empty when it did not."""
        s = job.table("settings")
        if s.is_empty() or "name" not in s.columns:
            return ""
        tuning = s.filter(pl.col("name").is_in(["NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD"]))
        if tuning.height:
            return ", ".join(sorted(set(tuning["name"]))) + " set"
        ifname = s.filter(pl.col("name") == "NCCL_SOCKET_IFNAME")
        if ifname.height:
            nics = [n for n in re.split(r"[,\s]+", ifname["value"][0].lstrip("=^")) if n]
            if len(nics) > 1:
                return f"NCCL_SOCKET_IFNAME lists {len(nics)} interfaces"
        return ""

    def _socket_reasons(self, job: Job, sock: pl.DataFrame) -> tuple[list[str], pl.DataFrame]:
        reasons: list[str] = []
        rows: list[pl.DataFrame] = []
        disabled = _settings(job, "NCCL_IB_DISABLE")
        if not disabled.is_empty():
            disabled = disabled.filter(pl.col("value").str.strip_chars(".").is_in(["1", "true", "True"]))
            if disabled.height:
                reasons.append("NCCL_IB_DISABLE=1 is set")
                rows.append(rows_of(disabled))
        forced = _settings(job, "NCCL_NET")
        if not forced.is_empty() and forced["value"].str.contains("(?i)socket").any():
            reasons.append("NCCL_NET selects Socket")
            rows.append(rows_of(forced))
        network = job.table("network")
        if not network.is_empty() and "event" in network.columns:
            nodev = network.filter(pl.col("event") == "ib_no_device")
            if nodev.height:
                reasons.append("'NET/IB : No device found' (no usable IB/RoCE device)")
                rows.append(rows_of(nodev))
            verbs = network.filter(pl.col("event") == "ibverbs_missing")
            if verbs.height:
                reasons.append("libibverbs could not be loaded")
                rows.append(rows_of(verbs))
            missing = (
                network.filter(
                    (pl.col("event") == "plugin")
                    & (pl.col("plugin_type").fill_null("NET") == "NET")
                    & (
                        pl.col("plugin_lib").is_not_null()
                        | pl.col("plugin_text").fill_null("").str.contains("(?i)no plugin|could not find")
                    )
                    & pl.col("plugin_name").is_null()
                )
                if "plugin_lib" in network.columns
                else pl.DataFrame()
            )
            loaded = (
                network.filter(pl.col("event") == "plugin").filter(pl.col("plugin_name").is_not_null())
                if "plugin_name" in network.columns
                else pl.DataFrame()
            )
            failed = _errors(job, "plugin")
            if not failed.is_empty() and "error_text" in failed.columns:
                failed = failed.filter(pl.col("error_text").fill_null("").str.contains(r"^IB"))
            if failed.height and not nodev.height:  # 2.27+: the IB plugin failed, NCCL went on with the next
                reasons.append("'Failed to initialize NET plugin IB'")
                rows.append(rows_of(failed))
            if not missing.is_empty() and loaded.is_empty() and not reasons:
                reasons.append(
                    "no network plugin was loaded (clusters whose RDMA network needs one, such as EFA "
                    "or Slingshot, fall back to sockets without it)"
                )
            devices = network.filter(pl.col("event").is_in(["socket_devices", "bootstrap_interface"]))
            ifaces = (
                " ".join(
                    devices["interfaces"].drop_nulls().to_list() + devices["ifname"].drop_nulls().to_list()
                )
                if devices.height
                else ""
            )
            if re.search(r"(?:^|[\s\]])ib\d", ifaces):
                reasons.append("the sockets run over IPoIB interfaces, so InfiniBand hardware is there")
        ibdev = _errors(job, "ib_device")
        if not ibdev.is_empty():
            reasons.append("IB devices could not be opened")
            rows.append(rows_of(ibdev))
        frame = pl.concat(rows) if rows else pl.DataFrame()
        return reasons, frame

    # -------------------------------------------------------------------------------------- GPUDirect RDMA
    def _gdr(self, job: Job, t: pl.DataFrame) -> Iterator[Finding]:
        if t.is_empty():
            return
        rdma = t.filter(
            (pl.col("transport") == "NET")
            & (pl.col("net_name") != "Socket")
            & pl.col("job_rank").is_not_null()
        )
        if rdma.is_empty():
            return
        per_rank = rdma.group_by("job_rank").agg(
            n=pl.len(), with_gdr=pl.col("gdr").is_not_null().sum(), host=pl.col("host").first()
        )
        per_host = rdma.group_by("host").agg(with_gdr=pl.col("gdr").is_not_null().sum())
        bare_hosts = set(per_host.filter(pl.col("with_gdr") == 0)["host"].drop_nulls())
        gdr_hosts = set(per_host.filter(pl.col("with_gdr") > 0)["host"].drop_nulls())
        none = per_rank.filter(pl.col("with_gdr") == 0)
        some = per_rank.filter(pl.col("with_gdr") > 0)
        partial = some.filter(pl.col("with_gdr") < pl.col("n"))
        net_names = ", ".join(sorted(rdma["net_name"].drop_nulls().unique().to_list()))
        reasons, reason_rows, capable = self._gdr_reasons(job)
        if none.height:
            ranks = sorted(int(r) for r in none["job_rank"])
            hosts = sorted(set(none["host"].drop_nulls()))
            if bare_hosts and gdr_hosts:
                # A whole node without GDR (peer-memory module missing there): every rank of it is affected.
                hosts = sorted(bare_hosts)
                on_hosts = (
                    job.processes.filter(pl.col("host").is_in(hosts))["global_rank"].drop_nulls()
                    if not job.processes.is_empty()
                    else []
                )
                ranks = sorted(set(ranks) | {int(r) for r in on_hosts})
                title = (
                    f"{', '.join(hosts[:4])}{' …' if len(hosts) > 4 else ''} use(s) NET/{net_names} without "
                    "GPUDirect "
                    f"RDMA while {len(gdr_hosts)} other host(s) use it ({len(ranks)} rank(s): "
                    f"{ranks_text(ranks)}): "
                    "their inter-node traffic is staged through host memory"
                )
                severity = Severity.WARNING
            elif some.height:
                title = (
                    f"{len(ranks)} rank(s) ({ranks_text(ranks)}) on {', '.join(hosts[:4])} use "
                    f"NET/{net_names} "
                    f"without GPUDirect RDMA while {some.height} rank(s) use it: their traffic is staged "
                    "through host memory"
                )
                severity = Severity.WARNING
            else:
                title = (
                    f"No rank uses GPUDirect RDMA on NET/{net_names} ({len(ranks)} rank(s)): inter-node "
                    "traffic is staged through host memory"
                )
                # Severity policy: GDR the job turned off everywhere (NCCL_NET_GDR_LEVEL set by environment)
                # is its choice, info; GDR lost to the topology or a missing module is a warning.
                chosen = not _settings(job, "NCCL_NET_GDR_LEVEL").is_empty()
                severity = Severity.WARNING if (reasons or capable) and not chosen else Severity.INFO
            no_gdr = rdma.filter(pl.col("host").is_in(hosts) & pl.col("gdr").is_null())
            if reasons:
                title += "; " + "; ".join(reasons)
            elif capable:
                title += "; the NICs report GPUDirect RDMA support"
            yield self.finding(
                job,
                title,
                evidence_rows=pl.concat([rows_of(no_gdr).head(3), rows_of(reason_rows).head(3)]),
                ranks=ranks,
                hosts=hosts,
                severity=severity,
                advice=self._gdr_advice(),
            )
        if partial.height:
            ranks = sorted(int(r) for r in partial["job_rank"])
            rows = rdma.filter(pl.col("job_rank").is_in(ranks) & pl.col("gdr").is_null())
            devs = sorted({int(d) for d in rows["net_dev"].drop_nulls()}) if "net_dev" in rows.columns else []
            share = f"{rows.height} of {rdma.filter(pl.col('job_rank').is_in(ranks)).height}"
            yield self.finding(
                job,
                f"{share} NET/{net_names} connections of {len(ranks)} rank(s) ({ranks_text(ranks)}) run "
                "without "
                f"GPUDirect RDMA{f' (net device(s) {ranks_text(devs)})' if devs else ''}, the others with "
                "it: "
                "NCCL uses NICs too far from these GPUs for GDR on some channels",
                evidence_rows=rows_of(rows).head(4),
                ranks=ranks,
                severity=Severity.INFO,
                advice="Usually the PCIe topology (NICs on another PCIe switch or CPU socket); check rail "
                "alignment (`nvidia-smi topo -m`) and NCCL_NET_GDR_LEVEL if this costs bandwidth.",
            )

    def _gdr_reasons(self, job: Job) -> tuple[list[str], pl.DataFrame, bool]:
        network = job.table("network")
        if network.is_empty() or "gdr" not in network.columns:
            return [], pl.DataFrame(), False
        gdr = network.filter((pl.col("event") == "gdr") & pl.col("gdr").is_not_null())
        disabled = gdr.filter(pl.col("gdr").str.to_lowercase() == "disabled")
        capable = (
            gdr.filter(pl.col("gdr_gpu").is_null() & (pl.col("gdr").str.to_lowercase() == "enabled")).height
            > 0
        )
        reasons: list[str] = []
        if disabled.height:
            far = disabled.filter(pl.col("distance").is_not_null())
            if far.height:
                row = far.row(0, named=True)
                reasons.append(
                    f"'GPU Direct RDMA Disabled' for {far['gdr_gpu'].n_unique()} GPU(s): GPU–NIC distance "
                    f"{row['distance']} {row['distance_op'] or '>'} {row['distance_limit']} "
                    "(NCCL_NET_GDR_LEVEL)"
                )
            why = disabled.filter(pl.col("gdr_reason").is_not_null())
            if why.height:
                reasons.append(f"'GPU Direct RDMA Disabled' ({why['gdr_reason'][0]})")
            if not far.height and not why.height:
                reasons.append("'GPU Direct RDMA Disabled' for the NICs")
        level = _settings(job, "NCCL_NET_GDR_LEVEL")
        rows = (
            pl.concat([rows_of(disabled).head(3), rows_of(level).head(1)])
            if disabled.height or not level.is_empty()
            else pl.DataFrame()
        )
        return reasons, rows, capable

    @staticmethod
    def _gdr_advice() -> str:
        return (
            "Load nvidia-peermem (or use DMA-BUF with a recent driver and kernel), make sure the container "
            "sees it, and compare NCCL_NET_GDR_LEVEL with the GPU–NIC distance in `nvidia-smi topo -m`; "
            "PCIe ACS or the IOMMU can also block GDR."
        )

    # -------------------------------------------------------------------------------------- inside a node
    def _intra_node(self, job: Job, t: pl.DataFrame) -> Iterator[Finding]:
        disabled = _settings(job, "NCCL_P2P_DISABLE")
        if not disabled.is_empty():
            disabled = disabled.filter(pl.col("value").str.strip_chars(".").is_in(["1", "true", "True"]))
        level = _settings(job, "NCCL_P2P_LEVEL")
        p2p_errors = _errors(job, "p2p")
        reasons: list[str] = []
        if not disabled.is_empty():
            reasons.append("NCCL_P2P_DISABLE=1 is set")
        if not level.is_empty():
            reasons.append(f"NCCL_P2P_LEVEL={level['value'][0]} is set")
        if not p2p_errors.is_empty():
            reasons.append(f"'{_message(job, p2p_errors)}'")
        reason_rows = pl.concat(
            [rows_of(disabled).head(2), rows_of(level).head(1), rows_of(p2p_errors).head(2)]
        )
        # Severity policy: a path the job chose (NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, no P2P error) is info;
        # one NCCL fell to on its own (P2P failed, or some hosts only) is a warning: the job works, slower.
        set_by_job = not disabled.is_empty() or not level.is_empty()
        chosen = Severity.INFO if set_by_job and p2p_errors.is_empty() else None
        if t.is_empty():
            if not disabled.is_empty():
                ranks = _ranks(with_job_rank(job, disabled))
                yield self.finding(
                    job,
                    "NCCL_P2P_DISABLE=1 is set: GPUs of a node exchange data through host "
                    "memory instead of NVLink/PCIe peer-to-peer",
                    evidence_rows=reason_rows,
                    ranks=ranks,
                    severity=chosen,
                    advice=self._p2p_advice(),
                )
            return
        intra = t.filter(
            pl.col("transport").is_in(["P2P", "SHM"])
            | ((pl.col("transport") == "NET") & pl.col("same_host").fill_null(False))
        )
        if intra.is_empty():
            return
        per_host = intra.group_by("host").agg(
            p2p=(pl.col("transport") == "P2P").sum(),
            shm=(pl.col("transport") == "SHM").sum(),
            net=(pl.col("transport") == "NET").sum(),
        )
        slow_hosts = per_host.filter((pl.col("p2p") == 0) & ((pl.col("shm") > 0) | (pl.col("net") > 0)))
        fast_hosts = per_host.filter(pl.col("p2p") > 0)
        if slow_hosts.height:
            hosts = sorted(slow_hosts["host"].drop_nulls())
            rows = intra.filter(pl.col("host").is_in(hosts))
            ranks = _ranks(rows)
            paths = " and ".join(
                p
                for p, n in (
                    ("host shared memory (SHM)", slow_hosts["shm"].sum()),
                    ("the network (NET)", slow_hosts["net"].sum()),
                )
                if n
            )
            contrast = f", while {fast_hosts.height} host(s) use P2P" if fast_hosts.height else ""
            title = (
                f"GPUs of {', '.join(hosts[:4])}{' …' if len(hosts) > 4 else ''} exchange data through "
                f"{paths} "
                f"instead of NVLink/PCIe peer-to-peer ({len(ranks)} rank(s): {ranks_text(ranks)}){contrast}"
            )
            if reasons:
                title += ": " + "; ".join(reasons)
            yield self.finding(
                job,
                title,
                evidence_rows=pl.concat([reason_rows, rows_of(rows).head(3)]),
                ranks=ranks,
                hosts=hosts,
                severity=chosen if not fast_hosts.height else None,
                advice=self._p2p_advice(),
            )
        mixed = per_host.filter((pl.col("p2p") > 0) & ((pl.col("shm") > 0) | (pl.col("net") > 0)))
        if mixed.height:
            hosts = sorted(mixed["host"].drop_nulls())
            rows = intra.filter(pl.col("host").is_in(hosts) & (pl.col("transport") != "P2P"))
            ranks = _ranks(rows)
            net_intra = int(mixed["net"].sum())
            title = (
                f"{rows.height} connection(s) between GPUs of the same host ({', '.join(hosts[:4])}) go "
                "through "
                f"{'the network' if net_intra and not mixed['shm'].sum() else 'host shared memory'} while "
                "the "
                f"others use P2P ({len(ranks)} rank(s): {ranks_text(ranks)})"
            )
            if reasons:
                title += ": " + "; ".join(reasons)
            yield self.finding(
                job,
                title,
                evidence_rows=pl.concat([reason_rows, rows_of(rows).head(3)]),
                ranks=ranks,
                hosts=hosts,
                severity=chosen or (Severity.WARNING if reasons or net_intra else Severity.INFO),
                advice=self._p2p_advice(),
            )

    @staticmethod
    def _p2p_advice() -> str:
        return (
            "Unset NCCL_P2P_DISABLE / NCCL_P2P_LEVEL unless they work around a known problem; check "
            "`nvidia-smi topo -m` (GPUs on different CPU sockets only reach each other through host "
            "memory), PCIe ACS and the IOMMU, and that all ranks of a host run in one container / IPC "
            "namespace."
        )

    # -------------------------------------------------------------------------------------- CollNet / NVLS
    def _collective_offload(self, job: Job) -> Iterator[Finding]:
        for kind, what in (("collnet", "CollNet/SHARP"), ("nvls", "NVLink SHARP (NVLS) / MNNVL")):
            rows = _errors(job, kind)
            if not rows.is_empty():
                rows = rows.filter(
                    pl.col("level") == "WARN"
                )  # INFO lines say a feature is absent, not broken
            if rows.is_empty():
                continue
            ranks = _ranks(rows)
            msgs = (
                _texts(job, rows)
                .unique("sig", keep="first", maintain_order=True)["message"]
                .head(2)
                .to_list()
            )
            who = f"{len(ranks)} rank(s) ({ranks_text(ranks)})" if ranks else f"{rows.height} line(s)"
            title = f"{what} could not be set up on {who}: " + "; ".join(f"'{m}'" for m in msgs)
            if kind == "collnet":
                title += "; NCCL falls back to the point-to-point network"
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(rows).head(4),
                ranks=ranks,
                advice=(
                    "For SHARP: check that the SHARP aggregation manager (sharp_am) runs and the job may "
                    "use it, or set NCCL_COLLNET_ENABLE=0. For NVLS: check the Fabric Manager and "
                    "NVSwitches, or set NCCL_NVLS_ENABLE=0."
                ),
            )

    # -------------------------------------------------------------------------------------- plugins
    def _plugin(self, job: Job) -> Iterator[Finding]:
        rows = _errors(job, "plugin")
        if rows.is_empty():
            return
        ranks = _ranks(rows)
        text = _message(job, rows)
        # A plugin that fails to initialize is skipped: NCCL tries the next one (IB, then Socket). Only when
        # the failing processes then used no network at all is this the job's failure; when they went on over
        # another network, the job works and the fallback finding above says how well.
        used = _networks_used(job, rows)
        if used:
            yield self.finding(
                job,
                f"The network plugin NCCL tried first could not be initialized on "
                f"{len(ranks) or rows.height} rank(s): '{text}'; NCCL went on with {', '.join(used)}",
                evidence_rows=rows_of(rows).head(4),
                ranks=ranks,
                severity=Severity.INFO,
                advice=(
                    "Expected on hosts without that network's devices. If the network should be there, "
                    "check its devices and the plugin library (libnccl-net*.so) in the job."
                ),
            )
            return
        yield self.finding(
            job,
            f"The network NCCL was asked to use is not available on {len(ranks) or rows.height} rank(s): "
            f"'{text}'",
            evidence_rows=rows_of(rows).head(4),
            ranks=ranks,
            severity=Severity.ERROR,
            advice=(
                "Check NCCL_NET / NCCL_NET_PLUGIN and that the plugin library (libnccl-net*.so) and its "
                "dependencies are on LD_LIBRARY_PATH inside the job's environment."
            ),
        )


def _networks_used(job: Job, failed: pl.DataFrame) -> list[str]:
    """The networks the processes of ``failed`` rows went on with: ``Using network X`` / ``Initialized NET
    plugin X`` lines, or connection lines through a NET transport, of the same host and pid."""
    keys = failed.select("host", "pid").unique() if {"host", "pid"} <= set(failed.columns) else pl.DataFrame()
    if keys.is_empty():
        return []
    names: set[str] = set()
    network = job.table("network")
    if not network.is_empty() and {"event", "net_name"} <= set(network.columns):
        chosen = network.filter(pl.col("event") == "net_selected").join(keys, on=["host", "pid"], how="semi")
        names |= set(chosen["net_name"].drop_nulls().to_list())
    t = job.table("transports")
    if not t.is_empty() and {"transport", "net_name"} <= set(t.columns):
        net = t.filter(pl.col("transport") == "NET").join(keys, on=["host", "pid"], how="semi")
        names |= set(net["net_name"].drop_nulls().to_list())
    return sorted(names)


# ---------------------------------------------------------------------------------------------- LS302
class NetError(Rule):
    """The network failed under NCCL: IB/RoCE completion errors, port events, OFI errors, closed sockets.

    What it means:
        A transfer between two ranks failed. For InfiniBand/RoCE the NIC reported a work completion with an
        error status (12: retries exceeded — link, routing or GID problem, or a dead peer; 13: receiver not
        ready; 4: local protection — GPUDirect blocked by PCIe ACS/IOMMU; 5: flushed after an earlier error),
        or an async event such as a port error. aws-ofi-nccl (NET/OFI) reported a libfabric failure. On TCP,
        the peer closed the connection or a send/receive failed.

    Why it matters:
        NCCL cannot retry a failed transfer: the communicator goes into an error state, the collective never
        completes, and the job aborts or hangs until the watchdog fires. A completion error names the link
        that failed; a closed socket usually means the peer process died first, so it points at the peer.

    How it is detected:
        From the ``errors`` table: ``NET/IB : Got completion from peer … with error|status=N … vendor err V``
        (status decoded; status 5 after another status is a consequence), ``NET/IB : … Got async event``,
        WARN lines of the OFI plugin (``NET/OFI …``; critical when an error chain ``file:line -> N``
        follows), IB device and verbs failures, and ``Connection closed by remote peer`` / ``Call to recv …
        failed`` / ``message truncated``. The ranks are the ones that logged the error; the peer address is
        mapped to its host through the bootstrap, socket and OOB addresses, and to a rank when one rank of
        that host talks to the logging rank over the network. Completion errors are critical; a closed
        socket is an error, and a warning when another process had already failed (named in the title) or
        a launcher reports a dead process; a flush (status 5) next to another status is a warning, alone
        an error; IB devices that cannot be opened are info on one node, a warning across nodes.

    Example:
        ``transport/net_ib.cc:1276 NCCL WARN NET/IB : Got completion from peer 10.70.17.153<59644> with error
        12, opcode 0, len 0, vendor err 129 (Send)`` on rank 1 (node0152), peer = rank 2 on node0153.

    What to do:
        Status 12/13: check both ends' links and switch ports (ibstat, perfquery error counters, dmesg), the
        routing, and for RoCE the GID index; if the peer died, start from that failure. Status 4: disable
        PCIe ACS / set iommu=pt, check nvidia-peermem or DMA-BUF. OFI errors: check the provider (fi_info),
        the plugin version and, in containers, access to the NIC devices. Closed sockets: find why the peer
        process ended (other findings for that rank or host).
    """

    code = "LS302"
    name = "net-error"
    kind = Kind.NET_ERROR
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        errors = job.table("errors")
        if errors.is_empty() or "error_kind" not in errors.columns:
            return
        errors = with_job_rank(job, with_seq(errors))
        t = transport_rows(job)
        addresses = address_hosts(job)
        yield from self._ib_completion(job, errors, t, addresses)
        yield from self._ib_async(job, errors)
        yield from self._ib_mismatch(job, errors)
        yield from self._ofi(job, errors)
        yield from self._ib_devices(job, errors)
        yield from self._sockets(job, errors, t, addresses)

    # -------------------------------------------------------------------------------------- peers
    def _peer(
        self,
        job: Job,
        peer: str | None,
        peer_ip: str | None,
        logger: int | None,
        t: pl.DataFrame,
        addresses: dict[str, set[str]],
    ) -> tuple[str, list[int], str | None]:
        """(text naming the peer, its candidate ranks, its host)."""
        if not peer_ip and not peer:
            return "", [], None
        key = peer_ip or peer
        hosts = addresses.get(key) or ({nccl_host(key)} if nccl_host(key) in addresses else set())
        host = next(iter(hosts)) if len(hosts) == 1 else None
        ranks = peer_ranks_on(job, host, logger, t)
        text = peer or key
        if host and host != key:
            text += f" = {host}"
        if len(ranks) == 1:
            text += f", rank {ranks[0]}"
        elif ranks:
            text += f", ranks {ranks_text(ranks)}"
        return text, ranks, host

    # -------------------------------------------------------------------------------------- IB completions
    def _ib_completion(self, job: Job, errors: pl.DataFrame, t: pl.DataFrame, addresses) -> Iterator[Finding]:
        rows = errors.filter(pl.col("error_kind") == "ib_completion")
        if rows.is_empty():
            return
        with_status = rows.filter(pl.col("status").is_not_null())
        statuses = set(with_status["status"].to_list())
        for (status,), group in with_status.sort("seq").group_by("status", maintain_order=True):
            status = int(status)
            ranks = _ranks(group)
            hosts = sorted(set(group["host"].drop_nulls()))
            peers = []
            peer_ranks: set[int] = set()
            for row in (
                group.unique(["job_rank", "peer_ip", "peer"], keep="first", maintain_order=True)
                .head(4)
                .iter_rows(named=True)
            ):
                text, cands, _ = self._peer(
                    job, row.get("peer"), row.get("peer_ip"), row["job_rank"], t, addresses
                )
                if text:
                    peers.append(text)
                if len(cands) == 1:
                    peer_ranks.update(cands)
            name = (
                group["status_name"].drop_nulls().first() if "status_name" in group.columns else None
            ) or f"IBV_WC_{IB_STATUS.get(status, 'UNKNOWN')}"
            meaning = IB_MEANING.get(status, "an IB work completion error")
            vendor = (
                sorted({int(v) for v in group["vendor_err"].drop_nulls()})
                if "vendor_err" in group.columns
                else []
            )
            req = sorted(set(group["req_type"].drop_nulls())) if "req_type" in group.columns else []
            hca = sorted(set(group["hca"].drop_nulls())) if "hca" in group.columns else []
            who = (
                names(job, ranks)
                if ranks
                else f"{group.height} line(s) on {', '.join(hosts) or 'an unknown host'}"
            )
            detail = ", ".join(
                x
                for x in (
                    f"vendor err {ranks_text(vendor)}" if vendor else "",
                    f"HCA {', '.join(hca)}" if hca else "",
                )
                if x
            )
            direction = (
                {"Send": "sending to", "Recv": "receiving from"}.get(req[0], "with")
                if len(req) == 1
                else "with"
            )
            title = f"IB completion error on {who}"
            if peers:
                title += f" {direction} {'; '.join(peers)}"
            title += f": status {status} {name}, {meaning}"
            if detail:
                title += f" [{detail}]"
            if status == 5 and len(statuses) > 1:
                title += (
                    f"; flushed after the status {', '.join(str(s) for s in sorted(statuses - {5}))} error"
                )
            elif status == 5:
                title += "; the earlier error that put the queue pair in error is not in these logs"
            # Flushes next to another status are that error's fallout: below error, so never taken for the
            # cause.
            severity = (
                Severity.CRITICAL
                if status != 5
                else (Severity.WARNING if len(statuses) > 1 else Severity.ERROR)
            )
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(group),
                ranks=ranks,
                hosts=hosts,
                severity=severity,
                advice=IB_ADVICE.get(status, IB_ADVICE[12]),
            )
        bare = rows.filter(pl.col("status").is_null())
        if bare.height:
            ranks = _ranks(bare)
            text = _message(job, bare)
            covered = set(_ranks(with_status))
            severity = Severity.ERROR if covered and set(ranks) <= covered else Severity.CRITICAL
            yield self.finding(
                job,
                f"IB transport error on {names(job, ranks) if ranks else 'an unknown rank'}: '{text}'",
                evidence_rows=rows_of(bare),
                ranks=ranks,
                severity=severity,
                advice=IB_ADVICE[12],
            )

    def _ib_async(self, job: Job, errors: pl.DataFrame) -> Iterator[Finding]:
        rows = errors.filter(pl.col("error_kind") == "ib_async")
        if rows.is_empty():
            return
        text_col = pl.coalesce(
            *[pl.col(c) for c in ("event_text", "errno_text", "error_text") if c in rows.columns]
        )
        rows = rows.with_columns(what=text_col.fill_null(""))
        for (what,), group in rows.group_by("what", maintain_order=True):
            ranks = _ranks(group)
            hcas = (
                sorted(
                    {
                        f"{h}:{p}" if p is not None else h
                        for h, p in group.select("hca", "ib_port").iter_rows()
                        if h
                    }
                )
                if "hca" in group.columns
                else []
            )
            benign = re.search(
                r"(?i)GID table changed|speed change|port active|client reregister|LID change", what or ""
            )
            fatal = re.search(
                r"(?i)port error|fatal|catastrophic|QP|CQ|SRQ|path mig", what or ""
            ) or "fatal" in (group["pattern"][0] or "")
            severity = Severity.CRITICAL if fatal and not benign else Severity.WARNING
            where = f" on {', '.join(hcas)}" if hcas else ""
            title = (
                f"IB async event '{what or 'unknown'}'{where} reported by "
                f"{names(job, ranks) if ranks else ', '.join(sorted(set(group['host'].drop_nulls())))}"
            )
            if re.search(r"(?i)port error", what or ""):
                title += ": the port went down (link failure)"
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(group),
                ranks=ranks,
                hosts=sorted(set(group["host"].drop_nulls())),
                severity=severity,
                advice="Check the HCA port and cable/switch port (ibstat, dmesg, the subnet manager's log); "
                "a "
                "port that goes down under a running job breaks every connection through it.",
            )

    def _ib_mismatch(self, job: Job, errors: pl.DataFrame) -> Iterator[Finding]:
        rows = errors.filter(pl.col("error_kind") == "ib_mismatch")
        if rows.is_empty():
            return
        ranks = _ranks(rows)
        text = _message(job, rows)
        yield self.finding(
            job,
            "The two ends of an IB transfer disagree on its size or buffer on "
            f"{names(job, ranks) if ranks else 'some ranks'}: "
            f"'{text}' (mismatched collectives across ranks, or memory corruption)",
            evidence_rows=rows_of(rows).head(4),
            ranks=ranks,
            severity=Severity.ERROR,
            advice="Check that every rank issues the same collectives with the same sizes "
            "(collective-mismatch "
            "findings, TORCH_DISTRIBUTED_DEBUG=DETAIL); if they do, suspect a NIC or GPU memory problem.",
        )

    def _ofi(self, job: Job, errors: pl.DataFrame) -> Iterator[Finding]:
        text = (
            pl.coalesce(*[pl.col(c) for c in ("error_text",) if c in errors.columns])
            if "error_text" in errors.columns
            else pl.lit(None)
        )
        rows = errors.filter((pl.col("level") == "WARN") & text.fill_null("").str.starts_with("NET/OFI"))
        if rows.is_empty():
            return
        chains = errors.filter(pl.col("error_kind") == "chain")
        rows = rows.with_columns(sig=pl.col("error_text").str.replace_all(r"\d+", "N"))
        for _, group in rows.group_by("sig", maintain_order=True):
            ranks = _ranks(group)
            hosts = sorted(set(group["host"].drop_nulls()))
            propagated = False
            for host, pid, seq in group.select("host", "pid", "seq").iter_rows():
                later = chains.filter(
                    (pl.col("host") == host)
                    & (pl.col("pid") == pid)
                    & (pl.col("seq") > seq)
                    & (pl.col("result_code").fill_null(0) != 0)
                )
                if later.height:
                    propagated = True
                    break
            msg = group["error_text"][0]
            who = (
                f"{len(ranks)} rank(s) ({ranks_text(ranks)})"
                if len(ranks) > 2
                else (names(job, ranks) if ranks else ", ".join(hosts))
            )
            title = f"The OFI network plugin (aws-ofi-nccl / libfabric) failed on {who}: '{msg}'"
            title += (
                "; NCCL returned the error to the caller"
                if propagated
                else "; NCCL went on (no error chain followed)"
            )
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(group),
                ranks=ranks,
                hosts=hosts,
                severity=Severity.CRITICAL if propagated else Severity.WARNING,
                advice="Check the libfabric provider (`fi_info -p efa|cxi`), the aws-ofi-nccl and libfabric "
                "versions against NCCL's, and in containers the NIC devices and memory-registration "
                "limits (ulimit -l) the job can use.",
            )

    def _ib_devices(self, job: Job, errors: pl.DataFrame) -> Iterator[Finding]:
        call = pl.col("call") if "call" in errors.columns else pl.lit(None, pl.String)
        rows = errors.filter(
            (pl.col("error_kind") == "ib_device")
            | (
                (pl.col("error_kind") == "syscall")
                & (pl.col("level") == "WARN")
                & call.fill_null("").str.contains(IB_CALLS)
            )
        )
        if rows.is_empty():
            return
        ranks = _ranks(rows)
        hosts = sorted(set(rows["host"].drop_nulls()))
        devices = sorted(set(rows["hca"].drop_nulls())) if "hca" in rows.columns else []
        multi = n_nodes(job) > 1
        text = _message(job, rows)
        title = (
            f"IB devices could not be opened or queried on {', '.join(hosts[:4]) or 'this job'}"
            f"{f' ({len(devices)} device(s): ' + ', '.join(devices[:4]) + ')' if devices else ''}: '{text}'; "
            "NCCL skips them"
        )
        if not multi:
            title += " (single-node job: no inter-node traffic needs them)"
        yield self.finding(
            job,
            title,
            evidence_rows=rows_of(rows).head(4),
            ranks=ranks,
            hosts=hosts,
            severity=Severity.WARNING if multi else Severity.INFO,
            advice="Check the HCAs with ibv_devinfo / ibstat on the host and inside the container; restrict "
            "NCCL to working devices with NCCL_IB_HCA.",
        )

    # -------------------------------------------------------------------------------------- sockets
    def _sockets(self, job: Job, errors: pl.DataFrame, t: pl.DataFrame, addresses) -> Iterator[Finding]:
        rows = errors.filter(pl.col("error_kind").is_in(SOCKET_KINDS))
        if rows.is_empty():
            return
        earlier = self._failures(job, errors)
        deaths = _deaths_reported(job)
        for (kind,), group in rows.sort("seq").group_by("error_kind", maintain_order=True):
            ranks = _ranks(group)
            hosts = sorted(set(group["host"].drop_nulls()))
            peers: list[str] = []
            peer_ranks: set[int] = set()
            for row in (
                group.unique(["peer_ip", "peer"], keep="first", maintain_order=True)
                .head(4)
                .iter_rows(named=True)
            ):
                _, cands, host = self._peer(
                    job, row.get("peer"), row.get("peer_ip"), row["job_rank"], t, addresses
                )
                cands = [r for r in cands if r not in ranks]
                address = row.get("peer") or row.get("peer_ip")
                if address:
                    where = f" = {host}" if host and host != (row.get("peer_ip") or "") else ""
                    rank = (
                        f", rank {cands[0]}"
                        if len(cands) == 1
                        else (f", ranks {ranks_text(cands)}" if cands else "")
                    )
                    peers.append(f"{address}{where}{rank}")
                peer_ranks.update(cands)
            what = {
                "socket_closed": "the connection was closed by the remote peer",
                "socket_io": "a socket send/receive failed",
                "socket_truncated": "a socket message was truncated",
            }[kind]
            errno = sorted(set(group["errno_text"].drop_nulls())) if "errno_text" in group.columns else []
            who = (
                f"{len(ranks)} rank(s) ({ranks_text(ranks)})"
                if len(ranks) > 2
                else (names(job, ranks) if ranks else ", ".join(hosts))
            )
            title = f"On {who} {what}{f' ({errno[0]})' if errno else ''}"
            if peers:
                title += f"; peer {'; '.join(peers)}"
            first = group["seq"].min()
            cause = self._cause(job, earlier, first, peer_ranks, set(ranks))
            if cause:
                title += f"; most likely a consequence: {cause}"
            elif kind == "socket_truncated":
                title += (
                    "; the two sides disagree on a message size (mismatched collectives or NCCL settings)"
                )
            else:
                title += "; the peer process probably died or its network path failed"
            # A closure after another process's failure is its fallout: reported below error level.
            yield self.finding(
                job,
                title,
                evidence_rows=rows_of(group),
                ranks=ranks,
                hosts=hosts,
                severity=Severity.WARNING if cause or deaths else Severity.ERROR,
                advice=(
                    "Find out why the peer ended first: look at the findings for "
                    f"{'rank(s) ' + ranks_text(sorted(peer_ranks)) if peer_ranks else 'the peer host'} "
                    "(crash, "
                    "OOM, CUDA or NCCL error, exit). If nothing failed there, check the TCP path between the "
                    "hosts (NCCL_SOCKET_IFNAME, firewalls, MTU)."
                ),
            )

    def _failures(self, job: Job, errors: pl.DataFrame) -> pl.DataFrame:
        """Fatal-looking events with their rank and position: errors of other kinds, process deaths."""
        fatal = errors.filter(
            pl.col("error_kind").is_in(
                ["cuda", "alloc", "ib_completion", "ib_async", "async_error", "fatal", "warn"]
            )
            & (pl.col("level") == "WARN")
        ).select("job_rank", "seq", "source_id", "line_no", "part", "error_kind")
        return fatal.sort("seq")

    def _cause(
        self, job: Job, earlier: pl.DataFrame, seq: int, peer_ranks: set[int], loggers: set[int]
    ) -> str:
        before = earlier.filter(
            (pl.col("seq") < seq) & ~pl.col("job_rank").is_in(list(loggers)).fill_null(False)
        )
        if before.is_empty():
            return ""
        on_peer = before.filter(pl.col("job_rank").is_in(list(peer_ranks))) if peer_ranks else before.head(0)
        pick = on_peer.head(1) if on_peer.height else before.head(1)
        row = pick.row(0, named=True)
        text = _message(job, pick)
        rank = row["job_rank"]
        who = f"rank {rank}" if rank is not None else "another process"
        return f"{who} failed before: {text}" if text else f"{who} failed before"


RULES: tuple[type[Rule], ...] = (TransportFallback, NetError)
