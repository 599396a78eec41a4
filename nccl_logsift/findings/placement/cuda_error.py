"""LS401 cuda-error: A CUDA call failed on a rank: out of memory, an illegal memory access, a launch
failure."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import evidence
from nccl_logsift.findings.wording import names_or_span, plural
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.cuda import cuda_rows
from nccl_logsift.resolve.inits import lifecycle_instances
from nccl_logsift.resolve.job import Job, per_job
from nccl_logsift.resolve.processes import PROC

# CUDA errors that mean the GPU itself failed (Xid 79, off the bus, shows as "unknown error", Xid 48/94/95 as
# ECC errors), not the program: the node needs draining, not a code fix.
HARDWARE_CUDA = (
    "unknown error",
    "uncorrectable ECC error encountered",
    "uncorrectable NVLink error detected during the execution",
)


# ---------------------------------------------------------------------------------------------- LS401
class CudaError(Rule):
    """A CUDA call failed on a rank: out of memory, an illegal memory access, a launch failure.

    What it means:
        NCCL (``Cuda failure 'out of memory'``, ``Failed to CUDA calloc N bytes``, a ``-> 1`` unhandled-CUDA
        chain) or PyTorch (``torch.OutOfMemoryError: CUDA out of memory``, ``CUDA error: an illegal memory
        access was encountered``) reported a CUDA failure on the listed ranks.

    Why it matters:
        The rank that hits it raises and exits (or its communicator becomes unusable); its peers then see
        closed sockets and ``-> 6`` remote errors, or wait until the watchdog fires. Those peers are not the
        culprits — the rank with the CUDA error is.

    How it is detected:
        The errors table's ``cuda`` and ``alloc`` messages (WARN and INFO forms), ``-> 1`` chains of
        processes that printed no CUDA message themselves, and PyTorch's ``cuda_oom`` / ``cuda_error``
        exceptions (plus "unhandled cuda error" NCCL errors) from ``app_errors``; the CUDA error a
        ProcessGroupNCCL watchdog thread died of (``watchdog thread terminated with exception: CUDA error:
        unknown error``, or ``what():  CUDA error: …`` after ``terminate called``), which is how a GPU fault
        shows when NCCL prints nothing; and NVRM Xid lines copied into the log (``NVRM: Xid (PCI:0000:3b:00):
        79, …``), tied to the rank whose NCCL busId is that PCI address. Findings are grouped by
        the error string; out-of-memory variants form one group. ``driver shutting down`` is exit noise and
        ignored. An OOM that a rank logs only after its own watchdog timeout is reported as an error, not a
        root cause (a failed collective often leaves an absurd allocation behind). The ranks that wait for
        the failed one time out later: their watchdog timeouts are consequences.

    Example:
        ``dgx391:3788705:3788793 [0] include/alloc.h:225 NCCL WARN Cuda failure 2 'out of memory'`` followed
        by ``include/alloc.h:244 -> 1`` … ``group.cc:112 -> 1`` on rank 0.

    What to do:
        For out of memory: leave NCCL room (smaller batch or activation memory, PYTORCH_CUDA_ALLOC_CONF=
        expandable_segments:True, fewer NCCL channels/buffers: NCCL_BUFFSIZE, NCCL_NCHANNELS_PER_NET_PEER),
        and check nothing else holds that GPU (``nvidia-smi``). For illegal accesses and launch failures:
        rerun with CUDA_LAUNCH_BLOCKING=1 / compute-sanitizer and check dmesg for Xid errors on that GPU.
    """

    code = "LS401"
    name = "cuda-error"
    kind = Kind.CUDA_ERROR
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        rows = cuda_rows(job)
        if rows.is_empty():
            return
        timeouts = _watchdog_seq(job)
        for (key,), group in rows.group_by("key", maintain_order=True):
            group = group.sort("seq")
            ranks = sorted({int(r) for r in group["job_rank"].drop_nulls()})
            hosts = sorted(set(group["host"].drop_nulls().to_list()))
            who = _who(job, group, ranks, hosts)
            what = "ran out of GPU memory" if key == "out of memory" else f"hit a CUDA error: {key}"
            details = _details(group)
            title = f"{who} {what}{details}"
            severity = self.severity
            # A driver line copied into the log says nothing by its position: the processes' own lines do.
            own = group.filter(pl.col("origin") != "xid")
            late = own.height > 0 and _after_timeout(own, timeouts)
            if late:
                severity = Severity.ERROR
                title += " — after the watchdog timeout, so probably a consequence of the hang, not its cause"
            primary = group.filter(pl.col("origin") != "chain")
            ev = pl.concat(
                [evidence(primary.head(4)), evidence(group.filter(pl.col("origin") == "chain").head(2))]
            )
            hardware = key in HARDWARE_CUDA or group.filter(pl.col("origin") == "xid").height > 0
            yield self.finding(
                job,
                title,
                evidence_rows=ev,
                ranks=ranks,
                hosts=hosts,
                severity=severity,
                comm=_comm_at(job, group),
                advice=_cuda_advice(key, hardware),
            )


def _who(job: Job, group: pl.DataFrame, ranks: list[int], hosts: list[str]) -> str:
    """The ranks of a CUDA error, and the processes of it no line ties to a rank: 'rank 3 (…) and 2
    processes on host-a'."""
    unranked = group.filter(pl.col("job_rank").is_null() & pl.col("host").is_not_null()).select(PROC).unique()
    who = names_or_span(job, ranks) if ranks else ""
    if unranked.height:
        who = (
            who + " and " if who else ""
        ) + f"{plural(unranked.height, 'process')} on {', '.join(hosts[:3])}"
    return who or "a rank (not identified in the log)"


