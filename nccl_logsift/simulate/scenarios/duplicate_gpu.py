"""duplicate-gpu: two ranks of one node select the same GPU (a LOCAL_RANK mix-up); NCCL refuses the
communicator.

Both print ``Duplicate GPU detected : rank a and rank b both on CUDA device <busId>`` and the
``-> 5`` (invalid usage) chain, then raise DistBackendError; the other ranks stay in init.
"""

from nccl_logsift.simulate.scenarios import Scenario


def setup(job) -> None:
    host = job.cluster.hosts[job.rng.randrange(len(job.cluster.hosts))]
    procs = [p for p in job.cluster.procs if p.host is host]
    a = procs[0]
    b = procs[job.rng.randrange(1, len(procs))]
    b.cuda_dev, b.nvml, b.bus, b.nic = a.cuda_dev, a.nvml, a.bus, a.nic
    job.notes.update(pair=(a.rank, b.rank), duplicate_of={a.rank: b.rank, b.rank: a.rank})


def inject(job) -> None:
    world = job.cluster.world
    for r in job.notes["pair"]:
        job.faults.init_fail[(r, world.index)] = "duplicate_gpu"


def truth(job, timeline) -> None:
    a, b = job.notes["pair"]
    world = job.cluster.world
    p = job.cluster.procs[a]
    job.fault(
        "duplicate_gpu",
        True,
        [a, b],
        comm=world,
        detail=f"ranks {a} and {b} both use GPU {p.bus} on {p.host.name}",
    )
    job.fault("process_exit", False, [a, b], detail="both raise DistBackendError (invalid usage) and exit")
    others = [r.rank for r in timeline.runs if r.rank not in (a, b)]
    job.fault(
        "init_incomplete", False, others, comm=world, detail="the other ranks wait in communicator init"
    )


SCENARIO = Scenario(
    "duplicate-gpu",
    "two ranks of a node use the same GPU; NCCL refuses to create the communicator",
    inject,
    truth,
    setup=setup,
    min_gpus=2,
    trains=False,
)
