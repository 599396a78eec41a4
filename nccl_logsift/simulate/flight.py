"""The Flight Recorder dumps a simulated job leaves: one per rank alive when the dump signal went out.

With ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` the first rank whose watchdog times out dumps its ring buffer and
signals every rank through the TCPStore; each rank whose process is still running dumps too
(``ProcessGroupNCCL.cpp``: "Observed flight recorder dump signal from another rank via TCPStore"). A rank
that already died (a crash, an exit, an init failure) never dumps: those are the dumps an analysis must do
without. A job with no timeout writes none.

Each dump is the dict of format 2.10 (``FlightRecorder.hpp``): ``version``, ``comm_lib_version``,
``pg_config`` (by GUID), ``pg_status`` (by the rank's local PG id) and ``entries``, written as a pickle of
plain containers (what ``DebugInfoWriter`` writes) or as JSON (``_dump_nccl_trace_json``).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

from nccl_logsift.simulate.program import BF16, FLOAT32, INT64

if TYPE_CHECKING:
    from nccl_logsift.simulate.engine import Timeline
    from nccl_logsift.simulate.job import Job

FORMAT_VERSION = "2.10"
PREFIX = "nccl_trace_rank_"
DEFAULT_BUFFER = 2000  # TORCH_FR_BUFFER_SIZE the tutorial recommends
DTYPES = {FLOAT32: "Float", BF16: "BFloat16", INT64: "Long"}
# PyTorch's profiling names for the OpTypes the programs issue (ProcessGroupNCCL's ``profilingTitle``).
PROFILING = {
    "ALLREDUCE": "all_reduce",
    "_ALLGATHER_BASE": "_all_gather_base",
    "_REDUCE_SCATTER_BASE": "_reduce_scatter_base",
    "BROADCAST": "broadcast",
    "SEND": "send",
    "RECV": "recv",
}
DUMP_DELAY = 0.5  # seconds from the first timeout to the dumps


def dumps(
    job: Job, timeline: Timeline, buffer: int = DEFAULT_BUFFER
) -> tuple[dict[int, dict], dict[int, str]]:
    """(rank → dump, rank → why it wrote none) for every rank of the job."""
    fired = [w.t for run in timeline.runs for w in run.watchdogs]
    if not fired:
        return {}, {run.rank: "no watchdog timeout: nothing triggered a dump" for run in timeline.runs}
    at = min(fired) + DUMP_DELAY
    written: dict[int, dict] = {}
    skipped: dict[int, str] = {}
    for run in timeline.runs:
        if run.end is not None and run.end < at and not run.watchdogs:
            skipped[run.rank] = f"its process ended ({run.end_kind or 'exit'}) before the dump signal"
            continue
        written[run.rank] = _dump(job, run, at, buffer)
    return written, skipped


def _dump(job: Job, run, at: float, buffer: int) -> dict:
    cluster = job.cluster
    mine = [pg for pg in cluster.pgs if run.rank in pg.ranks]
    local = {pg.index: i for i, pg in enumerate(mine)}
    entries = []
    last_seq: dict[int, int] = {}
    status: dict[int, dict[str, int]] = {}
    for issue in run.issues:
        op = issue.op
        if issue.pos == 0 or op is None or issue.t > at:
            continue
        pg = cluster.pgs[cluster.comms[issue.comm].pg]
        p2p = op.name in ("Send", "Recv")
        seq = issue.seq if not p2p else last_seq.get(pg.index, 0)
        if not p2p:
            last_seq[pg.index] = issue.seq
        done = issue.done is not None and issue.done <= at
        dtype = DTYPES.get(op.dtype, "Float")
        entries.append(
            {
                "record_id": len(entries),
                "pg_id": local[pg.index],
                "process_group": (str(pg.guid), pg.desc),
                "collective_seq_id": seq,
                "p2p_seq_id": 0 if not p2p else issue.seq,
                "op_id": len(entries) + 1,
                "profiling_name": f"nccl:{PROFILING.get(op.torch_op, op.torch_op.lower())}",
                "time_created_ns": _ns(job, issue.t),
                "input_sizes": [[op.numel_in or op.count]],
                "input_dtypes": [dtype],
                "output_sizes": [[op.numel_out or op.count]],
                "output_dtypes": [dtype],
                "state": "completed" if done else "scheduled",
                "time_discovered_started_ns": None,
                "time_discovered_completed_ns": _ns(job, issue.done) if done else None,
                "retired": done,
                "timeout_ms": job.torch.timeout_ms,
                "is_p2p": p2p,
                "thread_id": str(140000000000000 + run.rank),
                "thread_name": "python3",
                "frames": [
                    {
                        "name": op.torch_op.lower(),
                        "filename": "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py",
                        "line": 3068,
                    },
                    {
                        "name": "train_step",
                        "filename": "/workspace/train.py",
                        "line": 100 + sum(map(ord, op.label or op.name)) % 200,
                    },
                ],
            }
        )
        group = status.setdefault(
            local[pg.index],
            {"last_enqueued_collective": -1, "last_started_collective": -1, "last_completed_collective": -1},
        )
        if not p2p:
            group["last_enqueued_collective"] = max(group["last_enqueued_collective"], seq)
            if done:
                group["last_completed_collective"] = max(group["last_completed_collective"], seq)
    return {
        "version": FORMAT_VERSION,
        "comm_lib_version": job.nccl.version,
        "pg_config": {
            str(pg.guid): {"name": str(pg.guid), "desc": pg.desc, "ranks": str(list(pg.ranks))} for pg in mine
        },
        "pg_status": {str(k): v for k, v in sorted(status.items())},
        "entries": entries[-buffer:],  # a ring buffer keeps the newest
    }


def _ns(job: Job, t: float) -> int:
    return int(job.time(t).timestamp() * 1e9)


def write(directory: Path, written: dict[int, dict], form: str = "pickle") -> list[Path]:
    """Write each dump to ``<directory>/nccl_trace_rank_<rank>`` (``.json`` added for JSON)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, dump in sorted(written.items()):
        path = directory / f"{PREFIX}{rank}{'.json' if form == 'json' else ''}"
        if form == "json":
            path.write_text(json.dumps(dump))
        else:
            path.write_bytes(pickle.dumps(dump, protocol=4))
        paths.append(path)
    return paths


def truth(directory: Path, written: dict[int, dict], skipped: dict[int, str], form: str) -> dict:
    """The ground truth's ``flight_recorder`` section: which ranks dumped where, which did not and why."""
    return {
        "dir": str(directory),
        "format": form,
        "version": FORMAT_VERSION,
        "dumped": sorted(written),
        "not_dumped": [{"rank": r, "why": why} for r, why in sorted(skipped.items())],
    }
