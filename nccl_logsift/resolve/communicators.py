"""Communicator instances and the ranks of every process, from the Init/Destroy rows of the ``comms`` table.

The rank is not in NCCL's line prefix (grammar §2.5). Inside a process a communicator is its pointer;
the pointer is reused after ncclCommDestroy, so each Init opens a new *instance* (``generation``) of the
(host, pid, comm) key. Across processes an instance belongs to a communicator ``comm_uid``:

* ``commId`` when NCCL prints it (2.16.2+; split children until 2.22.3);
* for split children without commId (2.23.4+): the parent's uid with the split's color and count;
* otherwise (pre-2.16): ``n<nranks>#<k>``, the k-th communicator of that size the process created. SPMD
  programs create communicators in the same order on every rank, so this matches across processes, but
  two disjoint groups of the same size (two tensor-parallel groups) share a uid; ``uid_exact`` says so.

A process's global rank is its rank in the first communicator of the largest size (the world).
"""

from __future__ import annotations

import polars as pl

SEQ = "seq"
PROCESS = ["host", "pid"]
INSTANCE = ["host", "pid", "comm", "generation"]
# The most ranks a job is taken to have. The diagnosis enumerates the ranks of a world, a communicator or a
# launcher's task range to find the silent ones, so a size beyond this in a log is damage, not a job:
# "nranks 8000000000000000" (it fits a 64-bit column) asked for petabytes.
MAX_RANKS = 1 << 20


# The comms rows an instance is made of (Init opens it, Destroy or Abort ends it), and the columns of theirs
# that instances() reads.
INSTANCE_ROWS = ("Init", "Destroy", "Abort")
INSTANCE_COLUMNS = frozenset(
    {
        *INSTANCE,
        "source_id",
        "line_no",
        "part",
        "what",
        "phase",
        "rank",
        "nranks",
        "cuda_dev",
        "nvml_dev",
        "bus_id",
        "comm_id",
        "func",
        "parent",
        "color",
        "split_count",
    }
)


