"""gpu-fault: one rank's GPU fails mid-training; only its ProcessGroupNCCL watchdog says so.

The GPU falls off the bus (Xid 79, ``CUDA error: unknown error``), hits an uncorrectable ECC error (Xid 48)
or an MMU fault (Xid 31, ``an illegal memory access was encountered``). The rank's watchdog finds the
CUDA error while polling its work's events, its thread dies with it and the process aborts (SIGABRT);
NCCL prints nothing. The peers wait in the next collective until their own watchdogs time out (or the
launcher stops them). Sometimes a node health check copies the kernel's NVRM Xid line into the output.
"""

from nccl_logsift.simulate.program import Item
from nccl_logsift.simulate.scenarios import Scenario, culprit_fault, fault_step, first_op

FAULTS = (
    ("unknown error", 79, "GPU has fallen off the bus."),
    (
        "uncorrectable ECC error encountered",
        48,
        "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
        "subpartition 0.",
    ),
    (
        "an illegal memory access was encountered",
        31,
        "Ch 00000008, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f4c_1a200000. "
        "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    ),
)


def inject(job) -> None:
    rank = job.pick(list(range(job.ranks)))
    step = fault_step(job)
    index = first_op(job, rank, step)
    error, xid, text = job.rng.choice(FAULTS)
    proc = job.cluster.procs[rank]
    # NCCL prints the busId "0000:18:00.0" as the hex number 18000 (domain, bus, device, function digits).
    v = int(proc.bus, 16)
    pci = f"{v >> 20:04x}:{(v >> 12) & 0xFF:02x}:{(v >> 4) & 0xFF:02x}"
    line = (
        f"NVRM: Xid (PCI:{pci}): {xid}, pid={proc.pid}, name=python3, {text}"
        if job.rng.random() < 0.6
        else None
    )
    job.insert(
        rank,
        index,
        Item(
            "raise",
            gap=job.rng.uniform(0.05, 0.4),
            step=step,
            signal=6,
            what={"kind": "gpu_fault", "error": error, "xid": line},
        ),
    )
    job.notes.update(culprit=rank, index=index + 1, error=error, xid=xid)


def truth(job, timeline) -> None:
    rank, xid, error = job.notes["culprit"], job.notes["xid"], job.notes["error"]
    culprit_fault(
        job,
        timeline,
        "cuda_error",
        lambda op, comm, seq: (
            f"rank {rank}'s GPU failed (Xid {xid}): its watchdog died of CUDA error: {error}"
        ),
    )


SCENARIO = Scenario(
    "gpu-fault", "a rank's GPU fails (Xid 79/48/31); only its watchdog reports the CUDA error", inject, truth
)
