"""The network interfaces NCCL chose (``NCCL_SOCKET_IFNAME``, ``NET/Socket : Using``, ``Bootstrap :
Using``), with their addresses and what kind of address each is."""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass

import polars as pl

from nccl_logsift.resolve.job import Job, per_job


@per_job
def socket_ifname(job: Job) -> dict[str, str]:
    """NCCL_SOCKET_IFNAME per host as the ENV lines print it."""
    settings = job.table("settings")
    if settings.is_empty() or "name" not in settings.columns:
        return {}
    rows = settings.filter((pl.col("name") == "NCCL_SOCKET_IFNAME") & pl.col("host").is_not_null())
    return {h: v for h, v in rows.select("host", "value").unique("host", keep="first").iter_rows()}


# ---------------------------------------------------------------------------------------------- LS203
@dataclass(frozen=True)
class Iface:
    host: str
    pid: int
    ifname: str | None
    address: str | None
    role: str  # bootstrap, socket, oob
    source_id: int
    line_no: int
    part: int


# "[0]eth0:10.0.0.1<0>": a try starts at a "[" and never reads past the next one, so a long run of text costs
# its length once (an address group that could cross "[" retried the rest of the run from every "[").
_IFACE_PAIR = re.compile(r"\[\d+\]([^\s:\[<]+):([^\s<\[]+)<\d+>")


@per_job
def interfaces(job: Job) -> list[Iface]:
    """Every interface a process said it uses: bootstrap, NET/Socket data, IB out-of-band."""
    net = job.table("network")
    if net.is_empty() or "event" not in net.columns:
        return []
    # A pid that did not fit its column is null (parse/kinds.py): its line names no process to attribute.
    # Only the columns read, as tuples: a named row of the whole table (~50 columns) cost a 4096-rank job
    # 0.16 s for its 8,192 interface lines.
    text = [pl.col(c) if c in net.columns else pl.lit(None, pl.String).alias(c) for c in _IFACE_TEXT]
    rows = net.filter(
        pl.col("event").is_in(list(_ROLE_OF)) & pl.col("host").is_not_null() & pl.col("pid").is_not_null()
    ).select("event", "host", "pid", "source_id", "line_no", "part", *text)
    out = []
    for event, host, pid, source_id, line_no, part, listed, ifname, address in rows.iter_rows():
        role = _ROLE_OF[event]
        pairs = []
        if event != "ib_devices" and listed and ifname is None:
            pairs = _IFACE_PAIR.findall(listed)
        elif ifname:
            pairs = [(ifname, address)]
        for i, (name, at) in enumerate(pairs):
            # Old NCCL lists every interface in the Bootstrap line; bootstrap itself uses the first one.
            this_role = role if not (role == "bootstrap" and i > 0) else "listed"
            out.append(
                Iface(host, int(pid), name, at, this_role, int(source_id), int(line_no), int(part or 0))
            )
    return out


_ROLE_OF = {"bootstrap_interface": "bootstrap", "socket_devices": "socket", "ib_devices": "oob"}
_IFACE_TEXT = ("interfaces", "ifname", "address")  # the columns a network line may lack


@functools.lru_cache(
    maxsize=1 << 14
)  # a 4096-rank job names a few thousand addresses tens of thousands of times
def address_kind(address: str | None) -> str | None:
    """'loopback' / 'link-local' for addresses other hosts cannot reach, else None."""
    ip = parse_ip(address)
    if ip is None:
        return None
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    return None


@functools.lru_cache(maxsize=1 << 14)
def parse_ip(address: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address (without an IPv6 zone), or None when there is none or it is not one."""
    if not address:
        return None
    try:
        return ipaddress.ip_address(address.split("%")[0])
    except ValueError:
        return None


@functools.lru_cache(maxsize=1 << 14)
def subnet16(ip: ipaddress.IPv4Address) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(f"{ip}/16", strict=False)
