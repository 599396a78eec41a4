"""PyTorch's own account of its work: watchdog timeouts and work states per rank and process group, and
the PG keys and labels that make groups comparable across ranks and PyTorch versions."""

from __future__ import annotations

from collections import Counter

import polars as pl

from nccl_logsift.resolve.job import Job, per_job

# PyTorch watchdog events that say "this rank's work #seq did not finish" (pytorch-and-peers.md §1.4).
TIMEOUT_EVENTS = ("watchdog_timeout", "blocking_wait_timeout")
# Lines that report a rank's last enqueued and completed work of a PG. The dump signal is the snapshot a rank
# takes when a peer's watchdog fires: where it stood as the failure began (grammars/torch/heartbeat.toml).
WORK_STATE_EVENTS = ("timeout_at_work", "exception_at_work", "failure_at_work", "dump_signal")
# last_enqueued / last_completed beyond this are uninitialised memory, not counts (seen in real logs:
# "last completed NCCL work: 3904955349522264369").
PLAUSIBLE_SEQ = 1 << 40


def world_pg(frame: pl.DataFrame) -> pl.Expr:
    """Rows of the default process group: pg_id 0, or no PG prefix at all."""
    return pl.col("pg_id").is_null() | (pl.col("pg_id") == 0) if "pg_id" in frame.columns else pl.lit(True)


DEFAULT_PG = "0"


def pg_key() -> pl.Expr:
    """A process-group key equal across the ranks of one group and different between groups: the GUID
    (PyTorch 2.5+ ``[PG ID i PG GUID g(desc) Rank r]``, and 2.13's ``[PG GUID g(desc) Rank r]``), else the
    number of the older ``[PG n Rank r]`` prefixes, else the description; lines without a PG prefix belong
    to the default group ("0").

    Never the PG ID when a GUID is there: the ID counts the groups *this process* created
    (ProcessGroupNCCL's ``local_id_``), so the tensor-parallel group of ranks 0-3 and that of ranks 4-7
    both print ``PG ID 1``; the GUID is the group's name, unique in the job (ProcessGroupNCCL.cpp,
    ``createLogPrefix`` and the comment above it)."""
    desc = pl.col("pg_desc")
    return pl.coalesce(
        pl.col("pg_guid"),
        pl.col("pg_id").cast(pl.String),
        pl.when(desc == "default_pg").then(pl.lit(DEFAULT_PG)).otherwise(desc),
        pl.lit(DEFAULT_PG),
    )


def _prefixed() -> pl.Expr:
    """Rows whose line carried a PG prefix (any of its forms)."""
    return pl.any_horizontal(pl.col("pg_guid", "pg_id", "pg_desc").is_not_null())


@per_job
def pg_groups(job: Job) -> pl.DataFrame:
    """One row per process group the PyTorch lines name: its key (:func:`pg_key`), GUID, PG ID and
    description, the ``label`` to show for it, the same in every table of the job ("2
    (PIPELINE_MODEL_PARALLEL_GROUP)"), and its ``pg_family``: the label without the GUID, shared by the groups
    that print the same PG ID and description. Where one ID names several groups, the label adds the GUID
    ("1 (GUID 5, TENSOR_MODEL_PARALLEL_GROUP)")."""
    torch = job.table("torch")
    schema = {"key": pl.String, "label": pl.String, "pg_family": pl.String}
    if torch.is_empty() or "pg_desc" not in torch.columns:
        return pl.DataFrame(schema=schema)
    groups = (
        torch.filter(_prefixed())
        .group_by(key=pg_key())
        .agg(
            guid=pl.col("pg_guid").drop_nulls().first(),
            id=pl.col("pg_id").drop_nulls().mode().sort().first(),
            desc=pl.col("pg_desc").drop_nulls().first(),
        )
        .sort("key")
    )
    shared = {i for i, n in Counter(groups["id"].drop_nulls().to_list()).items() if n > 1}
    rows = []
    for key, guid, pg_id, desc in groups.iter_rows():
        shown = key if guid is None else str(pg_id) if pg_id is not None else f"GUID {guid}"
        described = [desc] if desc is not None and desc != shown else []
        family = f"{shown} ({desc})" if described else shown
        notes = [f"GUID {guid}"] if guid is not None and pg_id in shared else []
        label = f"{shown} ({', '.join(notes + described)})" if notes + described else shown
        rows.append((key, label, family))
    return pl.DataFrame(rows, schema=schema, orient="row")


