"""store-host-absent: rank 0 never starts, so the c10d store the others must join never listens.

``init_process_group`` (env:// or tcp://) creates its TCPStore in rank 0, on MASTER_ADDR:MASTER_PORT; every
other rank connects to it as a client. When rank 0 never gets there (its node never came up, or its process
was never started), the clients retry until their timeout, log socket.cpp's ``[c10d] The client socket has
timed out after T while trying to connect to (host, port).`` and raise ``DistNetworkError``. Rank 0 prints
nothing. When its whole node is missing, no line of the logs comes from the store's host either.

The culprit is rank 0 (and, when nothing else of it logged, its host), named by absence; the timeouts and
the exits are consequences. The logs cannot say which other ranks of the missing node there were, so the
truth names rank 0 only. With the torchrun layout the workers' own store timeouts are shown (as with
``TORCHELASTIC_USE_AGENT_STORE=0``), not the agents' rendezvous.
"""

from nccl_logsift.simulate.program import Item
from nccl_logsift.simulate.scenarios import Scenario

PORT = 29500
WAITED = ("1800000ms", "1800s", "600s")  # the connect timeout as fmt prints the duration


def inject(job) -> None:
    first = job.cluster.hosts[0]
    node_down = len(job.cluster.hosts) > 1 and job.rng.random() < 0.6
    missing = [p.rank for p in job.cluster.procs if p.host is first] if node_down else [0]
    waited = job.rng.choice(WAITED)
    for rank in missing:
        job.programs[rank] = [Item("vanish", gap=0.0)]
    job.never_started = set(missing)
    waiting = [r for r in range(job.ranks) if r not in missing]
    for rank in waiting:
        job.programs[rank] = [
            Item(
                "raise",
                gap=job.rng.uniform(30.0, 31.0),
                what={"kind": "store_timeout", "host": first.name, "port": PORT, "waited": waited},
            )
        ]
    job.notes.update(missing=missing, waiting=waiting, store_host=first.name, node_down=node_down)


def truth(job, timeline) -> None:
    notes = job.notes
    job.fault(
        "init_incomplete",
        True,
        [0],
        detail=f"rank 0 never started, so its c10d store on {notes['store_host']}:{PORT} never listened"
        + (f"; nothing of {notes['store_host']} started" if notes["node_down"] else ""),
    )
    job.fault(
        "bootstrap_failure",
        False,
        notes["waiting"],
        detail="the other ranks timed out connecting to the c10d store",
    )
    job.fault(
        "process_exit",
        False,
        notes["waiting"],
        detail="the ranks that timed out raised DistNetworkError and exited",
    )


SCENARIO = Scenario(
    "store-host-absent",
    "rank 0 never starts; the others time out connecting to the c10d store it would host",
    inject,
    truth,
    trains=False,
)