def with_seq(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """A total order over all lines of all sources: source, then line, then part of a glued line."""
    return frame.with_columns(
        (
            pl.col("source_id").cast(pl.Int64) * (1 << 40)
            + pl.col("line_no").cast(pl.Int64) * (1 << 8)
            + pl.col("part").cast(pl.Int64)
        ).alias(SEQ)
    )


def number_instances(comms: pl.DataFrame) -> pl.DataFrame:
    """Give every Init/Destroy/summary row the ``generation`` of its (host, pid, comm) instance."""
    rows = with_seq(comms).sort(SEQ)
    key = ["host", "pid", "comm"]
    inits = rows.filter(pl.col("what") == "Init")
    prev_phase = pl.col("phase").shift(1).over(key, order_by=SEQ)
    # A new instance starts at START, or at a COMPLETE not preceded by its own START (pre-2.18.3). Only Init
    # rows count here: the per-comm summary line (2.20.3+) sits between START and COMPLETE.
    opens = (pl.col("phase") == "START") | (prev_phase != "START").fill_null(True)
    inits = inits.with_columns(generation=opens.cast(pl.Int32).cum_sum().over(key, order_by=SEQ))
    others = rows.filter(pl.col("what") != "Init").join_asof(
        inits.select(*key, SEQ, "generation"), on=SEQ, by=key, strategy="backward", check_sortedness=False
    )
    return pl.concat([inits, others.select(inits.columns)]).sort(SEQ)


def ends_once(comms: pl.DataFrame) -> pl.DataFrame:
    """``comms`` (Init, Destroy and Abort rows) less every end but the first after each Init of a (host, pid,
    comm): an instance ends at its first Destroy or Abort, and the later ones (a log that repeats its teardown
    lines) change nothing :func:`instances` finds, but held a row each."""
    key = ["host", "pid", "comm"]
    init = pl.col("what") == "Init"
    rows = with_seq(comms).with_columns(opened=init.cast(pl.Int32).cum_sum().over(key, order_by=SEQ))
    first_end = pl.col(SEQ).filter(~init).min().over([*key, "opened"])
    return rows.filter(init | (pl.col(SEQ) == first_end)).drop(SEQ, "opened")


def instances(comms: pl.DataFrame) -> pl.DataFrame:
    """One row per communicator instance in a process, with its uid and the process's global rank."""
    numbered = number_instances(comms).filter(pl.col("comm").is_not_null())
    init = numbered.filter(pl.col("what") == "Init")
    if init.is_empty():
        return _empty_instances()
    first = pl.col("phase") == "START"
    done = pl.col("phase") == "COMPLETE"
    table = (
        init.group_by(INSTANCE)
        .agg(
            start_seq=pl.col(SEQ).min(),
            complete_seq=pl.col(SEQ).filter(done).min(),
            init_started=first.any(),
            init_completed=done.any(),
            rank=pl.col("rank").first(),
            nranks=pl.col("nranks").first(),
            cuda_dev=pl.col("cuda_dev").drop_nulls().first(),
            nvml_dev=pl.col("nvml_dev").drop_nulls().first(),
            bus_id=pl.col("bus_id").drop_nulls().first(),
            comm_id=pl.col("comm_id").drop_nulls().first(),
            func=pl.col("func").drop_nulls().first(),
            parent=pl.col("parent").drop_nulls().first(),
            color=pl.col("color").drop_nulls().first(),
            split_count=pl.col("split_count").drop_nulls().first(),
            source_id=pl.col("source_id").first(),
            line_no=pl.col("line_no").first(),
        )
        .sort("start_seq")
    )
    ended = (
        numbered.filter(pl.col("what").is_in(["Destroy", "Abort"]))
        .group_by(INSTANCE)
        .agg(ended=pl.col("what").first(), end_seq=pl.col(SEQ).min())
    )
    table = table.join(ended, on=INSTANCE, how="left", maintain_order="left")  # rows stay in start order
    return _assign_uids(table)


def _assign_uids(table: pl.DataFrame) -> pl.DataFrame:
    ordinal = pl.int_range(pl.len()).over([*PROCESS, "nranks"], order_by="start_seq")
    table = table.with_columns(
        fallback_uid=pl.format("n{}#{}", pl.col("nranks"), ordinal),
    )
    # Split children without commId: parent's uid (the parent pointer's latest instance before the child).
    parents = table.select(
        *PROCESS,
        pl.col("comm").alias("parent"),
        pl.col("start_seq").alias("parent_seq"),
        pl.coalesce("comm_id", "fallback_uid").alias("parent_uid"),
    ).sort("parent_seq")
    table = table.sort("start_seq").join_asof(
        parents,
        left_on="start_seq",
        right_on="parent_seq",
        by=[*PROCESS, "parent"],
        strategy="backward",
        check_sortedness=False,
    )
    split_uid = pl.format("{}/color{}#{}", "parent_uid", pl.col("color"), pl.col("split_count").fill_null(0))
    table = table.with_columns(
        comm_uid=pl.when(pl.col("comm_id").is_not_null())
        .then(pl.col("comm_id"))
        .when(pl.col("parent_uid").is_not_null() & pl.col("color").is_not_null())
        .then(split_uid)
        .otherwise(pl.col("fallback_uid")),
        uid_exact=pl.col("comm_id").is_not_null()
        | pl.col("parent_uid").str.starts_with("0x").fill_null(False),
    ).drop("fallback_uid", "parent_seq", "parent_uid")
    # A typed literal: every size may be null (too large for its column, parse/kinds.py), no world then.
    world = table["nranks"].max()
    worlds = table.filter(pl.col("nranks") == pl.lit(world, table.schema["nranks"])).sort("start_seq")
    process_rank = worlds.group_by(PROCESS, maintain_order=True).agg(global_rank=pl.col("rank").first())
    # A process that drives several GPUs (nccl-tests -g N; one process per node) holds several ranks of the
    # same world communicator, one per GPU: an instance's global rank is then the world rank of the process
    # on the instance's device. (A process that re-creates its world communicator holds one at a time.)
    several = (
        worlds.group_by(*PROCESS, "comm_uid").agg(ranks=pl.col("rank").n_unique()).filter(pl.col("ranks") > 1)
    )
    device_rank = (
        worlds.join(several.select(PROCESS), on=PROCESS, how="semi")
        .drop_nulls("cuda_dev")
        .group_by(*PROCESS, "cuda_dev", maintain_order=True)
        .agg(device_rank=pl.col("rank").first())
    )
    return (
        table.join(process_rank, on=PROCESS, how="left", maintain_order="left")
        .join(device_rank, on=[*PROCESS, "cuda_dev"], how="left", maintain_order="left")
        .with_columns(
            global_rank=pl.coalesce("device_rank", "global_rank"), world_size=pl.lit(world, pl.Int64)
        )
        .drop("device_rank")
    )


# One row per communicator instance per process: the `communicators` table.
INSTANCE_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String(),
    "pid": pl.Int64(),
    "comm": pl.UInt64(),
    "generation": pl.Int32(),
    "start_seq": pl.Int64(),
    "complete_seq": pl.Int64(),
    "init_started": pl.Boolean(),
    "init_completed": pl.Boolean(),
    "rank": pl.Int64(),
    "nranks": pl.Int64(),
    "cuda_dev": pl.Int64(),
    "nvml_dev": pl.Int64(),
    "bus_id": pl.String(),
    "comm_id": pl.String(),
    "func": pl.String(),
    "parent": pl.UInt64(),
    "color": pl.Int64(),
    "split_count": pl.Int64(),
    "source_id": pl.UInt16(),
    "line_no": pl.UInt32(),
    "ended": pl.String(),
    "end_seq": pl.Int64(),
    "comm_uid": pl.String(),
    "uid_exact": pl.Boolean(),
    "global_rank": pl.Int64(),
    "world_size": pl.Int64(),
}
# One row per process (per GPU of a process that holds several world ranks): the `processes` table.
PROCESS_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String(),
    "pid": pl.Int64(),
    "global_rank": pl.Int64(),
    "world_size": pl.Int64(),
    "cuda_dev": pl.Int64(),
    "bus_id": pl.String(),
    "communicators": pl.UInt32(),
    "incomplete_inits": pl.UInt32(),
}


