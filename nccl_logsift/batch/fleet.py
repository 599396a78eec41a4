"""The fleet summary: polars over the batch dataset, into frozen values the fleet page and the CLI show.

A *root cause* is a finding the triage marked primary; the hosts, GPUs and NICs *implicated* are those
of the culprit ranks of root causes, counted once per job. Hosts come from the findings themselves, a
rank's GPU from the ``gpus`` table (host and PCI bus id, which name the device whatever
CUDA_VISIBLE_DEVICES says). NICs need the parser tables (``--tables``): a rank's NIC is the HCA named by
the IB errors it logged (NCCL names it from 2.27 on; earlier releases only name the peer).
"""

from __future__ import annotations

import glob
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl

from nccl_logsift.batch import dataset

TOP = 20  # culprits listed per category
PROBLEMS = 50  # failed and incomplete jobs listed by name
LISTED = 5000  # jobs in the page's job list, most recent first: the page stays a few MB
UNKNOWN_VERSION = "unknown"


@dataclass(frozen=True, slots=True)
class KindCount:
    kind: str
    root_cause_jobs: int  # jobs where a finding of this kind is a root cause
    jobs: int  # jobs with a finding of this kind at all
    findings: int


@dataclass(frozen=True, slots=True)
class Culprit:
    host: str
    device: str | None  # None for a host; "GPU 1 (3d000)" or "mlx5_0" for a device
    jobs: int  # jobs in which it was implicated in a root cause
    kinds: tuple[str, ...]  # the root-cause kinds it was implicated in

    @property
    def name(self) -> str:
        return self.host if self.device is None else f"{self.host} {self.device}"


@dataclass(frozen=True, slots=True)
class VersionRow:
    nccl_version: str
    jobs: int  # analysed jobs that ran this NCCL version
    root_cause_jobs: int
    counts: tuple[int, ...]  # jobs per root-cause kind, in the order of FleetSummary.version_kinds


@dataclass(frozen=True, slots=True)
class JobProblem:
    job_id: str
    archive: str
    status: str
    message: str


@dataclass(frozen=True, slots=True)
class JobEntry:
    """One job of the page's job list: what it concluded, and where its own report is."""

    job_id: str
    archive: str
    status: str
    run_date: str | None
    worst_severity: str | None
    root_causes: tuple[str, ...]  # kinds of the primary findings
    hosts: tuple[str, ...]
    verdict: str | None
    report: str | None  # path of the job's HTML report, relative to the dataset directory


@dataclass(frozen=True, slots=True)
class FleetSummary:
    jobs: int
    ok: int
    incomplete: int
    failed: int
    with_root_cause: int  # analysed jobs with at least one root cause
    bytes: int  # log text read over all analysed jobs
    first_run_date: str | None
    last_run_date: str | None
    kinds: tuple[KindCount, ...]
    hosts: tuple[Culprit, ...]
    gpus: tuple[Culprit, ...]
    nics: tuple[Culprit, ...]
    nics_known: bool  # the parser tables were written, so NICs could be resolved
    version_kinds: tuple[str, ...]
    versions: tuple[VersionRow, ...]
    problems: tuple[JobProblem, ...]
    job_list: tuple[JobEntry, ...]  # the LISTED most recent jobs


def scan(out: Path, table: str) -> pl.LazyFrame:
    """Every partition of one table of the dataset (empty, with its schema, when nothing was written)."""
    pattern = dataset.table_glob(out, table)
    if not glob.glob(pattern):
        schema = dataset.SCHEMAS.get(table)
        empty = pl.from_arrow(schema.empty_table()) if schema is not None else pl.DataFrame()
        return empty.lazy().with_columns(pl.lit(None, pl.String).alias(dataset.PARTITION))
    return pl.scan_parquet(pattern, hive_partitioning=True, hive_schema={dataset.PARTITION: pl.String})


def summarize(out: Path) -> FleetSummary:
    jobs = scan(out, "jobs").collect()
    analysed = jobs.filter(pl.col("status") != "failed")
    findings = (
        scan(out, "findings").join(analysed.lazy().select("job_key"), on="job_key", how="semi").collect()
    )
    roots = findings.filter(pl.col("primary"))
    status = dict(jobs.group_by("status").len().iter_rows())
    culprits = _culprit_ranks(roots)
    nics_known = bool(glob.glob(dataset.table_glob(out, "errors")))
    versions, version_kinds = _versions(analysed, roots)
    return FleetSummary(
        jobs=jobs.height,
        ok=status.get("ok", 0),
        incomplete=status.get("incomplete", 0),
        failed=status.get("failed", 0),
        with_root_cause=roots["job_key"].n_unique(),
        bytes=int(analysed["bytes"].sum() or 0),
        first_run_date=jobs[dataset.PARTITION].min() if jobs.height else None,
        last_run_date=jobs[dataset.PARTITION].max() if jobs.height else None,
        kinds=_kinds(findings),
        hosts=_ranked(
            roots.explode("hosts").rename({"hosts": "host"}).with_columns(device=pl.lit(None, pl.String))
        ),
        gpus=_ranked(_gpus(out, culprits)),
        nics=_ranked(_nics(out, culprits)) if nics_known else (),
        nics_known=nics_known,
        version_kinds=version_kinds,
        versions=versions,
        problems=_problems(jobs),
        job_list=_job_list(out, jobs),
    )


def _kinds(findings: pl.DataFrame) -> tuple[KindCount, ...]:
    counts = (
        findings.group_by("kind")
        .agg(
            root_cause_jobs=pl.col("job_key").filter(pl.col("primary")).n_unique(),
            jobs=pl.col("job_key").n_unique(),
            findings=pl.len(),
        )
        .sort(["root_cause_jobs", "jobs", "kind"], descending=[True, True, False])
    )
    return tuple(KindCount(**row) for row in counts.iter_rows(named=True))


