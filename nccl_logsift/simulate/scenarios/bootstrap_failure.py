"""bootstrap-failure: the ranks of one node cannot bootstrap: no usable interface, or connection refused.

``no_interface``: the job sets NCCL_SOCKET_IFNAME to the interface name of most nodes; one node names
it differently, so NCCL finds no interface there ("Bootstrap : no socket interface found").
``refused``: a firewall on one node rejects the bootstrap connections to the root; NCCL retries, then
gives up. The failing ranks raise a DistBackendError; the others stay in init.
"""

from nccl_logsift.simulate.scenarios import Scenario


def setup(job) -> None:
    hosts = job.cluster.hosts
    bad = hosts[job.rng.randrange(1, len(hosts))] if len(hosts) > 1 else hosts[0]
    variant = job.rng.choice(("no_interface", "refused")) if len(hosts) > 1 else "no_interface"
    job.notes.update(bad_host=bad.index, variant=variant)
    if variant == "no_interface":
        wanted = hosts[0].ifname
        for h in hosts:
            job.env.setdefault(h.index, []).append(f"NCCL_SOCKET_IFNAME set by environment to {wanted}")
        bad.ifname = wanted.replace("0", "1", 1) if "0" in wanted else wanted + "1"


def inject(job) -> None:
    bad = job.cluster.hosts[job.notes["bad_host"]]
    world = job.cluster.world
    ranks = [p.rank for p in job.cluster.procs if p.host is bad]
    kind = "no_interface" if job.notes["variant"] == "no_interface" else "connect_refused"
    root = job.cluster.hosts[0]
    addr = f"{root.ip}<{job.rng.randrange(30000, 60000)}>"
    job.notes["connect_addr"] = dict.fromkeys(ranks, addr)
    for r in ranks:
        job.faults.init_fail[(r, world.index)] = kind
    job.notes["failing"] = ranks


def truth(job, timeline) -> None:
    failing = job.notes["failing"]
    world = job.cluster.world
    bad = job.cluster.hosts[job.notes["bad_host"]]
    if job.notes["variant"] == "no_interface":
        detail = f"NCCL_SOCKET_IFNAME matches no interface on {bad.name} (it is named {bad.ifname} there)"
    else:
        detail = f"bootstrap connections from {bad.name} to the root are refused"
    job.fault("bootstrap_failure", True, failing, comm=world, detail=detail)
    others = [
        run.rank for run in timeline.runs if run.rank not in failing and any(i.pos == 0 for i in run.issues)
    ]
    if others:
        job.fault(
            "init_incomplete", False, others, comm=world, detail="the other ranks wait in communicator init"
        )
    job.fault("process_exit", False, failing, detail="the failing ranks raise DistBackendError and exit")


SCENARIO = Scenario(
    "bootstrap-failure",
    "one node cannot bootstrap (no matching interface / connection refused)",
    inject,
    truth,
    setup=setup,
    min_nodes=2,
    trains=False,
)
