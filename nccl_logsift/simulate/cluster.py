"""The simulated job's hardware and communicators: hosts, GPUs, NICs, processes, process groups, rings, trees.

A job is ``nodes`` hosts with the same number of GPUs each, one process per GPU (global rank = host
index * GPUs per host + local rank). Process groups follow the Megatron layout (tensor-parallel groups
are consecutive ranks, data-parallel groups stride by ``tp``, pipeline groups by ``tp * dp``); each PG
that issues collectives owns one NCCL communicator, and every adjacent pipeline pair gets a 2-rank
communicator for its send/recv, as PyTorch creates them.

NCCL groups ranks into "nodes" by host name (nccl-log-grammar.md §9.6 f), so two hosts sharing a name
are one node to NCCL; ``Communicator.nodes`` follows that view, not the physical one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# PCI bus ids of the GPUs of common 1/2/4/8-GPU servers, as NCCL prints them (hex, no 0x, §9.8).
_BUS_IDS = {
    1: ["1b000"],
    2: ["1b000", "3d000"],
    4: ["3000", "41000", "82000", "c1000"],
    8: ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"],
}
_HOST_STYLES = ("gpu-node-{:03d}", "dgx{:02d}", "nid{:06d}", "compute-gpu-{:d}", "node{:04d}")
_BOOT_IFS = ("eth0", "ens1f0np0", "enp86s0f0", "ib0", "bond0")


@dataclass(slots=True)
class Host:
    index: int
    name: str  # short host name as NCCL prints it
    ip: str
    ifname: str  # interface NCCL bootstrap picks
    gpus: int
    bus_ids: list[str]
    nics: list[str]  # IB HCAs (mlx5_N)
    cores_per_socket: int
    has_ib: bool = True
    ib_disabled: bool = False  # NCCL_IB_DISABLE=1: NCCL does not even look for IB devices
    gdr: bool = True
    p2p: bool = True
    extra_ifs: list[tuple[str, str]] = field(default_factory=list)  # (ifname, ip) listed before ifname


@dataclass(slots=True)
class Process:
    rank: int
    host: Host
    local_rank: int
    pid: int
    cuda_dev: int  # the CUDA ordinal the process uses ([dev], cudaDev)
    nvml: int
    bus: str
    nic: int  # index of the HCA nearest to its GPU
    tids: dict[str, int] = field(default_factory=dict)

    def tid(self, role: str) -> int:
        """Thread ids: the main thread has tid == pid; other threads get stable ids per role."""
        if role == "main":
            return self.pid
        if role not in self.tids:
            self.tids[role] = self.pid + 60 + 7 * len(self.tids) + (self.pid * 13 + len(role)) % 50
        return self.tids[role]


@dataclass(slots=True)
class ProcessGroup:
    index: int
    kind: str  # world, tp, dp, pp
    desc: str
    ranks: list[int]
    guid: int  # creation order over all new_group calls of the job


@dataclass(slots=True)
class Communicator:
    index: int
    kind: str  # world, tp, dp, p2p
    name: str
    ranks: list[int]  # global ranks in comm-rank order
    comm_id: int
    pg: int  # owning process group
    func: str = "ncclCommInitRank"
    parent: int | None = None
    color: int = 0
    split_count: int = 0
    eager: bool = False
    ptr: dict[int, int] = field(default_factory=dict)  # global rank -> comm pointer in that process
    stream: dict[int, int] = field(default_factory=dict)
    nodes: list[list[int]] = field(default_factory=list)  # comm ranks grouped per NCCL node
    nchannels: int = 2
    cache: dict = field(default_factory=dict)  # rings, trees and the rank index, computed once

    @property
    def nranks(self) -> int:
        return len(self.ranks)

    def rank_of(self, global_rank: int) -> int:
        index = self.cache.get("index")
        if index is None:
            index = self.cache["index"] = {g: i for i, g in enumerate(self.ranks)}
        return index[global_rank]

    @property
    def comm_id_text(self) -> str:
        return f"0x{self.comm_id:x}"


@dataclass(slots=True)
class Parallel:
    tp: int = 1
    pp: int = 1
    dp: int = 1


@dataclass(slots=True)
class Cluster:
    hosts: list[Host]
    procs: list[Process]
    pgs: list[ProcessGroup]
    comms: list[Communicator]
    parallel: Parallel
    _by_rank: dict = field(default_factory=dict)

    @property
    def world(self) -> Communicator:
        return self.comms[0]

    def comms_of(self, rank: int) -> list[Communicator]:
        if self._by_rank.get(-1) != len(self.comms):
            self._by_rank.clear()
            for c in self.comms:
                for r in c.ranks:
                    self._by_rank.setdefault(r, []).append(c)
            self._by_rank[-1] = len(self.comms)
        return self._by_rank.get(rank, [])


# ------------------------------------------------------------------------------------------ building
def build_hosts(nodes: int, gpus: int, rng: random.Random) -> list[Host]:
    style = rng.choice(_HOST_STYLES)
    first = rng.randrange(1, 400)
    ifname = rng.choice(_BOOT_IFS)
    net_a, net_b = rng.randrange(1, 250), rng.randrange(0, 200)
    bus = _BUS_IDS.get(gpus) or [f"{0x10 + 0x10 * i:x}000" for i in range(gpus)]
    nics_per_host = {1: 1, 2: 1, 4: 4, 8: 8}.get(gpus, max(1, gpus // 2))
    cores = rng.choice((24, 32, 48, 56, 64))
    hosts = []
    for i in range(nodes):
        n = first + i
        hosts.append(
            Host(
                index=i,
                name=style.format(n),
                ip=f"10.{net_a}.{net_b + (n >> 8)}.{n & 255 or 1}",
                ifname=ifname,
                gpus=gpus,
                bus_ids=list(bus),
                nics=[f"mlx5_{k}" for k in range(nics_per_host)],
                cores_per_socket=cores,
            )
        )
    return hosts


def build_processes(hosts: list[Host], rng: random.Random) -> list[Process]:
    procs = []
    used: set[int] = set()
    for host in hosts:
        base = rng.randrange(2000, 3_900_000)
        for local in range(host.gpus):
            pid = base + local * rng.randrange(1, 40)
            while pid in used:
                pid += 1
            used.add(pid)
            procs.append(
                Process(
                    rank=host.index * host.gpus + local,
                    host=host,
                    local_rank=local,
                    pid=pid,
                    cuda_dev=local,
                    nvml=local,
                    bus=host.bus_ids[local],
                    nic=local * len(host.nics) // host.gpus,
                )
            )
    return procs


def choose_parallel(ranks: int, gpus: int, want_pp: bool) -> Parallel:
    """Plain data parallelism for small jobs; tensor/pipeline/data groups from 16 ranks up."""
    if want_pp:
        pp = 2 if ranks % 2 == 0 else 1
        tp = 2 if ranks >= 8 and ranks % 4 == 0 and gpus % 2 == 0 else 1
        return Parallel(tp=tp, pp=pp, dp=ranks // (tp * pp))
    if ranks < 16:
        return Parallel(dp=ranks)
    tp = min(4, gpus) if gpus >= 2 else 1
    while ranks % tp:
        tp //= 2
    pp = 2 if ranks // tp >= 4 and (ranks // tp) % 2 == 0 else 1
    return Parallel(tp=tp, pp=pp, dp=ranks // (tp * pp))


def build_groups(ranks: int, par: Parallel) -> tuple[list[ProcessGroup], dict[tuple[str, int], int]]:
    """World plus Megatron-style groups; returns the PGs and (kind, rank) -> PG index."""
    pgs = [ProcessGroup(0, "world", "default_pg", list(range(ranks)), 0)]
    member: dict[tuple[str, int], int] = {("world", r): 0 for r in range(ranks)}
    guid = 1

    def add(kind: str, desc: str, groups: list[list[int]]) -> None:
        nonlocal guid
        for g in groups:
            pgs.append(ProcessGroup(len(pgs), kind, desc, g, guid))
            guid += 1
            for r in g:
                member[(kind, r)] = len(pgs) - 1

    tp, pp, dp = par.tp, par.pp, par.dp
    if tp > 1:
        add("tp", "TENSOR_MODEL_PARALLEL_GROUP", [list(range(s, s + tp)) for s in range(0, ranks, tp)])
    if (tp > 1 or pp > 1) and dp > 1:
        groups = []
        for p in range(pp):
            for t in range(tp):
                groups.append([p * dp * tp + d * tp + t for d in range(dp)])
        add("dp", "DATA_PARALLEL_GROUP", groups)
    if pp > 1:
        groups = [[p * dp * tp + base for p in range(pp)] for base in range(dp * tp)]
        add("pp", "PIPELINE_MODEL_PARALLEL_GROUP", groups)
    return pgs, member


# ------------------------------------------------------------------------------------- rings, trees
def nccl_nodes(ranks: list[int], procs: list[Process]) -> list[list[int]]:
    """Comm ranks grouped the way NCCL groups them: by host name, in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for comm_rank, g in enumerate(ranks):
        groups.setdefault(procs[g].host.name, []).append(comm_rank)
    return list(groups.values())


