"""Who is who: the world rank of every process, GPU and row of a job, resolved once, with the evidence it came
from.

A rank can be read from several places, and they are not equally sure. Strongest first; a weaker source
only fills what the stronger ones left unknown:

``nccl_init``
    NCCL's Init line (``comm 0x… rank 3 nranks 8 cudaDev 3 busId …``) of the world communicator ties a
    process (host, pid) and its GPU to its rank. Rows whose line carries NCCL's ``host:pid:tid`` prefix take
    their process's rank (``global_rank``, attached as the tables are written).
``pg_prefix``
    PyTorch's prefix of the default process group (``[PG ID 0 PG GUID 0(default_pg) Rank 3]``, and the older
    ``[PG 0 Rank 3]`` and ``[Rank 3]``): the rank in the default group is the world rank.
``torch_label``
    torchrun's ``[rank3]:`` / ``[default3]:`` line prefixes, on every line of that rank.
``mpi_label``, ``task_label``
    mpirun's ``[1,3]<stderr>:`` and ``srun -l``'s ``3:``. They number processes, not GPUs: a task that drives
    two GPUs is one label and two ranks. They count as ranks only where that is proven (:func:`label_maps`).
``local_rank``
    torchrun's local rank, on a single host that holds every rank: the process whose CUDA device it is.

:func:`with_job_rank` gives rows their rank; :func:`identity` is the table of every process and GPU with
its communicators, its PyTorch process groups and its launcher labels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from nccl_logsift.resolve.cache import per_job
from nccl_logsift.resolve.communicators import with_seq
from nccl_logsift.resolve.exits import assemble_exits
from nccl_logsift.resolve.hosts import nccl_host_expr

if TYPE_CHECKING:
    from nccl_logsift.resolve.job import Job

# Where a rank was read, strongest first (the module's docstring); a process's rank may also come from
# torchrun's failure summary ("local_rank: 2 (pid: 2346374)") or, for a process that logged no Init line,
# from its first ``Trees`` line.
RANK_SOURCES = (
    "nccl_init",
    "pg_prefix",
    "torch_label",
    "mpi_label",
    "task_label",
    "launcher_summary",
    "nccl_trees",
    "local_rank",
)
# Launcher labels that number processes (a process may drive several GPUs): ranks only where proven.
PROCESS_LABELS = ("task", "mpi_rank")
_LABEL_SOURCE = {"torch_rank": "torch_label", "mpi_rank": "mpi_label", "task": "task_label"}
PROCESS = ["host", "pid"]
DEFAULT_GROUP = "0"  # the default process group's PG ID and GUID


def default_group() -> pl.Expr:
    """Rows of a PyTorch line whose PG prefix names the default group, or that has a bare ``[Rank N]``: the
    GUID ``0`` where there is one (2.5+; 2.13's WorkNCCL prefix has no PG ID), else PG ID 0, else the
    description ``default_pg``, else no PG at all."""
    guid, pg_id, desc = pl.col("pg_guid"), pl.col("pg_id"), pl.col("pg_desc")
    return (
        pl.when(guid.is_not_null())
        .then(guid == DEFAULT_GROUP)
        .when(pg_id.is_not_null())
        .then(pg_id == 0)
        .when(desc.is_not_null())
        .then(desc == "default_pg")
        .otherwise(pl.lit(True))
    )


@per_job
def label_maps(job: Job) -> dict[str, dict[int, int] | None]:
    """Per launcher label of PROCESS_LABELS, how a label names a rank: None when its value is the rank, else
    label → the (first) global rank of the process that carries it.

    The NCCL lines of a labelled process say which process a label is (host and pid) and so which ranks it
    holds. Where every label so proven equals its process's rank (one GPU a process, the usual case), or
    nothing proves anything (no NCCL Init line), the value is taken as the rank. Where one is not (a task
    that drives several GPUs: task 1 holds ranks 2 and 3), the proven labels map to their process's rank and
    the others to none, never to the rank that happens to share their number on another host.
    """
    maps: dict[str, dict[int, int] | None] = dict.fromkeys(PROCESS_LABELS)
    lines, procs = job.lines, job.processes
    if lines.is_empty() or procs.is_empty() or not {"host", "pid"} <= set(lines.columns):
        return maps
    first = procs.group_by("host", "pid").agg(
        rank=pl.col("global_rank").min().cast(pl.Int64), ranks=pl.col("global_rank").n_unique()
    )
    for column in PROCESS_LABELS:
        if column not in lines.columns:
            continue
        proven = (
            lines.select("host", "pid", label=pl.col(column).cast(pl.Int64))
            .drop_nulls()
            .unique()
            .join(first, on=["host", "pid"], how="inner")
        )
        if proven.is_empty():
            continue
        if proven.filter((pl.col("label") != pl.col("rank")) | (pl.col("ranks") > 1)).is_empty():
            continue  # every proven label is its process's one rank
        named = proven.group_by("label").agg(pl.col("rank").min(), processes=pl.len())
        maps[column] = dict(named.filter(pl.col("processes") == 1).select("label", "rank").iter_rows())
    return maps


def label_rank(job: Job, column: str) -> pl.Expr:
    """The global rank a launcher label names (see :func:`label_maps`)."""
    value = pl.col(column).cast(pl.Int64)
    mapping = label_maps(job).get(column)
    return value if mapping is None else value.replace_strict(mapping, default=None, return_dtype=pl.Int64)


def with_job_rank(job: Job, frame: pl.DataFrame, provenance: bool = False) -> pl.DataFrame:
    """Add ``job_rank``: the world rank of each row, from the strongest source the row has (see the module's
    docstring): the row's own process rank, else its process's rank from another source
    (:func:`process_ranks`), else the default group's PG prefix, else a
    launcher label, else the local rank. With ``provenance``, also ``rank_source``."""
    if frame.is_empty():
        out = frame.with_columns(job_rank=pl.lit(None, pl.Int64))
        return out.with_columns(rank_source=pl.lit(None, pl.String)) if provenance else out
    known = set(PROCESS) <= set(frame.columns)
    if known:
        by_process = process_ranks(job).select(
            *PROCESS, _known=pl.col("rank"), _known_source=pl.col("rank_source")
        )
        # Joined on the key columns alone and set beside the frame: process_ranks has one row per (host,
        # pid), so the left join keeps the frame's rows in order, and a join of the whole frame copied every
        # column (a 4096-rank job's 321k connection lines, 31 columns).
        found = frame.select(PROCESS).join(by_process, on=PROCESS, how="left", maintain_order="left")
        frame = frame.with_columns(found.get_column("_known"), found.get_column("_known_source"))
    candidates = _candidates(job, frame)
    out = frame.with_columns(
        job_rank=pl.coalesce([rank for rank, _ in candidates]) if candidates else pl.lit(None, pl.Int64)
    )
    if provenance:
        source = pl.lit(None, pl.String)
        for rank, name in reversed(candidates):
            source = pl.when(rank.is_not_null()).then(name).otherwise(source)
        out = out.with_columns(rank_source=source)
    if known:
        out = out.drop("_known", "_known_source")
    return _with_local_ranks(job, out, provenance)


def _candidates(job: Job, frame: pl.DataFrame) -> list[tuple[pl.Expr, pl.Expr]]:
    """(the rank it gives, the source's name) for each source the frame's columns hold, strongest first."""
    columns = set(frame.columns)
    found: list[tuple[pl.Expr, pl.Expr]] = []
    if "global_rank" in columns:
        found.append((pl.col("global_rank").cast(pl.Int64), pl.lit("nccl_init")))
    if "_known" in columns:
        found.append((pl.col("_known").cast(pl.Int64), pl.col("_known_source")))
    if {"pg_rank", "pg_id", "pg_guid", "pg_desc"} <= columns:
        found.append((pl.when(default_group()).then(pl.col("pg_rank").cast(pl.Int64)), pl.lit("pg_prefix")))
    for label in ("torch_rank", "mpi_rank", "task"):
        if label in columns:
            rank = label_rank(job, label) if label in PROCESS_LABELS else pl.col(label).cast(pl.Int64)
            found.append((rank, pl.lit(_LABEL_SOURCE[label])))
    return found


def _with_local_ranks(job: Job, out: pl.DataFrame, provenance: bool) -> pl.DataFrame:
    """Fill unknown ranks from torchrun's local rank where one host holds every rank: the process whose
    CUDA device that local rank is."""
    procs = job.processes
    # One host in the processes table is a single-host job only when it holds every rank: the ranks of a node
    # that died before NCCL init print no Init line, and their local ranks are not this host's.
    whole = job.world_size is None or procs.height >= job.world_size
    if "local_rank" not in out.columns or procs.is_empty() or procs["host"].n_unique() != 1 or not whole:
        return out
    by_dev = (
        procs.select(
            pl.col("cuda_dev").cast(pl.Int64).alias("local_rank"), pl.col("global_rank").alias("_by_dev")
        )
        .drop_nulls()
        .unique("local_rank", keep="none")
    )
    out = out.with_columns(pl.col("local_rank").cast(pl.Int64)).join(
        by_dev, on="local_rank", how="left", maintain_order="left"
    )
    if provenance:
        filled = pl.col("job_rank").is_null() & pl.col("_by_dev").is_not_null()
        out = out.with_columns(
            rank_source=pl.when(filled).then(pl.lit("local_rank")).otherwise("rank_source")
        )
    return out.with_columns(job_rank=pl.coalesce("job_rank", "_by_dev")).drop("_by_dev")


IDENTITY_SCHEMA = {
    "rank": pl.Int64,
    "rank_source": pl.String,
    "host": pl.String,
    "pid": pl.Int64,
    "cuda_dev": pl.Int64,
    "bus_id": pl.String,
    "communicators": pl.List(
        pl.Struct({"comm_uid": pl.String, "comm_id": pl.String, "rank": pl.Int64, "nranks": pl.Int64})
    ),
    "groups": pl.List(
        pl.Struct({"pg_id": pl.Int64, "pg_guid": pl.String, "pg_desc": pl.String, "pg_rank": pl.Int64})
    ),
    "labels": pl.List(pl.Struct({"label": pl.String, "value": pl.String})),
}


@per_job
def identity(job: Job) -> pl.DataFrame:
    """The job's rank-identity table: a row per GPU of a process NCCL's Init lines name (its world rank, host,
    pid, CUDA device and bus id), and a row per rank that only PyTorch or the launcher names; each with its
    ``rank_source`` (:data:`RANK_SOURCES`), its NCCL communicators (comm_uid, commId, its rank in each and
    their sizes), its PyTorch process groups (PG ID, GUID, description, its rank in each) and its launcher
    labels (``torch_rank``, ``task``, ``mpi_rank``, ``launcher_host``: the pdsh or kubectl host name).
    Sorted by rank; processes without a known rank last."""
    gpus = _gpus(job)
    groups = _groups(job)
    labels = _labels(job)
    known = gpus.filter(pl.col("rank").is_not_null())["rank"]
    others = (
        pl.concat([groups.select("rank", "rank_source"), labels.select("rank", "rank_source")])
        .filter(~pl.col("rank").is_in(known.implode()))
        .with_columns(order=_order("rank_source"))
        .sort("rank", "order")
        .unique("rank", keep="first", maintain_order=True)
        .drop("order")
    )
    table = pl.concat([gpus, others], how="diagonal_relaxed")
    table = table.join(groups.select("rank", "groups"), on="rank", how="left", nulls_equal=False)
    table = table.join(labels.select("rank", "labels"), on="rank", how="left", nulls_equal=False)
    columns = [
        pl.col(c).cast(t) if c in table.columns else pl.lit(None, t).alias(c)
        for c, t in IDENTITY_SCHEMA.items()
    ]
    lists = [c for c, t in IDENTITY_SCHEMA.items() if isinstance(t, pl.List)]
    return (
        table.select(columns)
        .with_columns(pl.col(c).fill_null(pl.lit([], IDENTITY_SCHEMA[c])) for c in lists)
        .sort("rank", "host", "pid", "cuda_dev", nulls_last=True)
    )


def _gpus(job: Job) -> pl.DataFrame:
    """A row per (process, GPU) of the NCCL Init lines: its world rank (where it holds one) and its
    communicators."""
    comms = job.table("communicators")
    if comms.is_empty() or "rank" not in comms.columns:
        return pl.DataFrame(schema={k: IDENTITY_SCHEMA[k] for k in ("rank", "rank_source", "host", "pid")})
    gpu = ["host", "pid", "cuda_dev"]
    world = (
        comms.filter(pl.col("nranks") == pl.col("world_size"))
        .sort("start_seq")
        .unique(gpu, keep="first", maintain_order=True)
        .select(*gpu, world_rank=pl.col("rank"))
    )
    member = pl.struct(
        pl.col("comm_uid"),
        pl.col("comm_id").cast(pl.String)
        if "comm_id" in comms.columns
        else pl.lit(None, pl.String).alias("comm_id"),
        pl.col("rank").cast(pl.Int64),
        pl.col("nranks").cast(pl.Int64),
    )
    per_gpu = (
        comms.sort("start_seq")
        .group_by(gpu, maintain_order=True)
        .agg(bus_id=pl.col("bus_id").drop_nulls().first(), communicators=member.unique(maintain_order=True))
    )
    joined = per_gpu.join(world, on=gpu, how="left", nulls_equal=True)
    return joined.select(
        rank=pl.col("world_rank"),
        rank_source=pl.when(pl.col("world_rank").is_not_null()).then(pl.lit("nccl_init")),
        host=pl.col("host"),
        pid=pl.col("pid"),
        cuda_dev=pl.col("cuda_dev"),
        bus_id=pl.col("bus_id"),
        communicators=pl.col("communicators"),
    )


def _groups(job: Job) -> pl.DataFrame:
    """Per rank: the PyTorch process groups its lines name, and the strongest source of its rank there."""
    torch = job.table("torch")
    if torch.is_empty() or "pg_rank" not in torch.columns:
        return pl.DataFrame(
            schema={"rank": pl.Int64, "rank_source": pl.String, "groups": IDENTITY_SCHEMA["groups"]}
        )
    rows = with_job_rank(
        job,
        torch.select(
            _present(
                torch,
                "global_rank",
                "pg_id",
                "pg_guid",
                "pg_desc",
                "pg_rank",
                "torch_rank",
                "mpi_rank",
                "task",
                "local_rank",
            )
        ),
        provenance=True,
    )
    rows = rows.filter(pl.col("job_rank").is_not_null())
    prefixed = pl.any_horizontal(pl.col("pg_guid", "pg_id", "pg_desc").is_not_null())
    group = pl.struct(pl.col("pg_id").cast(pl.Int64), "pg_guid", "pg_desc", pl.col("pg_rank").cast(pl.Int64))
    return rows.group_by(rank="job_rank").agg(
        rank_source=_strongest("rank_source"),
        groups=group.filter(prefixed).unique().sort(),
    )


def _labels(job: Job) -> pl.DataFrame:
    """Per rank: the launcher labels its lines carry, and the strongest source of its rank there."""
    lines = job.lines
    names = [c for c in ("torch_rank", "task", "mpi_rank", "launcher_host") if c in lines.columns]
    if lines.is_empty() or not names:
        return pl.DataFrame(
            schema={"rank": pl.Int64, "rank_source": pl.String, "labels": IDENTITY_SCHEMA["labels"]}
        )
    wanted = _present(
        lines, "global_rank", "host", "pid", "torch_rank", "mpi_rank", "task", "local_rank", "launcher_host"
    )
    labelled = lines.select(wanted).filter(pl.any_horizontal(pl.col(names).is_not_null())).unique()
    rows = with_job_rank(job, labelled, provenance=True).filter(pl.col("job_rank").is_not_null())
    long = rows.unpivot(
        index=["job_rank", "rank_source"], on=names, variable_name="label", value_name="value"
    )
    return (
        long.with_columns(pl.col("value").cast(pl.String))
        .group_by(rank="job_rank")
        .agg(
            rank_source=_strongest("rank_source"),
            labels=pl.struct("label", "value").filter(pl.col("value").is_not_null()).unique().sort(),
        )
    )


def _order(column: str) -> pl.Expr:
    """A rank source's place in RANK_SOURCES: the lower, the stronger."""
    return pl.col(column).replace_strict(RANK_SOURCES, list(range(len(RANK_SOURCES))), default=None)


def _strongest(column: str) -> pl.Expr:
    return pl.col(column).sort_by(_order(column), nulls_last=True).first()


def _present(frame: pl.DataFrame, *columns: str) -> list[str]:
    return [c for c in columns if c in frame.columns]


@per_job
def process_ranks(job: Job) -> pl.DataFrame:
    """(host, pid) → its world rank and ``rank_source``, from every source that names a process: its Init
    lines, the launcher labels of its lines (the most frequent), torchrun's failure summary, the Trees
    line of a process that never logged an Init line. The strongest source wins (:data:`RANK_SOURCES`)."""
    frames = [
        frame for frame in (_by_init(job), _by_label(job), _by_summary(job), _by_trees(job)) if frame.height
    ]
    if not frames:
        return pl.DataFrame(
            schema={"host": pl.String, "pid": pl.Int64, "rank": pl.Int64, "rank_source": pl.String}
        )
    merged = pl.concat(
        [
            f.select(
                pl.col("host").cast(pl.String),
                pl.col("pid").cast(pl.Int64),
                pl.col("rank").cast(pl.Int64),
                "rank_source",
            )
            for f in frames
        ]
    )
    return (
        merged.drop_nulls()
        .sort(_order("rank_source"), maintain_order=True)
        .unique(PROCESS, keep="first", maintain_order=True)
    )


def known_ranks(job: Job) -> pl.DataFrame:
    """(host, pid) → world rank (:func:`process_ranks` without the source)."""
    return process_ranks(job).drop("rank_source")


def _by_init(job: Job) -> pl.DataFrame:
    procs = job.processes
    if procs.is_empty():
        return pl.DataFrame()
    return procs.select(*PROCESS, pl.col("global_rank").alias("rank"), rank_source=pl.lit("nccl_init"))


def _by_label(job: Job) -> pl.DataFrame:
    """The rank the launcher labels of a process's lines name most often."""
    lines = job.lines
    names = [c for c in ("torch_rank", "mpi_rank", "task") if c in lines.columns]
    if lines.is_empty() or not set(PROCESS) <= set(lines.columns) or not names:
        return pl.DataFrame()
    labels = [label_rank(job, c) if c in PROCESS_LABELS else pl.col(c).cast(pl.Int64) for c in names]
    source = pl.lit(None, pl.String)
    for label, name in reversed(list(zip(labels, names, strict=True))):
        source = pl.when(label.is_not_null()).then(pl.lit(_LABEL_SOURCE[name])).otherwise(source)
    # Columns first, then rows: filtering the whole table would copy every column of every line.
    labelled = (
        lines.select(*PROCESS, pl.coalesce(*labels).alias("rank"), source.alias("rank_source"))
        .filter(pl.col("host").is_not_null() & pl.col("pid").is_not_null())
        .drop_nulls("rank")
    )
    if labelled.is_empty():
        return labelled
    return labelled.group_by(PROCESS).agg(pl.col("rank").mode().sort().first(), pl.col("rank_source").first())


def _by_summary(job: Job) -> pl.DataFrame:
    """torchrun's failure summary: the local rank and pid of each failed worker, with its global rank."""
    exits = job.table("exits")
    if exits.is_empty():
        return pl.DataFrame()
    try:
        done = assemble_exits(exits)
    except Exception:  # a malformed summary must not hide the other sources
        return pl.DataFrame()
    if done.is_empty():
        return done
    done = done.filter(pl.col("pid").is_not_null() & pl.col("rank").is_not_null())
    return done.select(
        nccl_host_expr(pl.col("host")).alias("host"), "pid", "rank", rank_source=pl.lit("launcher_summary")
    )


def _by_trees(job: Job) -> pl.DataFrame:
    """The rank in the first ``Trees … ->me->`` line of processes that never logged an Init line.

    Before NCCL 2.18.3 a rank that fails during init prints no Init line at all, but it may print its
    Trees line first. Its first communicator is taken for the world communicator (PyTorch creates the
    default process group's communicator first), so that communicator rank is its global rank.
    """
    topo = job.table("topology")
    if topo.is_empty() or "event" not in topo.columns or "trees" not in topo.columns:
        return pl.DataFrame()
    rows = topo.filter(
        (pl.col("event") == "trees") & pl.col("host").is_not_null() & pl.col("trees").is_not_null()
    )
    if rows.is_empty():
        return rows
    inst = job.table("comms")
    if not inst.is_empty():
        rows = rows.join(
            inst.filter(pl.col("what") == "Init").select(*PROCESS).unique(), on=PROCESS, how="anti"
        )
    rows = rows.with_columns(
        rank=pl.col("trees").str.extract(r"->(-?\d+)->", 1).cast(pl.Int64, strict=False)
    ).drop_nulls("rank")
    if rows.is_empty():
        return rows
    first = with_seq(rows).sort("seq").group_by(PROCESS).agg(pl.col("rank").first())
    return first.with_columns(rank_source=pl.lit("nccl_trees"))
