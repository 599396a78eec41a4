"""node-death: a node goes away mid-training (power, kernel panic, a fabric cut); NCCL's RAS declares it dead.

Its processes stop inside a collective without a word: no exit line, no launcher report (the node's own
agent died with it). The collective never completes, so every other rank waits until its watchdog fires.
The job logs with ``NCCL_DEBUG_SUBSYS`` including RAS (NCCL 2.24.3+, nccl-log-grammar.md §6.7): the
processes whose RAS links led to the dead ones log keep-alive timeouts and ``RAS declaring peer ip<port> as
DEAD``, the others ``RAS handling deadPeer``. The culprit is the node RAS declares dead, not the ranks that
report it.
"""

from nccl_logsift.simulate.program import Item
from nccl_logsift.simulate.scenarios import Scenario, consequences, fault_step, first_op


def ras_peer(job, rank: int) -> str:
    """The RAS listening address of a process: its host's address and a port of its own."""
    p = job.cluster.procs[rank]
    return f"{p.host.ip}<{40000 + (p.pid * 7) % 20000}>"


def inject(job) -> None:
    dead = job.cluster.hosts[job.rng.randrange(1, len(job.cluster.hosts))]
    ranks = [p.rank for p in job.cluster.procs if p.host is dead]
    step = fault_step(job)
    for rank in ranks:
        index = first_op(job, rank, step)
        # Inside the step's first collective: issued, then the node is gone.
        job.insert(rank, index + 1, Item("vanish", gap=job.rng.uniform(0.0005, 0.002), step=step))
    job.notes.update(dead=dead.index, culprits=ranks)


def events(job, timeline) -> None:
    culprits = job.notes["culprits"]
    runs = timeline.runs
    t_dead = min(runs[r].end or 0.0 for r in culprits)
    n = job.ranks
    # RAS links form a ring over the processes: the neighbours of the dead block notice it first and tell
    # the others.
    watchers = sorted({(min(culprits) - 1) % n, (max(culprits) + 1) % n} - set(culprits))
    hashes = f"0x{job.rng.getrandbits(64):016x}"
    for rank in range(n):
        if rank in culprits:
            continue
        extra = runs[rank].extra
        for i, peer in enumerate(ras_peer(job, r) for r in culprits):
            t = t_dead + i * 0.01
            if rank in watchers:
                extra.append(
                    (
                        t + 5.0,
                        "ras",
                        {"text": f"RAS keep-alive timeout warning (5s) on socket connection with {peer}"},
                    )
                )
                extra.append(
                    (
                        t + 20.0,
                        "ras",
                        {"text": f"RAS keep-alive timeout error (20s) on socket connection with {peer}"},
                    )
                )
                extra.append(
                    (
                        t + 20.2,
                        "ras",
                        {"text": f"RAS declaring peer {peer} as DEAD; rasDeadPeersHash {hashes}"},
                    )
                )
            else:
                extra.append(
                    (
                        t + 20.5 + job.rng.uniform(0.0, 0.2),
                        "ras",
                        {"text": f"RAS handling deadPeer (addr {peer})"},
                    )
                )
        extra.sort(key=lambda e: e[0])


def truth(job, timeline) -> None:
    culprits = job.notes["culprits"]
    host = job.cluster.hosts[job.notes["dead"]]
    job.fault(
        "process_exit",
        True,
        culprits,
        detail=f"{host.name} went away mid-training, no exit report from its processes; RAS saw them die",
    )
    consequences(job, timeline, culprits)


SCENARIO = Scenario(
    "node-death",
    "a node dies mid-training; NCCL's RAS declares its processes dead, the others time out",
    inject,
    truth,
    min_nodes=2,
    min_nccl="2.24.3",
    min_nccl_why="RAS appeared in NCCL 2.24.3",
    events=events,
)
