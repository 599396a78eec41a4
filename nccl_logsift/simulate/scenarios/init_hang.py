"""init-hang: some ranks never join; the others wait in init forever (or in the store barrier,
PyTorch <= 2.0).

With lazy communicator creation (PyTorch 2.1/2.2 without ``device_id``) the missing rank may be rank 0, held
up after ``init_process_group``: the others then give up waiting for its ncclUniqueId in the c10d store.

The missing ranks (every rank of the last node, or a single rank) are stuck before
``init_process_group`` — a node whose GPU driver hangs in CUDA init, or a rank stuck loading data —
and print nothing NCCL. With PyTorch 1.13/2.0 the others log the store-based barrier
(``world_size`` vs ``worker_count``) and give up at the timeout; later releases create the NCCL
communicator, so their Init START lines (NCCL 2.18.3+) have no Init COMPLETE.
"""

from nccl_logsift.simulate.program import Item
from nccl_logsift.simulate.scenarios import Scenario


def inject(job) -> None:
    last = job.cluster.hosts[-1]
    world = job.cluster.world
    if not world.eager and not job.torch.store_barrier and job.rng.random() < 0.5:
        # Rank 0 is held up after init_process_group (a dataset download, a checkpoint conversion on rank 0
        # only): the others' first collective creates the communicator lazily and waits for rank 0's
        # ncclUniqueId in the c10d store until the store timeout.
        job.programs[0] = [Item("stall", gap=job.rng.uniform(0.5, 2.0))]
        for rank in range(1, job.ranks):
            job.faults.init_fail[(rank, world.index)] = "unique_id"
        job.notes.update(missing=[0], joined=list(range(1, job.ranks)), unique_id=True)
        return
    if len(job.cluster.hosts) > 1 and job.rng.random() < 0.6:
        missing = [p.rank for p in job.cluster.procs if p.host is last]
    else:
        missing = [job.pick(list(range(1, job.ranks)))]
    for rank in missing:
        job.programs[rank] = [Item("stall", gap=job.rng.uniform(0.5, 2.0))]
    joined = [r for r in range(job.ranks) if r not in missing]
    if job.torch.store_barrier:
        for rank in joined:
            job.programs[rank] = [Item("store_wait", gap=job.rng.uniform(0.5, 1.5))]
        job.store_wait = set(joined)
    job.notes.update(missing=missing, joined=joined)


def truth(job, timeline) -> None:
    missing, joined = job.notes["missing"], job.notes["joined"]
    world = job.cluster.world
    if job.notes.get("unique_id"):
        job.fault(
            "init_incomplete",
            True,
            missing,
            comm=world,
            detail="rank 0 never created the NCCL communicator, so it never published the ncclUniqueId",
        )
        failed = [run.rank for run in timeline.runs if run.end_kind == "init_fail"]
        job.fault(
            "bootstrap_failure",
            False,
            failed,
            comm=world,
            detail="the other ranks gave up waiting for rank 0's ncclUniqueId in the c10d store",
        )
        job.fault("process_exit", False, failed, detail="the ranks that gave up raised DistBackendError")
        return
    job.fault(
        "init_incomplete",
        True,
        missing,
        comm=world,
        detail=f"{len(missing)} of {job.ranks} ranks never reached init_process_group / ncclCommInitRank",
    )
    if job.torch.store_barrier:
        job.fault(
            "process_exit",
            False,
            joined,
            detail="the ranks that joined timed out in the store-based barrier and exited",
        )
    else:
        job.fault(
            "init_incomplete",
            False,
            joined,
            comm=world,
            detail="the ranks that joined wait in NCCL bootstrap for the missing ones "
            "(Init START without COMPLETE)",
        )


SCENARIO = Scenario(
    "init-hang",
    "some ranks never join: the others wait in communicator init (or the store barrier)",
    inject,
    truth,
    trains=False,
)