def _culprit_ranks(roots: pl.DataFrame) -> pl.DataFrame:
    """One row per (job, culprit rank, root-cause kind)."""
    return roots.select("job_key", "kind", rank=pl.col("ranks")).explode("rank").drop_nulls("rank").unique()


def _gpus(out: Path, culprits: pl.DataFrame) -> pl.DataFrame:
    gpus = scan(out, "gpus").select("job_key", "host", "rank", "cuda_dev", "bus_id")
    device = pl.format("GPU {}", pl.col("cuda_dev").cast(pl.String).fill_null("?"))
    return (
        culprits.lazy()
        .join(gpus, on=["job_key", "rank"])
        .with_columns(
            device=pl.when(pl.col("bus_id").is_null())
            .then(device)
            .otherwise(pl.format("{} ({})", device, "bus_id"))
        )
        .collect()
    )


def _nics(out: Path, culprits: pl.DataFrame) -> pl.DataFrame:
    processes = scan(out, "processes").select("job_key", "host", "pid", rank="global_rank")
    hcas = (
        scan(out, "errors")
        .filter(pl.col("hca").is_not_null())
        .select("job_key", "host", "pid", device="hca")
        .unique()
    )
    return (
        culprits.lazy()
        .join(processes, on=["job_key", "rank"])
        .join(hcas, on=["job_key", "host", "pid"])
        .collect()
    )


def _ranked(implicated: pl.DataFrame) -> tuple[Culprit, ...]:
    """Hosts or devices by the number of jobs they were implicated in, most first (ties by name)."""
    ranked = (
        implicated.drop_nulls("host")
        .group_by("host", "device")
        .agg(jobs=pl.col("job_key").n_unique(), kinds=pl.col("kind").unique().sort())
        .sort(["jobs", "host", "device"], descending=[True, False, False], nulls_last=True)
        .head(TOP)
    )
    return tuple(
        Culprit(host=r["host"], device=r["device"], jobs=r["jobs"], kinds=tuple(r["kinds"]))
        for r in ranked.iter_rows(named=True)
    )


def _versions(analysed: pl.DataFrame, roots: pl.DataFrame) -> tuple[tuple[VersionRow, ...], tuple[str, ...]]:
    """Root-cause kinds by NCCL version: jobs per (version, kind), versions in release order."""
    per_job = analysed.select("job_key", nccl_version=pl.col("nccl_version").fill_null(UNKNOWN_VERSION))
    kinds = roots.select("job_key", "kind").unique()
    version_kinds = tuple(
        kinds.group_by("kind").len().sort(["len", "kind"], descending=[True, False])["kind"]
    )
    totals = per_job.group_by("nccl_version").agg(jobs=pl.len())
    rooted = per_job.join(kinds, on="job_key")
    roots_per_version = rooted.group_by("nccl_version").agg(root_cause_jobs=pl.col("job_key").n_unique())
    matrix = (
        rooted.group_by("nccl_version", "kind")
        .agg(n=pl.col("job_key").n_unique())
        .pivot(on="kind", index="nccl_version", values="n")
    )
    table = (
        totals.join(roots_per_version, on="nccl_version", how="left")
        .join(matrix, on="nccl_version", how="left")
        .with_columns(pl.col("root_cause_jobs", *[k for k in version_kinds]).fill_null(0))
        .with_columns(order=_version_order(pl.col("nccl_version")))
        .sort("order", "nccl_version", nulls_last=True)
    )
    rows = tuple(
        VersionRow(r["nccl_version"], r["jobs"], r["root_cause_jobs"], tuple(r[k] for k in version_kinds))
        for r in table.iter_rows(named=True)
    )
    return rows, version_kinds


def _version_order(version: pl.Expr) -> pl.Expr:
    """Release order of 'major.minor.patch' (RCCL and unknown last)."""
    parts = version.str.extract_groups(r"^(\d+)\.(\d+)(?:\.(\d+))?$")
    return pl.concat_list(parts.struct.field(str(i)).cast(pl.Int64, strict=False) for i in (1, 2, 3))


def _problems(jobs: pl.DataFrame) -> tuple[JobProblem, ...]:
    rows = (
        jobs.filter(pl.col("status") != "ok")
        .sort(["status", "archive", "job_id"])
        .head(PROBLEMS)
        .select("job_id", "archive", "status", message=pl.col("message").fill_null(""))
    )
    return tuple(JobProblem(**r) for r in rows.iter_rows(named=True))


def _job_list(out: Path, jobs: pl.DataFrame) -> tuple[JobEntry, ...]:
    rows = jobs.sort([dataset.PARTITION, "job_id"], descending=[True, False], nulls_last=True).head(LISTED)
    entries = []
    for r in rows.iter_rows(named=True):
        report = dataset.report_path(r[dataset.PARTITION], r["job_key"])
        entries.append(
            JobEntry(
                job_id=r["job_id"],
                archive=r["archive"],
                status=r["status"],
                run_date=r[dataset.PARTITION],
                worst_severity=r["worst_severity"],
                root_causes=tuple(r["primary_kinds"] or ()),
                hosts=tuple(r["hosts"] or ()),
                verdict=r["verdict"],
                report=report.as_posix() if (out / report).is_file() else None,
            )
        )
    return tuple(entries)


def summary_json(summary: FleetSummary) -> str:
    """The summary as JSON (``fleet.json``): the same values the fleet page shows."""
    document = asdict(summary)
    for key in ("hosts", "gpus", "nics"):
        for culprit, value in zip(document[key], getattr(summary, key)):
            culprit["name"] = value.name
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
