"""import-error: some ranks die at import; the others wait for them until a timeout or the launcher ends it.

A package is missing from one node's image (or one rank imports a module its node lacks): those ranks
print a ``ModuleNotFoundError`` traceback from the script's top level and exit with code 1 before any
distributed call. The ranks that started wait for them: with PyTorch 1.13/2.0 in the store-based barrier
of ``init_process_group`` until its timeout (``Timed out initializing process group in store based
barrier``), later in NCCL's bootstrap (Init START without COMPLETE). torchrun's agent stops them as soon
as it sees the failed worker. The exception is the root cause; the timeouts and the stopped ranks are
its consequences.
"""

from nccl_logsift.simulate.program import Item
from nccl_logsift.simulate.scenarios import Scenario

MODULES = ("apex", "flash_attn", "transformer_engine", "deepspeed")


def inject(job) -> None:
    last = job.cluster.hosts[-1]
    if len(job.cluster.hosts) > 1 and job.rng.random() < 0.5:
        missing = [p.rank for p in job.cluster.procs if p.host is last]
    else:
        missing = [job.pick(list(range(1, job.ranks)))]
    module = job.rng.choice(MODULES)
    for rank in missing:
        job.programs[rank] = [
            Item(
                "raise",
                gap=job.rng.uniform(0.2, 0.8),
                text=f"ModuleNotFoundError: No module named '{module}'",
            )
        ]
    joined = [r for r in range(job.ranks) if r not in missing]
    if job.torch.store_barrier:
        for rank in joined:
            job.programs[rank] = [Item("store_wait", gap=job.rng.uniform(1.0, 2.0))]
        job.store_wait = set(joined)
    job.notes.update(missing=missing, joined=joined, module=module)


def truth(job, timeline) -> None:
    missing, joined = job.notes["missing"], job.notes["joined"]
    world = job.cluster.world
    job.fault(
        "process_exit",
        True,
        missing,
        detail=f"rank(s) {missing} raised ModuleNotFoundError ({job.notes['module']}) at import, exit code 1",
    )
    runs = timeline.runs
    timed_out = [r for r in joined if runs[r].end_kind == "init_fail"]
    if timed_out:
        job.fault(
            "process_exit",
            False,
            timed_out,
            detail="the ranks that started timed out in the store-based barrier and exited",
        )
    waiting = [r for r in joined if any(i.pos == 0 for i in runs[r].issues)]
    if waiting:
        job.fault(
            "init_incomplete",
            False,
            waiting,
            comm=world,
            detail="the ranks that started wait in NCCL bootstrap for the dead ones (no Init COMPLETE)",
        )


SCENARIO = Scenario(
    "import-error",
    "some ranks die of an ImportError at startup; the others time out waiting for them",
    inject,
    truth,
    trains=False,
)
