"""The ground-truth document (schema ``nccl-logsift/truth/v1``) of a simulated job.

Keys the findings contract uses: ``scenario, seed, nccl_version, torch_version, world_size, nodes,
hosts, communicators[{comm_id, nranks, ranks}], faults[{kind, primary, ranks, hosts, comm, seq, op}]``.
Extra keys help tests and people: per communicator its ``name``, the NCCL function that created it
(split children also name their ``parent`` comm_id, ``color`` and ``split_count``, which is how to find
them in 2.23.4+ logs, where split children print no commId)
and which ranks entered ncclCommInitRank/Split (``init_started``: they print Init START from 2.18.3)
and completed it (``init_completed``); ``processes`` maps ranks to host and pid; each fault has
a one-line ``detail``, and where the scenario states it a ``severity``: the worst a finding of that kind may
be graded by the severity policy (a degraded but working job: ``warning`` or ``info``, never primary).
``seq`` is the 1-based position of the operation on ``comm`` (count of COLL
lines of that communicator in one process), not NCCL's opCount.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nccl_logsift.simulate.engine import Timeline
    from nccl_logsift.simulate.job import Job

import json
import re

SCHEMA = "nccl-logsift/truth/v1"

KINDS = (
    "rank_behind",
    "collective_mismatch",
    "watchdog_timeout",
    "init_incomplete",
    "bootstrap_failure",
    "interface_misconfig",
    "transport_fallback",
    "net_error",
    "cuda_error",
    "duplicate_gpu",
    "host_collision",
    "process_exit",
    "latency_outlier",
    "nccl_error",
)


def truth_document(job: Job, timeline: Timeline) -> dict:
    cluster = job.cluster
    started_by: dict[int, list[int]] = {}
    completed_by: dict[int, list[int]] = {}
    for run in timeline.runs:
        for i in run.issues:
            if i.pos == 0 and job.faults.init_fail.get((run.rank, i.comm)) != "no_interface":
                started_by.setdefault(i.comm, []).append(run.rank)
                if i.done is not None and (run.end is None or i.done <= run.end):
                    completed_by.setdefault(i.comm, []).append(run.rank)
    comms = []
    for c in cluster.comms:
        started = sorted(started_by.get(c.index, []))
        if not started:
            continue
        completed = sorted(completed_by.get(c.index, []))
        comms.append(
            {
                "comm_id": c.comm_id_text,
                "nranks": c.nranks,
                "ranks": list(c.ranks),
                "name": c.kind,
                "created_by": c.func,
                "parent": cluster.comms[c.parent].comm_id_text if c.parent is not None else None,
                "color": c.color if c.parent is not None else None,
                "split_count": c.split_count if c.parent is not None else None,
                "init_started": started,
                "init_completed": completed,
            }
        )
    faults = []
    for f in job.truth:
        assert f.kind in KINDS, f.kind
        fault = {
            "kind": f.kind,
            "primary": f.primary,
            "ranks": f.ranks,
            "hosts": f.hosts,
            "comm": f.comm,
            "seq": f.seq,
            "op": f.op,
            "detail": f.detail,
        }
        if f.severity:  # only where a scenario states it: the other truths stay as they were
            fault["severity"] = f.severity
        faults.append(fault)
    return {
        "schema": SCHEMA,
        "scenario": job.scenario.name,
        "seed": job.options.seed,
        "nccl_version": job.nccl.version,
        "torch_version": job.torch.version,
        "layout": job.options.layout,
        "world_size": job.ranks,
        "nodes": len(cluster.hosts),
        "hosts": [h.name for h in cluster.hosts],
        "processes": [
            {"rank": p.rank, "host": p.host.name, "pid": p.pid, "local_rank": p.local_rank}
            for p in cluster.procs
        ],
        "communicators": comms,
        "faults": faults,
    }


def dumps(doc: dict) -> str:
    """Indented JSON whose flat lists and small objects stay on one line (readable at 4096 ranks)."""
    text = json.dumps(doc, indent=2)
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
    text = re.sub(
        r"\{\s+(\"rank\": [^{}\[\]]*?)\s+\}", lambda m: "{" + re.sub(r",\s+", ", ", m.group(1)) + "}", text
    )
    return text + "\n"
