"""What the NCCL release a job logged with can show: version quirks asked of one place.

A rule asks ``teardown_is_logged(job)``, not ``if version >= (2, 30, 3)``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nccl_logsift.resolve.job import Job

# From 2.30.3 the Destroy/Abort/Revoke lines are in the DESTROY subsystem, which is not in the default
# NCCL_DEBUG_SUBSYS mask (grammar §2.3; docs troubleshooting/logging.rst @v2.30.7-1).
DESTROY_SUBSYS_FROM = (2, 30, 3)
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def newest_nccl(job: Job) -> tuple[int, int, int] | None:
    """The newest NCCL (or RCCL) version the job's lines print, or None when none does."""
    versions = job.table("versions")
    if versions.is_empty() or "version" not in versions.columns:
        return None
    found = [
        tuple(map(int, m.groups()))
        for v in versions["version"].drop_nulls().unique().to_list()
        if (m := _VERSION.search(v))
    ]
    return max(found) if found else None  # type: ignore[return-value]


def teardown_logged(job: Job) -> bool:
    """Some process logged a communicator Destroy or Abort line."""
    comms = job.table("comms")
    if comms.is_empty() or "what" not in comms.columns:
        return False
    return bool(comms["what"].str.contains("(?i)destroy|abort").any())


def teardown_is_logged(job: Job) -> bool:
    """Whether a process that destroyed or aborted its communicators would have said so in this log.

    Before 2.30.3 the teardown lines are INIT lines, printed with NCCL_DEBUG=INFO. From 2.30.3 they need
    DESTROY in NCCL_DEBUG_SUBSYS: a log that shows none of them may come from a job that tore everything
    down without a word, so the absence of a Destroy line says nothing there. A job that logged one has the
    subsystem on. With no version printed, the older default is assumed.
    """
    version = newest_nccl(job)
    return version is None or version < DESTROY_SUBSYS_FROM or teardown_logged(job)
