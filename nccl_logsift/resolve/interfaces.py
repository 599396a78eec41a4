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
    rows = net.filter(
        pl.col("event").is_in(("bootstrap_interface", "socket_devices", "ib_devices"))
        & pl.col("host").is_not_null()
        & pl.col("pid").is_not_null()
    )
    out = []
    role_of = {"bootstrap_interface": "bootstrap", "socket_devices": "socket", "ib_devices": "oob"}
    for r in rows.iter_rows(named=True):
        role = role_of[r["event"]]
        pairs = []
        if r["event"] != "ib_devices" and r.get("interfaces") and r.get("ifname") is None:
            pairs = _IFACE_PAIR.findall(r["interfaces"])
        elif r.get("ifname"):
            pairs = [(r["ifname"], r.get("address"))]
        for i, (ifname, address) in enumerate(pairs):
            # Old NCCL lists every interface in the Bootstrap line; bootstrap itself uses the first one.
            this_role = role if not (role == "bootstrap" and i > 0) else "listed"
            out.append(
                Iface(
                    r["host"],
                    int(r["pid"]),
                    ifname,
                    address,
                    this_role,
                    int(r["source_id"]),
                    int(r["line_no"]),
                    int(r["part"] or 0),
                )
            )
    return out


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
