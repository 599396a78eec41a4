"""rank-stall: one rank stops before a collective (stuck data loader, slow checkpoint I/O); the others time
out.

The stalled rank issues nothing more: its COLL lines end one operation short on the communicator
where its peers wait, and it prints no watchdog timeout of its own (its operations all completed).
Every peer that waits on it — directly or through another group — times out and aborts.
"""

from nccl_logsift.simulate.program import Item
from nccl_logsift.simulate.scenarios import Scenario, culprit_fault, fault_step, first_op

REASONS = (
    "its data loader worker hung reading a shard",
    "it was blocked writing a checkpoint shard to shared storage",
)


def inject(job) -> None:
    rank = job.pick(list(range(1, job.ranks)))
    step = fault_step(job)
    index = first_op(job, rank, step)
    job.insert(rank, index, Item("stall", gap=job.rng.uniform(0.2, 1.5), step=step))
    job.notes.update(culprit=rank, index=index + 1, reason=job.rng.choice(REASONS))


def truth(job, timeline) -> None:
    rank, reason = job.notes["culprit"], job.notes["reason"]
    culprit_fault(
        job,
        timeline,
        "rank_behind",
        lambda op, comm, seq: f"rank {rank} never called {op} #{seq} on the {comm} communicator: {reason}",
    )


SCENARIO = Scenario(
    "rank-stall",
    "one rank stops before a collective (data loader / checkpoint I/O); the others time out",
    inject,
    truth,
)
