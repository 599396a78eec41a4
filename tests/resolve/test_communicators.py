"""Rank resolution: communicator instances, pointer reuse, several comms per process, splits, ordinals."""

from __future__ import annotations

import polars as pl
from builders import two_gpu_processes

from nccl_logsift.pipeline import parse_paths
from nccl_logsift.tables import MemorySink


def env(host, pid, msg, dev=0):
    return f"{host}:{pid}:{pid} [{dev}] NCCL INFO {msg}"


def init(host, pid, comm, rank, nranks, phase, comm_id=None, extra=""):
    cid = f" commId {comm_id}" if comm_id else ""
    return env(
        host,
        pid,
        f"comm {comm} rank {rank} nranks {nranks} cudaDev {rank % 8} busId 1b000{extra}{cid} - Init {phase}",
    )


def coll(host, pid, comm, opcount, nranks, op="AllReduce", count=1024):
    return env(
        host,
        pid,
        f"{op}: opCount {opcount:x} sendbuff 0x7f00 recvbuff 0x7f00 count {count} datatype 7 op 0 root 0 "
        f"comm {comm} [nranks={nranks}] stream 0x5500",
    )


def parse_lines(tmp_path, lines, name="job.log"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    sink = MemorySink()
    parse_paths([str(path)], sink)
    return sink.tables


def test_ranks_reused_comm_pointer_starts_new_instance(tmp_path):
    lines = []
    for r in range(2):
        lines.append(init("h", 100 + r, "0xaaa0", r, 2, "COMPLETE", "0x11"))
    lines += [coll("h", 100 + r, "0xaaa0", 0, 2) for r in range(2)]
    lines += [
        env("h", 100 + r, f"comm 0xaaa0 rank {r} nranks 2 cudaDev {r} busId 1b000 - Destroy COMPLETE")
        for r in range(2)
    ]
    # The same pointer comes back for a new 2-rank communicator with another commId.
    lines += [init("h", 100 + r, "0xaaa0", 1 - r, 2, "COMPLETE", "0x22") for r in range(2)]
    lines += [coll("h", 100 + r, "0xaaa0", 0, 2, op="Broadcast") for r in range(2)]
    t = parse_lines(tmp_path, lines)
    inst = t["communicators"].sort("host", "pid", "generation")
    assert inst.select("pid", "generation", "comm_uid", "rank").rows() == [
        (100, 1, "0x11", 0),
        (100, 2, "0x22", 1),
        (101, 1, "0x11", 1),
        (101, 2, "0x22", 0),
    ]
    assert inst["ended"].to_list() == ["Destroy", None, "Destroy", None]
    c = t["collectives"].sort("pid", "line_no")
    assert c.select("pid", "op", "comm_uid", "rank", "ordinal").rows() == [
        (100, "AllReduce", "0x11", 0, 0),
        (100, "Broadcast", "0x22", 1, 0),
        (101, "AllReduce", "0x11", 1, 0),
        (101, "Broadcast", "0x22", 0, 0),
    ]


def test_ranks_several_comms_per_process_and_global_rank(tmp_path):
    lines = []
    for r in range(4):  # world of 4, then two 2-rank groups created in the same order on every rank
        lines.append(init(f"n{r // 2}", 10 + r, f"0x{r}00", r, 4, "COMPLETE"))
    for r in range(4):
        lines.append(init(f"n{r // 2}", 10 + r, f"0x{r}10", r % 2, 2, "COMPLETE"))
    t = parse_lines(tmp_path, lines)
    procs = t["processes"].sort("global_rank")
    assert procs.select("host", "pid", "global_rank", "world_size", "communicators").rows() == [
        ("n0", 10, 0, 4, 2),
        ("n0", 11, 1, 4, 2),
        ("n1", 12, 2, 4, 2),
        ("n1", 13, 3, 4, 2),
    ]
    uids = t["communicators"].group_by("comm_uid").agg(pl.len(), pl.col("uid_exact").first()).sort("comm_uid")
    # Pre-2.16 there is no commId: ids come from creation order, and are flagged as not exact.
    assert uids.rows() == [("n2#0", 4, False), ("n4#0", 4, False)]
    lines_table = t["lines"]
    assert lines_table.filter(pl.col("pid") == 13)["rank"].unique().to_list() == [3]


def test_ranks_split_children_inherit_parent_uid(tmp_path):
    lines = []
    for r in range(4):
        lines.append(init("h", 50 + r, "0x100", r, 4, "START", "0xabc"))
        lines.append(init("h", 50 + r, "0x100", r, 4, "COMPLETE", "0xabc"))
    for r in range(4):
        color = r % 2
        split = f" parent 0x100 splitCount 1 color {color} key {r}"
        lines.append(
            env(
                "h",
                50 + r,
                (
                    f"ncclCommSplit comm 0x200 rank {r // 2} nranks 2 cudaDev {r} nvmlDev {r} busId "
                    f"1b000{split}- Init START"
                ),
            )
        )
        lines.append(
            env(
                "h",
                50 + r,
                (
                    f"ncclCommSplit comm 0x200 rank {r // 2} nranks 2 cudaDev {r} nvmlDev {r} busId "
                    f"1b000{split} - Init COMPLETE"
                ),
            )
        )
    t = parse_lines(tmp_path, lines)
    children = t["communicators"].filter(pl.col("nranks") == 2).sort("pid")
    assert children["comm_uid"].to_list() == ["0xabc/color0#1", "0xabc/color1#1"] * 2
    assert children["uid_exact"].all() and children["init_completed"].all()


def test_ordinal_counts_calls_when_opcount_stays_zero_across_chunks(tmp_path):
    # NCCL 2.27+ keeps opCount 0 on single-node P2P communicators (grammar §5.2).
    lines = [init("h", 7, "0xc0", 0, 2, "COMPLETE", "0x5"), init("h", 8, "0xc0", 1, 2, "COMPLETE", "0x5")]
    lines += [coll("h", 7 + (i % 2), "0xc0", 0, 2) for i in range(4000)]
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    from nccl_logsift.pipeline import ParseOptions

    sink = MemorySink()
    parse_paths([str(path)], sink, ParseOptions(chunk_bytes=64 << 10))  # many chunks
    c = sink.tables["collectives"]
    last = c.group_by("pid").agg(pl.col("ordinal").max(), pl.col("opcount").max()).sort("pid")
    assert last.rows() == [(7, 1999, 0), (8, 1999, 0)]
    assert c["ordinal"].n_unique() == 2000


def test_ranks_per_rank_files_resolve_like_one_stream(tmp_path):
    for r in range(2):
        (tmp_path / f"h.{200 + r}.log").write_text(
            "\n".join([init("h", 200 + r, "0x9", r, 2, "COMPLETE", "0x77"), coll("h", 200 + r, "0x9", 0, 2)])
            + "\n"
        )
    sink = MemorySink()
    parse_paths([str(tmp_path)], sink)
    c = sink.tables["collectives"].sort("source_id")
    assert c.select("source_id", "global_rank", "comm_uid").rows() == [(0, 0, "0x77"), (1, 1, "0x77")]


def test_ordinals_follow_inits_that_arrive_in_later_batches(tmp_path, monkeypatch):
    # Numbering remembers each (host, pid, comm)'s instance between calls: an init seen in a later batch
    # (the starts change) or a reused address (a later start) must still move the calls to the new instance.
    from nccl_logsift.parse import chunks
    from nccl_logsift.pipeline import ParseOptions

    lines = [coll("h", 7, "0xc0", i, 2) for i in range(300)]  # no init logged yet: their own instance
    lines += [init("h", 7, "0xc0", 0, 2, "COMPLETE", "0x5")]
    lines += [coll("h", 7, "0xc0", i, 2) for i in range(300)]
    lines += [env("h", 7, "comm 0xc0 rank 0 nranks 2 cudaDev 0 busId 1b000 - Destroy COMPLETE")]
    lines += [init("h", 7, "0xc0", 1, 2, "COMPLETE", "0x6")]
    lines += [coll("h", 7, "0xc0", i, 2) for i in range(300)]
    path = tmp_path / "job.log"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(chunks, "FAST_ROWS", 100)
    sink = MemorySink()
    parse_paths([str(path)], sink, ParseOptions(chunk_bytes=8 << 10, workers=1))
    c = sink.tables["collectives"].sort("line_no")
    assert c["comm_uid"].to_list() == [None] * 300 + ["0x5"] * 300 + ["0x6"] * 300
    assert c["rank"].to_list() == [None] * 300 + [0] * 300 + [1] * 300
    assert c["ordinal"].to_list() == list(range(300)) * 3


def test_a_process_driving_several_gpus_holds_a_rank_per_gpu(tmp_path):
    t = parse_lines(tmp_path, two_gpu_processes())
    procs = t["processes"].sort("global_rank")
    assert procs.select("host", "pid", "global_rank", "cuda_dev", "bus_id").rows() == [
        ("n0", 10, 0, 0, "17000"),
        ("n0", 10, 1, 1, "27000"),
        ("n1", 20, 2, 0, "17000"),
        ("n1", 20, 3, 1, "27000"),
    ]
    assert t["communicators"].sort("global_rank")["global_rank"].to_list() == [0, 1, 2, 3]
    # A call's rank is its communicator's: the device in the line's prefix is the one the thread set last.
    calls = t["collectives"].select("comm", "global_rank").unique().sort("global_rank")
    assert calls["global_rank"].to_list() == [0, 1, 2, 3] and calls["comm"].n_unique() == 4
    # Other lines of such a process go by the device in their prefix.
    lines = t["lines"].filter(pl.col("family") == "comm_init")
    assert lines.select("host", "dev", "rank").unique().sort("host", "dev").rows() == [
        ("n0", 0, 0),
        ("n0", 1, 1),
        ("n1", 0, 2),
        ("n1", 1, 3),
    ]


def test_a_process_that_recreates_its_world_keeps_one_rank(tmp_path):
    # Destroyed and created again (another commId, another device in this helper's lines): one rank at a time.
    lines = [
        init("h", 100, "0xaaa0", 0, 2, "COMPLETE", "0x11"),
        init("h", 101, "0xaaa0", 1, 2, "COMPLETE", "0x11"),
    ]
    lines += [
        env("h", 100 + r, f"comm 0xaaa0 rank {r} nranks 2 cudaDev {r} busId 1b000 - Destroy COMPLETE")
        for r in range(2)
    ]
    lines += [
        init("h", 100, "0xaaa0", 1, 2, "COMPLETE", "0x22"),
        init("h", 101, "0xaaa0", 0, 2, "COMPLETE", "0x22"),
    ]
    t = parse_lines(tmp_path, lines)
    assert t["processes"].select("pid", "global_rank").sort("pid").rows() == [(100, 0), (101, 1)]
    assert t["communicators"].sort("pid", "generation")["global_rank"].to_list() == [0, 0, 1, 1]