@per_job
def _watchdog_seq(job: Job) -> dict:
    """First watchdog-timeout position per rank (key None: the first of any rank)."""
    torch = job.table("torch")
    if torch.is_empty() or "event" not in torch.columns:
        return {}
    rows = torch.filter(pl.col("event").is_in(("watchdog_timeout", "blocking_wait_timeout")))
    if rows.is_empty():
        return {}
    rows = with_seq(rows).with_columns(r=pl.coalesce(pl.col("torch_rank"), pl.col("pg_rank")).cast(pl.Int64))
    out = {r: s for r, s in rows.group_by("r").agg(pl.col("seq").min()).iter_rows() if r is not None}
    out[None] = rows["seq"].min()
    return out


def _after_timeout(group: pl.DataFrame, timeouts: dict) -> bool:
    if not timeouts:
        return False
    for rank, seq in group.group_by("job_rank").agg(pl.col("seq").min()).iter_rows():
        limit = timeouts.get(rank) if rank is not None else timeouts.get(None)
        if limit is None or seq < limit:
            return False
    return True


def _details(group: pl.DataFrame) -> str:
    bits = []
    sizes = group.filter(pl.col("oom_alloc").is_not_null())["oom_alloc"].unique(maintain_order=True).to_list()
    if sizes:
        bits.append(f"tried to allocate {', '.join(sizes[:3])}")
    alloc = group.filter(pl.col("bytes").is_not_null() & (pl.col("error_kind") == "alloc"))
    if alloc.height:
        bits.append(f"NCCL failed to allocate {int(alloc['bytes'].max())} bytes")
    nccl = group.filter((pl.col("origin") == "nccl") & pl.col("cuda_error").is_not_null())
    if nccl.height and not bits:
        bits.append(f"NCCL: Cuda failure '{nccl['cuda_error'][0]}'")
    xid = group.filter(pl.col("origin") == "xid")
    if xid.height and not xid["key"][0].startswith("GPU fault ("):  # else the title names it already
        bits.append(f"the driver logged {xid['message'][0].rstrip('.')} on PCI {xid['xid_pci'][0]}")
    return f" ({'; '.join(bits)})" if bits else ""


def _comm_at(job: Job, group: pl.DataFrame) -> str | None:
    inst = lifecycle_instances(job)
    located = group.filter(pl.col("host").is_not_null())
    if inst.is_empty() or located.is_empty():
        return None
    mine = located.select(*PROC, "seq").join(
        inst.select(*PROC, "start_seq", "complete_seq", "comm_uid"),
        on=PROC,
        how="inner",
        maintain_order="left_right",
    )
    inside = mine.filter(
        (pl.col("start_seq") <= pl.col("seq"))
        & (pl.col("complete_seq").is_null() | (pl.col("complete_seq") >= pl.col("seq")))
    )
    if inside.height:
        return inside.sort("start_seq", maintain_order=True).tail(1)["comm_uid"][0]
    return None


def _cuda_advice(key: str, hardware: bool = False) -> str:
    if hardware:
        return (
            "Treat it as a GPU fault: drain that node (or GPU) from the scheduler, check `dmesg` / "
            "`nvidia-smi -q` there for Xid, ECC and PCIe errors, and restart the job without it (from its "
            "last checkpoint)."
        )
    if key == "out of memory":
        return (
            "Free GPU memory on that rank: reduce batch/activation memory, set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, shrink NCCL's buffers (NCCL_BUFFSIZE, fewer "
            "channels) and check with `nvidia-smi` that no other process holds memory on that GPU."
        )
    return (
        "Rerun the failing rank with CUDA_LAUNCH_BLOCKING=1 (or under compute-sanitizer) to find the kernel, "
        "and check `dmesg` / `nvidia-smi -q` on that host for Xid or ECC errors on the GPU."
    )
