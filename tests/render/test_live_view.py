"""The live view at a fixed width, and live events as JSON objects."""

from __future__ import annotations

import io

from rich.console import Console

from nccl_logsift.live import EventKind, LiveEvent, LiveSnapshot, RankRow
from nccl_logsift.model import Evidence, Finding, Kind, Severity
from nccl_logsift.render.json import finding_dict
from nccl_logsift.render.live import event_dict, live_view

STALL = Finding(
    code="LS101",
    name="rank-behind",
    kind=Kind.RANK_BEHIND,
    severity=Severity.ERROR,
    title=(
        "rank 3 (trn-node-b, pid 40003, GPU 1) has not called #6 on communicator 0x7c3e91a5d2b4f608 (4 ranks)"
    ),
    ranks=(3,),
    hosts=("trn-node-b",),
    comm="0x7c3e91a5d2b4f608",
    seq=6,
    evidence=(Evidence("-", 12, "trn-node-b:40003:40003 [1] NCCL INFO AllReduce: opCount 4 ..."),),
)


def row(rank: int, call: int, behind: int = 0, stalled: bool = False) -> RankRow:
    return RankRow(
        comm="0x7c3e91a5d2b4f608",
        rank=rank,
        comm_rank=rank,
        host="trn-node-a",
        pid=40000 + rank,
        op="AllReduce",
        call=call,
        behind=behind,
        idle=12.0 if stalled else 0.4,
        stalled=stalled,
    )


def snapshot(**changes) -> LiveSnapshot:
    values = {
        "elapsed": 75.2,
        "bytes_read": 12_500_000,
        "ranks_seen": 4,
        "world_size": 4,
        "calls_per_second": 1234.4,
        "stall_after": 10.0,
        "block_buffered": False,
        "rows": (row(3, 5, behind=2, stalled=True), row(0, 7), row(1, 7), row(2, 7)),
        "more_rows": 0,
        "events": (
            LiveEvent(EventKind.FINDING, 20.5, STALL),
            LiveEvent(
                EventKind.RECOVERED, 31.0, STALL, "rank 3 (trn-node-b, pid 40003, GPU 1) is advancing again"
            ),
        ),
    }
    return LiveSnapshot(**(values | changes))


def render(view, width: int = 110) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(view)
    return console.file.getvalue()


def test_view_shows_the_header_the_rank_table_problem_first_and_the_events():
    text = render(live_view(snapshot(), height=40))
    lines = text.splitlines()
    assert lines[0] == (
        "logsift watch  4/4 ranks seen · 1,234 collectives/s · 12.5 MB read · 1:15 elapsed · stall after 10 s"
    )
    table_rows = [l for l in lines if "0x7c3e91a5d2b4f608" in l and l.startswith("│")]
    assert table_rows[0].split("│")[2].strip() == "3" and table_rows[0].split("│")[7].strip() == "2"
    assert "   20.5 s  LS101 error  rank 3 (trn-node-b, pid 40003, GPU 1) has not called #6" in text
    assert "   31.0 s  recovered  rank 3 (trn-node-b, pid 40003, GPU 1) is advancing again" in text


def test_view_cuts_the_table_to_the_screen_and_says_how_many_more():
    text = render(live_view(snapshot(more_rows=10), height=13))
    table_rows = [l for l in text.splitlines() if "0x7c3e91a5d2b4f608" in l and l.startswith("│")]
    assert len(table_rows) == 3
    assert "11 more" in text


def test_event_dicts_carry_a_finding_of_the_findings_contract():
    finding, recovered = (event_dict(e) for e in snapshot().events)
    assert finding == {"event": "finding", "at": 20.5, "finding": finding_dict(STALL)}
    assert recovered == {
        "event": "recovered",
        "at": 31.0,
        "note": "rank 3 (trn-node-b, pid 40003, GPU 1) is advancing again",
        "finding": finding_dict(STALL),
    }


def test_view_says_when_nccl_block_buffers_its_lines_and_how_to_see_every_line():
    plain, buffered = render(live_view(snapshot(), 40)), render(live_view(snapshot(block_buffered=True), 40))
    assert "4 KiB blocks" not in plain
    assert "4 KiB blocks" in buffered and "stdbuf -oL" in buffered


LONG = Finding(
    code="LS302",
    name="net-error",
    kind=Kind.NET_ERROR,
    severity=Severity.CRITICAL,
    title=(
        "IB completion error on rank 1 (trn-node-a, pid 40001, GPU 1) sending to 10.0.1.11<51730> = "
        "trn-node-b, rank 2: status 12 IBV_WC_RETRY_EXC_ERR, retries exhausted, the peer never acknowledged"
    ),
    ranks=(1,),
    hosts=("trn-node-a",),
    advice="Check the link and switch port of both NICs (ibstat, perfquery, dmesg for link flaps).",
)


def flat(text: str) -> str:
    return " ".join(text.split())


def test_full_view_shows_each_finding_whole_with_its_advice_within_the_width():
    view = snapshot(events=(LiveEvent(EventKind.FINDING, 20.5, LONG),))
    cut, whole = render(live_view(view, 40), width=80), render(live_view(view, 40, 80, full=True), width=80)
    assert flat(LONG.title) not in flat(cut)  # one line, cut at the edge
    assert flat(f"20.5 s LS302 critical {LONG.title}") in flat(whole)
    assert flat(f"= help: {LONG.advice}") in flat(whole)
    lines = whole.splitlines()
    assert max(map(len, lines)) <= 80
    first = next(i for i, line in enumerate(lines) if "LS302 critical" in line)
    assert lines[first].startswith("   20.5 s  LS302 critical  IB completion")
    assert lines[first + 1].startswith(" " * 11) and lines[first + 1].strip()  # wrapped under its text


def test_full_view_keeps_three_table_rows_and_the_newest_finding():
    events = tuple(LiveEvent(EventKind.FINDING, float(t), LONG) for t in range(1, 7))
    text = render(live_view(snapshot(events=events), 16, 80, full=True), width=80)
    table_rows = [line for line in text.splitlines() if "0x7c3e91a5" in line and line.startswith("│")]
    assert len(table_rows) == 3 and "1 more" in text
    assert "    6.0 s  LS302" in text and "    5.0 s  LS302" not in text  # the older ones made room
    assert len(text.splitlines()) <= 16


def test_watch_full_draws_the_live_findings_whole(tmp_path):
    from nccl_logsift.cli.watch import LiveScreen

    class State:
        def snapshot(self):
            return snapshot(events=(LiveEvent(EventKind.FINDING, 20.5, LONG),))

    console = Console(file=io.StringIO(), width=80, height=40, color_system=None)
    screen, short = LiveScreen(console, full=True), LiveScreen(console)
    assert flat(LONG.advice) in flat(render(screen.view(State()), width=80))
    assert flat(LONG.advice) not in flat(render(short.view(State()), width=80))
