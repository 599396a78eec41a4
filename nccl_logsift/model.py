"""The report as frozen values: what the analysis found, independent of how it is shown.

The JSON rendering of :class:`Report` is the findings contract ``nccl-logsift/findings/v1``; renderers read
these values and compute nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum, StrEnum

FINDINGS_SCHEMA = "nccl-logsift/findings/v1"
# Additions that keep every v1 field as it was raise the minor version only; consumers match on the major.
FINDINGS_SCHEMA_VERSION = "1.1"


class Severity(IntEnum):
    """How bad a finding is, by what it did to the job (the severity policy: ``logsift explain --policy``)."""

    INFO = 1
    WARNING = 2
    ERROR = 3
    CRITICAL = 4

    @property
    def label(self) -> str:
        return self.name.lower()

    @property
    def meaning(self) -> str:
        return _SEVERITY_MEANING[self]

    @classmethod
    def parse(cls, text: str) -> Severity:
        return cls[text.upper()]


_SEVERITY_MEANING = {
    Severity.CRITICAL: "caused the failure or the hang (a root cause)",
    Severity.ERROR: "a failure, or the direct consequence of one",
    Severity.WARNING: "the job works, degraded (slower path, slow rank, a feature that could not be set up)",
    Severity.INFO: "worth knowing (a choice the job made, a quirk of the logs)",
}


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
    # When the first timestamped evidence line was written (epoch seconds): across files (one per rank) the
    # line order says nothing about time, so triage compares these when every contender has one.
    first_time: float | None = None


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The verdict in its parts, as triage decided them (findings/triage.py): the one-paragraph ``verdict`` is
    written from these, and a renderer that lays the verdict out (the HTML page) reads them. Not part of the
    findings contract: there each finding's ``primary`` says the same."""

    causes: tuple[Finding, ...] = ()  # the root-cause findings, the first leading; none: no root cause
    consequences: tuple[Finding, ...] = ()  # the other findings at error or worse: what followed from it
    next_step: str = ""  # the leading cause's advice
    warnings: tuple[Finding, ...] = ()  # without a root cause: the job works, degraded
    notes: tuple[Finding, ...] = ()  # without a root cause: worth knowing
    caveat: str = ""  # what the verdict cannot speak for: input that was not read to its end

    @property
    def healthy(self) -> bool:
        return not self.causes

    @property
    def cause(self) -> Finding | None:
        return self.causes[0] if self.causes else None


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


class ProblemKind(StrEnum):
    """What went wrong reading one input (the contract's ``inputs[].problems[].kind``): new ones may be
    added, none renamed."""

    TRUNCATED = "truncated"  # a compressed stream ends early; what was decoded before ``offset`` is read
    CORRUPT = "corrupt"  # a compressed stream breaks at ``offset``; what was decoded before it is read
    UNREADABLE = "unreadable"  # could not be opened (or read on from ``offset``): ``reason``
    BINARY = "binary"  # not a text log: nothing of it is read
    NUL_PADDED = "nul_padded"  # ``bytes`` NUL bytes left out: the padding or holes a crash leaves in a file
    INVALID_UTF8 = "invalid_utf8"  # ``lines`` lines held bytes that are not UTF-8 (read with U+FFFD)


@dataclass(frozen=True, slots=True)
class InputProblem:
    """One problem of one input; the fields its kind does not use are None."""

    kind: ProblemKind
    offset: int | None = None  # decompressed bytes read before the input broke off
    bytes: int | None = None
    lines: int | None = None
    reason: str | None = None

    @property
    def cuts_input(self) -> bool:
        """Whether some of the input was not read at all (as opposed to read and repaired)."""
        return self.kind in _CUTTING

    def describe(self) -> str:
        """The problem in a few words, for a note on stderr or in the text report."""
        offset = f"{self.offset:,}" if self.offset is not None else "?"
        reason = f" ({self.reason})" if self.reason else ""
        kept = f"the {offset} bytes decoded before the break were read{reason}"
        match self.kind:
            case ProblemKind.TRUNCATED:
                return f"compressed stream is truncated: {kept}"
            case ProblemKind.CORRUPT:
                return f"compressed stream is corrupt: {kept}"
            case ProblemKind.UNREADABLE:
                at = f" after {offset} bytes" if self.offset else ""
                return f"could not be read{at}: {self.reason}"
            case ProblemKind.BINARY:
                return f"looks like binary data, not a text log: not read{reason}"
            case ProblemKind.NUL_PADDED:
                return f"{self.bytes:,} NUL bytes (the padding or holes a crash leaves) left out"
            case ProblemKind.INVALID_UTF8:
                return f"{self.lines:,} line(s) held bytes that are not UTF-8, read as U+FFFD"
        return self.kind.value


