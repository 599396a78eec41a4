"""init-hang: some ranks never join; the others wait in init forever (or in the store barrier, PyTorch <= 2.0).

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
    job.fault("init_incomplete", True, missing, comm=world,
              detail=f"{len(missing)} of {job.ranks} ranks never reached init_process_group / ncclCommInitRank")
    if job.torch.store_barrier:
        job.fault("process_exit", False, joined, detail="the ranks that joined timed out in the store-based barrier and exited")
    else:
        job.fault("init_incomplete", False, joined, comm=world,
                  detail="the ranks that joined wait in NCCL bootstrap for the missing ones (Init START without COMPLETE)")


SCENARIO = Scenario("init-hang", "some ranks never join: the others wait in communicator init (or the store barrier)",
                    inject, truth, trains=False)
