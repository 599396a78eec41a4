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

from typing import TypeVar

import polars as pl

from nccl_logsift.parse.schema import ENGINE

SEQ = "seq"
PROCESS = ["host", "pid"]
INSTANCE = ["host", "pid", "comm", "generation"]
# The most ranks a job is taken to have. The diagnosis enumerates the ranks of a world, a communicator or a
# launcher's task range to find the silent ones, so a size beyond this in a log is damage, not a job:
# "nranks 8000000000000000" (it fits a 64-bit column) asked for petabytes.
MAX_RANKS = 1 << 20


# The comms rows an instance is made of (Init opens it, Destroy or Abort ends it), and the columns of theirs
# that instances() reads, with their types.
INSTANCE_ROWS = ("Init", "Destroy", "Abort")
COMMS_SCHEMA: dict[str, pl.DataType] = {
    "source_id": pl.UInt16(),
    "line_no": pl.UInt32(),
    "part": pl.UInt8(),
    "host": pl.String(),
    "pid": pl.Int64(),
    "what": pl.String(),
    "phase": pl.String(),
    "comm": pl.UInt64(),
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
}
INSTANCE_COLUMNS = frozenset({*COMMS_SCHEMA, *INSTANCE})

# A query's input and result: eager, or lazy where several steps run as one query (LiveInstances).
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


# Where a line's source, line number and part sit in its ``seq``.
_SOURCE, _LINE = 1 << 40, 1 << 8


def with_seq(frame: Frame) -> Frame:
    """A total order over all lines of all sources: source, then line, then part of a glued line."""
    return frame.with_columns(
        (
            pl.col("source_id").cast(pl.Int64) * _SOURCE
            + pl.col("line_no").cast(pl.Int64) * _LINE
            + pl.col("part").cast(pl.Int64)
        ).alias(SEQ)
    )


