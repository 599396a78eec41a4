"""pp-deadlock: two pipeline stages both send first; neither receives (send/recv order bug).

The last stage's schedule sends its first gradient before receiving the first activation, while the
stage before it is sending that activation: both block in Send on their 2-rank communicator, and the
rest of the pipeline waits behind them.
"""

from nccl_logsift.simulate.scenarios import Scenario, consequences, fault_step


def inject(job) -> None:
    par = job.cluster.parallel
    step = fault_step(job)
    last = [r for r in range(job.ranks) if r // (par.tp * par.dp) == par.pp - 1]
    rank = job.pick(last)
    comm = job.comm("p2p", rank)
    items = job.step_items(rank, step, comm.index)
    prog = job.programs[rank]
    recv = next(i for i in items if prog[i].op.name == "Recv")
    send = next(i for i in items if prog[i].op.name == "Send")
    moved = prog.pop(send)
    prog.insert(recv, moved)
    job.notes.update(culprit=rank, index=recv, comm=comm.index, peer=comm.ranks[0])


def truth(job, timeline) -> None:
    rank = job.notes["culprit"]
    comm = job.cluster.comms[job.notes["comm"]]
    job.fault(
        "collective_mismatch",
        True,
        [rank],
        comm=comm,
        seq=job.position_of(timeline, rank, job.notes["index"]),
        op="Send",
        detail=f"pipeline rank {rank} calls Send where it should Recv from rank {job.notes['peer']}, "
        "which is sending too: both block",
    )
    consequences(job, timeline, [rank])


SCENARIO = Scenario(
    "pp-deadlock", "pipeline stages both send first: send/recv deadlock", inject, truth, needs_pp=True
)
