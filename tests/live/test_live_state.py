"""LiveState: stalls, recoveries and WARNs as events, driven step by step with a fake clock."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from nccl_logsift.live import EventKind, LiveState
from nccl_logsift.model import Kind, Severity
from nccl_logsift.parse.calls import Calls
from nccl_logsift.pipeline import Batch, TableStream

RANKS = 4
STALL_AFTER = 10.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def host(rank: int) -> str:
    return ("trn-node-a", "trn-node-b")[rank // 2]


def nccl(rank: int, text: str) -> str:
    return f"{host(rank)}:{40000 + rank}:{40000 + rank} [{rank % 2}] NCCL {text}"


def init(rank: int) -> list[str]:
    comm = f"0x55a1c3e0{rank:04x}"
    head = (
        f"INFO ncclCommInitRank comm {comm} rank {rank} nranks {RANKS} cudaDev {rank % 2} nvmlDev {rank % 2} "
        "busId 1b000 commId 0x7c3e91a5d2b4f608"
    )
    return [nccl(rank, f"{head} - Init START"), nccl(rank, f"{head} - Init COMPLETE")]


def call(rank: int, opcount: int) -> str:
    return nccl(
        rank,
        f"INFO AllReduce: opCount {opcount:x} sendbuff 0x7f2a40000000 recvbuff 0x7f2a40000000 count 1024 "
        f"datatype 7 op 0 root 0 comm 0x55a1c3e0{rank:04x} [nranks={RANKS}] stream 0x55a1c3f01a30",
    )


def ib_warn(rank: int, peer_port: int) -> str:
    return (
        f"{host(rank)}:{40000 + rank}:{40100 + rank} [{rank % 2}] transport/net_ib.cc:1276 NCCL WARN NET/IB "
        f": Got completion from peer 10.0.1.11<{peer_port}> with error 12, opcode 0, len 0, vendor err 129 "
        "(Send)"
    )


def startup(version: str = "2.12.12") -> list[str]:
    # 2.12 flushed every line, so what the state sees is where each rank is (2.13.4+ block-buffers).
    return [f"NCCL version {version}+cuda11.6", *(line for r in range(RANKS) for line in init(r))]


def calls(opcount: int, ranks=range(RANKS)) -> list[str]:
    return [call(r, opcount) for r in ranks]


def step_batches(tmp_path: Path, steps: list[list[str]]) -> list[Batch]:
    """Parse the steps as one log, then cut every table back into one batch per step by line number.

    One parse keeps the collective numbering of a real stream; the cut lets the test decide what arrives
    between two ticks of the fake clock.
    """
    path = tmp_path / "job.log"
    path.write_text("".join(line + "\n" for step in steps for line in step))
    stream = TableStream([str(path)])
    parsed = list(stream)
    tables = {
        name: pl.concat([b.tables[name] for b in parsed], how="diagonal_relaxed") for name in parsed[0].tables
    }
    calls = Calls.concat([b.calls for b in parsed])
    call_lines = (calls["seq"] >> 8) & 0xFFFFFFFF  # seq: source, line, part (calls.seq_of)
    batches, first = [], 1
    for step in steps:
        last = first + len(step) - 1
        cut = {name: t.filter(pl.col("line_no").is_between(first, last)) for name, t in tables.items()}
        batches.append(
            Batch(cut, parsed[0].source, 0, calls.take((call_lines >= first) & (call_lines <= last)))
        )
        first = last + 1
    return batches


def feed(state: LiveState, clock: FakeClock, batches: list[Batch], seconds_apart: float) -> list:
    """Add each batch, ``seconds_apart`` after the previous one, checking after each; all events in order."""
    events = []
    for batch in batches:
        clock.now += seconds_apart
        state.add(batch)
        events += state.check()
    return events


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state(clock: FakeClock) -> LiveState:
    return LiveState(STALL_AFTER, clock=clock)


def test_rank_that_stops_while_peers_go_on_is_reported_once_after_stall_after(tmp_path, state, clock):
    steps = [startup(), *(calls(k) for k in range(5)), calls(5, ranks=[0, 1, 2]), calls(6, ranks=[0, 1, 2])]
    assert feed(state, clock, step_batches(tmp_path, steps), seconds_apart=1.0) == []
    # Rank 3 last advanced 2 s ago, with calls #6 and #7 of its peers behind it.
    clock.now += STALL_AFTER - 2.0
    assert state.check() == []
    clock.now += 0.5
    (event,) = state.check()
    finding = event.finding
    assert event.kind is EventKind.FINDING
    assert (finding.code, finding.kind, finding.severity) == ("LS101", Kind.RANK_BEHIND, Severity.CRITICAL)
    assert finding.ranks == (3,) and finding.hosts == ("trn-node-b",) and finding.comm == "0x7c3e91a5d2b4f608"
    assert finding.title.startswith("rank 3 (trn-node-b, pid 40003, GPU 1) has not called #6 on communicator")
    assert "last call #5 (AllReduce), while 3 rank(s) went on to #7" in finding.title
    assert [e.line for e in finding.evidence] == [
        steps_line(steps, call(3, 4)),
        steps_line(steps, call(0, 6)),
    ]
    clock.now += 30
    assert state.check() == []  # once per episode


def test_lag_a_stdio_block_could_hide_is_no_stall_when_nccl_block_buffers_its_lines(tmp_path, state, clock):
    steps = [
        startup("2.21.5"),
        *(calls(k) for k in range(5)),
        calls(5, ranks=[0, 1, 2]),
        calls(6, ranks=[0, 1, 2]),
    ]
    feed(state, clock, step_batches(tmp_path, steps), seconds_apart=1.0)
    clock.now += 10 * STALL_AFTER
    assert state.check() == []
    snapshot = state.snapshot()
    assert snapshot.block_buffered and snapshot.rows[0].behind == 2 and not snapshot.rows[0].stalled


def test_stalled_rank_that_advances_again_recovers_and_can_stall_again(tmp_path, state, clock):
    steps = [startup(), calls(0), calls(1, ranks=[0, 1, 2]), calls(1, ranks=[3]), calls(2, ranks=[0, 1, 2])]
    start, level, peers_ahead, catch_up, ahead_again = step_batches(tmp_path, steps)
    feed(state, clock, [start, level, peers_ahead], seconds_apart=1.0)
    clock.now += STALL_AFTER + 1
    (stalled,) = state.check()
    assert stalled.finding.ranks == (3,)
    (event,) = feed(state, clock, [catch_up], seconds_apart=1.0)
    assert event.kind is EventKind.RECOVERED and event.finding is stalled.finding
    assert event.note.startswith("rank 3 (trn-node-b, pid 40003, GPU 1) is advancing again: last call #2")
    feed(state, clock, [ahead_again], seconds_apart=1.0)
    clock.now += STALL_AFTER + 1
    (again,) = state.check()
    assert again.kind is EventKind.FINDING and again.finding.ranks == (3,) and again.finding.seq == 3


def test_ranks_that_all_stop_at_the_same_call_are_not_stalled(tmp_path, state, clock):
    feed(state, clock, step_batches(tmp_path, [startup(), calls(0), calls(1)]), seconds_apart=1.0)
    clock.now += 10 * STALL_AFTER
    assert state.check() == []
    assert not any(row.stalled or row.behind for row in state.snapshot().rows)


def test_lost_coll_line_does_not_fake_a_stall_when_opcount_counts_calls(tmp_path, state, clock):
    steps = [startup(), calls(0), calls(1, ranks=[0, 1, 3]), calls(2)]  # rank 2's line of call #2 was lost
    feed(state, clock, step_batches(tmp_path, steps), seconds_apart=1.0)
    clock.now += 10 * STALL_AFTER
    assert state.check() == []
    assert {row.call for row in state.snapshot().rows} == {3}


def test_rank_briefly_behind_is_not_stalled(tmp_path, state, clock):
    steps = [startup(), calls(0), calls(1, ranks=[0, 1, 2]), calls(1, ranks=[3])]
    feed(state, clock, step_batches(tmp_path, steps), seconds_apart=STALL_AFTER - 1)
    clock.now += STALL_AFTER - 1
    assert state.check() == []


def test_warn_is_a_finding_at_once_and_the_same_warn_from_another_rank_is_not_repeated(
    tmp_path, state, clock
):
    steps = [startup(), [ib_warn(1, 59644)], [ib_warn(2, 59700), ib_warn(1, 59645)]]
    (event,) = feed(state, clock, step_batches(tmp_path, steps), seconds_apart=0.1)
    finding = event.finding
    assert event.kind is EventKind.FINDING and event.at == pytest.approx(0.2)
    assert (finding.code, finding.kind, finding.severity) == ("LS302", Kind.NET_ERROR, Severity.ERROR)
    assert finding.ranks == (1,) and finding.hosts == ("trn-node-a",)
    assert finding.title == (
        "rank 1 (trn-node-a, pid 40001, GPU 1): NCCL WARN NET/IB : Got completion from peer "
        "10.0.1.11<59644> with error 12, opcode 0, len 0, vendor err 129 (Send)"
    )
    assert finding.evidence[0].line == len(startup()) + 1


def test_an_ib_device_warn_is_named_by_the_rule_analyze_reports_it_under(tmp_path, state, clock):
    """It was LS901 live and LS302 in analyze: both now read the owner from grammars/nccl/errors.toml."""
    device = (
        f"{host(1)}:40001:40101 [1] transport/net_ib.cc:139 NCCL WARN NET/IB : Unable to open device mlx5_1"
    )
    (event,) = feed(state, clock, step_batches(tmp_path, [startup(), [device]]), seconds_apart=0.1)
    finding = event.finding
    assert (finding.code, finding.kind, finding.severity) == ("LS302", Kind.NET_ERROR, Severity.WARNING)


def test_warnings_hands_out_warns_at_once_and_leaves_stalls_to_the_timed_check(tmp_path, state, clock):
    steps = [startup(), calls(0), calls(1, ranks=[0, 1, 2]), [ib_warn(0, 59644)]]
    *before, warn = step_batches(tmp_path, steps)
    feed(state, clock, before, seconds_apart=1.0)
    clock.now += STALL_AFTER + 1
    state.add(warn)
    assert [e.finding.code for e in state.warnings()] == ["LS302"]
    assert [e.finding.code for e in state.check()] == ["LS101"]


def test_snapshot_puts_the_stalled_rank_first_and_counts_calls_per_second(tmp_path, state, clock):
    steps = [startup(), *(calls(k) for k in range(4)), calls(4, ranks=[0, 1, 2])]
    feed(state, clock, step_batches(tmp_path, steps), seconds_apart=1.0)
    clock.now += STALL_AFTER + 1
    state.check()
    snapshot = state.snapshot(max_rows=2)
    assert (snapshot.ranks_seen, snapshot.world_size) == (RANKS, RANKS)
    assert [(r.rank, r.call, r.behind, r.stalled) for r in snapshot.rows] == [
        (3, 4, 1, True),
        (0, 5, 0, False),
    ]
    assert snapshot.more_rows == 2
    assert snapshot.calls_per_second == 0.0  # no call in the last 5 s
    assert [e.finding.code for e in snapshot.events] == ["LS101"]


def steps_line(steps: list[list[str]], line: str) -> int:
    """1-based line number of ``line`` in the log the steps make."""
    return [l for step in steps for l in step].index(line) + 1


def test_a_stalled_gpu_of_a_process_that_drives_two_is_named_by_its_own_rank(tmp_path, state, clock):
    from builders import two_gpu_processes

    lines = two_gpu_processes(stalled_rank=3, calls=8)
    inits, rest = lines[:8], lines[8:]
    steps = [inits, *(rest[i : i + 4] for i in range(0, 16, 4)), rest[16:]]  # 4 rounds of all, then 3 ranks
    feed(state, clock, step_batches(tmp_path, steps), seconds_apart=1.0)
    clock.now += STALL_AFTER + 1
    (event,) = state.check()
    assert event.finding.ranks == (3,)
    assert event.finding.title.startswith("rank 3 (n1, pid 20, GPU 1) has not called #5")
    snapshot = state.snapshot()
    assert snapshot.ranks_seen == 4 and snapshot.world_size == 4
    assert sorted(row.rank for row in snapshot.rows) == [0, 1, 2, 3]


def test_a_warn_of_the_second_gpu_of_a_process_that_drives_two_is_named_by_that_gpus_rank(
    tmp_path, state, clock
):
    from builders import two_gpu_processes

    lines = two_gpu_processes(calls=2)
    warn = (
        "n1:20:20 [1] transport/net_ib.cc:1276 NCCL WARN NET/IB : Got completion from peer 10.0.1.11<59644> "
        "with error 12, opcode 0, len 0, vendor err 129 (Send)"
    )
    (event,) = feed(state, clock, step_batches(tmp_path, [lines, [warn]]), seconds_apart=1.0)
    assert event.finding.ranks == (3,)
    assert event.finding.title.startswith("rank 3 (n1, pid 20, GPU 1): NCCL WARN NET/IB")
