"""What to capture next time: each piece of advice answers something this job's input lacks.

Nothing here is a fixed checklist: every check looks at the parsed tables (or the dump audit) and advises a
setting only when what it would have produced is absent. References: NCCL ``docs/env.rst`` and
``troubleshooting/logging.rst`` (``NCCL_DEBUG_SUBSYS``, ``NCCL_DEBUG_TIMESTAMP_LEVELS`` (2.26+, default WARN
only), ``NCCL_DEBUG_FILE`` with ``%h``/``%p``, ``DESTROY`` outside the default mask from 2.30.3);
PyTorch's Flight Recorder tutorial (``TORCH_FR_BUFFER_SIZE``, ``TORCH_FR_DUMP_TEMP_FILE``,
``TORCH_NCCL_DUMP_ON_TIMEOUT``); research/landscape-2026.md §NCCL 2.26-2.30 and §PyTorch 2.9-2.11.
"""

from __future__ import annotations

import statistics

import polars as pl

from nccl_logsift.model import DumpAudit, NextRunAdvice
from nccl_logsift.parse.schema import ENGINE
from nccl_logsift.resolve.job import Job
from nccl_logsift.resolve.releases import newest_nccl, teardown_is_logged

FR_DEFAULT_BUFFER = 2000
STEPS_WORTH_KEEPING = 10  # a dump should cover several steps, so the step before the hang is in it


def advise(job: Job, dumps: DumpAudit) -> tuple[NextRunAdvice, ...]:
    lines = job.table("lines")
    producer = lines["producer"] if "producer" in lines.columns else pl.Series(dtype=pl.String)
    # The NCCL lines' columns read below only: a filter of the whole table copies every column, and a
    # 4096-rank job's init lines are most of it at the end of the run, where the peak is set.
    read = [c for c in ("level", "ts", "collector_ts", "source_id", "host", "pid") if c in lines.columns]
    nccl = (
        lines.lazy().filter(pl.col("producer") == "nccl").select(read).collect(engine=ENGINE)
        if not lines.is_empty() and "producer" in lines.columns
        else lines.select(read).clear()
    )
    torch_lines = int(producer.is_in(["torch_cpp", "torch_py"]).sum()) if producer.len() else 0
    advice: list[NextRunAdvice] = []
    add = lambda missing, setting, why: advice.append(NextRunAdvice(missing, setting, why))

    if nccl.is_empty():
        add(
            "NCCL debug output",
            "NCCL_DEBUG=INFO",
            "no NCCL line is in these logs: communicator init, topology, transports and NCCL's own errors "
            "are invisible",
        )
    else:
        if not (nccl["level"] == "INFO").any():
            add(
                "NCCL INFO lines",
                "NCCL_DEBUG=INFO",
                "NCCL printed warnings only: which ranks formed which communicator, and over which "
                "transport, is not logged",
            )
        if _calls(job) == 0:
            add(
                "COLL lines (one per collective call)",
                "NCCL_DEBUG_SUBSYS=INIT,COLL",
                "without them the position each rank reached on each communicator is unknown, so a rank "
                "behind or a mismatched collective can only be seen through PyTorch's watchdog, if at all",
            )
        info = nccl.filter(pl.col("level") == "INFO")
        if (
            not info.is_empty()
            and not info["ts"].is_not_null().any()
            and not info["collector_ts"].is_not_null().any()
        ):
            add(
                "timestamps on NCCL INFO lines",
                "NCCL_DEBUG_TIMESTAMP_LEVELS=WARN,INFO",
                "NCCL stamps only WARN lines by default (2.26+): without times, which rank stopped first "
                "and how long each waited cannot be told",
            )
        version = newest_nccl(job)
        if not teardown_is_logged(job) and version:
            add(
                "communicator teardown lines (Destroy/Abort COMPLETE)",
                "NCCL_DEBUG_SUBSYS=INIT,COLL,DESTROY",
                f"NCCL {'.'.join(map(str, version))} moved teardown into the DESTROY subsystem, outside "
                "the default mask: whether a rank destroyed or aborted its communicators is not logged",
            )
        if _several_processes_in_a_source(nccl.lazy()):
            add(
                "one NCCL log per process",
                "NCCL_DEBUG_FILE=/shared/logs/nccl.%h.%p",
                "the NCCL output of several processes shares one stream, where lines interleave and tear; "
                "a file per host and pid keeps each process's lines whole and in order",
            )
    advice += _flight_recorder(job, dumps, torch_lines)
    if not lines.is_empty() and _several_processes_unlabelled(lines):
        add(
            "launcher labels on every line",
            "srun -l (Slurm), kubectl logs --prefix, torchrun --tee 3",
            "plain output (Python prints, tracebacks) of several processes shares a stream with no rank "
            "or task label, so it cannot be tied to a rank",
        )
    if (
        not lines.is_empty()
        and not lines["collector_ts"].is_not_null().any()
        and not lines["ts"].is_not_null().any()
    ):
        add(
            "timestamps from the launcher or log collector",
            "kubectl logs --timestamps (or a timestamping collector)",
            "no line carries a time: nothing orders the ranks' lines across files or says how long the "
            "job hung",
        )
    return tuple(advice)


