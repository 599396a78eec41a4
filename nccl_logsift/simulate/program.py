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


def _op(
    comm: Communicator,
    name: str,
    count: int,
    dtype: int,
    gap: float,
    dur: float,
    slot: str,
    label: str,
    root: int = 0,
) -> Item:
    """A collective of the program, ``gap`` host seconds after the item before it."""
    return Item("op", _coll(comm, name, count, dtype, root=root, slot=slot, dur=dur, label=label), gap=gap)


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
        prog.append(_op(world, "AllGather", 1, INT64, 1.5, 0.001, "shape", "DDP parameter-shape check"))
        for i, count in enumerate(buckets[:2]):
            prog.append(_op(dcomm, "Broadcast", count, FLOAT32, 0.01, 0.01, f"b{i}", "DDP weight broadcast"))
        prog.append(Item("sync", gap=0.05))
        stage = (rank // (par.tp * par.dp)) if par.pp > 1 else 0
        width = par.tp * par.dp  # ranks per pipeline stage
        before = p2p[(rank - width, rank)] if par.pp > 1 and stage > 0 else None
        after = p2p[(rank, rank + width)] if par.pp > 1 and stage < par.pp - 1 else None
        tp = comm_of[("tp", rank)] if par.tp > 1 else None
        activation, tp_count = seq_tokens * hidden // 4, seq_tokens * hidden // 2
        step_items: list[Item] = []
        for _ in range(micro):  # forward: activations in, the tensor-parallel layers, activations out
            if before is not None:
                step_items.append(
                    _op(before, "Recv", activation, BF16, 0.01, 0.004, "act", "pipeline activation recv")
                )
            if tp is not None:
                label = "tensor-parallel forward all-reduce"
                step_items += [
                    _op(tp, "AllReduce", tp_count, BF16, 0.04, 0.003, "tpf", label) for _ in range(tp_layers)
                ]
            if after is not None:
                label = "pipeline activation send"
                step_items.append(_op(after, "Send", activation, BF16, 0.05, 0.004, "act", label, root=1))
        for _ in range(micro):  # backward: gradients the other way
            if after is not None:
                label = "pipeline gradient recv"
                step_items.append(_op(after, "Recv", activation, BF16, 0.02, 0.004, "grad", label, root=1))
            if tp is not None:
                label = "tensor-parallel backward all-reduce"
                step_items += [
                    _op(tp, "AllReduce", tp_count, BF16, 0.06, 0.003, "tpb", label) for _ in range(tp_layers)
                ]
            if before is not None:
                step_items.append(
                    _op(before, "Send", activation, BF16, 0.06, 0.004, "grad", "pipeline gradient send")
                )
        if sharded:
            step_items += _sharded_step(world, hidden)
        elif dcomm.nranks > 1:
            for i, count in enumerate(buckets):
                gap = 0.08 if i == 0 else 0.01
                step_items.append(
                    _op(dcomm, "AllReduce", count, FLOAT32, gap, 0.02, f"b{i}", "DDP gradient all-reduce")
                )
        step_items.append(
            _op(world, "AllReduce", 1, FLOAT32, 0.01, 0.001, "loss", "loss all-reduce for logging")
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
        prog.append(_op(world, "AllReduce", 1, FLOAT32, 0.2, 0.001, "barrier", "barrier before exit"))
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
    items = [
        _op(world, "AllGather", shard, BF16, 0.03, 0.004, f"ag{layer}", "FSDP forward gather")
        for layer in range(SHARDED_LAYERS)
    ]
    for layer in reversed(range(SHARDED_LAYERS)):
        items += [
            _op(world, "AllGather", shard, BF16, 0.02, 0.004, f"ag{layer}", "FSDP backward gather"),
            _op(
                world,
                "ReduceScatter",
                shard,
                FLOAT32,
                0.04,
                0.006,
                f"rs{layer}",
                "FSDP gradient reduce-scatter",
            ),
            _op(world, "AllReduce", 1, FLOAT32, 0.005, 0.001, "norm", "FSDP gradient-norm all-reduce"),
        ]
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
