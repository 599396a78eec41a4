"""What each rank's training script calls, in order: communicator inits, collectives, syncs, the end.

A program is a list of :class:`Item` s per global rank. The loop mirrors a Megatron/DDP step: tensor-
parallel all-reduces inside each micro-batch, pipeline send/recv between stages, gradient all-reduce
over the data-parallel group, then a host sync (``loss.item()``). Before the loop DDP checks parameter
shapes (an AllGather) and broadcasts the weights from rank 0; after it, a barrier.

Scenarios edit these lists (insert, drop, replace, stall) before the engine runs them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from nccl_logsift.simulate.cluster import Cluster, Communicator

# ncclDataType_t (§5.4)
INT64, FLOAT32, BF16 = 4, 7, 9

TORCH_OP = {
    "AllReduce": "ALLREDUCE",
    "AllGather": "_ALLGATHER_BASE",
    "ReduceScatter": "_REDUCE_SCATTER_BASE",
    "Broadcast": "BROADCAST",
    "Send": "SEND",
    "Recv": "RECV",
}


@dataclass(slots=True)
class Op:
    comm: int
    name: str  # NCCL op name as the COLL line prints it
    count: int
    dtype: int
    redop: int = 0
    root: int = 0  # root, or the peer's comm rank for Send/Recv
    torch_op: str = "ALLREDUCE"
    numel_in: int = 0
    numel_out: int = 0
    slot: str = "x"  # which buffer of the process it uses (fixed address per rank and slot)
    dur: float = 0.002  # GPU seconds
    label: str = ""  # what the training script was doing (for the truth file's detail)

    def matches(self, other: Op) -> bool:
        if self.name in ("Send", "Recv") or other.name in ("Send", "Recv"):
            return {self.name, other.name} == {"Send", "Recv"} and self.count == other.count
        return (self.name, self.count, self.dtype, self.root) == (
            other.name,
            other.count,
            other.dtype,
            other.root,
        )


@dataclass(slots=True)
class Item:
    kind: str  # init | op | sync | stall | exit | crash | raise | vanish | bulk | print | store_wait
    op: Op | None = None
    comm: int = -1  # init: the communicator
    gap: float = 0.0  # host seconds spent before this item (compute, data loading)
    step: int = -1  # training step the item belongs to (-1: setup / teardown)
    signal: int = 0  # crash: the signal that kills the process
    fail: str = ""  # a failure the scenario injected: "net_error" on an op ("" = none)
    text: str = ""  # print: a line the script prints (stdout); raise without what: the uncaught exception's
    # last line
    what: dict | None = None  # raise: what the process reports as it dies (story.Narrator.raised reads it)


@dataclass(slots=True)
class StepShape:
    """The collectives of one training step, per rank, kept for --size streaming."""

    items: dict[int, list[Item]] = field(default_factory=dict)
    period: float = 0.8


def _coll(
    comm: Communicator, name: str, count: int, dtype: int, *, root: int = 0, slot: str, dur: float, label: str
) -> Op:
    n = comm.nranks
    numel_in, numel_out = count, count
    if name == "AllGather":
        numel_out = count * n
    elif name == "ReduceScatter":
        numel_in = count * n
    return Op(comm.index, name, count, dtype, 0, root, TORCH_OP[name], numel_in, numel_out, slot, dur, label)


def build_programs(
    cluster: Cluster, steps: int, rng: random.Random, step_time: float, *, sharded: bool = False
) -> tuple[dict[int, list[Item]], StepShape]:
    """Programs for every rank, and the shape of one steady-state step (``sharded``: FSDP's, below)."""
    procs = cluster.procs
    ranks = len(procs)
    par = cluster.parallel
    comm_of: dict[tuple[str, int], Communicator] = {}
    p2p: dict[tuple[int, int], Communicator] = {}
    for c in cluster.comms:
        if c.kind == "p2p":
            p2p[(c.ranks[0], c.ranks[1])] = c
        else:
            for r in c.ranks:
                comm_of[(c.kind, r)] = c
    world = cluster.world
    data_kind = "dp" if ("dp", 0) in comm_of else "world"
    shape = StepShape(period=step_time)
    micro = 2 if par.pp > 1 else 1
    tp_layers = 2
    hidden = rng.choice((4096, 5120, 8192))
    seq_tokens = rng.choice((2048, 4096))
    buckets = [rng.choice((6553600, 13107200)), 6553600, rng.randrange(1_000_000, 6_000_000)]
    programs: dict[int, list[Item]] = {}
    for rank in range(ranks):
        prog: list[Item] = []
        # DDP's constructor: verify parameter shapes, then broadcast the weights from rank 0.
        dcomm = comm_of.get((data_kind, rank), world)
        prog.append(
            Item(
                "op",
                _coll(
                    world, "AllGather", 1, INT64, slot="shape", dur=0.001, label="DDP parameter-shape check"
                ),
                gap=1.5,
            )
        )
        for i, count in enumerate(buckets[:2]):
            prog.append(
                Item(
                    "op",
                    _coll(
                        dcomm,
                        "Broadcast",
                        count,
                        FLOAT32,
                        slot=f"b{i}",
                        dur=0.01,
                        label="DDP weight broadcast",
                    ),
                    gap=0.01,
                )
            )
        prog.append(Item("sync", gap=0.05))
        stage = (rank // (par.tp * par.dp)) if par.pp > 1 else 0
        step_items: list[Item] = []
        for _ in range(micro):
            if par.pp > 1 and stage > 0:
                c = p2p[(rank - par.tp * par.dp, rank)]
                step_items.append(
                    Item(
                        "op",
                        replace(
                            _coll(
                                c,
                                "Recv",
                                seq_tokens * hidden // 4,
                                BF16,
                                root=0,
                                slot="act",
                                dur=0.004,
                                label="pipeline activation recv",
                            )
                        ),
                        gap=0.01,
                    )
                )
            if par.tp > 1:
                c = comm_of[("tp", rank)]
                for _ in range(tp_layers):
                    step_items.append(
                        Item(
                            "op",
                            _coll(
                                c,
                                "AllReduce",
                                seq_tokens * hidden // 2,
                                BF16,
                                slot="tpf",
                                dur=0.003,
                                label="tensor-parallel forward all-reduce",
                            ),
                            gap=0.04,
                        )
                    )
            if par.pp > 1 and stage < par.pp - 1:
                c = p2p[(rank, rank + par.tp * par.dp)]
                step_items.append(
                    Item(
                        "op",
                        _coll(
                            c,
                            "Send",
                            seq_tokens * hidden // 4,
                            BF16,
                            root=1,
                            slot="act",
                            dur=0.004,
                            label="pipeline activation send",
                        ),
                        gap=0.05,
                    )
                )
        for _ in range(micro):
            if par.pp > 1 and stage < par.pp - 1:
                c = p2p[(rank, rank + par.tp * par.dp)]
                step_items.append(
                    Item(
                        "op",
                        _coll(
                            c,
                            "Recv",
                            seq_tokens * hidden // 4,
                            BF16,
                            root=1,
                            slot="grad",
                            dur=0.004,
                            label="pipeline gradient recv",
                        ),
                        gap=0.02,
                    )
                )
            if par.tp > 1:
                c = comm_of[("tp", rank)]
                for _ in range(tp_layers):
                    step_items.append(
                        Item(
                            "op",
                            _coll(
                                c,
                                "AllReduce",
                                seq_tokens * hidden // 2,
                                BF16,
                                slot="tpb",
                                dur=0.003,
                                label="tensor-parallel backward all-reduce",
                            ),
                            gap=0.06,
                        )
                    )
            if par.pp > 1 and stage > 0:
                c = p2p[(rank - par.tp * par.dp, rank)]
                step_items.append(
                    Item(
                        "op",
                        _coll(
                            c,
                            "Send",
                            seq_tokens * hidden // 4,
                            BF16,
                            root=0,
                            slot="grad",
                            dur=0.004,
                            label="pipeline gradient send",
                        ),
                        gap=0.06,
                    )
                )
        if sharded:
            step_items += _sharded_step(world, hidden)
        elif dcomm.nranks > 1:
            for i, count in enumerate(buckets):
                step_items.append(
                    Item(
                        "op",
                        _coll(
                            dcomm,
                            "AllReduce",
                            count,
                            FLOAT32,
                            slot=f"b{i}",
                            dur=0.02,
                            label="DDP gradient all-reduce",
                        ),
                        gap=0.08 if i == 0 else 0.01,
                    )
                )
        step_items.append(
            Item(
                "op",
                _coll(
                    world,
                    "AllReduce",
                    1,
                    FLOAT32,
                    slot="loss",
                    dur=0.001,
                    label="loss all-reduce for logging",
                ),
                gap=0.01,
            )
        )
        # Spread the rest of the step's compute over the items so that a step takes about step_time.
        spent = sum(i.gap for i in step_items)
        for it in step_items:
            if it.op and it.op.name == "AllReduce" and it.op.count > 1 and it.op.comm == dcomm.index:
                it.gap += max(0.0, step_time - spent)
                break
        else:
            step_items[0].gap += max(0.0, step_time - spent)
        shape.items[rank] = step_items
        for s in range(steps):
            for it in step_items:
                prog.append(replace(it, step=s, op=it.op))
            prog.append(Item("sync", gap=0.002, step=s))
        prog.append(
            Item(
                "op",
                _coll(world, "AllReduce", 1, FLOAT32, slot="barrier", dur=0.001, label="barrier before exit"),
                gap=0.2,
            )
        )
        prog.append(Item("sync", gap=0.01))
        prog.append(Item("exit", gap=0.1))
        programs[rank] = prog
    return programs, shape


SHARDED_LAYERS = 4


def _sharded_step(world: Communicator, hidden: int) -> list[Item]:
    """A fully sharded data-parallel step on the world communicator: each layer's parameters gathered
    (AllGather) before its forward, again before its backward, and its gradients reduce-scattered, so
    AllGather, ReduceScatter and AllReduce calls alternate op by op."""
    shard = hidden * hidden // world.nranks
    items: list[Item] = []
    for layer in range(SHARDED_LAYERS):
        op = _coll(world, "AllGather", shard, BF16, slot=f"ag{layer}", dur=0.004, label="FSDP forward gather")
        items.append(Item("op", op, gap=0.03))
    for layer in reversed(range(SHARDED_LAYERS)):
        gather = _coll(
            world, "AllGather", shard, BF16, slot=f"ag{layer}", dur=0.004, label="FSDP backward gather"
        )
        items.append(Item("op", gather, gap=0.02))
        grads = _coll(
            world,
            "ReduceScatter",
            shard,
            FLOAT32,
            slot=f"rs{layer}",
            dur=0.006,
            label="FSDP gradient reduce-scatter",
        )
        items.append(Item("op", grads, gap=0.04))
        norm = _coll(
            world, "AllReduce", 1, FLOAT32, slot="norm", dur=0.001, label="FSDP gradient-norm all-reduce"
        )
        items.append(Item("op", norm, gap=0.005))
    return items


def insert_inits(programs: dict[int, list[Item]], cluster: Cluster, eager: set[int]) -> None:
    """Put each communicator's init where PyTorch creates it: up front when eager, else before first use."""
    for rank, prog in programs.items():
        out: list[Item] = []
        ready: set[int] = set()
        for c in cluster.comms_of(rank):
            if c.index in eager:
                out.append(Item("init", comm=c.index, gap=0.3 if c.index == 0 else 0.05))
                ready.add(c.index)
        for it in prog:
            if it.kind == "op" and it.op and it.op.comm not in ready:
                out.append(Item("init", comm=it.op.comm, gap=0.01, step=it.step))
                ready.add(it.op.comm)
            out.append(it)
        programs[rank] = out


def ops_of(prog: list[Item], comm: int | None = None) -> list[int]:
    """Indices of the op items of a program (optionally only those on one communicator)."""
    return [
        i for i, it in enumerate(prog) if it.kind == "op" and it.op and (comm is None or it.op.comm == comm)
    ]
