"""LS302 net-error: The network failed under NCCL: IB/RoCE completion errors, port events, OFI errors,
closed sockets."""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import rows_of
from nccl_logsift.findings.transport._text import first_message, ranks_in
from nccl_logsift.findings.wording import names, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.exits import assemble_exits
from nccl_logsift.resolve.hosts import nccl_host
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.transports import (
    address_hosts,
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


def _deaths_reported(job: Job) -> bool:
    """A launcher reported a process that crashed, was killed or exited with an error."""
    exits = job.table("exits")
    if exits.is_empty() or "event" not in exits.columns:
        return False
    rows = assemble_exits(exits)
    return rows.filter(pl.col("signal").is_not_null() | (pl.col("exit_code").fill_null(0) != 0)).height > 0


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
            ranks = ranks_in(group)
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
            ranks = ranks_in(bare)
            text = first_message(job, bare)
            covered = set(ranks_in(with_status))
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
            ranks = ranks_in(group)
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
        ranks = ranks_in(rows)
        text = first_message(job, rows)
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
            ranks = ranks_in(group)
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
        ranks = ranks_in(rows)
        hosts = sorted(set(rows["host"].drop_nulls()))
        devices = sorted(set(rows["hca"].drop_nulls())) if "hca" in rows.columns else []
        multi = n_nodes(job) > 1
        text = first_message(job, rows)
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
            ranks = ranks_in(group)
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
        text = first_message(job, pick)
        rank = row["job_rank"]
        who = f"rank {rank}" if rank is not None else "another process"
        return f"{who} failed before: {text}" if text else f"{who} failed before"
