"""LS301 transport-fallback: Some ranks move data over a slower path than the hardware allows."""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import EVIDENCE, rows_of
from nccl_logsift.findings.transport._text import first_message, ranks_in
from nccl_logsift.findings.wording import ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.transports import (
    logged_hosts,
    n_nodes,
    transport_rows,
)


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


# The columns of transport_rows that TransportFallback reads: the line, both ends and the path.
_CONNECTION_COLUMNS = (
    *EVIDENCE,
    *("host", "job_rank", "peer_host", "same_host", "transport", "net_name", "net_dev", "gdr"),
)


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
        # The columns the checks below read, first: each filters the connection lines, and a filter of all
        # ~40 columns copied them all (a 4096-rank job has 321k connection lines).
        t = transport_rows(job)
        t = t.select(c for c in _CONNECTION_COLUMNS if c in t.columns)
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
        ranks = ranks_in(sock)
        if whole and not selected.is_empty():
            ranks = sorted(set(ranks) | set(ranks_in(selected.filter(pl.col("net_name") == "Socket"))))
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
                f"{len(ranks_in(other))} rank(s) use {nets}"
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
            reasons.append(f"'{first_message(job, p2p_errors)}'")
        reason_rows = pl.concat(
            [rows_of(disabled).head(2), rows_of(level).head(1), rows_of(p2p_errors).head(2)]
        )
        # Severity policy: a path the job chose (NCCL_P2P_DISABLE / NCCL_P2P_LEVEL, no P2P error) is info;
        # one NCCL fell to on its own (P2P failed, or some hosts only) is a warning: the job works, slower.
        set_by_job = not disabled.is_empty() or not level.is_empty()
        chosen = Severity.INFO if set_by_job and p2p_errors.is_empty() else None
        if t.is_empty():
            if not disabled.is_empty():
                ranks = ranks_in(with_job_rank(job, disabled))
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
            ranks = ranks_in(rows)
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
            ranks = ranks_in(rows)
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
            ranks = ranks_in(rows)
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
        ranks = ranks_in(rows)
        text = first_message(job, rows)
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
