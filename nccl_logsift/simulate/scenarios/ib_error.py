"""ib-error: an InfiniBand completion error on one link (retry exceeded: status 12, vendor err 129), then
timeouts.

The proxy thread of the sending rank logs ``NET/IB : Got completion from peer … error 12 … vendor
err 129`` and the ``-> N`` chain; PyTorch's watchdog finds the asynchronous NCCL error and aborts that
process. The operation never completes anywhere, so every other rank times out on it.
"""

from dataclasses import replace

from nccl_logsift.simulate.cluster import ring
from nccl_logsift.simulate.scenarios import Scenario, consequences, fault_step


def inject(job) -> None:
    step = fault_step(job)
    world = job.cluster.world
    comm = job.data_comm(0)
    if len(comm.nodes) < 2:
        comm = world
    order = ring(comm, 0)
    edges = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
    cross = [(a, b) for a, b in edges if job.host_of(comm.ranks[a]) != job.host_of(comm.ranks[b])]
    a, b = job.rng.choice(cross)
    rank, peer = comm.ranks[a], comm.ranks[b]
    buckets = [i for i in job.step_items(rank, step, comm.index) if job.programs[rank][i].op.count > 1]
    index = job.rng.choice(buckets or job.step_items(rank, step, comm.index))
    job.programs[rank][index] = replace(job.programs[rank][index], fail="net_error")
    job.faults.net_peer[rank] = peer
    job.notes.update(culprit=rank, peer=peer, index=index, comm=comm.index)


def truth(job, timeline) -> None:
    rank, peer = job.notes["culprit"], job.notes["peer"]
    comm = job.cluster.comms[job.notes["comm"]]
    p = job.cluster.procs[rank]
    job.fault(
        "net_error",
        True,
        [rank],
        comm=comm,
        seq=job.position_of(timeline, rank, job.notes["index"]),
        op=job.programs[rank][job.notes["index"]].op.name,
        detail="IB completion error (status 12 retry exceeded, vendor err 129) "
        f"on {p.host.nics[p.nic]} of {p.host.name} "
        f"sending to rank {peer} on {job.host_of(peer)}",
    )
    consequences(job, timeline, [rank])


SCENARIO = Scenario(
    "ib-error",
    "an IB completion error on one link (status 12, vendor err 129), followed by timeouts",
    inject,
    truth,
    min_nodes=2,
)
