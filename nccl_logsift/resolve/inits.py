"""Communicator initialisation: the instances the Init/Destroy/Abort lines open and end, the
communicators no member finished initialising, and the ranks inferred for processes that failed before
their Init line."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from nccl_logsift.resolve.communicators import instances as build_instances
from nccl_logsift.resolve.failures import failure_rows, unranked_exits
from nccl_logsift.resolve.job import Job, per_job, rank_range
from nccl_logsift.resolve.processes import PROC
from nccl_logsift.resolve.ranks import known_ranks, with_job_rank

LIFECYCLE = ("Init", "Destroy", "Abort")


@per_job
def lifecycle_instances(job: Job) -> pl.DataFrame:
    """Communicator instances from the Init/Destroy/Abort rows: the ``communicators`` table, which the
    stream's numbering built from those rows (its other rows, summaries and revokes, neither open nor end
    an instance; the same table on the 42 real logs and the fixtures, row for row); built here for a Job
    without it. Building it again took 0.13 s for a 4096-rank job."""
    built = job.table("communicators")
    if "start_seq" in built.columns:
        return built
    comms = job.table("comms")
    if comms.is_empty() or "what" not in comms.columns:
        return _no_instances(job)
    rows = comms.filter(pl.col("what").is_in(LIFECYCLE) & pl.col("comm").is_not_null())
    if rows.is_empty():
        return _no_instances(job)
    return build_instances(rows.drop([c for c in ("global_rank",) if c in rows.columns]))


def _no_instances(job: Job) -> pl.DataFrame:
    table = job.table("communicators")
    return (
        table.clear()
        if not table.is_empty()
        else pl.DataFrame(
            schema={
                "host": pl.String,
                "pid": pl.Int64,
                "comm": pl.UInt64,
                "init_started": pl.Boolean,
                "init_completed": pl.Boolean,
                "rank": pl.Int64,
                "nranks": pl.Int64,
                "comm_uid": pl.String,
                "global_rank": pl.Int64,
                "world_size": pl.Int64,
                "start_seq": pl.Int64,
                "complete_seq": pl.Int64,
                "source_id": pl.UInt16,
                "line_no": pl.UInt32,
                "bus_id": pl.String,
                "nvml_dev": pl.Int64,
                "cuda_dev": pl.Int64,
            }
        )
    )


@dataclass
class InitState:
    """Per communicator that no member finished: who started, who failed, who never joined."""

    uid: str
    nranks: int
    world: bool
    members: pl.DataFrame  # instances that started and never completed
    failed: list[int] = field(default_factory=list)  # global ranks that logged an error in init
    waiting: list[int] = field(default_factory=list)  # global ranks still in init, no error
    missing: list[int] = field(default_factory=list)  # communicator ranks absent from every Init line
    failed_elsewhere: list[int] = field(default_factory=list)  # missing ranks that failed before Init START
    unexplained: list[int] = field(default_factory=list)  # missing ranks with no sign of life


@per_job
def stalled_inits(job: Job) -> list[InitState]:
    """The communicators whose init nobody completed, split into failed / waiting / missing ranks."""
    inst = lifecycle_instances(job)
    if inst.is_empty():
        return []
    failures = failure_rows(job)
    ranks = known_ranks(job)
    world = job.world_size
    out = []
    # The stalled communicators first, in one pass: a 4096-rank job has ~3k, nearly all of them complete.
    stalled = inst.filter(
        ~pl.col("init_completed").any().over("comm_uid") & pl.col("init_started").any().over("comm_uid")
    )
    for (uid,), group in stalled.group_by("comm_uid"):
        members = group.filter(pl.col("init_started"))
        # A size too large for its column is null (parse/kinds.py): the members seen are then the size.
        nranks = int(members["nranks"].max() or members.height)
        is_world = world is not None and nranks == world
        failed_seq = (
            members.select(*PROC, "start_seq", "global_rank", "rank")
            .join(failures.select(*PROC, "seq"), on=PROC, how="left")
            .with_columns(hit=pl.col("seq") >= pl.col("start_seq"))
            .group_by(*PROC, "global_rank", "rank")
            .agg(pl.col("hit").any())
        )
        state = InitState(uid, nranks, is_world, members)
        state.failed = sorted(
            int(r) for r in failed_seq.filter(pl.col("hit").fill_null(False))["global_rank"].drop_nulls()
        )
        state.waiting = sorted(
            int(r) for r in failed_seq.filter(~pl.col("hit").fill_null(False))["global_rank"].drop_nulls()
        )
        present = {int(r) for r in members["rank"].drop_nulls()}
        state.missing = sorted(set(rank_range(nranks)) - present)
        if state.missing and is_world:
            _explain_missing(job, state, failures, ranks)
        else:
            state.unexplained = list(state.missing)
        out.append(state)
    return sorted(out, key=lambda s: (not s.world, s.uid))


def _explain_missing(job: Job, state: InitState, failures: pl.DataFrame, ranks: pl.DataFrame) -> None:
    """Missing world ranks that are processes which failed before they logged Init START."""
    inst_procs = lifecycle_instances(job).select(*PROC).unique()
    failed_procs = failures.select(*PROC).unique().join(inst_procs, on=PROC, how="anti")
    known = failed_procs.join(ranks, on=PROC, how="left")
    named = {int(r) for r in known["rank"].drop_nulls()} & set(state.missing)
    # Processes that died of a top-level Python exception before NCCL init, in a stream without rank labels.
    unnamed = known.filter(pl.col("rank").is_null()).height + unranked_exits(job)
    rest = [r for r in state.missing if r not in named]
    if unnamed >= len(rest):
        named |= set(rest)
        rest = []
    state.failed_elsewhere = sorted(named)
    state.unexplained = rest


@per_job
def unranked_failures(job: Job) -> dict[tuple[str, int], int]:
    """Ranks for failing processes that never logged an Init line, inferred from the world's missing ranks.

    Only when the count matches exactly (k failing processes without a rank, k missing world ranks) is the
    assignment made, and then in host/pid order: the set of ranks is certain, the pairing is a guess that
    only matters when the processes are on different hosts.
    """
    out: dict[tuple[str, int], int] = {}
    failures = failure_rows(job)
    if failures.is_empty():
        return out
    ranks = known_ranks(job)
    inst_procs = lifecycle_instances(job).select(*PROC).unique()
    procs = (
        failures.select(*PROC).unique().join(inst_procs, on=PROC, how="anti").join(ranks, on=PROC, how="anti")
    )
    if procs.is_empty():
        return out
    for state in stalled_inits(job):
        if not state.world:
            continue
        taken = set(ranks["rank"].drop_nulls().to_list())
        missing = [r for r in state.missing if r not in taken]
        if len(missing) == procs.height:
            for (host, pid), rank in zip(procs.sort(PROC).iter_rows(), missing):
                out[(host, int(pid))] = rank
        break
    return out


def resolve_rows(job: Job, frame: pl.DataFrame) -> pl.DataFrame:
    """``job_rank`` for rows of a table, including inferred ranks of processes that failed before Init."""
    out = with_job_rank(job, frame)
    guess = unranked_failures(job)
    if guess and set(PROC) <= set(out.columns):
        g = pl.DataFrame(
            {"host": [h for h, _ in guess], "pid": [p for _, p in guess], "_guess": list(guess.values())},
            schema={"host": pl.String, "pid": pl.Int64, "_guess": pl.Int64},
        )
        out = (
            out.join(g, on=PROC, how="left")
            .with_columns(job_rank=pl.coalesce("job_rank", "_guess"))
            .drop("_guess")
        )
    return out
