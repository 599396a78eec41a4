"""LS402 duplicate-gpu: Two ranks of one host use the same GPU."""

from __future__ import annotations

from collections.abc import Iterator

import polars as pl

from nccl_logsift.findings.base import Rule
from nccl_logsift.findings.evidence import EVIDENCE, evidence
from nccl_logsift.findings.wording import names_or_span, ranks_text
from nccl_logsift.model import Finding, Kind, Severity
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.inits import lifecycle_instances, resolve_rows
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.processes import PROC
from nccl_logsift.resolve.transports import bootstrap_addresses


# ---------------------------------------------------------------------------------------------- LS402
class DuplicateGpu(Rule):
    """Two ranks of one host use the same GPU.

    What it means:
        Two ranks of one communicator run on the same physical GPU of the same machine (same PCI busId),
        usually because the device was not set from LOCAL_RANK or CUDA_VISIBLE_DEVICES is the same for
        every process.

    Why it matters:
        NCCL refuses the communicator (``Duplicate GPU detected``, ``ncclInvalidUsage``): the two ranks
        raise during init_process_group and every other rank waits in init. Older NCCL releases or other
        frameworks may instead run far slower, or hang.

    How it is detected:
        ``Duplicate GPU detected : rank X and rank Y both on CUDA device <busId>`` (2.5.6–2.29) and
        ``Multiple ranks detected using the same GPU`` (2.30.3+), with the communicator ranks translated
        to global ranks through the communicator the process was initialising. From Init lines: members of
        one communicator on the same host and bootstrap address whose busId (nvmlDev before 2.5.6) is equal,
        when their init did not complete (a completed init means NCCL accepted them).

    Example:
        ``gpu-node-057:1224575:1224673 [0] init.cc:1486 NCCL WARN Duplicate GPU detected : rank 0 and rank 3
        both on CUDA device 3000``.

    What to do:
        Bind each process to its own GPU: ``torch.cuda.set_device(local_rank)`` before init_process_group (or
        ``device_id=`` in init_process_group), and check CUDA_VISIBLE_DEVICES and the launcher's
        ``--nproc-per-node`` against the GPUs the host really has.
    """

    code = "LS402"
    name = "duplicate-gpu"
    kind = Kind.DUPLICATE_GPU
    severity = Severity.CRITICAL

    def check(self, job: Job) -> Iterator[Finding]:
        covered: set[frozenset] = set()
        for finding in self._from_warnings(job):
            covered.add(frozenset(finding.ranks))
            yield finding
        for finding in self._from_init_lines(job):
            if not any(set(finding.ranks) <= c for c in covered):
                yield finding

    def _from_warnings(self, job: Job) -> Iterator[Finding]:
        errors = job.table("errors")
        if errors.is_empty() or "error_kind" not in errors.columns:
            return
        rows = errors.filter((pl.col("error_kind") == "duplicate_gpu") & pl.col("host").is_not_null())
        if rows.is_empty():
            return
        rows = resolve_rows(job, with_seq(rows))
        inst = lifecycle_instances(job)
        groups: dict[tuple, dict] = {}
        for r in rows.iter_rows(named=True):
            uid, nranks, members, first = _current_comm(job, inst, r["host"], r["pid"], r["seq"])
            found = set()
            if r.get("rank") is not None:
                for comm_rank in (r["rank"], r["peer_rank"]):
                    g = _to_global(job, members, nranks, comm_rank, first)
                    if g is not None:
                        found.add(g)
            if r["job_rank"] is not None:
                found.add(int(r["job_rank"]))
            device = r.get("device") or _bus_of(inst, r["host"], r["pid"])
            if r.get("rank") is None and device is not None and members is not None:
                same = members.filter((pl.col("host") == r["host"]) & (pl.col("bus_id") == device))
                found |= {int(x) for x in same["global_rank"].drop_nulls()}
            key = (r["host"], device, uid)
            entry = groups.setdefault(key, {"ranks": set(), "rows": [], "comm_ranks": set()})
            entry["ranks"] |= found
            entry["rows"].append(r)
            if r.get("rank") is not None:
                entry["comm_ranks"] |= {r["rank"], r["peer_rank"]}
        for (host, device, uid), entry in groups.items():
            ranks = sorted(entry["ranks"])
            frame = pl.DataFrame([{k: row[k] for k in EVIDENCE} for row in entry["rows"]])
            who = (
                names_or_span(job, ranks, hosts=[host])
                if ranks
                else f"communicator ranks {ranks_text(entry['comm_ranks'])} on {host}"
            )
            gpu = f"the same GPU of {host} (busId {device})" if device else f"the same GPU of {host}"
            yield self.finding(
                job,
                f"{who} use {gpu}; NCCL refused the communicator",
                evidence_rows=evidence(frame),
                ranks=ranks,
                hosts=[host],
                comm=uid,
                advice=self._advice(),
            )

    def _from_init_lines(self, job: Job) -> Iterator[Finding]:
        inst = lifecycle_instances(job)
        if inst.is_empty():
            return
        gpu = pl.coalesce(pl.col("bus_id"), pl.lit("nvml") + pl.col("nvml_dev").cast(pl.String))
        inst = inst.with_columns(gpu=gpu).filter(
            pl.col("gpu").is_not_null() & pl.col("global_rank").is_not_null()
        )
        addr = bootstrap_addresses(job)
        if not addr.is_empty():
            inst = inst.join(addr, on=PROC, how="left", maintain_order="left")
        else:
            inst = inst.with_columns(address=pl.lit(None, pl.String))
        dup = (
            inst.group_by("comm_uid", "host", pl.col("address").fill_null("?").alias("addr"), "gpu")
            .agg(
                ranks=pl.col("global_rank").unique().sort(),
                completed=pl.col("init_completed").all(),
                source_id=pl.col("source_id"),
                line_no=pl.col("line_no"),
            )
            .filter((pl.col("ranks").list.len() > 1) & ~pl.col("completed"))
            .sort("host", "gpu", "comm_uid", "addr")  # group_by's order follows its threads
        )
        seen = set()
        for row in dup.iter_rows(named=True):
            key = (row["host"], row["gpu"], tuple(row["ranks"]))
            if key in seen:
                continue
            seen.add(key)
            ranks = row["ranks"]
            frame = pl.DataFrame({"source_id": row["source_id"], "line_no": row["line_no"]}).with_columns(
                part=pl.lit(0, pl.UInt8)
            )
            title = (
                f"{names_or_span(job, ranks, hosts=[row['host']])} initialise communicator {row['comm_uid']} "
                "on the same GPU of "
                f"{row['host']} (busId {row['gpu']}) and never complete init"
            )
            yield self.finding(
                job,
                title,
                evidence_rows=frame,
                ranks=ranks,
                hosts=[row["host"]],
                comm=row["comm_uid"],
                advice=self._advice(),
            )

    @staticmethod
    def _advice() -> str:
        return (
            "Give every process its own GPU: call torch.cuda.set_device(local_rank) (or pass device_id= to "
            "init_process_group) before creating the process group, and check CUDA_VISIBLE_DEVICES and "
            "--nproc-per-node against the GPUs of the host."
        )


