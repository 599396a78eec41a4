"""debug-mismatch: a collective mismatch that TORCH_DISTRIBUTED_DEBUG=DETAIL catches before NCCL runs it.

With DETAIL, PyTorch wraps each process group in a ProcessGroupWrapper that all-gathers a fingerprint of
every collective (sequence number, op type, shapes, dtypes) over gloo first. At the position where one rank
calls another op (``op``), a smaller bucket (``shape``) or another dtype (``dtype``), every member raises
``RuntimeError: Detected mismatch between collectives on ranks. Rank R is running collective: …, but Rank K
is running collective: …`` naming the first rank whose fingerprint differs from its own, and exits 1; no NCCL
operation is issued at that position, so nothing hangs.
"""

from nccl_logsift.simulate.program import BF16, FLOAT32, INT64, Item
from nccl_logsift.simulate.scenarios import Scenario, fault_step

DTYPE = {FLOAT32: "Float", BF16: "BFloat16", INT64: "Long"}


def inject(job) -> None:
    world = job.cluster.world
    step = fault_step(job)
    rank = job.pick(list(range(job.ranks)))
    # The check runs on every collective of the group; the world group holds every rank: all of them report.
    candidates = [
        i for i in job.step_items(rank, step, world.index) if job.programs[rank][i].op.name == "AllReduce"
    ]
    index = job.rng.choice(candidates)
    op = job.programs[rank][index].op
    seq = 1 + sum(1 for it in job.programs[rank][:index] if it.kind == "op" and it.op.comm == world.index)
    usual = {"seq": seq, "op": op.torch_op, "shape": [op.count], "dtype": DTYPE[op.dtype]}
    variant = job.rng.choice(("op", "shape", "dtype"))
    if variant == "op":
        odd = {**usual, "op": "BROADCAST", "shape": [1], "dtype": "Long"}
        call, detail = (
            "dist.broadcast(stop_flag, src=0)",
            f"rank {rank} broadcasts a flag where the others all-reduce",
        )
    elif variant == "shape":
        odd = {**usual, "shape": [max(1, op.count - job.rng.choice((1024, 4096, 65536)))]}
        call, detail = (
            "dist.all_reduce(bucket)",
            f"rank {rank} all-reduces {odd['shape'][0]} elements where the others all-reduce {op.count}",
        )
    else:
        odd = {**usual, "dtype": "BFloat16" if usual["dtype"] != "BFloat16" else "Float"}
        call, detail = (
            "dist.all_reduce(bucket)",
            f"rank {rank} all-reduces {odd['dtype']} where the others all-reduce {usual['dtype']}",
        )
    prints = {r: odd if r == rank else usual for r in range(job.ranks)}
    reports = {}
    for r in range(job.ranks):
        # verify_tensors walks the gathered fingerprints in rank order and raises at the first that differs.
        peer = next(k for k in range(job.ranks) if prints[k] != prints[r])
        fn = "broadcast" if prints[r]["op"] == "BROADCAST" else "allreduce"
        reports[r] = {
            "rank": r,
            "peer": peer,
            "mine": prints[r],
            "other": prints[peer],
            "fn": fn,
            "call": call if r == rank else "dist.all_reduce(bucket)",
        }
    for r in range(job.ranks):
        at = next(
            i
            for i in job.step_items(r, step, world.index)
            if job.programs[r][i].op.comm == world.index
            and sum(1 for it in job.programs[r][:i] if it.kind == "op" and it.op.comm == world.index) + 1
            == seq
        )
        job.truncate(
            r,
            at,
            Item(
                "raise",
                gap=job.programs[r][at].gap,
                step=step,
                what={"kind": "fingerprint", "together": 0, "reports": reports},
            ),
        )
    job.notes.update(culprit=rank, seq=seq, detail=detail, op=odd["op"])


def truth(job, timeline) -> None:
    rank = job.notes["culprit"]
    culprits = [rank] if job.ranks > 2 else [0, 1]  # with two ranks neither side is the odd one out
    job.fault(
        "collective_mismatch",
        True,
        culprits,
        comm=job.cluster.world,
        seq=job.notes["seq"],
        op=job.notes["op"],
        detail=job.notes["detail"] + " (TORCH_DISTRIBUTED_DEBUG=DETAIL fingerprint check)",
    )
    raised = [run.rank for run in timeline.runs if run.end_kind == "raised"]
    job.fault(
        "process_exit",
        False,
        raised,
        detail="every rank raised RuntimeError from the fingerprint check and exited 1",
    )


SCENARIO = Scenario(
    "debug-mismatch",
    "TORCH_DISTRIBUTED_DEBUG=DETAIL reports a collective fingerprint mismatch",
    inject,
    truth,
)
