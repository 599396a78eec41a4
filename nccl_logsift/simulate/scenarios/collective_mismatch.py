"""collective-mismatch: at the same position one rank calls a different collective or a different count.

``count``: its gradient bucket is smaller (a parameter unused on that rank was left out);
``op``: it calls AllGather where the others call AllReduce (a code path that differs on that rank).
NCCL does not check (since 2.7.6, nccl-log-grammar.md §6.5); the communicator hangs at that position.
"""

from nccl_logsift.simulate.scenarios import Scenario, consequences, fault_step


def inject(job) -> None:
    rank = job.pick(list(range(job.ranks)))
    step = fault_step(job)
    comm = job.data_comm(rank)
    buckets = [
        i
        for i in job.step_items(rank, step, comm.index)
        if job.programs[rank][i].op.name == "AllReduce" and job.programs[rank][i].op.count > 1
    ]
    index = job.rng.choice(buckets)
    old = job.programs[rank][index].op
    variant = job.rng.choice(("count", "op"))
    if variant == "count":
        new = job.replace_op(rank, index, count=old.count - job.rng.choice((1024, 4096, 65536)))
        new = job.replace_op(rank, index, numel_in=new.count, numel_out=new.count)
        detail = f"rank {rank} all-reduces {new.count} elements where the others all-reduce {old.count}"
    else:
        per = old.count // comm.nranks
        new = job.replace_op(
            rank,
            index,
            name="AllGather",
            count=per,
            torch_op="_ALLGATHER_BASE",
            numel_in=per,
            numel_out=per * comm.nranks,
        )
        detail = f"rank {rank} calls AllGather where the others call AllReduce"
    job.notes.update(culprit=rank, index=index, detail=detail, comm=comm.index)


def truth(job, timeline) -> None:
    rank = job.notes["culprit"]
    comm = job.cluster.comms[job.notes["comm"]]
    index = job.notes["index"]
    job.fault(
        "collective_mismatch",
        True,
        [rank],
        comm=comm,
        seq=job.position_of(timeline, rank, index),
        op=job.programs[rank][index].op.name,
        detail=job.notes["detail"],
    )
    consequences(job, timeline, [rank])


SCENARIO = Scenario(
    "collective-mismatch",
    "one rank calls a different collective or count at the same position",
    inject,
    truth,
)
