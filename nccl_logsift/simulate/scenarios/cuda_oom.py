"""cuda-oom: one rank runs out of GPU memory while NCCL sets up its buffers; its peers see closed sockets.

The rank prints ``Cuda failure … 'out of memory'`` and the ``-> 1`` chain and raises DistBackendError.
Its bootstrap-ring neighbours then hit ``Connection closed by remote peer`` (``-> 6`` chains) and
fail too; the rest wait in init.
"""

from nccl_logsift.simulate.scenarios import Scenario


def inject(job) -> None:
    world = job.cluster.world
    rank = job.pick(list(range(job.ranks)))
    job.faults.init_fail[(rank, world.index)] = "oom"
    n = job.ranks
    peers = sorted({(rank - 1) % n, (rank + 1) % n} - {rank})
    job.faults.closed_peers[rank] = peers
    job.notes.update(culprit=rank, peers=peers)


def truth(job, timeline) -> None:
    rank, peers = job.notes["culprit"], job.notes["peers"]
    world = job.cluster.world
    job.fault(
        "cuda_error",
        True,
        [rank],
        comm=world,
        detail=f"CUDA out of memory on rank {rank} while NCCL allocated its buffers",
    )
    closed = [p for p in peers if timeline.runs[p].end_kind == "nccl_error"]
    if closed:
        job.fault(
            "net_error", False, closed, comm=world, detail=f"rank(s) {closed} saw rank {rank}'s sockets close"
        )
    job.fault(
        "process_exit",
        False,
        sorted([rank, *closed]),
        detail="the ranks that hit NCCL errors raised DistBackendError and exited",
    )


SCENARIO = Scenario(
    "cuda-oom",
    "one rank runs out of GPU memory during NCCL setup; peers see closed sockets",
    inject,
    truth,
    trains=False,
)
