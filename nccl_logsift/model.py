"""The report as frozen values: what the analysis found, independent of how it is shown.

The JSON rendering of :class:`Report` is the findings contract ``nccl-logsift/findings/v1``; renderers read
these values and compute nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

FINDINGS_SCHEMA = "nccl-logsift/findings/v1"


class Severity(IntEnum):
    INFO = 1
    WARNING = 2
    ERROR = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> "Severity":
        return cls[text.upper()]


class Kind(StrEnum):
    """The contract's finding kinds: new ones may be added, none renamed."""

    RANK_BEHIND = "rank_behind"
    COLLECTIVE_MISMATCH = "collective_mismatch"
    WATCHDOG_TIMEOUT = "watchdog_timeout"
    INIT_INCOMPLETE = "init_incomplete"
    BOOTSTRAP_FAILURE = "bootstrap_failure"
    INTERFACE_MISCONFIG = "interface_misconfig"
    TRANSPORT_FALLBACK = "transport_fallback"
    NET_ERROR = "net_error"
    CUDA_ERROR = "cuda_error"
    DUPLICATE_GPU = "duplicate_gpu"
    HOST_COLLISION = "host_collision"
    PROCESS_EXIT = "process_exit"
    LATENCY_OUTLIER = "latency_outlier"
    NCCL_ERROR = "nccl_error"


@dataclass(frozen=True, slots=True)
class Evidence:
    path: str
    line: int
    text: str


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    name: str
    kind: Kind
    severity: Severity
    title: str
    ranks: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    comm: str | None = None
    pg: str | None = None
    seq: int | None = None
    op: str | None = None
    evidence: tuple[Evidence, ...] = ()
    advice: str = ""
    primary: bool = False
    # Position of the first evidence in the job's line order; triage uses it to find what came first.
    first_seen: int | None = None


@dataclass(frozen=True, slots=True)
class RankState:
    rank: int | None
    host: str | None
    pid: int | None
    comm: str | None
    last_op: str | None
    last_seq: int | None
    last_completed_seq: int | None
    last_line: Evidence | None


@dataclass(frozen=True, slots=True)
class JobSummary:
    nccl_versions: tuple[str, ...]
    torch_version: str | None
    world_size: int | None
    hosts: tuple[str, ...]
    ranks_seen: int
    communicators: int


@dataclass(frozen=True, slots=True)
class InputInfo:
    path: str
    bytes: int
    lines: int
    unparsed_lines: int


@dataclass(frozen=True, slots=True)
class Report:
    inputs: tuple[InputInfo, ...]
    job: JobSummary
    verdict: str
    findings: tuple[Finding, ...]
    ranks: tuple[RankState, ...]
    schema: str = FINDINGS_SCHEMA
    notes: tuple[str, ...] = field(default=())

    @property
    def worst_severity(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)
