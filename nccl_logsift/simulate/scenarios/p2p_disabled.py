"""p2p-disabled: GPUs of one node talk through shared memory instead of P2P (NCCL_P2P_DISABLE=1 left set).

Its intra-node transport lines say ``via SHM/direct/direct`` (``direct shared memory`` before 2.13)
where the other nodes say ``via P2P/…`` (nccl-log-grammar.md §4.4).
"""

from nccl_logsift.simulate.scenarios import Scenario


def setup(job) -> None:
    hosts = job.cluster.hosts
    bad = hosts[job.rng.randrange(len(hosts))]
    bad.p2p = False
    job.env.setdefault(bad.index, []).append("NCCL_P2P_DISABLE set by environment to 1.")
    job.notes["bad_host"] = bad.index


def inject(job) -> None:
    pass


def truth(job, timeline) -> None:
    bad = job.cluster.hosts[job.notes["bad_host"]]
    ranks = [p.rank for p in job.cluster.procs if p.host is bad]
    # The job works either way (no root cause). Set on every node it is the job's choice (info); left set on
    # one node of several it is a slip that makes that node the slow one (a warning).
    whole = len(job.cluster.hosts) == 1
    job.fault(
        "transport_fallback",
        False,
        ranks,
        comm=job.cluster.world,
        severity="info" if whole else "warning",
        detail=f"intra-node traffic on {bad.name} goes through SHM: NCCL_P2P_DISABLE=1 is set there",
    )


SCENARIO = Scenario(
    "p2p-disabled",
    "one node uses SHM instead of P2P between its GPUs",
    inject,
    truth,
    setup=setup,
    min_gpus=2,
)
