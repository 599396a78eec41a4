"""LiveState on a simulated rank stall replayed as it reached the pipe: NCCL >= 2.13.4 block-buffers its
lines (4 KiB per process), so ranks appear in bursts; NCCL <= 2.12 flushed every line.

The simulator knows when each write reached the stream; the replay adds each write at that (simulated) time
and runs the timed check every second between them, as ``logsift watch`` does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_live_state import FakeClock, step_batches

from nccl_logsift.live import EventKind, LiveState
from nccl_logsift.simulate import Options, layout, simulate

STALL_AFTER = 5.0
TICK = 1.0


def replay(
    tmp_path: Path, version: str, seed: int
) -> tuple[list[tuple[float, object]], LiveState, dict, dict]:
    """Feed the rank-stall job's writes at their times; the events with their times, the state, the truth, and
    when each rank last advanced before each moment (rank -> times of its writes holding a collective)."""
    sim = simulate(Options("rank-stall", ranks=8, ops=60, nccl_version=version, seed=seed, noise=False))
    writes = [c for c in layout.chunks(sim.job, sim.timeline, sim.records, buffered=True) if c.text.strip()]
    batches = step_batches(tmp_path, [c.text.splitlines() for c in writes])
    clock = FakeClock()
    clock.now = 0.0
    state = LiveState(STALL_AFTER, clock=clock)
    events: list[tuple[float, object]] = []
    for write, batch in zip(writes, batches):
        while clock.now + TICK < write.t:
            clock.now += TICK
            events += [(clock.now, e) for e in state.check()]
        clock.now = write.t
        state.add(batch)
        events += [(clock.now, e) for e in state.check()]
    advances: dict[int, list[float]] = {}
    for write in writes:
        if write.chan == "nccl" and "opCount" in write.text:
            advances.setdefault(write.proc, []).append(write.t)
    return events, state, sim.truth, advances


def culprits(truth: dict) -> set[int]:
    return {r for f in truth["faults"] if f["primary"] for r in f["ranks"]}


@pytest.mark.parametrize(("version", "seed"), [("2.18", 0), ("2.21", 1), ("2.27", 1)])
def test_block_buffered_ranks_raise_no_stall_that_later_recovers_and_no_false_culprit(
    tmp_path, version, seed
):
    events, state, truth, _ = replay(tmp_path, version, seed)
    assert [e for _, e in events if e.kind is EventKind.RECOVERED] == []
    assert {r for _, e in events if e.finding.code == "LS101" for r in e.finding.ranks} <= culprits(truth)
    assert state.snapshot().block_buffered


@pytest.mark.parametrize("seed", [0, 1])
def test_line_flushed_culprit_is_named_once_within_the_stall_threshold(tmp_path, seed):
    events, state, truth, advances = replay(tmp_path, "2.10", seed)  # the simulator's line-flushing release
    stalls = [(t, e) for t, e in events if e.finding.code == "LS101"]
    assert [set(e.finding.ranks) for _, e in stalls] == [culprits(truth)]
    (at, _), (culprit,) = stalls[0], culprits(truth)
    last_advance = max(t for t in advances[culprit] if t <= at)
    assert STALL_AFTER < at - last_advance <= STALL_AFTER + TICK
    assert not state.snapshot().block_buffered
