"""veth-interface: NCCL bootstraps over a container veth interface on one node; peers cannot reach it.

NCCL_SOCKET_IFNAME is unset and one node lists a ``veth…`` interface (a container runtime's bridge
side) first, so its ranks advertise 172.18.0.1. The rank that must connect to that node's first rank
in the bootstrap ring times out; the job never finishes init.
"""

from nccl_logsift.simulate.scenarios import Scenario


def setup(job) -> None:
    hosts = job.cluster.hosts
    bad = hosts[job.rng.randrange(1, len(hosts))]
    veth = "veth" + "".join(job.rng.choice("0123456789abcdef") for _ in range(7))
    bad.extra_ifs = [(veth, "172.18.0.1")]
    job.notes.update(bad_host=bad.index, veth=veth)


def inject(job) -> None:
    bad = job.cluster.hosts[job.notes["bad_host"]]
    first = min(p.rank for p in job.cluster.procs if p.host is bad)
    victim = first - 1
    world = job.cluster.world
    job.faults.init_fail[(victim, world.index)] = "connect_timeout"
    job.notes["connect_addr"] = {victim: f"172.18.0.1<{job.rng.randrange(30000, 60000)}>"}
    job.notes.update(victim=victim, culprits=[p.rank for p in job.cluster.procs if p.host is bad])


def truth(job, timeline) -> None:
    bad = job.cluster.hosts[job.notes["bad_host"]]
    world = job.cluster.world
    culprits, victim = job.notes["culprits"], job.notes["victim"]
    job.fault(
        "interface_misconfig",
        True,
        culprits,
        comm=world,
        detail=f"NCCL picked {job.notes['veth']} (172.18.0.1) on {bad.name} for bootstrap; "
        "other nodes cannot reach it",
    )
    job.fault(
        "bootstrap_failure",
        False,
        [victim],
        comm=world,
        detail=f"rank {victim} timed out connecting to 172.18.0.1",
    )
    others = [r.rank for r in timeline.runs if r.rank != victim and any(i.pos == 0 for i in r.issues)]
    if others:
        job.fault(
            "init_incomplete", False, others, comm=world, detail="the other ranks wait in communicator init"
        )


SCENARIO = Scenario(
    "veth-interface",
    "NCCL bootstraps over a veth/docker interface on one node; peers cannot reach it",
    inject,
    truth,
    setup=setup,
    min_nodes=2,
    trains=False,
)