_CUTTING = (ProblemKind.TRUNCATED, ProblemKind.CORRUPT, ProblemKind.UNREADABLE, ProblemKind.BINARY)


@dataclass(frozen=True, slots=True)
class InputInfo:
    path: str
    bytes: int
    lines: int
    unparsed_lines: int
    problems: tuple[InputProblem, ...] = ()


@dataclass(frozen=True, slots=True)
class Report:
    inputs: tuple[InputInfo, ...]
    job: JobSummary
    verdict: str
    findings: tuple[Finding, ...]
    ranks: tuple[RankState, ...]
    schema: str = FINDINGS_SCHEMA
    schema_version: str = FINDINGS_SCHEMA_VERSION
    notes: tuple[str, ...] = field(default=())
    views: ReportViews | None = None  # for the HTML report; not part of the JSON contract
    dumps: DumpAudit | None = None  # Flight Recorder dumps read, expected and missing
    next_run: tuple[NextRunAdvice, ...] = ()  # what to capture next time, from what this input lacks
    diagnosis: Diagnosis = field(default_factory=Diagnosis)  # the verdict in its parts (not in the JSON)

    @property
    def worst_severity(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)

    @property
    def lines(self) -> int:
        """Lines read from all inputs."""
        return sum(i.lines for i in self.inputs)

    @property
    def unparsed_lines(self) -> int:
        """NCCL/PyTorch lines of all inputs that no grammar understood."""
        return sum(i.unparsed_lines for i in self.inputs)

    @property
    def bytes(self) -> int:
        return sum(i.bytes for i in self.inputs)

    @property
    def cut_short(self) -> bool:
        """Whether some input was not read to its end (skipped, truncated, unreadable, binary)."""
        return any(p.cuts_input for i in self.inputs for p in i.problems)


# ---------------------------------------------------------------------------------------------- views
# What the HTML report draws, computed by nccl_logsift.views. They are not part of the findings contract:
# the JSON rendering leaves them out.


class CellState(StrEnum):
    """One cell of the rank × collective grid."""

    ALL = "all"  # every member reached (NCCL) or completed (PyTorch) this position
    REACHED = "reached"  # this rank reached it, some peers did not
    PENDING = "pending"  # PyTorch: enqueued on this rank, not completed
    MISSING = "missing"  # this rank never reached it while a peer did
    # ... and the verdict has a root cause elsewhere: this rank was held up by it (a milder state than the
    # culprit's own missing calls, so the grid reads as the verdict does)
    HELD = "held"
    MISMATCH = "mismatch"  # this rank called something else than the majority here
    UNKNOWN = "unknown"  # nothing in the logs says


class RankRole(StrEnum):
    """What the verdict makes of a rank: the grid shows the same split as the verdict's cause and
    consequences (``Diagnosis``)."""

    ROOT_CAUSE = "root-cause"  # a root-cause finding names it
    CONSEQUENCE = "consequence"  # a consequence names it, or it stopped behind a root cause elsewhere
    BYSTANDER = "bystander"  # neither


@dataclass(frozen=True, slots=True)
class GridColumn:
    position: (
        int | None
    )  # 1-based call number (NCCL) or SeqNum (PyTorch); None marks a gap of skipped positions
    op: str | None  # what most members called here, when the kept calls say
    skipped: int = 0  # positions a gap column stands for
    mark: str | None = None  # "divergence", "last-common" or "stuck"


@dataclass(frozen=True, slots=True)
class GridRow:
    label: str
    host: str | None
    ranks: tuple[int, ...]  # global ranks this row stands for (one, or a node's ranks)
    last: int | None  # last position reached (1-based; None: none)
    role: RankRole  # of a node row: the most telling role of its ranks (root cause, then consequence)
    behind: bool  # some cell is not at the front (missing, pending, mismatch, unknown)
    cells: tuple[CellState, ...]
    notes: tuple[str, ...]  # one per cell: what a tooltip says

    @property
    def culprit(self) -> bool:
        return self.role is RankRole.ROOT_CAUSE


