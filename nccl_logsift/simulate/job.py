"""Assemble a simulated job from the options: profiles, cluster, communicators, programs, the fault.

:func:`build_job` returns a :class:`Job` whose programs are ready for the engine; scenarios use the
small editing helpers here (``stall``, ``replace_op``, ``insert_op`` …) and report faults with
:meth:`Job.fault`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from nccl_logsift.simulate.cluster import (
    Cluster,
    Communicator,
    Parallel,
    build_groups,
    build_hosts,
    build_processes,
    choose_parallel,
    nccl_nodes,
)
from nccl_logsift.simulate.engine import Faults, Timeline
from nccl_logsift.simulate.program import Item, Op, StepShape, build_programs, insert_inits, ops_of
from nccl_logsift.simulate.versions import (
    DEFAULT_NCCL,
    DEFAULT_TORCH_FOR_NCCL,
    NcclProfile,
    TorchProfile,
    nccl_profile,
    torch_profile,
    version_key,
)

if TYPE_CHECKING:
    from nccl_logsift.simulate.scenarios import Scenario

LAYOUTS = ("interleaved", "per-rank", "srun", "torchrun", "mpirun")
COMMS = ("groups", "world")
INTERLEAVES = ("buffered", "op")
MAX_RANKS = 4096


class OptionError(ValueError):
    """An option value (or combination) the simulator cannot honour; the CLI shows it as a usage error."""


@dataclass(frozen=True, slots=True)
class Options:
    scenario: str = "healthy"
    ranks: int = 8
    nodes: int | None = None
    ops: int = 40
    nccl_version: str = DEFAULT_NCCL
    torch_version: str | None = None
    layout: str = "interleaved"
    seed: int = 0
    size: int | None = None  # bytes of log to stream (COLL-heavy steady state before the fault)
    noise: bool = True
    torn_rate: float | None = None  # probability per line of a torn+glued line in interleaved output
    nccl_debug: bool = True  # NCCL_DEBUG=INFO; off, only PyTorch, Python and launcher lines are left
    # The shape of the --size steady state (benchmarks/README.md "What is measured"):
    comms: str = (
        "groups"  # groups: Megatron TP/PP/DP groups from 16 ranks; world: the world communicator alone
    )
    interleave: str = (
        "buffered"  # buffered: as NCCL's stdio flushes; op: every rank's n-th call, then the n+1-th
    )
    print_every: int = 0  # a training print after every N-th COLL line of a step (0: the noise's one a step)
    other_lines: float = 0.0  # the fraction of the steady state's lines that are not COLL lines


@dataclass(slots=True)
class TruthFault:
    kind: str
    primary: bool
    ranks: list[int]
    hosts: list[str]
    comm: str | None = None
    seq: int | None = None
    op: str | None = None
    detail: str = ""
    severity: str | None = None  # the worst the severity policy allows for it (README "Severities"), if set


@dataclass(slots=True)
class Job:
    options: Options
    scenario: Scenario
    nccl: NcclProfile
    torch: TorchProfile
    cluster: Cluster
    programs: dict[int, list[Item]]
    shape: StepShape
    steps: int
    faults: Faults
    rng: random.Random
    base_time: datetime
    env: dict[int, list[str]] = field(default_factory=dict)  # host index -> ENV lines NCCL prints
    info_timestamps: str | None = None  # NCCL_DEBUG_TIMESTAMP_FORMAT when INFO lines carry times
    store_wait: set[int] = field(default_factory=set)  # ranks blocked in the store-based barrier
    never_started: set[int] = field(default_factory=set)  # ranks whose process never ran: they print nothing
    truth: list[TruthFault] = field(default_factory=list)
    notes: dict = field(default_factory=dict)  # scenario scratch space for its truth/story hooks
    bulk_steps: int = 0
    nccl_debug: bool = True  # NCCL_DEBUG=INFO; off, NCCL prints nothing (a plain benchmark run)
    python: bool = True  # the ranks run a Python training script (its warnings and progress lines are noise)

    # ------------------------------------------------------------------------------- lookups
    @property
    def ranks(self) -> int:
        return len(self.cluster.procs)

    def host_of(self, rank: int) -> str:
        return self.cluster.procs[rank].host.name

    def hosts_of(self, ranks: list[int]) -> list[str]:
        seen: list[str] = []
        for r in ranks:
            name = self.host_of(r)
            if name not in seen:
                seen.append(name)
        return seen

    def comm(self, kind: str, rank: int = 0) -> Communicator:
        """The communicator of ``kind`` (world, tp, dp, p2p) that ``rank`` belongs to."""
        for c in self.cluster.comms:
            if c.kind == kind and rank in c.ptr:
                return c
        if kind == "dp":
            return self.cluster.world
        raise KeyError((kind, rank))

    def data_comm(self, rank: int) -> Communicator:
        return self.comm("dp", rank)

    def time(self, t: float) -> datetime:
        return self.base_time + timedelta(seconds=t)

    def pick(self, candidates: list[int]) -> int:
        return candidates[self.rng.randrange(len(candidates))]

    # -------------------------------------------------------------------------- program edits
    def step_items(self, rank: int, step: int, comm: int | None = None) -> list[int]:
        prog = self.programs[rank]
        return [i for i in ops_of(prog, comm) if prog[i].step == step]

    def insert(self, rank: int, index: int, item: Item) -> None:
        self.programs[rank].insert(index, item)

    def replace_op(self, rank: int, index: int, **changes) -> Op:
        it = self.programs[rank][index]
        new = replace(it.op, **changes)  # type: ignore[arg-type]
        self.programs[rank][index] = replace(it, op=new)
        return new

    def truncate(self, rank: int, index: int, *tail: Item) -> None:
        """Drop everything from ``index`` on and end the program with ``tail``."""
        self.programs[rank][index:] = list(tail)

    def fault(
        self,
        kind: str,
        primary: bool,
        ranks: list[int],
        *,
        comm: Communicator | None = None,
        seq: int | None = None,
        op: str | None = None,
        detail: str = "",
        severity: str | None = None,
    ) -> TruthFault:
        f = TruthFault(
            kind,
            primary,
            sorted(ranks),
            self.hosts_of(sorted(ranks)),
            comm.comm_id_text if comm else None,
            seq,
            op,
            detail,
            severity,
        )
        self.truth.append(f)
        return f

    def next_pos(self, timeline: Timeline, rank: int, comm: Communicator) -> int:
        """The position (1-based ordinal on ``comm``) of the first op ``rank`` never issued."""
        run = timeline.runs[rank]
        issued = [i.pos for i in run.issues if i.comm == comm.index and i.pos > 0]
        base = max(issued) if issued else run.bulk_pos.get(comm.index, 0)
        return max(base, run.bulk_pos.get(comm.index, 0)) + 1

    def position_of(self, timeline: Timeline, rank: int, index: int) -> int | None:
        """The position the program item ``index`` of ``rank`` got when it was issued."""
        item = self.programs[rank][index]
        for issue in timeline.runs[rank].issues:
            if issue.item is item:
                return issue.pos
        return None


# ------------------------------------------------------------------------------------ building
def resolve(options: Options) -> tuple[Scenario, NcclProfile, TorchProfile, int, int]:
    from nccl_logsift.simulate.scenarios import SCENARIOS

    if options.scenario not in SCENARIOS:
        raise OptionError(f"unknown scenario {options.scenario!r}; see --list")
    scenario = SCENARIOS[options.scenario]
    try:
        nccl = nccl_profile(options.nccl_version)
        torch = torch_profile(options.torch_version or DEFAULT_TORCH_FOR_NCCL[nccl.series])
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    ranks = options.ranks
    if not 2 <= ranks <= MAX_RANKS:
        raise OptionError(f"--ranks must be between 2 and {MAX_RANKS}, got {ranks}")
    if options.layout not in LAYOUTS:
        raise OptionError(f"--layout must be one of {', '.join(LAYOUTS)}")
    if scenario.min_nccl and version_key(nccl.version) < version_key(scenario.min_nccl):
        raise OptionError(
            f"scenario {scenario.name} needs NCCL {scenario.min_nccl} or later ({scenario.min_nccl_why}); "
            f"got {nccl.version}"
        )
    if options.nodes is not None:
        nodes = options.nodes
        if nodes < 1 or ranks % nodes:
            raise OptionError(f"--ranks {ranks} must split evenly over --nodes {nodes}")
        if ranks // nodes > 16:
            raise OptionError(
                f"{ranks // nodes} GPUs per node is more than the 16 a server holds; add --nodes"
            )
        if nodes < scenario.min_nodes:
            raise OptionError(f"scenario {scenario.name} needs at least {scenario.min_nodes} nodes")
    else:
        gpus = min(8, ranks)
        while ranks % gpus:
            gpus -= 1
        nodes = max(ranks // gpus, scenario.min_nodes)
        if ranks % nodes:
            raise OptionError(
                f"scenario {scenario.name} needs {scenario.min_nodes} nodes; "
                f"use --ranks divisible by {scenario.min_nodes}"
            )
    if ranks // nodes < scenario.min_gpus:
        raise OptionError(
            f"scenario {scenario.name} needs at least {scenario.min_gpus} GPUs per node; use fewer --nodes"
        )
    if scenario.needs_pp and ranks % 2:
        raise OptionError(f"scenario {scenario.name} needs an even number of ranks (two pipeline stages)")
    if options.size is not None and not scenario.trains:
        raise OptionError(
            f"--size streams training steps, but scenario {scenario.name} fails before training starts"
        )
    if options.ops < 1:
        raise OptionError("--ops must be at least 1")
    _check_steady_state(options, scenario)
    return scenario, nccl, torch, nodes, ranks // nodes


def _check_steady_state(options: Options, scenario: Scenario) -> None:
    """The options that shape the --size steady state: each needs it, and the last three one stream."""
    if options.comms not in COMMS:
        raise OptionError(f"--comms must be one of {', '.join(COMMS)}")
    if options.interleave not in INTERLEAVES:
        raise OptionError(f"--interleave must be one of {', '.join(INTERLEAVES)}")
    if options.comms == "world" and scenario.needs_pp:
        raise OptionError(f"scenario {scenario.name} needs pipeline stages; --comms world has none")
    if not 0.0 <= options.other_lines < 1.0:
        raise OptionError(f"--other-lines must be at least 0 and below 1, got {options.other_lines}")
    if options.print_every < 0:
        raise OptionError(f"--print-every must be 0 or more, got {options.print_every}")
    shaped = [
        name
        for name, on in (
            ("--interleave op", options.interleave == "op"),
            ("--print-every", options.print_every > 0),
            ("--other-lines", options.other_lines > 0),
        )
        if on
    ]
    if shaped and options.size is None:
        raise OptionError(f"{shaped[0]} shapes the steady state that --size streams; give --size")
    if shaped and options.layout == "per-rank":
        raise OptionError(
            f"{shaped[0]} shapes one stream of every rank; --layout per-rank writes a file each"
        )


def build_job(options: Options) -> Job:
    scenario, nccl, torch, nodes, gpus = resolve(options)
    rng = random.Random(f"nccl-logsift/{options.seed}/{scenario.name}/{options.ranks}")
    hosts = build_hosts(nodes, gpus, rng)
    procs = build_processes(hosts, rng)
    # The world communicator alone: plain data parallelism (DDP, FSDP), whatever the job's size.
    world_only = options.comms == "world"
    parallel = (
        Parallel(dp=options.ranks) if world_only else choose_parallel(options.ranks, gpus, scenario.needs_pp)
    )
    cluster = Cluster(hosts, procs, [], [], parallel)
    base = datetime(2025, 6, 2, 14, 0, 0) + timedelta(seconds=rng.randrange(0, 6 * 3600))
    job = Job(
        options,
        scenario,
        nccl,
        torch,
        cluster,
        {},
        StepShape(),
        0,
        Faults(),
        rng,
        base,
        nccl_debug=options.nccl_debug,
    )
    if scenario.setup:
        scenario.setup(job)
    _build_comms(job)
    step_time = rng.uniform(0.6, 1.1)
    programs, shape = build_programs(cluster, 1, random.Random(rng.random()), step_time, sharded=world_only)
    per_step = len([it for it in shape.items[0] if it.kind == "op"])
    steps = max(scenario.min_steps, math.ceil(options.ops / max(1, per_step)))
    programs, shape = build_programs(
        cluster, steps, random.Random(rng.random()), step_time, sharded=world_only
    )
    eager = {c.index for c in cluster.comms if c.eager}
    insert_inits(programs, cluster, eager)
    job.programs, job.shape, job.steps = programs, shape, steps
    if options.size is not None:
        for prog in programs.values():
            at = max(i for i, it in enumerate(prog) if it.kind == "sync" and it.step == 0) + 1
            prog.insert(at, Item("bulk", step=0))
    scenario.inject(job)
    return job


def _build_comms(job: Job) -> None:
    cluster, rng, torch, nccl = job.cluster, job.rng, job.torch, job.nccl
    ranks = len(cluster.procs)
    pgs, _member = build_groups(ranks, cluster.parallel)
    cluster.pgs = pgs
    split = torch.eager_init and version_key(nccl.version) >= (2, 18)
    # PyTorch 2.x calls ncclCommInitRankConfig once NCCL has it (2.14+); 1.13 calls ncclCommInitRank.
    init_api = (
        "ncclCommInitRankConfig"
        if version_key(torch.version) >= (2, 0) and version_key(nccl.version) >= (2, 14)
        else "ncclCommInitRank"
    )
    heap = {p.rank: 0x550000000000 + (rng.getrandbits(28) << 12) for p in cluster.procs}

    def add(
        kind: str,
        name: str,
        members: list[int],
        pg: int,
        *,
        func: str = init_api,
        parent: int | None = None,
        color: int = 0,
        split_count: int = 0,
        eager: bool = False,
    ) -> Communicator:
        comm = Communicator(
            len(cluster.comms),
            kind,
            name,
            members,
            rng.getrandbits(64) | (1 << 56),
            pg,
            func,
            parent,
            color,
            split_count,
            eager,
        )
        for r in members:
            heap[r] += rng.randrange(0x40000, 0x400000) & ~0xF
            comm.ptr[r] = heap[r]
            comm.stream[r] = heap[r] + rng.randrange(0x1000, 0x20000) & ~0xF
        comm.nodes = nccl_nodes(members, cluster.procs)
        gpus = cluster.hosts[0].gpus
        comm.nchannels = (
            2 if gpus <= 2 or len(members) == 2 else (4 if gpus <= 4 or len(members) > 512 else 8)
        )
        cluster.comms.append(comm)
        return comm

    world = add("world", "world", list(range(ranks)), 0, eager=torch.eager_init)
    for pg in pgs[1:]:
        if pg.kind in ("tp", "dp"):
            add(
                pg.kind,
                f"{pg.kind}{pg.index}",
                pg.ranks,
                pg.index,
                func="ncclCommSplit" if split else init_api,
                parent=world.index if split else None,
                color=rng.getrandbits(30) if split else 0,
                split_count=pg.guid if split else 0,
                eager=split,
            )
        elif pg.kind == "pp":
            for a, b in zip(pg.ranks, pg.ranks[1:]):
                add("p2p", f"p2p{a}-{b}", [a, b], pg.index)
