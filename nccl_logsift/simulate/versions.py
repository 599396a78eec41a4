"""What each simulated NCCL and PyTorch release prints: one small table of capabilities and templates.

Every difference between releases lives here as data, so the line builders never compare version
numbers. The NCCL templates restate nccl-log-grammar.md (section numbers in the comments); the PyTorch
ones restate pytorch-and-peers.md §1.3-1.4. Values in templates are ``str.format`` fields.

Source-line numbers in WARN prefixes and ``file:line -> N`` chains are plausible stand-ins, not the
exact lines of any tag: the grammar documents the shapes, not every call site.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True, slots=True)
class NcclProfile:
    """The log dialect of one NCCL release series."""

    series: str
    version: str  # the full version printed in the banner
    cuda: str
    driver: int | None  # "cudaDriverVersion %d" (2.13.4+)
    # §1.5 version banner: "printf" = bare stdout line from processes owning a rank-0 comm (<= 2.21.5);
    # "info" = an INFO line in every process (2.22.3+).
    banner: str
    warn_timestamp: bool  # §1.2/1.4: WARN lines start with "[%F %T] " (2.26.2+)
    flush_per_line: bool  # §1.6/9.2: 2.4-2.12 fflush after every line; later stdout is block-buffered
    subsys: tuple[str, ...]  # NCCL_DEBUG_SUBSYS the simulated job sets
    bootstrap: str  # §4.2
    plugin: tuple[str, ...]  # §4.2 net plugin discovery
    net_ready: tuple[str, ...]  # lines after the network is chosen (2.27: Initialized / Assigned)
    ib_using: str
    ib_relaxed: str  # "[RO]" suffix of the device list or ""
    net_lines_in_init_thread: bool  # 2.14+: plugin and NET/IB lines come from the comm-init thread
    dmabuf: bool
    init_start: str | None  # §2.1 (2.18.3+)
    init_complete: str
    split_start: str | None
    split_complete: str | None
    bootstrap_split: str | None  # 2.18.1-2.22.3
    init_func: (
        str  # funcName printed for non-split inits: "" (none), a literal (2.21-2.22), or "{api}" (2.23+)
    )
    summary: str | None  # §2.2 nRanks/nNodes line (2.20.3+)
    bootstrap_timings: str | None  # 2.23.4+
    affinity: str | None  # "mask" (<= 2.26), "range" (2.27), None
    nvls_line: str | None
    ring_dump: str  # "w3" (2.5.6-2.22.3) or "digits" (2.23.4+) — §3.1
    chunksize: bool  # "P2P Chunksize set to" (2.16.2+)
    p2p_line: str  # §4.1
    shm_line: str
    net_line: str
    bracket: str  # "busid" (<= 2.18.1) or "nvml" (2.18.3+)
    p2p_path: str
    shm_path: str
    connected_rings: str  # §3.5
    thresholds: str
    channels: str
    cc_line: str | None
    init_timings: str | None
    launch_mode: bool  # "Launch mode Parallel" (<= 2.12.12)
    lazy_connect: bool  # §3.5/9.10: transports printed at first use (2.22.3+)
    destroy: str | None  # §2.3
    abort: str | None
    abort_start: str | None
    opcount: str  # §5.2: "proxy" (2.9-2.11), "plan" (2.12-2.26), "network" (2.27+)
    send_buffer_in_sendbuff: bool  # §5.1: Send prints its buffer as sendbuff in 2.7.3-2.11.4
    # errors (§6)
    ib_completion: str
    ib_site: str
    socket_closed: str
    connect_retry: str
    connect_refused: str  # the WARN after the retries
    connect_timeout: str
    no_interface: str
    cuda_oom: str
    duplicate_gpu: str
    progress_thread: str  # "[Proxy Thread]" (<= 2.18.6) or "[Progress Thread]" (2.19.1+)
    async_tag: bool  # "[Async thread]" trace lines from the init job (2.14+)
    remote_error: int  # ncclRemoteError (6, 2.13.4+) or ncclSystemError (2) before
    long_error_strings: bool  # §7: "(run with NCCL_DEBUG=INFO for details)" suffixes (2.18.1+)
    sites: dict[str, str] = field(default_factory=dict)  # file:line of trace and WARN sites
    # Without a usable IB device, the lines between "No device found" and the socket plugin (2.28: the IB
    # plugin's OOB line and "Failed to initialize NET plugin IB", as the H200 jobs of the corpus print them).
    ib_absent: tuple[str, ...] = ()
    git_version: str = ""  # 2.29.2+: "NCCL git version {branch} {describe}" right after the banner (§1.5)
    # 2.30.7+: WARN lines and "file:line -> N" traces name the calling function, "file:line (func) ..."
    # (src/debug.cc:345 and INFO_LOC in src/include/debug.h @v2.30.7-1; grammar §1.2, §1.9).
    site_funcs: bool = False
    # The subsystem of the Destroy/Abort lines: INIT, and from 2.30.3 DESTROY, which is not in the default
    # mask, so a job that does not ask for it prints no teardown line (grammar §2.3).
    teardown_subsys: str = "INIT"

    @property
    def key(self) -> tuple[int, ...]:
        return version_key(self.version)


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


# --------------------------------------------------------------------------------------------- NCCL
_COMPLETE_OLD = "comm {comm} rank {rank} nranks {nranks} cudaDev {cuda_dev} busId {bus} - Init COMPLETE"
_INIT_218 = (
    "comm {comm} rank {rank} nranks {nranks} cudaDev {cuda_dev} nvmlDev {nvml} busId {bus} "
    "commId {comm_id} - Init {phase}"
)
_INIT_221 = "{func} " + _INIT_218
_SPLIT_221 = (
    "ncclCommSplit comm {comm} rank {rank} nranks {nranks} cudaDev {cuda_dev} nvmlDev {nvml} busId {bus} "
    "parent {parent} color {color} key {key} commId {comm_id} - Init {phase}"
)
_SPLIT_224_START = (
    "ncclCommSplit comm {comm} rank {rank} nranks {nranks} cudaDev {cuda_dev} nvmlDev {nvml} busId {bus} "
    "parent {parent} splitCount {split_count} color {color} key {key}- Init START"
)
_SPLIT_224_COMPLETE = _SPLIT_224_START.replace("key {key}- Init START", "key {key} - Init COMPLETE")
_DESTROY = "comm {comm} rank {rank} nranks {nranks} cudaDev {cuda_dev} busId {bus} - {what} COMPLETE"
_P2P_NOCONN = "Channel {ch:02d} : {a}[{ad}] -> {b}[{bd}] via {path}"
_P2P_CONN = "Channel {ch:02d}/{conn} : {a}[{ad}] -> {b}[{bd}] via {path}"
_SHM = "Channel {ch:02d} : {a}[{ad}] -> {b}[{bd}] via {path}"
_NET_NOCONN = "Channel {ch:02d} : {a}[{ad}] -> {b}[{bd}] [{dir}] via NET/{net}/{dev}{gdr}"
_NET_CONN = "Channel {ch:02d}/{conn} : {a}[{ad}] -> {b}[{bd}] [{dir}] via NET/{net}/{dev}{gdr}"
_IB_USING_OLD = "NET/IB : Using{devices} ; OOB {ifname}:{ip}<0>"
_IB_USING = "NET/IB : Using{devices} {ro}; OOB {ifname}:{ip}<0>"
_CH_OLD = "{coll} coll channels, {p2p} p2p channels, {per_peer} p2p channels per peer"
_CH_218 = "{coll} coll channels, {nvls} nvls channels, {p2p} p2p channels, {per_peer} p2p channels per peer"
_CH_220 = (
    "{coll} coll channels, {coll} collnet channels, {nvls} nvls channels, {p2p} p2p channels, "
    "{per_peer} p2p channels per peer"
)
_THR_OLD = "threadThresholds 8/8/64 | {ring_ll}/8/64 | 8/8/512"
_THR = "threadThresholds 8/8/64 | {ring_ll}/8/64 | 512 | 512"
_TIMINGS = (
    "Init timings - {func}: rank {rank} nranks {nranks} total {total:.2f} "
    "(kernels {kernels:.2f}, alloc {alloc:.2f}, "
    "bootstrap {bootstrap:.2f}, allgathers {allgathers:.2f}, topo {topo:.2f}, graphs {graphs:.2f}, "
    "connections {connections:.2f}, rest {rest:.2f})"
)
_BOOT_TIMINGS = (
    "Bootstrap timings total {total:f} "
    "(create {create:f}, send {send:f}, recv {recv:f}, ring {ring:f}, delay {delay:f})"
)

_IB_ERR_OLD = (
    "NET/IB : Got completion from peer {peer} with error {status}, "
    "opcode {opcode}, len {len}, vendor err {vendor}"
)
_IB_ERR_218 = _IB_ERR_OLD + " ({req})"
_IB_ERR_220 = (
    "NET/IB : Got completion from peer {peer} with status={status} "
    "opcode={opcode} len={len} vendor err {vendor} ({req})"
)
_IB_ERR_224 = (
    "NET/IB: Got completion from peer {peer} with status={status} "
    "opcode={opcode} len={len} vendor err {vendor} ({req}) hca {hca}"
)

_BASE_SITES = {
    "alloc": "include/alloc.h:{n}",
    "socket": "misc/socket.cc:{n}",
    "bootstrap": "bootstrap.cc:{n}",
    "init": "init.cc:{n}",
    "group": "group.cc:{n}",
    "transport": "transport.cc:{n}",
    "p2p": "transport/p2p.cc:{n}",
    "net": "transport/net.cc:{n}",
    "net_ib": "transport/net_ib.cc:{n}",
    "proxy": "proxy.cc:{n}",
}


_SITE_LINES = {  # series → the line of each _BASE_SITES file, in its order
    "2.10": (195, 414, 213, 860, 73, 98, 425, 537, 1123, 622),
    "2.14": (189, 537, 229, 1299, 65, 111, 478, 687, 1261, 939),
    "2.18": (246, 49, 76, 1374, 64, 148, 628, 691, 1295, 1021),
    "2.21": (153, 62, 81, 1505, 74, 183, 762, 1051, 1696, 1264),
    "2.26": (231, 69, 94, 1713, 75, 197, 816, 1187, 2244, 1380),
    "2.27": (244, 79, 96, 1790, 75, 204, 864, 1233, 2283, 1421),
}


def _sites(series: str) -> dict[str, str]:
    """The ``file:line`` each WARN of ``series`` is printed from."""
    return {
        k: site.format(n=n) for (k, site), n in zip(_BASE_SITES.items(), _SITE_LINES[series], strict=True)
    }


_V2_10 = NcclProfile(
    series="2.10",
    version="2.10.3",
    cuda="11.4",
    driver=None,
    banner="printf",
    warn_timestamp=False,
    flush_per_line=True,
    subsys=("INIT", "ENV", "COLL"),
    bootstrap="Bootstrap : Using {ifname}:{ip}<0>",
    plugin=("NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",),
    net_ready=(),
    ib_using=_IB_USING_OLD,
    ib_relaxed="",
    net_lines_in_init_thread=False,
    dmabuf=False,
    init_start=None,
    init_complete=_COMPLETE_OLD,
    split_start=None,
    split_complete=None,
    bootstrap_split=None,
    init_func="",
    summary=None,
    bootstrap_timings=None,
    affinity="mask",
    nvls_line=None,
    ring_dump="w3",
    chunksize=False,
    p2p_line=_P2P_NOCONN,
    shm_line=_SHM,
    net_line=_NET_NOCONN,
    bracket="busid",
    p2p_path="P2P/IPC/read",
    shm_path="direct shared memory",
    connected_rings="Connected all rings",
    thresholds=_THR_OLD,
    channels=_CH_OLD,
    cc_line=None,
    init_timings=None,
    launch_mode=True,
    lazy_connect=False,
    destroy=None,
    abort=None,
    abort_start=None,
    opcount="proxy",
    send_buffer_in_sendbuff=True,
    ib_completion=_IB_ERR_OLD,
    ib_site="transport/net_ib.cc:1123",
    socket_closed="Net : Connection closed by remote peer {peer}",
    connect_retry="Call to connect returned {err}, retrying",
    connect_refused="Net : Connect to {addr} failed : {err}",
    connect_timeout="Net : Connect to {addr} failed : {err}",
    no_interface="Bootstrap : no socket interface found",
    cuda_oom="Cuda failure 'out of memory'",
    duplicate_gpu="Duplicate GPU detected : rank {rank} and rank {other} both on CUDA device {bus}",
    progress_thread="[Proxy Thread]",
    async_tag=False,
    remote_error=2,
    long_error_strings=False,
    sites=_sites("2.10"),
)

_V2_14 = replace(
    _V2_10,
    series="2.14",
    version="2.14.3",
    cuda="11.7",
    driver=11070,
    flush_per_line=False,
    net_lines_in_init_thread=True,
    dmabuf=True,
    p2p_line=_P2P_CONN,
    net_line=_NET_CONN,
    shm_path="SHM/direct/direct",
    ib_using=_IB_USING,
    thresholds=_THR,
    launch_mode=False,
    destroy=_DESTROY,
    abort=_DESTROY,
    opcount="plan",
    send_buffer_in_sendbuff=False,
    async_tag=True,
    remote_error=6,
    ib_site="transport/net_ib.cc:1261",
    sites=_sites("2.14"),
)

_V2_18 = replace(
    _V2_14,
    series="2.18",
    version="2.18.3",
    cuda="12.2",
    driver=12020,
    plugin=(
        "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
        "libnccl-net.so: cannot open shared object file: No such file or directory",
        "NET/Plugin : No plugin found, using internal implementation",
    ),
    ib_relaxed="[RO]",
    init_start=_INIT_218.replace("{phase}", "START"),
    init_complete=_INIT_218.replace("{phase}", "COMPLETE"),
    split_start=_INIT_218.replace("{phase}", "START"),
    split_complete=_INIT_218.replace("{phase}", "COMPLETE"),
    bootstrap_split=(
        "bootstrapSplit: rank {rank} nranks {nranks} color {color} key {key} prev {prev} next {next} - DONE"
    ),
    nvls_line="NVLS multicast support is not available on dev {cuda_dev}",
    chunksize=True,
    bracket="nvml",
    channels=_CH_218,
    ib_completion=_IB_ERR_218,
    ib_site="transport/net_ib.cc:1295",
    socket_closed="socketProgress: Connection closed by remote peer {peer_name}",
    connect_refused="socketStartConnect: exceeded retries ({retries})",
    connect_timeout="socketStartConnect: Connect to {addr} failed : {err}",
    long_error_strings=True,
    sites=_sites("2.18"),
)

_V2_21 = replace(
    _V2_18,
    series="2.21",
    version="2.21.5",
    cuda="12.4",
    driver=12040,
    plugin=("NET/Plugin: No plugin found (libnccl-net.so)",),
    init_start=_INIT_221.replace("{phase}", "START"),
    init_complete=_INIT_221.replace("{phase}", "COMPLETE"),
    split_start=_SPLIT_221.replace("{phase}", "START"),
    split_complete=_SPLIT_221.replace("{phase}", "COMPLETE"),
    bootstrap_split=(
        "bootstrapSplit: comm {comm} parent {parent} rank {rank} nranks {nranks} color {color} key {key} "
        "prev {prev} next {next} - DONE"
    ),
    init_func="ncclCommInitRank",
    summary=(
        "comm {comm} rank {rank} nRanks {nranks} nNodes {nnodes} "
        "localRanks {local_ranks} localRank {local_rank} MNNVL 0"
    ),
    p2p_path="P2P/CUMEM/read",
    channels=_CH_220,
    ib_completion=_IB_ERR_220,
    ib_site="transport/net_ib.cc:1696",
    progress_thread="[Progress Thread]",
    cuda_oom="Cuda failure 2 'out of memory'",
    sites=_sites("2.21"),
)

_V2_26 = replace(
    _V2_21,
    series="2.26",
    version="2.26.2",
    cuda="12.8",
    driver=12080,
    banner="info",
    warn_timestamp=True,
    subsys=("INIT", "BOOTSTRAP", "ENV", "COLL"),
    bootstrap="Bootstrap: Using {ifname}:{ip}<0>",
    plugin=(
        "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
        "PROFILER/Plugin: Could not find: libnccl-profiler.so. ",
    ),
    init_start=_INIT_221.replace("{phase}", "START"),
    split_start=_SPLIT_224_START,
    split_complete=_SPLIT_224_COMPLETE,
    bootstrap_split=None,
    init_func="{api}",
    bootstrap_timings=_BOOT_TIMINGS,
    ring_dump="digits",
    p2p_path="P2P/CUMEM",
    connected_rings="Connected all rings, use ring PXN 0 GDR {gdr}",
    cc_line="CC Off, workFifoBytes 1048576",
    init_timings=_TIMINGS,
    lazy_connect=True,
    ib_completion=_IB_ERR_224,
    ib_site="transport/net_ib.cc:2244",
    connect_retry=(
        "socketStartConnect: connect returned {err}, "
        "retrying ({attempt}/{retries}) after sleep for {msec} msec"
    ),
    connect_refused="socketStartConnect: connect returned {err}, exceeded error retry count ({retries})",
    connect_timeout="socketPollConnect: Connect to {addr} failed : {err}",
    sites=_sites("2.26"),
)

_V2_27 = replace(
    _V2_26,
    series="2.27",
    version="2.27.7",
    cuda="12.9",
    driver=12090,
    flush_per_line=False,
    plugin=(
        "NET/Plugin: Could not find: libnccl-net.so. ",
        "PROFILER/Plugin: Could not find: libnccl-profiler.so. ",
    ),
    net_ready=("Initialized NET plugin {net}", "Assigned NET plugin {net} to comm"),
    affinity="range",
    nvls_line="NVLS multicast support is not available on dev {cuda_dev} (NVLS_NCHANNELS 16)",
    opcount="network",
    ib_site="transport/net_ib.cc:2283",
    connect_retry=(
        "socketPollConnect: connect to {addr} returned {err}, "
        "retrying ({attempt}/{retries}) after sleep for {msec} msec"
    ),
    connect_refused=(
        "socketPollConnect: connect to {addr} returned {err}, "
        "exceeded error retry count after {attempts} attempts"
    ),
    connect_timeout="socketPollConnect: connect to {addr} failed : {err}",
    sites=_sites("2.27"),
)

# 2.28.9 as the real H200 jobs of ../shared/corpus/gpu-h200 print it: the ENV and NET plugin probes without a
# trailing note, and from 2.28.7 the IB completion WARN with IBV_WC_* names and reqSize (grammar §6.1).
_IB_ERR_2287 = (
    "NET/IB: Got completion from peer {peer} with status=IBV_WC_RETRY_EXC_ERR({status}) "
    "opcode=IBV_WC_SEND({opcode}) reqSize={len} vendor_err={vendor} req_type={req} hca {hca}"
)

_V2_28 = replace(
    _V2_27,
    series="2.28",
    version="2.28.9",
    cuda="13.0",
    driver=13000,
    plugin=(
        "ENV/Plugin: Could not find: libnccl-env.so",
        "NET/Plugin: Could not find: libnccl-net.so",
        "PROFILER/Plugin: Could not find: libnccl-profiler.so",
    ),
    ib_completion=_IB_ERR_2287,
    ib_absent=("NET/IB : Using [RO]; OOB {ifname}:{ip}<0>", "Failed to initialize NET plugin IB"),
)

# 2.29.2 from the grammar's samples (no real 2.29 log in the corpus): the git version line, "[Rank N]" before
# Init START (§2.1), and the IB completion WARN without reqSize, two spaces before "hca" when no GIDs (§6.1).
_IB_ERR_229 = (
    "NET/IB: Got completion from peer {peer} with status=IBV_WC_RETRY_EXC_ERR({status}) "
    "opcode=IBV_WC_SEND({opcode}) vendor_err={vendor}  hca {hca}"
)

_V2_29 = replace(
    _V2_28,
    series="2.29",
    version="2.29.2",
    git_version="NCCL git version master v2.29.2-1-g3f8e2a1",
    init_start="[Rank {rank}] " + _INIT_221.replace("{phase}", "START"),
    split_start="[Rank {rank}] " + _SPLIT_224_START,
    ib_completion=_IB_ERR_229,
    ib_site="transport/net_ib/p2p.cc:550",
)

# 2.30.7 (tag v2.30.7-1): the IB completion WARN of 2.29.2 at its new line, "(func)" after every WARN's and
# trace's file:line, and teardown lines in the DESTROY subsystem the simulated job does not ask for (§1.2,
# §1.9, §2.3, §6.1).
_V2_30 = replace(
    _V2_29,
    series="2.30",
    version="2.30.7",
    git_version="NCCL git version master v2.30.7-1-g5c1e0b4",
    ib_site="transport/net_ib/p2p.cc:688",
    site_funcs=True,
    teardown_subsys="DESTROY",
)

NCCL_PROFILES: dict[str, NcclProfile] = {
    p.series: p for p in (_V2_10, _V2_14, _V2_18, _V2_21, _V2_26, _V2_27, _V2_28, _V2_29, _V2_30)
}

# The function a WARN or trace line of 2.30.7+ names, per call-site key of NcclProfile.sites (stand-ins from
# the files' own functions, like the line numbers).
SITE_FUNCS = {
    "alloc": "ncclCudaCalloc",
    "socket": "socketProgress",
    "bootstrap": "bootstrapConnect",
    "init": "initTransportsRank",
    "group": "groupLaunch",
    "transport": "ncclTransportP2pSetup",
    "p2p": "p2pSendSetup",
    "net": "sendProxyProgress",
    "net_ib": "ncclIbTest",
    "proxy": "progressOps",
    "ib": "ncclIbLogCompletionWithError",
}
DEFAULT_NCCL = "2.21"

# The lowest patch release of a series that the series' templates describe (e.g. the Init START line
# exists from 2.18.3, not in 2.18.1).
_MIN_PATCH = {"2.18": 3}


def nccl_profile(text: str) -> NcclProfile:
    """The profile for '2.21', '2.21.5' or '2.27.3'; ValueError with the choices otherwise."""
    parts = text.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts) or len(parts) > 3:
        raise ValueError(f"{text!r} is not a NCCL version like 2.21 or 2.21.5")
    series = f"{int(parts[0])}.{int(parts[1])}"
    profile = NCCL_PROFILES.get(series)
    if profile is None:
        raise ValueError(
            f"NCCL {text} is not simulated; choose one of {', '.join(NCCL_PROFILES)} (any patch release)"
        )
    if len(parts) == 3:
        if int(parts[2]) < _MIN_PATCH.get(series, 0):
            raise ValueError(
                f"NCCL {text} predates the {series} log format simulated here "
                f"(use {series}.{_MIN_PATCH[series]} or later)"
            )
        profile = replace(profile, version=f"{series}.{int(parts[2])}")
    return profile


# -------------------------------------------------------------------------------------------- torch
@dataclass(frozen=True, slots=True)
class TorchProfile:
    """How one PyTorch release logs ProcessGroupNCCL trouble and how torchrun reports failures."""

    series: str
    version: str
    # watchdog generation: "1.13", "2.2", "2.3", "2.4", "2.5", "2.6" (for people; code reads the fields below)
    generation: str
    rank_prefix: bool  # c10 lines start with "[rankN]:" (2.3+)
    glog_time: bool  # "[E602 14:03:11.123456789 file:line]" (2.4+) instead of "[E file:line]"
    pg_prefix: str  # "rank" | "pg" | "pg_desc" | "pg_guid"  (pytorch-and-peers.md §1.4 PG prefix)
    numel: bool  # WorkNCCL(... NumelIn=, NumelOut= ...) (2.2+)
    timeout_ms: int
    elastic_log: str  # "plain" (<= 2.1) | "bracketed" (2.2-2.3) | "glog" (2.4+)
    eager_init: bool  # init_process_group(device_id=...) creates the world comm at once; groups split from it
    store_barrier: bool  # init_process_group waits in a store-based barrier (<= 2.0)
    exception_class: str  # Python exception for NCCL errors
    cpp_exception: str  # what std::terminate reports
    split_warning: bool  # 1.13: the two "Some NCCL operations..." sentences are one line
    python: str
    # The watchdog's report, as keys of torch_text.MESSAGES in print order (pytorch-and-peers.md §1.4 #1-#12).
    timeout_report: tuple[str, ...] = ("caught",)
    error_report: tuple[str, ...] = ()  # what precedes the take-down lines for an asynchronous NCCL error
    first_pg_report: tuple[
        str, ...
    ] = ()  # extra lines of the first PG of a rank to time out (dump signal, 2.5+)
    rank_tag_take_down: bool = False  # "[Rank R] " before "Some NCCL operations..." (2.3+)
    # "what": terminate + what(); "nccl_watchdog" (2.2) / "pg_watchdog" (2.3+) exception line first
    watchdog_exit: str = "what"
    lines: dict[str, int] = field(default_factory=dict)  # ProcessGroupNCCL.cpp line numbers by message
    # WorkNCCL's own prefix (the timeout, the take-down lines): "rank" "[Rank N]", or "pg_guid"
    # "[PG GUID g(desc) Rank N]" from 2.13 (pytorch PR #191440, issue #191305).
    work_prefix: str = "rank"


def _tp(**kw) -> TorchProfile:
    return TorchProfile(**kw)


_T113 = _tp(
    series="1.13",
    version="1.13.1",
    generation="1.13",
    rank_prefix=False,
    glog_time=False,
    pg_prefix="rank",
    numel=False,
    timeout_ms=1800000,
    elastic_log="plain",
    eager_init=False,
    store_barrier=True,
    exception_class="RuntimeError",
    cpp_exception="std::runtime_error",
    split_warning=False,
    python="3.8",
    lines={
        "timeout": 737,
        "some_ops": 414,
        "take_down": 414,
        "watchdog_exc": 0,
        "check": 737,
        "watchdog_loop": 0,
        "async": 433,
    },
)
_T20 = replace(
    _T113,
    series="2.0",
    version="2.0.1",
    split_warning=True,
    python="3.10",
    lines={
        "timeout": 821,
        "some_ops": 455,
        "take_down": 460,
        "watchdog_exc": 0,
        "check": 821,
        "watchdog_loop": 0,
        "async": 474,
    },
)
_T21 = replace(
    _T20,
    series="2.1",
    version="2.1.2",
    store_barrier=False,
    exception_class="torch.distributed.DistBackendError",
    cpp_exception="c10::DistBackendError",
    lines={
        "timeout": 915,
        "some_ops": 489,
        "take_down": 495,
        "watchdog_exc": 0,
        "check": 915,
        "watchdog_loop": 0,
        "async": 509,
    },
)
_T22 = replace(
    _T21,
    series="2.2",
    version="2.2.2",
    generation="2.2",
    numel=True,
    timeout_ms=600000,
    elastic_log="bracketed",
    watchdog_exit="nccl_watchdog",
    lines={
        "timeout": 525,
        "some_ops": 539,
        "take_down": 545,
        "watchdog_exc": 1182,
        "check": 527,
        "watchdog_loop": 1186,
        "async": 559,
    },
)
_T23 = replace(
    _T22,
    series="2.3",
    version="2.3.1",
    generation="2.3",
    rank_prefix=True,
    pg_prefix="pg",
    eager_init=True,
    timeout_report=("caught", "status"),
    rank_tag_take_down=True,
    watchdog_exit="pg_watchdog",
    lines={
        "timeout": 563,
        "some_ops": 577,
        "take_down": 583,
        "watchdog_exc": 1414,
        "check": 565,
        "watchdog_loop": 1418,
        "status": 1537,
        "async": 597,
    },
)
_T24 = replace(
    _T23,
    series="2.4",
    version="2.4.1",
    generation="2.4",
    glog_time=True,
    pg_prefix="pg_desc",
    elastic_log="glog",
    python="3.11",
    timeout_report=("caught", "exception_at", "status"),
    error_report=("exception_at",),
    lines={
        "timeout": 607,
        "some_ops": 621,
        "take_down": 627,
        "watchdog_exc": 1521,
        "check": 609,
        "watchdog_loop": 1525,
        "status": 1664,
        "exception_at": 1592,
        "async": 641,
    },
)
_T25 = replace(
    _T24,
    series="2.5",
    version="2.5.1",
    generation="2.5",
    pg_prefix="pg_guid",
    first_pg_report=("dump", "first_pg"),
    lines={
        "timeout": 616,
        "some_ops": 630,
        "take_down": 636,
        "watchdog_exc": 1601,
        "check": 618,
        "watchdog_loop": 1605,
        "status": 1748,
        "exception_at": 1670,
        "dump": 1724,
        "async": 650,
    },
)
_T26 = replace(
    _T25,
    series="2.6",
    version="2.6.0",
    generation="2.6",
    timeout_report=("caught", "failure", "stack"),
    error_report=("failure",),
    lines={
        "timeout": 632,
        "some_ops": 658,
        "take_down": 664,
        "watchdog_exc": 1683,
        "check": 635,
        "watchdog_loop": 1689,
        "failure": 1771,
        "stack": 1810,
        "dump": 1785,
        "async": 678,
    },
)
_T27 = replace(
    _T26,
    series="2.7",
    version="2.7.1",
    lines={
        "timeout": 634,
        "some_ops": 668,
        "take_down": 674,
        "watchdog_exc": 1695,
        "check": 637,
        "watchdog_loop": 1701,
        "failure": 1782,
        "stack": 1821,
        "dump": 1796,
        "async": 690,
    },
)
_T28 = replace(_T27, series="2.8", version="2.8.0", python="3.12")
# 2.13: 2.8's watchdog report, WorkNCCL lines prefixed with their own group's GUID and rank (PR #191440).
# The ProcessGroupNCCL.cpp line numbers are 2.8's: the messages, not their lines, are what a parser reads.
_T213 = replace(_T28, series="2.13", version="2.13.0", work_prefix="pg_guid")

TORCH_PROFILES: dict[str, TorchProfile] = {
    p.series: p for p in (_T113, _T20, _T21, _T22, _T23, _T24, _T25, _T26, _T27, _T28, _T213)
}

# A PyTorch release a job with this NCCL plausibly ran (the wheel's bundled NCCL or a newer system NCCL).
DEFAULT_TORCH_FOR_NCCL = {
    "2.10": "1.13",
    "2.14": "2.0",
    "2.18": "2.1",
    "2.21": "2.5",
    "2.26": "2.7",
    "2.27": "2.8",
    "2.28": "2.8",
    "2.29": "2.8",
    "2.30": "2.13",
}  # PyTorch 2.9-2.12 are not simulated: 2.8's formats


def torch_profile(text: str) -> TorchProfile:
    parts = text.strip().split(".")
    if len(parts) < 2 or len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"{text!r} is not a PyTorch version like 2.4 or 2.4.1")
    series = f"{int(parts[0])}.{int(parts[1])}"
    profile = TORCH_PROFILES.get(series)
    if profile is None:
        raise ValueError(f"PyTorch {text} is not simulated; choose one of {', '.join(TORCH_PROFILES)}")
    if len(parts) == 3:
        profile = replace(profile, version=f"{series}.{int(parts[2])}")
    return profile


# ----------------------------------------------------------------------------------- result codes §7
NCCL_RESULTS = {
    1: ("unhandled cuda error", "ncclUnhandledCudaError", "Call to CUDA function failed."),
    2: (
        "unhandled system error",
        "ncclSystemError",
        "System call (e.g. socket, malloc) or external library call failed or device error. ",
    ),
    3: ("internal error", "ncclInternalError", "Internal check failed."),
    5: ("invalid usage", "ncclInvalidUsage", "This usually reflects invalid usage of NCCL library."),
    6: (
        "remote process exited or there was a network error",
        "ncclRemoteError",
        "A call failed possibly due to a network error or a remote process exiting prematurely.",
    ),
}
_LONG_SUFFIX = {
    1: " (run with NCCL_DEBUG=INFO for details)",
    2: " (run with NCCL_DEBUG=INFO for details)",
    3: " - please report this issue to the NCCL developers",
    5: " (run with NCCL_DEBUG=WARN for details)",
}


def nccl_error_string(profile: NcclProfile, code: int) -> str:
    text = NCCL_RESULTS[code][0]
    return text + _LONG_SUFFIX.get(code, "") if profile.long_error_strings else text
