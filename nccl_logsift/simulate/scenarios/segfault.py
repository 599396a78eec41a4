"""segfault: one rank dies of SIGSEGV mid-training; torchrun reports a ChildFailedError (exitcode -11).

Under srun the task is reported as ``Segmentation fault (core dumped)`` and the survivors time out;
torchrun and mpirun stop everyone else right away.
"""

from nccl_logsift.simulate.program import Item
from nccl_logsift.simulate.scenarios import Scenario, culprit_fault, fault_step, first_op


def inject(job) -> None:
    rank = job.pick(list(range(job.ranks)))
    step = fault_step(job)
    index = first_op(job, rank, step)
    job.insert(rank, index, Item("crash", gap=job.rng.uniform(0.05, 0.4), step=step, signal=11))
    job.notes.update(culprit=rank, index=index + 1)


def truth(job, timeline) -> None:
    rank = job.notes["culprit"]
    culprit_fault(
        job,
        timeline,
        "process_exit",
        lambda op, comm, seq: f"rank {rank} was killed by SIGSEGV (exit code -11) before {op}",
    )


SCENARIO = Scenario(
    "segfault", "a rank dies of SIGSEGV; torchrun prints a ChildFailedError summary", inject, truth
)
