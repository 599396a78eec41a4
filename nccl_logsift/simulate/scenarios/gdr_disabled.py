"""gdr-disabled: one node uses IB without GPUDirect RDMA (nvidia-peermem not loaded): data staged through host
memory.

Its ranks' NET transport lines lack the ``/GDRDMA`` suffix while the other nodes' have it
(nccl-log-grammar.md §4.3-4.4).
"""

from nccl_logsift.simulate.scenarios import Scenario


def setup(job) -> None:
    hosts = job.cluster.hosts
    bad = hosts[job.rng.randrange(len(hosts))]
    bad.gdr = False
    job.notes["bad_host"] = bad.index


def inject(job) -> None:
    pass


def truth(job, timeline) -> None:
    bad = job.cluster.hosts[job.notes["bad_host"]]
    ranks = [p.rank for p in job.cluster.procs if p.host is bad]
    # The job works, its traffic staged through host memory: a warning and no root cause (severity policy).
    job.fault(
        "transport_fallback",
        False,
        ranks,
        comm=job.cluster.world,
        severity="warning",
        detail=f"NET/IB without GPUDirect RDMA on {bad.name} (nvidia-peermem not loaded)",
    )


SCENARIO = Scenario(
    "gdr-disabled",
    "one node uses IB without GPUDirect RDMA (no /GDRDMA on its NET lines)",
    inject,
    truth,
    setup=setup,
    min_nodes=2,
)
