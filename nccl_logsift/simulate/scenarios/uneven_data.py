"""uneven-data: some ranks run out of data early, leave the training loop and exit; the rest hang.

With data parallelism every rank of one data-parallel replica reads the same shard, so all of them
stop (a whole tensor/pipeline group); in plain DDP one or two ranks stop. They print that their
shard is exhausted, destroy their communicators and exit 0; the others wait in the next collective.
"""

from nccl_logsift.simulate.program import Item
from nccl_logsift.simulate.scenarios import Scenario, consequences, fault_step, first_op


def inject(job) -> None:
    par = job.cluster.parallel
    step = fault_step(job)
    if par.tp == 1 and par.pp == 1:
        early = sorted(job.rng.sample(range(1, job.ranks), min(job.ranks - 1, job.rng.choice((1, 2)))))
    else:
        d = job.rng.randrange(1, par.dp) if par.dp > 1 else 0
        early = [r for r in range(job.ranks) if (r // par.tp) % par.dp == d]
    for rank in early:
        index = first_op(job, rank, step)
        text = f"[rank {rank}] data shard exhausted after {step} steps; leaving the training loop"
        job.truncate(
            rank,
            index,
            Item("print", gap=job.rng.uniform(0.05, 0.3), step=step, text=text),
            Item("exit", gap=0.5),
        )
    job.notes.update(early=early, step=step)


def truth(job, timeline) -> None:
    early = job.notes["early"]
    rank = early[0]
    comm = job.data_comm(rank)
    waiting = [r for r in comm.ranks if r not in early]
    seq = job.next_pos(timeline, waiting[0] if waiting else rank, comm)
    seq = min(seq, job.next_pos(timeline, rank, comm))
    job.fault(
        "rank_behind",
        True,
        early,
        comm=comm,
        seq=seq,
        op="AllReduce" if comm.kind != "p2p" else None,
        detail=f"rank(s) {', '.join(map(str, early))} ran out of data "
        f"after step {job.notes['step']} and exited; "
        "their peers wait for them in the next collective",
    )
    consequences(job, timeline, early)


SCENARIO = Scenario(
    "uneven-data", "some ranks run out of data and stop early; the others wait for them", inject, truth
)