@dataclass(frozen=True, slots=True)
class Grid:
    title: str
    source: str  # "nccl" (COLL lines per communicator) or "pytorch" (work SeqNum per process group)
    columns: tuple[GridColumn, ...]
    rows: tuple[GridRow, ...]
    by_node: bool  # rows are nodes, each aggregating its ranks
    summary: str
    culprit: bool  # a finding names a rank of this grid


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    t: float  # seconds since the timeline's start
    kind: str  # "warn", "error", "timeout", "exit", "outlier"
    label: str


@dataclass(frozen=True, slots=True)
class TimelineLane:
    label: str
    host: str | None
    culprit: bool
    bins: tuple[int, ...]  # collectives logged per time bin
    last: float | None  # seconds: the lane's last collective
    events: tuple[TimelineEvent, ...]


@dataclass(frozen=True, slots=True)
class Timeline:
    start: str  # wall-clock time of t = 0, as printed
    span: float  # seconds covered
    clock: str  # "timestamp", "collector" or "tms" (relative per process)
    lanes: tuple[TimelineLane, ...]
    peak: int  # most collectives in one bin of one lane
    by_node: bool
    note: str


@dataclass(frozen=True, slots=True)
class GpuNode:
    rank: int | None
    cuda_dev: int | None
    bus_id: str | None
    culprit: bool


@dataclass(frozen=True, slots=True)
class HostNode:
    name: str
    gpus: tuple[GpuNode, ...]
    nics: tuple[str, ...]  # as NCCL printed them: mlx5_0:1/IB, eth0:10.0.0.1<0>
    intra: tuple[str, ...]  # intra-node transports with counts: "P2P/CUMEM/read × 48"
    culprit: bool
    fallback: bool  # a transport finding names this host


@dataclass(frozen=True, slots=True)
class HostLink:
    a: str
    b: str
    transport: str  # "NET/IB", "NET/Socket", "P2P", ...
    gdr: bool | None  # GPUDirect RDMA on every connection (None: not a NET link)
    connections: int
    channels: int
    fallback: bool


@dataclass(frozen=True, slots=True)
class Topology:
    hosts: tuple[HostNode, ...]
    links: tuple[HostLink, ...]
    rings: tuple[str, ...]  # "channel 0: 0 → 1 → … (2 hops between nodes)"
    note: str


@dataclass(frozen=True, slots=True)
class ReportViews:
    grids: tuple[Grid, ...] = ()
    timeline: Timeline | None = None
    topology: Topology | None = None
    notes: tuple[str, ...] = ()  # what could not be drawn, and why
    culprit_ranks: tuple[int, ...] = ()  # named by the root-cause findings, each once
    culprit_hosts: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------- flight recorder
# What the report says about PyTorch Flight Recorder dumps and about what the next run should capture; both
# are part of the findings contract (``dumps`` and ``next_run``), in every output.


@dataclass(frozen=True, slots=True)
class DumpFile:
    rank: int | None
    path: str
    entries: int | None
    version: str | None
    problem: str | None  # why it could not be read (then entries and version are None)


@dataclass(frozen=True, slots=True)
class NamedDump:
    """A dump path a log line names: where a rank said it wrote its dump, and whether it was read."""

    rank: int | None
    path: str
    read: bool
    line: Evidence


@dataclass(frozen=True, slots=True)
class DumpAudit:
    dumped: tuple[int, ...]  # ranks whose dump was read
    expected: tuple[int, ...]  # ranks that should have dumped: asked to by a timeout or a peer's signal
    missing: tuple[int, ...]  # expected, and no dump read
    written: tuple[int, ...]  # ranks whose logs say their dump was written ("trace successfully dumped")
    files: tuple[DumpFile, ...]
    named: tuple[NamedDump, ...]
    summary: str


@dataclass(frozen=True, slots=True)
class NextRunAdvice:
    """A setting for the next run, for something this job's input lacks."""

    missing: str  # what the input lacks, in words
    setting: str  # the environment variable or launcher option that captures it
    why: str  # what it would have told about this job