def line_of_seq(seq: pl.Expr) -> list[pl.Expr]:
    """The line a ``seq`` (of :func:`with_seq`) stands for: its source_id, line_no and part columns."""
    return [
        (seq // _SOURCE).cast(pl.UInt16).alias("source_id"),
        (seq % _SOURCE // _LINE).cast(pl.UInt32).alias("line_no"),
        (seq % _LINE).cast(pl.UInt8).alias("part"),
    ]


def number_instances(comms: Frame) -> Frame:
    """Give every Init/Destroy/summary row the ``generation`` of its (host, pid, comm) instance (a query
    of ``comms``'s kind: eager or lazy)."""
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
    return pl.concat([inits, others.select(inits.collect_schema().names())]).sort(SEQ)


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
    ended = (
        numbered.filter(pl.col("what").is_in(["Destroy", "Abort"]))
        .group_by(INSTANCE)
        .agg(ended=pl.col("what").first(), end_seq=pl.col(SEQ).min())
    )
    table = _instance_rows(init).join(ended, on=INSTANCE, how="left", maintain_order="left")  # in start order
    table = table.with_columns(_ORDINAL.alias("ordinal"))
    return _with_world_ranks(_without_parents(_with_uids(table)))


# An instance's position among the instances of its size that its process created (the fallback uid's k).
_ORDINAL = pl.int_range(pl.len()).over([*PROCESS, "nranks"], order_by="start_seq")
# The columns _with_uids adds to find an instance's parent, that instances() does not keep.
_PARENT_COLUMNS = ("ordinal", "parent_seq", "parent_uid")


def _instance_rows(init: Frame) -> Frame:
    """One row per instance of the numbered Init rows ``init``, in start order."""
    first = pl.col("phase") == "START"
    done = pl.col("phase") == "COMPLETE"
    return (
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


def _parent_candidates(table: Frame) -> Frame:
    """Each instance as a split child's parent: its pointer, its start, the uid a child builds on."""
    return table.select(
        *PROCESS,
        pl.col("comm").alias("parent"),
        pl.col("start_seq").alias("parent_seq"),
        pl.coalesce("comm_id", pl.format("n{}#{}", pl.col("nranks"), pl.col("ordinal"))).alias("parent_uid"),
    )


def _with_uids(table: Frame, earlier: pl.DataFrame | None = None) -> Frame:
    """``table`` (instances with their ``ordinal``) with ``comm_uid`` and ``uid_exact``, and the parent each
    split child was matched to (``parent_seq``, ``parent_uid``). ``earlier`` adds parents that are not in
    ``table`` (instances :class:`LiveInstances` no longer holds), as :func:`_parent_candidates` gives them."""
    # Split children without commId: parent's uid (the parent pointer's latest instance before the child).
    parents = _parent_candidates(table)
    if earlier is not None:
        parents = pl.concat([parents, earlier.lazy() if isinstance(parents, pl.LazyFrame) else earlier])
    table = table.sort("start_seq").join_asof(
        parents.sort("parent_seq"),
        left_on="start_seq",
        right_on="parent_seq",
        by=[*PROCESS, "parent"],
        strategy="backward",
        check_sortedness=False,
    )
    split_uid = pl.format("{}/color{}#{}", "parent_uid", pl.col("color"), pl.col("split_count").fill_null(0))
    return table.with_columns(
        comm_uid=pl.when(pl.col("comm_id").is_not_null())
        .then(pl.col("comm_id"))
        .when(pl.col("parent_uid").is_not_null() & pl.col("color").is_not_null())
        .then(split_uid)
        .otherwise(pl.format("n{}#{}", pl.col("nranks"), pl.col("ordinal"))),
        uid_exact=pl.col("comm_id").is_not_null()
        | pl.col("parent_uid").str.starts_with("0x").fill_null(False),
    )


def _without_parents(table: pl.DataFrame) -> pl.DataFrame:
    return table.drop(_PARENT_COLUMNS)


def _with_world_ranks(table: pl.DataFrame) -> pl.DataFrame:
    """``table`` with each instance's ``global_rank`` (its process's rank in the world) and ``world_size``."""
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


class LiveInstances:
    """The instances that calls from now on can belong to, kept up to date as Init rows arrive in line order.

    A call belongs to the latest instance of its (host, pid, comm) that started before it. Rows come in line
    order, so once a later Init opened a new instance of a key, the one it replaced takes no more rows and
    no later call; and an instance that exists has every instance that started before it, so its
    generation and its ordinal among its process's instances of its size (its fallback uid) never change.
    This keeps each key's latest instance with its Init rows (a COMPLETE line may still fill in its commId)
    and, of the instances it let go, only those a live split child names as its parent, with the uid the
    child builds on (for a child whose init is under way, whose parent a later line may name, the last
    instance of every pointer of its process that started before it). :meth:`update` then costs what is
    live and what arrived, where building every instance from every Init row at each batch was quadratic
    in a log that keeps creating communicators; its instances are those :func:`instances` finds over all
    rows so far, with the same generation, rank and uid. Rows that come out of line order (a caller's
    mistake) raise ``ValueError``.
    """

    def __init__(self) -> None:
        self._rows: pl.DataFrame | None = None  # each key's latest instance's Init rows, generation, ordinal
        self._counts: pl.DataFrame | None = None  # host, pid, nranks → instances so far
        self._parents: pl.DataFrame | None = None  # let-go instances a live child names (_parent_candidates)
        self._last_seq: int | None = None

    def update(self, inits: pl.DataFrame) -> pl.DataFrame:
        """Take the Init rows that arrived since the last update (comms rows of ``INSTANCE_COLUMNS``) and
        return every instance they opened or touched, and every other key's latest instance: ``INSTANCE``,
        ``start_seq``, ``rank``, ``nranks``, ``comm_uid`` and the other columns of :func:`instances` but
        the ended and global-rank ones, in start order.

        The steps are lazy queries, run in four collects: eagerly, each step was a query of its own (~60 an
        update, 17 ms on ~1,400 instances, however few rows arrived)."""
        new = with_seq(inits.filter(pl.col("comm").is_not_null() & (pl.col("what") == "Init")))
        if not new.is_empty():
            first, last = new.select(pl.col(SEQ).min().alias("first"), pl.col(SEQ).max().alias("last")).row(0)
            if self._last_seq is not None and first <= self._last_seq:
                raise ValueError("Init rows out of line order")
            self._last_seq = last
        new = new.drop(SEQ)
        held = self._rows
        if new.is_empty() and (held is None or held.is_empty()):
            return _empty_instances().drop("ended", "end_seq", "global_rank", "world_size")
        rows = (
            new.lazy()
            if held is None
            else pl.concat([held.lazy().drop("generation", "ordinal"), new.lazy()], how="vertical_relaxed")
        )
        key = ["host", "pid", "comm"]
        numbered = number_instances(rows)
        if held is not None:  # generations continue from each held instance's
            base = held.lazy().group_by(key).agg(base=pl.col("generation").first() - 1)
            numbered = numbered.join(base, on=key, how="left", nulls_equal=True, maintain_order="left")
            numbered = numbered.with_columns(
                pl.col("generation") + pl.col("base").fill_null(0).cast(pl.Int32)
            ).drop("base")
        numbered = numbered.collect(engine=ENGINE)
        table = _instance_rows(numbered.lazy())
        table = table.with_columns(_ORDINAL.alias("ordinal"))
        if held is not None:  # a held instance keeps its ordinal; a new one counts on from the process's
            kept = held.lazy().select(*INSTANCE, pl.col("ordinal").alias("held")).unique(INSTANCE)
            table = table.join(kept, on=INSTANCE, how="left", nulls_equal=True, maintain_order="left")
            new_ordinal = pl.int_range(pl.len()).over(
                [*PROCESS, "nranks", pl.col("held").is_null()], order_by="start_seq"
            )
            table = table.with_columns(ordinal=new_ordinal)
            if self._counts is not None:
                table = table.join(
                    self._counts.lazy(),
                    on=[*PROCESS, "nranks"],
                    how="left",
                    nulls_equal=True,
                    maintain_order="left",
                ).with_columns(ordinal=pl.col("ordinal") + pl.col("count").fill_null(0))
                table = table.drop("count")
            table = table.with_columns(ordinal=pl.coalesce("held", "ordinal")).drop("held")
        table = _with_uids(table, self._parents).collect(engine=ENGINE)
        self._let_go(numbered, table, held)
        return table.drop("parent_seq", "parent_uid", "ordinal")

    def _let_go(self, numbered: pl.DataFrame, table: pl.DataFrame, held: pl.DataFrame | None) -> None:
        """Keep each key's latest instance (its rows, generation and ordinal), the count of instances per
        process and size, and the let-go instances a kept one names as its parent: three lazy queries,
        collected together."""
        key = ["host", "pid", "comm"]
        instances = table.lazy()
        latest = instances.group_by(key).agg(pl.col("generation").max())
        live = instances.join(latest, on=[*key, "generation"], how="semi", nulls_equal=True)
        rows = (
            numbered.lazy()
            .join(latest, on=[*key, "generation"], how="semi", nulls_equal=True)
            .join(
                live.select(*INSTANCE, "ordinal"),
                on=INSTANCE,
                how="left",
                nulls_equal=True,
                maintain_order="left",
            )
            .drop(SEQ)
        )
        held_keys = (
            held.lazy().select(*INSTANCE).unique()
            if held is not None
            else pl.LazyFrame(schema=table.select(INSTANCE).schema)
        )
        opened = instances.join(held_keys, on=INSTANCE, how="anti", nulls_equal=True)
        added = opened.group_by(*PROCESS, "nranks").agg(count=pl.len().cast(pl.Int64))
        counts = added if self._counts is None else pl.concat([self._counts.lazy(), added])
        counts = counts.group_by(*PROCESS, "nranks").agg(pl.col("count").sum())
        gone = instances.join(latest, on=[*key, "generation"], how="anti", nulls_equal=True)
        candidates = _parent_candidates(gone)
        if self._parents is not None:
            candidates = pl.concat([self._parents.lazy(), candidates])
        named = live.select(*PROCESS, "parent", "parent_seq").drop_nulls(["parent", "parent_seq"])
        # An instance whose init is under way (no COMPLETE yet) may still learn its parent from a later
        # line: keep, of every pointer of its process, the last instance that started before it.
        pending = live.filter(~pl.col("init_completed")).select(*PROCESS, pl.col("start_seq").alias("child"))
        before = (
            candidates.join(pending, on=PROCESS, how="inner", nulls_equal=True)
            .filter(pl.col("parent_seq") <= pl.col("child"))
            .group_by(*PROCESS, "parent", "child")
            .agg(pl.col("parent_seq").max())
            .select(*PROCESS, "parent", "parent_seq")
        )
        named = pl.concat([named, before], how="vertical_relaxed")
        parents = candidates.join(
            named.unique(), on=[*PROCESS, "parent", "parent_seq"], how="semi", nulls_equal=True
        )
        self._rows, self._counts, self._parents = pl.collect_all([rows, counts, parents], engine=ENGINE)


# One row per communicator instance per process: the `communicators` table. The columns an instance takes
# from its Init rows have their types there (COMMS_SCHEMA).
_FROM_INIT = (
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
)
INSTANCE_SCHEMA: dict[str, pl.DataType] = {
    **{name: COMMS_SCHEMA[name] for name in ("host", "pid", "comm")},
    "generation": pl.Int32(),
    "start_seq": pl.Int64(),
    "complete_seq": pl.Int64(),
    "init_started": pl.Boolean(),
    "init_completed": pl.Boolean(),
    **{name: COMMS_SCHEMA[name] for name in (*_FROM_INIT, "source_id", "line_no")},
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
