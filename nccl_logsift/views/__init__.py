"""What the HTML report draws, computed from the job and the triaged findings (renderers compute nothing).

* :mod:`~nccl_logsift.views.grid`: rank × collective grids per communicator or process group;
* :mod:`~nccl_logsift.views.timeline`: when each rank logged its collectives, and the events around them;
* :mod:`~nccl_logsift.views.topology`: nodes, GPUs, NICs and the transports between them.
"""

from __future__ import annotations

from nccl_logsift.model import Finding, ReportViews
from nccl_logsift.resolve.job import Job
from nccl_logsift.views.grid import culprit_ranks, grids
from nccl_logsift.views.timeline import timeline
from nccl_logsift.views.topology import topology


def build_views(job: Job, findings: list[Finding]) -> ReportViews:
    culprits = culprit_ranks(findings)
    drawn, notes = grids(job, findings)
    if not drawn:
        notes += (
            "No rank × collective grid: no COLL lines (NCCL_DEBUG_SUBSYS=COLL or NCCL_DEBUG=INFO with "
            "NCCL before 2.19 prints them) and no PyTorch work numbers in these logs.",
        )
    line, why = timeline(job, findings, culprits)
    hosts = sorted({h for f in findings if f.primary for h in f.hosts})
    return ReportViews(
        grids=drawn,
        timeline=line,
        topology=topology(job, findings, culprits),
        notes=notes + ((why,) if why else ()),
        culprit_ranks=tuple(sorted(culprits)),
        culprit_hosts=tuple(hosts),
    )