def ring(comm: Communicator, channel: int) -> list[int]:
    """Ring order (comm ranks) of one channel: nodes in order, GPUs of a node ascending or mirrored."""
    key = ("ring", channel)
    if key in comm.cache:
        return comm.cache[key]
    order: list[int] = []
    for local in comm.nodes:
        if channel % 2 and len(local) > 2:
            local = [local[0], *reversed(local[1:])]
        order.extend(local)
    comm.cache[key] = order
    comm.cache[("ringpos", channel)] = {r: i for i, r in enumerate(order)}
    return order


def ring_neighbours(comm: Communicator, channel: int, me: int) -> tuple[int, int]:
    """(previous, next) of comm rank ``me`` in the channel's ring."""
    order = ring(comm, channel)
    i = comm.cache[("ringpos", channel)][me]
    return order[i - 1], order[(i + 1) % len(order)]


def tree(comm: Communicator, channel: int) -> dict[int, tuple[list[int], int]]:
    """comm rank -> (children, parent) of one channel's tree (-1 = none).

    Within a node the GPUs form a chain from the node's first rank; node heads form a binary tree,
    mirrored on odd channels (NCCL's double binary tree, §3.2).
    """
    key = ("tree", channel % 2)
    if key in comm.cache:
        return comm.cache[key]
    out: dict[int, tuple[list[int], int]] = {}
    n = len(comm.nodes)
    order = list(range(n)) if channel % 2 == 0 else list(reversed(range(n)))
    pos = {node: i for i, node in enumerate(order)}
    for node, local in enumerate(comm.nodes):
        for i, r in enumerate(local):
            children = [local[i + 1]] if i + 1 < len(local) else []
            parent = local[i - 1] if i else -1
            if i == 0:
                p = pos[node]
                if p:
                    parent = comm.nodes[order[(p - 1) // 2]][0]
                for c in (2 * p + 1, 2 * p + 2):
                    if c < n:
                        children.append(comm.nodes[order[c]][0])
            out[r] = (children[:3], parent)
    comm.cache[key] = out
    return out


def affinity_mask(host: Host, local_rank: int) -> tuple[str, str]:
    """The CPU set of the GPU's socket as NCCL prints it: hex mask (<= 2.26) and range list (2.27)."""
    c = host.cores_per_socket
    socket = 0 if local_rank < max(1, host.gpus // 2) else 1
    cpus = list(range(socket * c, socket * c + c)) + list(range(2 * c + socket * c, 2 * c + socket * c + c))
    value = 0
    for cpu in cpus:
        value |= 1 << cpu
    words = []
    while value:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
    text = ",".join([f"{words[-1]:x}"] + [f"{w:08x}" for w in reversed(words[:-1])])
    ranges = f"{cpus[0]}-{cpus[c - 1]},{cpus[c]}-{cpus[-1]}"
    return text, ranges
