"""NCCL's messages for one process: the envelope, init output, transports, COLL lines, errors.

Functions return :class:`Msg` values (thread role, level, message, WARN call site); ``story.py``
stamps them with times and turns them into lines with :func:`envelope`. Every template comes from the
profile (``versions.py``), so nothing here branches on a version number.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nccl_logsift.simulate.cluster import (
    Cluster,
    Communicator,
    Process,
    affinity_mask,
    ring,
    ring_neighbours,
    tree,
)
from nccl_logsift.simulate.program import Op
from nccl_logsift.simulate.versions import SITE_FUNCS, NcclProfile

MAX_LINE = 1023  # §1.8: prefix + message fit in a 1024-byte buffer (<= 2.28.9)


@dataclass(frozen=True, slots=True)
class Msg:
    role: str  # thread: main | init:<comm> | progress | service | watchdog | async
    level: str  # INFO | WARN | BARE (no envelope: the pre-2.22 version banner)
    text: str
    site: str = ""  # WARN: file:line of the call site


def info(role: str, text: str) -> Msg:
    return Msg(role, "INFO", text)


def envelope(proc: Process, tid: int, msg: Msg, ts: str | None) -> str:
    """One NCCL line (§1.2): ``[ts] host:pid:tid [dev] NCCL INFO msg``; WARN lines start with a blank line."""
    if msg.level == "BARE":
        return msg.text
    stamp = f"[{ts}] " if ts else ""
    head = f"{stamp}{proc.host.name}:{proc.pid}:{tid} [{proc.cuda_dev}] "
    if msg.level == "WARN":
        return f"\n{head}{msg.site} NCCL WARN {msg.text}"
    return f"{head}NCCL {msg.level} {msg.text}"


def trace(role: str, profile: NcclProfile, site: str, code: int, thread: str = "", nth: int = 0) -> Msg:
    """An error-propagation line (§1.9): ``file:line -> N`` with an optional ``[thread]`` tag.

    ``nth`` > 0 moves to another call site of the same file (a chain passes through a file more than once).
    """
    tag = f" {thread}" if thread else ""
    return info(role, f"{located(profile, shift(profile.sites[site], 37 * nth), site)} -> {code}{tag}")


def located(profile: NcclProfile, site: str, key: str) -> str:
    """A call site as WARN and trace lines print it: ``file:line``, and ``file:line (func)`` from 2.30.7."""
    return f"{site} ({SITE_FUNCS[key]})" if profile.site_funcs else site


def shift(site: str, by: int) -> str:
    path, line = site.rsplit(":", 1)
    return f"{path}:{int(line) + by}"


def chain(role: str, profile: NcclProfile, code: int, sites: list[str]) -> list[Msg]:
    """Trace lines through ``sites`` (keys of ``profile.sites``), each repeated file at a new line."""
    seen: dict[str, int] = {}
    out = []
    for key in sites:
        thread = ""
        if "|" in key:
            key, thread = key.split("|", 1)
        out.append(
            trace(
                role if not thread.startswith("main") else "main",
                profile,
                key,
                code,
                "" if thread in ("", "main") else thread,
                seen.get(key, 0),
            )
        )
        seen[key] = seen.get(key, 0) + 1
    return out


class NcclText:
    """The NCCL messages of one job, for one profile."""

    def __init__(self, profile: NcclProfile, cluster: Cluster, rng: random.Random):
        self.p = profile
        self.cluster = cluster
        self.rng = rng
        self.env: dict[int, list[str]] = {}  # host index -> "NCCL_X set by environment to ..." lines

    # ----------------------------------------------------------------------------- process start
    def net_name(self, proc: Process) -> str:
        return "IB" if proc.host.has_ib else "Socket"

    def bootstrap_if(self, proc: Process) -> tuple[str, str]:
        host = proc.host
        return host.extra_ifs[0] if host.extra_ifs else (host.ifname, host.ip)

    def process_start(self, proc: Process) -> tuple[list[Msg], list[Msg]]:
        """ncclInit output (§A.1-3): lines of the main thread, then lines of the first init thread."""
        p = self.p
        main: list[Msg] = []
        if p.driver and p.banner == "printf":
            main.append(info("main", f"cudaDriverVersion {p.driver}"))
        main += [info("main", text) for text in self.env.get(proc.host.index, [])]
        ifname, ip = self.bootstrap_if(proc)
        main.append(info("main", p.bootstrap.format(ifname=ifname, ip=ip)))
        if p.banner == "info":
            main.append(info("main", f"cudaDriverVersion {p.driver}"))
            main.append(info("main", self.banner()))
            if p.git_version:
                main.append(info("main", p.git_version))
        role = "init" if p.net_lines_in_init_thread else "main"
        net = [info(role, text) for text in p.plugin]
        net += self.net_devices(proc, role)
        return main, net

    def banner(self) -> str:
        return f"NCCL version {self.p.version}+cuda{self.p.cuda}"

    def net_devices(self, proc: Process, role: str) -> list[Msg]:
        p = self.p
        ifname, ip = self.bootstrap_if(proc)
        out: list[Msg] = []
        if proc.host.has_ib:
            devices = "".join(f" [{i}]{nic}:1/IB" for i, nic in enumerate(proc.host.nics))
            out.append(
                info(
                    role,
                    p.ib_using.format(
                        devices=devices, ro=f"{p.ib_relaxed}" if p.ib_relaxed else "", ifname=ifname, ip=ip
                    ),
                )
            )
        else:
            if not proc.host.ib_disabled:
                out.append(info(role, "NET/IB : No device found."))
                out += [info(role, text.format(ifname=ifname, ip=ip)) for text in p.ib_absent]
            out.append(info(role, f"NET/Socket : Using [0]{ifname}:{ip}<0>"))
        out += [info(role, text.format(net=self.net_name(proc))) for text in p.net_ready[:1]]
        return out

    # ------------------------------------------------------------------------------- comm init
    def init_fields(self, comm: Communicator, rank: int) -> dict:
        proc = self.cluster.procs[rank]
        parent = self.cluster.comms[comm.parent] if comm.parent is not None else None
        return {
            "func": self.p.init_func.format(api=comm.func),
            "comm": f"0x{comm.ptr[rank]:x}",
            "rank": comm.rank_of(rank),
            "nranks": comm.nranks,
            "cuda_dev": proc.cuda_dev,
            "nvml": proc.nvml,
            "bus": proc.bus,
            "comm_id": comm.comm_id_text,
            "parent": f"0x{parent.ptr[rank]:x}" if parent else "(nil)",
            "color": comm.color,
            "key": rank,
            "split_count": comm.split_count,
        }

    def _start_template(self, comm: Communicator) -> str | None:
        return self.p.split_start if comm.func == "ncclCommSplit" else self.p.init_start

    def _complete_template(self, comm: Communicator) -> str:
        if comm.func == "ncclCommSplit" and self.p.split_complete:
            return self.p.split_complete
        return self.p.init_complete

    def init_before_bootstrap(self, comm: Communicator, rank: int, role: str) -> list[Msg]:
        """What a rank prints when it enters a comm init, before waiting for the others (§A.3-4)."""
        p = self.p
        proc = self.cluster.procs[rank]
        out = [
            info("main" if not p.net_lines_in_init_thread else role, f"Using network {self.net_name(proc)}")
        ]
        out += [info(role, text.format(net=self.net_name(proc))) for text in p.net_ready[1:]]
        if p.dmabuf:
            out.append(info(role, f"DMA-BUF is available on GPU device {proc.cuda_dev}"))
        start = self._start_template(comm)
        if start:
            out.append(info(role, start.format(**self.init_fields(comm, rank))))
        return out

    def init_after_bootstrap(self, comm: Communicator, rank: int, role: str, *, connect: bool) -> list[Msg]:
        """Topology, rings, trees, (transports), thresholds and Init COMPLETE (§A.5-9)."""
        p = self.p
        proc = self.cluster.procs[rank]
        me = comm.rank_of(rank)
        f = self.init_fields(comm, rank)
        rng = self.rng
        out: list[Msg] = []
        if comm.func == "ncclCommSplit" and p.bootstrap_split:
            n = comm.nranks
            out.append(info(role, p.bootstrap_split.format(prev=(me - 1) % n, next=(me + 1) % n, **f)))
        if p.bootstrap_timings:
            total = rng.uniform(0.01, 0.4)
            out.append(
                info(
                    role,
                    p.bootstrap_timings.format(
                        total=total,
                        create=rng.uniform(1e-5, 1e-4),
                        send=rng.uniform(5e-5, 3e-4),
                        recv=rng.uniform(5e-5, 3e-4),
                        ring=rng.uniform(2e-4, total / 2),
                        delay=rng.uniform(1e-6, 5e-6),
                    ),
                )
            )
        if p.affinity:
            mask, ranges = affinity_mask(proc.host, proc.local_rank)
            out.append(
                info(
                    role,
                    f"Setting affinity for GPU {proc.nvml} to {mask if p.affinity == 'mask' else ranges}",
                )
            )
        if p.nvls_line:
            out.append(info(role, p.nvls_line.format(cuda_dev=proc.cuda_dev)))
        if p.summary:
            node = next(i for i, local in enumerate(comm.nodes) if me in local)
            out.append(
                info(
                    role,
                    p.summary.format(
                        nnodes=len(comm.nodes),
                        local_ranks=len(comm.nodes[node]),
                        local_rank=comm.nodes[node].index(me),
                        **f,
                    ),
                )
            )
        if me == 0:
            out += [info(role, text) for text in self.ring_dump(comm)]
        out.append(info(role, self.trees(comm, me, proc)))
        if p.chunksize:
            out.append(info(role, "P2P Chunksize set to 131072"))
        if connect:
            out += self.transports(comm, rank, role)
        nch = comm.nchannels
        out.append(info(role, p.thresholds.format(ring_ll=8 * comm.nranks)))
        out.append(info(role, p.channels.format(coll=nch, nvls=0, p2p=nch, per_peer=2 if nch >= 4 else 1)))
        if p.cc_line:
            out.append(info(role, p.cc_line))
        if p.launch_mode and me == 0:
            out.append(info(role, "Launch mode Parallel"))
        out.append(
            info(
                role,
                self._complete_template(comm).format(phase="COMPLETE", **f).replace("{phase}", "COMPLETE"),
            )
        )
        if p.init_timings:
            parts = [
                rng.uniform(0.05, 0.3),
                rng.uniform(0.2, 1.5),
                rng.uniform(0.01, 0.2),
                rng.uniform(0.01, 0.3),
                rng.uniform(0.1, 1.2),
                rng.uniform(0.01, 0.2),
                rng.uniform(0.0, 0.1),
                rng.uniform(0.0, 0.05),
            ]
            names = ("kernels", "alloc", "bootstrap", "allgathers", "topo", "graphs", "connections", "rest")
            out.append(
                info(
                    role,
                    p.init_timings.format(
                        func=comm.func if comm.func == "ncclCommSplit" else f["func"],
                        rank=me,
                        nranks=comm.nranks,
                        total=sum(parts),
                        **dict(zip(names, parts)),
                    ),
                )
            )
        return out

    def ring_dump(self, comm: Communicator) -> list[str]:
        """Rank 0's ring orders (§3.1)."""
        out = []
        nch = comm.nchannels
        width = len(str(comm.nranks - 1))
        for ch in range(nch):
            order = ring(comm, ch)
            if self.p.ring_dump == "w3":
                out.append(f"Channel {ch:02d}/{nch:02d} : " + "".join(f" {r:3d}" for r in order[:20]))
            else:
                text = f"Channel {ch:02d}/{nch:02d} :" + "".join(f" {r:{width}d}" for r in order)
                if len(text) > 127:
                    text = text[:124] + "..."
                out.append(text)
        return out

    def trees(self, comm: Communicator, me: int, proc: Process) -> str:
        text = "Trees"
        for ch in range(comm.nchannels):
            children, parent = tree(comm, ch)[me]
            down = (children + [-1, -1, -1])[:3]
            text += f" [{ch}] {down[0]}/{down[1]}/{down[2]}->{me}->{parent}"
        room = MAX_LINE - len(f"{proc.host.name}:{proc.pid}:{proc.pid + 99} [{proc.cuda_dev}] NCCL INFO ")
        return text[:room]

    # ------------------------------------------------------------------------------ transports
    def _bracket(self, proc: Process) -> str:
        return proc.bus if self.p.bracket == "busid" else str(proc.nvml)

    def _edge(self, comm: Communicator, a: int, b: int, ch: int, conn: int, direction: str) -> str:
        """One transport line seen from ``direction`` (send: a is local; receive: b is local)."""
        p = self.p
        procs = self.cluster.procs
        pa, pb = procs[comm.ranks[a]], procs[comm.ranks[b]]
        fields = {"ch": ch, "conn": conn, "a": a, "b": b, "ad": self._bracket(pa), "bd": self._bracket(pb)}
        if pa.host.name == pb.host.name:  # NCCL's notion of "same node" is the host name (§9.6 f)
            if pa.host.p2p and pb.host.p2p:
                return p.p2p_line.format(path=p.p2p_path, **fields)
            return p.shm_line.format(path=p.shm_path, **fields)
        local = pa if direction == "send" else pb
        gdr = "/GDRDMA" if local.host.has_ib and local.host.gdr else ""
        return p.net_line.format(
            dir=direction,
            net=self.net_name(local),
            dev=local.nic if local.host.has_ib else 0,
            gdr=gdr,
            **fields,
        )

    def _is_net(self, comm: Communicator, a: int, b: int) -> bool:
        procs = self.cluster.procs
        return procs[comm.ranks[a]].host.name != procs[comm.ranks[b]].host.name

    def transports(self, comm: Communicator, rank: int, role: str) -> list[Msg]:
        """Ring then tree connections of this rank (§4.1), grouped by peer like NCCL prints them."""
        me = comm.rank_of(rank)
        if comm.nranks == 1:
            return []
        out: list[Msg] = []
        ring_edges: dict[tuple[str, int], list[int]] = {}
        for ch in range(comm.nchannels):
            prv, nxt = ring_neighbours(comm, ch, me)
            if self._is_net(comm, prv, me):
                ring_edges.setdefault(("receive", prv), []).append(ch)
            ring_edges.setdefault(("send", nxt), []).append(ch)
        for (direction, peer), chans in ring_edges.items():
            for ch in chans:
                a, b = (me, peer) if direction == "send" else (peer, me)
                out.append(info(role, self._edge(comm, a, b, ch, 0, direction)))
        procs = self.cluster.procs
        gdr = int(len(comm.nodes) > 1 and procs[rank].host.gdr and procs[rank].host.has_ib)
        out.append(info(role, self.p.connected_rings.format(gdr=gdr)))
        tree_edges: dict[int, list[int]] = {}
        for ch in range(comm.nchannels):
            children, parent = tree(comm, ch)[me]
            for peer in [*children, parent]:
                if peer >= 0:
                    tree_edges.setdefault(peer, []).append(ch)
        for peer, chans in tree_edges.items():
            net = self._is_net(comm, me, peer)
            if net:
                out += [info(role, self._edge(comm, peer, me, ch, 0, "receive")) for ch in chans]
            out += [info(role, self._edge(comm, me, peer, ch, 0, "send")) for ch in chans]
        out.append(info(role, "Connected all trees"))
        return out

    def p2p_connect(self, comm: Communicator, rank: int, op: Op, role: str) -> list[Msg]:
        """Send/recv connections made at the first p2p call (§9.10): connection index 1."""
        me = comm.rank_of(rank)
        peer = op.root
        chans = range(2 if comm.nchannels >= 4 else 1)
        if op.name == "Send":
            return [info(role, self._edge(comm, me, peer, ch, 1, "send")) for ch in chans]
        if self._is_net(comm, peer, me):
            return [info(role, self._edge(comm, peer, me, ch, 1, "receive")) for ch in chans]
        return []

    # -------------------------------------------------------------------------------- per op
    def coll(self, op: Op, opcount: int, comm: Communicator, rank: int, buffers: dict[str, int]) -> str:
        """The COLL line (§5.1)."""
        buf = f"0x{buffers[op.slot]:x}"
        if op.name == "Send":
            send, recv = (buf, "(nil)") if self.p.send_buffer_in_sendbuff else ("(nil)", buf)
        elif op.name == "Recv":
            send, recv = "(nil)", buf
        elif op.name == "AllGather":
            send = f"0x{buffers[op.slot] + comm.rank_of(rank) * op.count * 4:x}"
            recv = buf
        else:
            send = recv = buf
        return (
            f"{op.name}: opCount {opcount:x} sendbuff {send} recvbuff {recv} count {op.count} "
            f"datatype {op.dtype} op {op.redop} root {op.root} comm 0x{comm.ptr[rank]:x} "
            f"[nranks={comm.nranks}] stream 0x{comm.stream[rank]:x}"
        )

    def teardown(self, comm: Communicator, rank: int, what: str, role: str) -> list[Msg]:
        template = self.p.destroy if what == "Destroy" else self.p.abort
        if not template or self.p.teardown_subsys not in self.p.subsys:
            return []
        f = self.init_fields(comm, rank)
        out = []
        if what == "Abort" and self.p.abort_start:
            out.append(info(role, self.p.abort_start.format(**f)))
        out.append(info(role, template.format(what=what, **f)))
        return out

    # ------------------------------------------------------------------------------ failures §6
    def warn(self, role: str, site_key: str, text: str) -> Msg:
        """A WARN at a call site a few lines above the first trace line of the same file."""
        return Msg(role, "WARN", text, located(self.p, shift(self.p.sites[site_key], -19), site_key))

    def ib_completion_error(self, proc: Process, peer: Process, rng: random.Random) -> list[Msg]:
        p = self.p
        code = p.remote_error
        text = p.ib_completion.format(
            peer=f"{peer.host.ip}<{rng.randrange(32768, 60999)}>",
            status=12,
            opcode=0,
            len=0,
            vendor=129,
            req="Send",
            hca=proc.host.nics[proc.nic],
        )
        return [Msg("progress", "WARN", text, located(p, shift(p.ib_site, -19), "ib"))] + chain(
            "progress", p, code, ["net_ib", "net", "proxy", f"proxy|{p.progress_thread}"]
        )

    def socket_closed(
        self, role: str, peer: Process, rng: random.Random, sites: tuple[str, ...]
    ) -> list[Msg]:
        p = self.p
        port = rng.randrange(32768, 60999)
        text = p.socket_closed.format(peer=f"{peer.host.ip}<{port}>", peer_name=f"{peer.host.name}<{port}>")
        code = p.remote_error
        return [self.warn(role, "socket", text)] + chain(role, p, code, ["socket", *sites])

    def connect_failure(self, role: str, addr: str, err: str, *, timed_out: bool) -> list[Msg]:
        """Bootstrap connect to a peer that never answers (§6.2), with NCCL's retries."""
        p = self.p
        out: list[Msg] = []
        if timed_out:
            out.append(self.warn(role, "socket", p.connect_timeout.format(addr=addr, err=err)))
        else:
            for attempt in (1, 2, 3):
                out.append(
                    info(
                        role,
                        p.connect_retry.format(
                            err=err, addr=addr, attempt=attempt, retries=34, msec=100 * attempt
                        ),
                    )
                )
            out.append(
                self.warn(
                    role, "socket", p.connect_refused.format(addr=addr, err=err, retries=34, attempts=35)
                )
            )
        return out + chain(role, p, 2, ["socket", "bootstrap", "bootstrap", "init", *self.async_tail()])

    def async_tail(self) -> list[str]:
        """How an init error reaches the caller: through the init job's thread (2.14+), then ncclGroupEnd."""
        return ["init", *(["group|[Async thread]"] if self.p.async_tag else []), "group|main"]

    def no_interface(self) -> list[Msg]:
        p = self.p
        return [self.warn("main", "bootstrap", p.no_interface)] + chain("main", p, 3, ["bootstrap", "init"])

    def cuda_oom(self, role: str) -> list[Msg]:
        p = self.p
        return [self.warn(role, "alloc", p.cuda_oom)] + chain(
            role, p, 1, ["alloc", "p2p", "transport", "init", *self.async_tail()]
        )

    def duplicate_gpu(self, role: str, rank: int, other: int, bus: str) -> list[Msg]:
        p = self.p
        text = p.duplicate_gpu.format(rank=rank, other=other, bus=bus)
        return [self.warn(role, "init", text)] + chain(role, p, 5, ["init", "init", *self.async_tail()])