def _empty_instances() -> pl.DataFrame:
    return pl.DataFrame(schema=INSTANCE_SCHEMA)


def process_ranks(instance_table: pl.DataFrame) -> pl.DataFrame:
    """(host, pid) → global rank and world size: the rank of the process's first instance of the world (of
    its first GPU's, for a process that drives several)."""
    first = (
        instance_table.filter(pl.col("nranks") == pl.col("world_size"))
        .sort("start_seq")
        .unique(PROCESS, keep="first", maintain_order=True)
        .select(*PROCESS, "global_rank")
    )
    processes = instance_table.select(*PROCESS, "world_size")
    processes = processes.unique(PROCESS, keep="first", maintain_order=True)
    joined = processes.join(first, on=PROCESS, how="left", maintain_order="left")
    return joined.select(*PROCESS, "global_rank", "world_size")


def device_ranks(instance_table: pl.DataFrame) -> pl.DataFrame:
    """(host, pid, dev) → global rank, for the processes that hold ranks of the world on several GPUs (empty
    for one process per GPU). ``dev`` is the CUDA device in NCCL's line prefix, the Init line's cudaDev."""
    ranked = instance_table.filter(pl.col("nranks") == pl.col("world_size")).drop_nulls("cuda_dev")
    several = ranked.group_by(PROCESS).agg(n=pl.col("global_rank").n_unique()).filter(pl.col("n") > 1)
    return (
        ranked.join(several.select(PROCESS), on=PROCESS, how="semi")
        .sort("start_seq")
        .unique([*PROCESS, "cuda_dev"], keep="first", maintain_order=True)
        .select(*PROCESS, pl.col("cuda_dev").alias("dev"), "global_rank")
    )
