"""The scenario catalogue: one small module per scenario, each a :class:`Scenario` named ``SCENARIO``.

A scenario can adjust the cluster before communicators exist (``setup``: a host without IB, a
duplicated host name…), edit the ranks' programs or inject faults (``inject``), and states what
happened once the engine has run (``truth``): the primary fault with its culprit ranks, then the
consequences (peers timing out, processes exiting) with ``primary=False``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nccl_logsift.simulate.engine import Timeline
    from nccl_logsift.simulate.job import Job


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    inject: Callable[[Job], None]
    truth: Callable[[Job, Timeline], None]
    setup: Callable[[Job], None] | None = None
    min_nodes: int = 1
    min_gpus: int = 1  # GPUs per node
    needs_pp: bool = False
    trains: bool = True  # the fault happens after training started (so --size can stream steps first)
    min_steps: int = 3
    min_nccl: str | None = None
    min_nccl_why: str = ""
    events: Callable[[Job, Timeline], None] | None = None  # adds lines once the engine ran (RAS reports)


_MODULES = (
    "healthy",
    "rank_stall",
    "extra_collective",
    "collective_mismatch",
    "uneven_data",
    "init_hang",
    "bootstrap_failure",
    "veth_interface",
    "ib_error",
    "socket_fallback",
    "gdr_disabled",
    "p2p_disabled",
    "duplicate_gpu",
    "hostname_collision",
    "cuda_oom",
    "segfault",
    "slow_rank",
    "pp_deadlock",
    "import_error",
    "node_death",
    "debug_mismatch",
    "gpu_fault",
    "nccl_tests_failure",
    "store_host_absent",
)


def _load() -> dict[str, Scenario]:
    found = {}
    for name in _MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        scenario: Scenario = module.SCENARIO
        found[scenario.name] = scenario
    return found


# ------------------------------------------------------------------------------ shared truth helpers
def culprit_fault(job: Job, timeline: Timeline, kind: str, detail: Callable[[str, str, int], str]) -> None:
    """The primary fault of the culprit the scenario noted (``notes``: culprit, index of its failing op), at
    the position it never reached on that op's communicator, then the peers' consequences. ``detail`` gets
    the op's name, the communicator's kind and that position."""
    rank = job.notes["culprit"]
    op = job.programs[rank][job.notes["index"]].op
    comm = job.cluster.comms[op.comm]
    seq = job.next_pos(timeline, rank, comm)
    job.fault(kind, True, [rank], comm=comm, seq=seq, op=op.name, detail=detail(op.name, comm.kind, seq))
    consequences(job, timeline, [rank])


def consequences(job: Job, timeline: Timeline, culprits: list[int]) -> None:
    """Peers whose watchdog fired, and processes that died of it, as non-primary faults."""
    timed_out = [run.rank for run in timeline.runs if run.watchdogs and run.end_kind == "watchdog"]
    if timed_out:
        first = timeline.runs[timed_out[0]].watchdogs[0]
        comm = next((c for c in job.cluster.comms if c.index == first.issue.comm), None)
        job.fault(
            "watchdog_timeout",
            False,
            timed_out,
            comm=comm,
            seq=first.issue.pos,
            op=first.issue.op.name if first.issue.op else None,
            detail=f"{len(timed_out)} rank(s) hit the {job.torch.timeout_ms // 1000} s "
            "ProcessGroupNCCL timeout and aborted",
        )


def fault_step(job: Job) -> int:
    """A training step in the second half of the run (never step 0: --size streams after it)."""
    return job.rng.randrange(max(1, job.steps // 2), job.steps)


def first_op(job: Job, rank: int, step: int, comm=None) -> int:
    """Program index of the first operation ``rank`` issues in ``step`` (optionally on one comm)."""
    found = job.step_items(rank, step, comm.index if comm is not None else None)
    if not found:
        raise ValueError(f"rank {rank} has no operation in step {step}")
    return found[0]


SCENARIOS: dict[str, Scenario] = _load()
