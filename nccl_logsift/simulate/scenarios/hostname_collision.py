"""hostname-collision: two hosts share a host name, so NCCL treats them as one node.

Their ranks report one node (``nNodes`` too small, ``localRanks`` doubled) and connect across the
two machines with intra-node transports (P2P) between ranks whose bootstrap IPs differ
(nccl-log-grammar.md §9.6 f). Those connections cannot work: the first collective never completes.
The second host has a different PCI layout, so NCCL's duplicate-GPU check does not fire.
"""

from nccl_logsift.simulate.scenarios import Scenario, consequences


def setup(job) -> None:
    hosts = job.cluster.hosts
    a, b = (hosts[1], hosts[2]) if len(hosts) > 2 else (hosts[0], hosts[1])
    b.name = a.name
    b.bus_ids = [f"{int(x, 16) + 0x1000:x}" for x in a.bus_ids]
    for p in job.cluster.procs:
        if p.host is b:
            p.bus = b.bus_ids[p.local_rank]
    job.notes["pair"] = (a.index, b.index)


def inject(job) -> None:
    a, b = (job.cluster.hosts[i] for i in job.notes["pair"])
    for comm in job.cluster.comms:
        hosts = {job.cluster.procs[r].host.index for r in comm.ranks}
        if a.index in hosts and b.index in hosts:
            job.faults.dead_comms.add(comm.index)


def truth(job, timeline) -> None:
    a, b = (job.cluster.hosts[i] for i in job.notes["pair"])
    ranks = [p.rank for p in job.cluster.procs if p.host.index in (a.index, b.index)]
    job.fault(
        "host_collision",
        True,
        ranks,
        comm=job.cluster.world,
        detail=f"two machines ({a.ip} and {b.ip}) are both named {a.name}; NCCL joins them into one node",
    )
    consequences(job, timeline, ranks)


SCENARIO = Scenario(
    "hostname-collision",
    "two hosts share a host name: intra-node transports between different IPs, then a hang",
    inject,
    truth,
    setup=setup,
    min_nodes=2,
    trains=False,
)
