"""socket-fallback: a multi-node job runs over TCP sockets because NCCL found no usable IB device.

Either the container was started without the IB devices (``NET/IB : No device found.``) or someone
left ``NCCL_IB_DISABLE=1`` in the environment. The job works, slowly: ``Using network Socket`` and
``via NET/Socket/0`` transports. By the severity policy it has no root cause: sockets because no RDMA device
is usable are a warning, sockets chosen on purpose (IB disabled) are info.
"""

from nccl_logsift.simulate.scenarios import Scenario


def setup(job) -> None:
    variant = job.rng.choice(("no_device", "disabled"))
    for h in job.cluster.hosts:
        h.has_ib = False
        if variant == "disabled":
            h.ib_disabled = True
            job.env.setdefault(h.index, []).append("NCCL_IB_DISABLE set by environment to 1.")
    job.notes["variant"] = variant


def inject(job) -> None:
    for rank in range(job.ranks):  # TCP is slower: a little more time per step
        for i in job.step_items(rank, 1):
            job.programs[rank][i].op.dur *= 4


def truth(job, timeline) -> None:
    no_device = job.notes["variant"] == "no_device"
    why = "no IB device is visible" if no_device else "NCCL_IB_DISABLE=1 is set"
    job.fault(
        "transport_fallback",
        False,
        list(range(job.ranks)),
        comm=job.cluster.world,
        detail=f"inter-node traffic uses NET/Socket because {why}; the job completes",
        severity="warning" if no_device else "info",
    )


SCENARIO = Scenario(
    "socket-fallback",
    "a multi-node job falls back to NET/Socket (no IB device / IB disabled)",
    inject,
    truth,
    setup=setup,
    min_nodes=2,
)
