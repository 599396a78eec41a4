"""LS203 interface-misconfig: NCCL uses (or cannot find) the wrong network interface for bootstrap or
socket traffic."""

from __future__ import annotations

import re
from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import evidence
from nccl_logsift.findings.vocabulary import CONNECT_KINDS
from nccl_logsift.findings.wording import names_or_span, plural
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.inits import resolve_rows
from nccl_logsift.resolve.interfaces import Iface, address_kind, interfaces, parse_ip, socket_ifname, subnet16
from nccl_logsift.resolve.job import Job, per_job
from nccl_logsift.resolve.ranks import with_job_rank
from nccl_logsift.resolve.transports import n_nodes

# Interfaces that other hosts usually cannot reach (container bridges, loopback) — grammar §4.2, taxonomy C.
BAD_IFNAME = re.compile(r"^(?:lo|veth\w*|docker\w*|br-\w+|virbr\w*|cni\w*|flannel\.?\w*|cali\w+|vxlan\w*)$")


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
        for users, keys in by_users.items():
            used = [u for k in keys for u in bad[k]]
            frame = _iface_lines(used)
            frame = with_job_rank(job, frame)
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