def _flight_recorder(job: Job, dumps: DumpAudit, torch_lines: int) -> list[NextRunAdvice]:
    out: list[NextRunAdvice] = []
    torch = job.table("torch")
    events = set(torch["event"].drop_nulls().unique().to_list()) if "event" in torch.columns else set()
    timed_out = bool(events & {"watchdog_timeout", "timeout_at_work", "failure_at_work"})
    lines = job.table("lines")
    disabled = (
        not lines.is_empty()
        and bool(lines["text"].str.contains("FlightRecorder is disabled", literal=True).any())
        if "text" in lines.columns
        else False
    )
    if disabled:
        out.append(
            NextRunAdvice(
                "Flight Recorder entries",
                f"TORCH_FR_BUFFER_SIZE={FR_DEFAULT_BUFFER}",
                "PyTorch says the Flight Recorder was disabled: no record of which collective each rank "
                "enqueued, with shapes and call sites, survives the failure",
            )
        )
    if timed_out and not dumps.expected and not dumps.dumped:
        out.append(
            NextRunAdvice(
                "Flight Recorder dumps on timeout",
                "TORCH_FR_DUMP_ON_TIMEOUT=1 (TORCH_NCCL_DUMP_ON_TIMEOUT in older PyTorch)",
                "the watchdog timed out but no rank dumped its Flight Recorder: the dumps would say which "
                "collective each rank had enqueued",
            )
        )
    if dumps.missing or (dumps.expected and not dumps.dumped):
        named = [n.path for n in dumps.named]
        local = [p for p in named if p.startswith("/tmp/") or "/.cache/" in p]
        where = (
            f" (these went to {', '.join(sorted({p.rsplit('/', 1)[0] for p in local})[:2])})" if local else ""
        )
        out.append(
            NextRunAdvice(
                "the dumps of some ranks",
                "TORCH_FR_DUMP_TEMP_FILE=/shared/fr/nccl_trace_rank_",
                f"{len(dumps.missing)} rank(s) expected to dump have no dump here{where}: a prefix on "
                "storage every node shares keeps them after the nodes are released",
            )
        )
    if dumps.expected and not dumps.named and torch_lines:
        lost = (
            f"{len(dumps.missing)} expected dump(s) are missing and nothing says where they went"
            if dumps.missing
            else "only the dumps given here tie them to ranks"
        )
        out.append(
            NextRunAdvice(
                "where each rank wrote its dump",
                "TORCH_CPP_LOG_LEVEL=INFO",
                "PyTorch logs 'dumping nccl trace to <path>' at INFO, and these logs have no such line: "
                f"{lost}",
            )
        )
    small = _buffer_too_small(job)
    if small:
        held, per_step = small
        if per_step is None:  # no call repeats within what a dump holds: less than one step
            size, step = (
                max(FR_DEFAULT_BUFFER, held * STEPS_WORTH_KEEPING),
                f"more than {held} (no call repeats in a dump)",
            )
        else:
            size, step = max(FR_DEFAULT_BUFFER, per_step * STEPS_WORTH_KEEPING), f"about {per_step}"
        out.append(
            NextRunAdvice(
                "Flight Recorder entries older than the last few steps",
                f"TORCH_FR_BUFFER_SIZE={size}",
                f"a dump holds the last {held} ops but a step issues {step}: the buffer wrapped and the "
                "steps before the failure are lost",
            )
        )
    return out


def _buffer_too_small(job: Job) -> tuple[int, int | None] | None:
    """(entries held, ops per step) when a dump's ring buffer wrapped and holds fewer than 3 steps of ops.

    Ops per step: the distance in record_id between consecutive entries of one call (the same call site, op,
    process group and size), which a training loop repeats every step; None when no call repeats within a
    dump, which then holds less than a step.
    """
    files = job.table("flight_dumps")
    fr = job.table("flight_recorder")
    if files.is_empty() or fr.is_empty():
        return None
    wrapped = files.filter(pl.col("first_record_id").fill_null(0) > 0)
    if wrapped.is_empty():
        return None
    keys = ["dump_id", "call_site", "op", "pg_name", "numel"]
    # The size tells apart the gradient buckets one call site all-reduces in turn. A call made once a step
    # repeats every step; one made twice a step (two buckets of one size) repeats sooner: the longest of the
    # calls' typical gaps is the step.
    periods = (
        fr.filter(pl.col("call_site").is_not_null())
        .with_columns(numel=pl.col("input_sizes").list.first().list.first())
        .sort("dump_id", "record_id")
        .with_columns(gap=pl.col("record_id").diff().over(keys))
        .group_by(keys)
        .agg(pl.col("gap").median())
        .group_by("dump_id")
        .agg(pl.col("gap").max())["gap"]
        .drop_nulls()
        .to_list()
    )
    held = int(wrapped["entries"].min())
    if not periods:
        return held, None
    per_step = int(statistics.median(periods))
    return (held, per_step) if per_step > 0 and held < 3 * per_step else None


def _calls(job: Job) -> int:
    coll = job.table("collectives")
    stats = job.table("coll_stats")
    if not stats.is_empty() and "calls" in stats.columns:
        return int(stats["calls"].sum())
    return coll.height


def _several_processes_in_a_source(rows: pl.LazyFrame) -> bool:
    """Whether one input holds the lines (``rows``) of more than one (host, pid).

    Two processes differ in their host or in their pid, so counting each column's values is enough: counting
    distinct (host, pid) structs took a 4096-rank job's 590k lines 0.05 s, this 0.04 s."""
    several = (pl.col("host").n_unique() > 1) | (pl.col("pid").n_unique() > 1)
    per_source = rows.group_by("source_id").agg(several=several)
    return bool(per_source.select(pl.col("several").any()).collect(engine=ENGINE).item())


def _several_processes_unlabelled(lines: pl.DataFrame) -> bool:
    """One input holds the output of several processes, and no line of it carries a launcher label."""
    labels = [c for c in ("task", "mpi_rank", "local_rank") if c in lines.columns]
    if labels and lines.select(pl.any_horizontal([pl.col(c).is_not_null() for c in labels]).any()).item():
        return False
    return _several_processes_in_a_source(lines.lazy().filter(pl.col("pid").is_not_null()))
