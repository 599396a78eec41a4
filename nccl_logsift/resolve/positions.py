"""Where each call sits in its communicator's sequence, comparable across ranks, and how far each member of
a communicator got.

Positions are compared within one communicator only: NCCL counts calls per communicator (:func:`positioned`:
opCount where it counts every call, else ``ordinal``, the parser's count of COLL lines, grammar §5.2).
A finding's ``#n`` is position + 1: nccl_logsift/call_numbers.py says it for users."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nccl_logsift.resolve.job import Job, per_job

P2P_OPS = ("Send", "Recv")


def positioned(coll: pl.DataFrame, stats: pl.DataFrame | None = None) -> pl.DataFrame:
    """Add ``position``: where a call sits in its communicator's sequence, comparable across ranks.

    The parser's ``ordinal`` counts COLL lines, which shifts when a line is lost (torn by another
    process's output, or cut off). Where opCount grows by exactly one per call on every member of a
    communicator (NCCL 2.4-2.7, and ungrouped calls of 2.9+ with network proxies, grammar §5.2), it survives
    such losses and is used instead; elsewhere (2.8, grouped calls, 2.27+ single node) the ordinal is.
    ``stats`` (per comm_uid and rank: calls, steady, min_opcount) judges the whole run when ``coll``
    holds only part of it (the digest of a large log).
    """
    if coll.is_empty():
        return coll.with_columns(position=pl.lit(None, pl.Int64))
    if stats is None or stats.is_empty():
        stats = (
            coll.sort("ordinal", "source_id", "line_no", "part")
            .group_by("comm_uid", "rank")
            .agg(
                steady=(pl.col("opcount").diff().drop_nulls() > 0).all(),
                min_opcount=pl.col("opcount").min(),
                calls=pl.len(),
            )
        )
    reliable = stats.group_by("comm_uid").agg(
        use=(pl.col("steady") & (pl.col("min_opcount") <= 1).fill_null(False)).all()
        & (pl.col("calls").max() > 1)
    )
    # An opCount too large for its column is null (parse/kinds.py): such a communicator is placed by ordinal.
    unread = coll.filter(pl.col("opcount").is_null())["comm_uid"].unique().implode()
    by_opcount = reliable.filter(pl.col("use") & ~pl.col("comm_uid").is_in(unread))["comm_uid"].to_list()
    return coll.with_columns(
        position=pl.when(pl.col("comm_uid").is_in(by_opcount))
        .then(pl.col("opcount"))
        .otherwise(pl.col("ordinal"))
    )


SIGNATURE = ("op", "count", "datatype", "redop", "root")


def with_signature(coll: pl.DataFrame) -> pl.DataFrame:
    """Add ``sig`` (what must match across ranks at one position) and ``is_p2p``."""
    return coll.with_columns(sig=pl.struct(SIGNATURE).hash(), is_p2p=pl.col("op").is_in(P2P_OPS))


def per_position(coll: pl.DataFrame) -> pl.DataFrame:
    """Per (comm_uid, ordinal) of positioned calls: how many, how many signatures, whether all are p2p, how
    many ops."""
    return (
        with_signature(coll)
        .group_by("comm_uid", "ordinal")
        .agg(
            n=pl.len(),
            kinds=pl.col("sig").n_unique(),
            p2p=pl.col("is_p2p").all(),
            nranks=pl.col("nranks").max(),
            # A count, not the list of ops: only how many is read, and a sorted list per position cost a
            # 4096-rank job's 49k positions more than the rest of this query.
            ops=pl.col("op").n_unique(),
        )
    )


def first_divergences(positions: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The first position per communicator where collectives disagree, and where a p2p pair deadlocks
    (both sides send, or both receive)."""
    collectives = positions.filter(~pl.col("p2p") & (pl.col("kinds") > 1))
    pairs = positions.filter(pl.col("p2p") & (pl.col("n") == 2) & (pl.col("ops") == 1))
    return tuple(
        frame.sort("ordinal").group_by("comm_uid").agg(pl.all().first()).sort("comm_uid")
        for frame in (collectives, pairs)
    )


@dataclass(frozen=True, slots=True)
class CommProgress:
    """Per communicator uid: each member's last call (ordinal, op) as the COLL lines show it."""

    uid: str
    nranks: int
    last: pl.DataFrame  # rank, global_rank, ordinal, op, source_id, line_no, part, host, pid, dev