def _current_comm(job: Job, inst: pl.DataFrame, host: str, pid: int, seq: int):
    """(comm_uid, nranks, members, first) of the communicator a process was initialising at ``seq``.

    ``first`` is true when the process had completed no communicator before: PyTorch's first communicator
    is the default (world) process group's, so its communicator ranks are global ranks.
    """
    mine = inst.filter((pl.col("host") == host) & (pl.col("pid") == pid)) if not inst.is_empty() else inst
    earlier = mine.filter(pl.col("complete_seq") < seq) if not mine.is_empty() else mine
    first = earlier.is_empty()
    started = (
        mine.filter(pl.col("init_started") & (pl.col("start_seq") <= seq)).sort("start_seq")
        if not mine.is_empty()
        else mine
    )
    if started.is_empty():
        return None, None, None, first
    row = started.row(-1, named=True)
    members = inst.filter(pl.col("comm_uid") == row["comm_uid"])
    return row["comm_uid"], row["nranks"], members, first


def _to_global(
    job: Job, members: pl.DataFrame | None, nranks: int | None, comm_rank: int | None, first: bool
) -> int | None:
    if comm_rank is None:
        return None
    if members is not None:
        hit = members.filter(pl.col("rank") == comm_rank)["global_rank"].drop_nulls()
        if hit.len():
            return int(hit[0])
    world = job.world_size
    if (nranks is not None and world is not None and nranks == world) or (nranks is None and first):
        return int(comm_rank)
    return None


def _bus_of(inst: pl.DataFrame, host: str, pid: int) -> str | None:
    if inst.is_empty():
        return None
    bus = inst.filter((pl.col("host") == host) & (pl.col("pid") == pid))["bus_id"].drop_nulls()
    return bus[0] if bus.len() else None
