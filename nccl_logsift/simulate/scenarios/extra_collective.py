"""extra-collective: one rank issues a collective the others do not (a rank-0-only barrier), or skips one.

``extra``: rank 0 calls ``dist.barrier()`` inside an ``if rank == 0`` block (e.g. before saving a
checkpoint): its AllReduce of 1 element meets the others' gradient AllReduce at the same position.
``missing``: one rank skips the all-reduce of one gradient bucket (its parameter group is frozen
there), so its next call meets the others' call for the bucket it skipped. Either way the counts disagree and
every member of the communicator hangs there.
"""

from nccl_logsift.simulate.program import FLOAT32, Item, Op
from nccl_logsift.simulate.scenarios import Scenario, consequences, fault_step, first_op


def inject(job) -> None:
    step = fault_step(job)
    variant = job.rng.choice(("extra", "missing"))
    if variant == "extra":
        rank = 0
        comm = job.data_comm(rank)
        index = first_op(job, rank, step, comm)
        barrier = Op(
            comm.index,
            "AllReduce",
            1,
            FLOAT32,
            torch_op="ALLREDUCE",
            numel_in=1,
            numel_out=1,
            slot="barrier",
            dur=0.001,
            label="rank-0-only barrier",
        )
        job.insert(rank, index, Item("op", op=barrier, gap=job.rng.uniform(0.05, 0.4), step=step))
        detail = "rank 0 called dist.barrier() (AllReduce of 1 element) that no other rank called"
    else:
        rank = job.pick(list(range(1, job.ranks)))
        comm = job.data_comm(rank)
        # Skip the middle bucket: the next call (the last bucket, another size) is issued right away
        # and meets the others' middle bucket, so the mismatch is on record.
        buckets = [
            i for i in job.step_items(rank, step, comm.index) if job.programs[rank][i].op.slot.startswith("b")
        ]
        job.notes["skipped"] = job.programs[rank].pop(buckets[1])
        index = buckets[2] - 1
        detail = (
            f"rank {rank} skipped the all-reduce of a gradient bucket in step {step} "
            "(a parameter group frozen on that rank); "
            "its next all-reduce meets the others' skipped one"
        )
    job.notes.update(culprit=rank, index=index, variant=variant, detail=detail, comm=comm.index)


def truth(job, timeline) -> None:
    rank = job.notes["culprit"]
    comm = job.cluster.comms[job.notes["comm"]]
    index = job.notes["index"]
    seq = job.position_of(timeline, rank, index)
    op = job.programs[rank][index].op
    job.fault("collective_mismatch", True, [rank], comm=comm, seq=seq, op=op.name, detail=job.notes["detail"])
    consequences(job, timeline, [rank])


SCENARIO = Scenario(
    "extra-collective",
    "one rank issues an extra collective (a rank-0-only barrier) or misses one",
    inject,
    truth,
)