@per_job
def comm_progress(job: Job) -> list[CommProgress]:
    return progress_of(members_last_calls(job))


def progress_of(last: pl.DataFrame) -> list[CommProgress]:
    """A :class:`CommProgress` per communicator of ``last`` (rows of :func:`members_last_calls`), in its
    order."""
    # A size that did not fit its column is null (parse/kinds.py): the members seen are then the size.
    return [
        CommProgress(uid, int(group["nranks"].max() or group.height), group)
        for (uid,), group in last.group_by("comm_uid", maintain_order=True)
    ]


@per_job
def members_last_calls(job: Job) -> pl.DataFrame:
    """Every member's last call, of every communicator (the rows of :func:`comm_progress`, in its order), and
    whether it ``left`` the communicator with a Destroy of its own."""
    coll = job.table("collectives")
    comms = job.table("communicators")
    if coll.is_empty() or "comm_uid" not in coll.columns:
        return pl.DataFrame(
            schema={
                "comm_uid": pl.String,
                "global_rank": pl.Int64,
                "ordinal": pl.Int64,
                "nranks": pl.Int64,
                "left": pl.Boolean,
                "left_seq": pl.Int64,
            }
        )
    # The columns kept, first: sorting every column of a 4096-rank job's window of calls held ~100 MB.
    kept = [
        "comm_uid",
        "rank",
        "global_rank",
        "ordinal",
        "opcount",
        "op",
        "source_id",
        "line_no",
        "part",
        "host",
        "pid",
        "dev",
        "nranks",
    ]
    coll = coll.select(kept).filter(pl.col("comm_uid").is_not_null())
    coll = positioned(coll, job.table("coll_stats")).with_columns(ordinal=pl.col("position"))
    # The last call of each member: by position, then by line (a member can log one position twice). Each
    # member's row is found by its index and the rows gathered once: sorting every column of every call before
    # the group_by took a 4096-rank job's 262k calls 0.13 s, this 0.09 s.
    picked = (
        coll.with_row_index("_row")
        .group_by("comm_uid", "rank")
        .agg(pl.col("_row").sort_by("ordinal", "source_id", "line_no", "part").last())
        .get_column("_row")
    )
    last = coll[picked].select(c for c in kept if c != "opcount")
    if not comms.is_empty():
        # Members that initialised a communicator with calls but never logged one of them: ordinal -1.
        members = comms.join(last.select("comm_uid").unique(), on="comm_uid", how="semi")
        silent = members.join(last.select("comm_uid", "rank"), on=["comm_uid", "rank"], how="anti").select(
            "comm_uid",
            "rank",
            "global_rank",
            pl.lit(-1, pl.Int64).alias("ordinal"),
            pl.lit(None, pl.String).alias("op"),
            "source_id",
            "line_no",
            pl.lit(0, pl.UInt8).alias("part"),
            "host",
            "pid",
            pl.col("cuda_dev").alias("dev"),
            "nranks",
        )
        last = pl.concat([last, silent], how="diagonal_relaxed")
    # Communicators by uid, members by rank, then where their line is: the same order on every run.
    last = last.sort("comm_uid", "rank", "global_rank", "source_id", "line_no", "part", nulls_last=True)
    return _with_left(last, comms)


def _with_left(last: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """``last`` with ``left``: the member's instance of the communicator ended with its own Destroy (it
    left on purpose, after its last call), not with an Abort or not at all; and ``left_seq``, the seq of
    that Destroy line (:func:`resolve.communicators.line_of_seq` reads it)."""
    if instances.is_empty() or "ended" not in instances.columns:
        return last.with_columns(left=pl.lit(False), left_seq=pl.lit(None, pl.Int64))
    keys = ["comm_uid", "host", "pid"]
    destroyed = (
        instances.filter(pl.col("ended") == "Destroy")
        .select(*keys, left_seq=pl.col("end_seq").cast(pl.Int64))
        .unique(keys, keep="first", maintain_order=True)
    )
    joined = last.join(destroyed, on=keys, how="left", maintain_order="left")
    return joined.with_columns(left=pl.col("left_seq").is_not_null())