def pg_labels(job: Job) -> dict[str, str]:
    """PG key → its label (see :func:`pg_groups`), for the keys whose label differs."""
    groups = pg_groups(job).filter(pl.col("key") != pl.col("label"))
    return dict(zip(groups["key"].to_list(), groups["label"].to_list(), strict=True))


@per_job
def timeouts(job: Job) -> pl.DataFrame:
    """Watchdog timeout rows with the rank that logged them, its PG key and a plausible last-completed."""
    torch = job.table("torch")
    if torch.is_empty() or "event" not in torch.columns:
        return pl.DataFrame()
    rows = torch.filter(pl.col("event").is_in(TIMEOUT_EVENTS))
    if rows.is_empty():
        return rows
    rank = pl.coalesce(pl.col("torch_rank"), pl.col("work_rank"), pl.col("pg_rank"))
    rows = rows.with_columns(job_rank=rank.cast(pl.Int64))
    # "[Rank N] Watchdog caught ..." carries no PG prefix; the work-state line PyTorch prints right after it
    # on the same rank does ("[PG ID 2 PG GUID 5(PIPELINE_MODEL_PARALLEL_GROUP) Rank 1] failure
    # detected ...").
    states = _work_states(job)
    if not states.is_empty():
        # Sorted by line, then source (a total order: rows keep it, and equal lines of two files tie).
        follow = (
            states.select("source_id", "job_rank", "line_no", "part", pl.col("pg").alias("next_pg"))
            .sort("line_no", "source_id", "part")
            .drop("part")
        )
        rows = rows.sort("line_no", "source_id", "part").join_asof(
            follow,
            on="line_no",
            by=["source_id", "job_rank"],
            strategy="forward",
            tolerance=8,
            check_sortedness=False,
        )
    else:
        rows = rows.with_columns(next_pg=pl.lit(None, pl.String))
    # PyTorch 2.13 prefixes WorkNCCL's timeout with the group's GUID
    # ("[PG GUID 5(PIPELINE_MODEL_PARALLEL_GROUP) Rank 1]", pytorch PR #191440): its group's key.
    own = pl.when(_prefixed()).then(pg_key())
    rows = rows.with_columns(pg=own.otherwise(pl.coalesce("next_pg", pg_key())))
    return _labelled(rows, pg_labels(job))


def _labelled(frame: pl.DataFrame, labels: dict[str, str]) -> pl.DataFrame:
    """Replace PG keys by their display labels (the same map for every table, so groups stay equal)."""
    if not labels:
        return frame
    return frame.with_columns(pg=pl.col("pg").replace(labels))


@per_job
def work_states(job: Job) -> pl.DataFrame:
    """Work-state rows with PG keys turned into labels (see :func:`_work_states`)."""
    rows = _work_states(job)
    return rows if rows.is_empty() else _labelled(rows, pg_labels(job))


@per_job
def _work_states(job: Job) -> pl.DataFrame:
    """'Timeout at NCCL work' / 'failure detected by watchdog' rows: last enqueued / completed per rank and
    PG."""
    torch = job.table("torch")
    if torch.is_empty() or "event" not in torch.columns:
        return pl.DataFrame()
    rows = torch.filter(pl.col("event").is_in(WORK_STATE_EVENTS))
    plausible = lambda c: pl.when(pl.col(c).is_between(-1, PLAUSIBLE_SEQ)).then(pl.col(c))
    return rows.with_columns(
        job_rank=pl.coalesce(pl.col("torch_rank"), pl.col("pg_rank")).cast(pl.Int64),
        pg=pg_key(),
        last_enqueued=plausible("last_enqueued"),
        last_completed=plausible("last_completed"),
        implausible=~pl.col("last_completed").is_between(-1, PLAUSIBLE_SEQ)
        | ~pl.col("last_enqueued").is_between(-1, PLAUSIBLE_SEQ),
    )


# PyTorch events that say a collective failed or timed out (a job with them failed).
FAILURE_EVENTS = (
    "watchdog_timeout",
    "blocking_wait_timeout",
    "timeout_at_work",
    "exception_at_work",
    "failure_at_work",
    "ops_failed",
    "taking_down",
    "watchdog_terminated",
    "heartbeat_timeout",
)
