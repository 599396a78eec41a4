"""The bounded digest of COLL calls gives the diagnosis the unbounded tables give."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from nccl_logsift import accel
from nccl_logsift.pipeline import Analysis, ParseOptions, TableStream
from nccl_logsift.resolve.digest import CollectiveDigest
from nccl_logsift.simulate import Options, write


def diagnose(path, digest: CollectiveDigest | None = None):
    analysis = Analysis(TableStream([str(path)], ParseOptions(every_line=False)))
    if digest is not None:
        analysis.digest = digest
    for batch in analysis.stream:
        analysis.add(batch)
    return analysis.report(), analysis.digest


def tiny() -> CollectiveDigest:
    """A window of a few dozen calls per instance, trimmed many times over a 600-step job."""
    return CollectiveDigest(budget=400, final=200, min_window=16)


@pytest.mark.parametrize(
    "scenario",
    ["collective-mismatch", "extra-collective", "rank-stall", "uneven-data", "pp-deadlock", "healthy"],
)
def test_a_tiny_window_gives_the_same_root_cause(tmp_path, scenario):
    path = tmp_path / "job.log"
    write(Options(scenario=scenario, ranks=8, nodes=2, ops=600, noise=False), str(path))
    full, _ = diagnose(path)
    bounded, digest = diagnose(path, tiny())
    assert digest.calls > 2000 and digest.table().height < digest.calls / 4
    key = lambda r: [(f.code, f.ranks, f.comm, f.seq, f.op) for f in r.findings[:3]]
    assert key(bounded) == key(full)


def test_an_early_divergence_survives_the_window(tmp_path):
    """One rank calls a different size at its 20th call and the job runs on: found after 600 steps."""
    path = tmp_path / "job.log"
    write(Options(scenario="healthy", ranks=4, nodes=1, ops=600, noise=False), str(path))
    lines = path.read_text().splitlines()
    calls = [
        i
        for i, line in enumerate(lines)
        if " opCount " in line
        and line.startswith(lines[[j for j, l in enumerate(lines) if " opCount " in l][0]].split(" ")[0])
    ]
    lines[calls[19]] = re.sub(r" count \d+ ", " count 12345 ", lines[calls[19]])
    path.write_text("\n".join(lines) + "\n")
    full, _ = diagnose(path)
    bounded, _digest = diagnose(path, tiny())
    mismatch = [f for f in bounded.findings if f.code == "LS102"]
    assert mismatch and mismatch[0].seq == [f for f in full.findings if f.code == "LS102"][0].seq
    assert "count 12345" in " ".join(e.text for e in mismatch[0].evidence)


def test_per_rank_files_keep_every_ranks_last_calls(tmp_path):
    """Per-rank files: the most recent calls are all the last rank's; each rank still keeps its last ones."""
    out = tmp_path / "logs"
    write(Options(scenario="rank-stall", ranks=8, nodes=2, ops=600, noise=False, layout="per-rank"), str(out))
    analysis = Analysis(TableStream([str(out)], ParseOptions(every_line=False)))
    analysis.digest = CollectiveDigest(budget=400, final=200, min_window=16)
    for batch in analysis.stream:
        analysis.add(batch)
    _, job = analysis.job()  # (waits for the last batch's fold, which runs in a thread of its own)
    kept = job.tables["collectives"]
    per_instance = kept.group_by("host", "pid", "comm", "generation").len()
    assert per_instance["len"].min() >= 16
    assert kept.height < analysis.digest.calls / 4


def test_open_positions_beyond_the_cap_forget_the_lowest(tmp_path, monkeypatch):
    """Per-rank files open a whole rank's run at once; past the cap the lowest positions are dropped, and
    the diagnosis of the stalled rank is the one the uncapped digest gives."""
    from nccl_logsift.parse.chunks import ChunkParser
    from nccl_logsift.resolve import digest

    # A batch per file, as files too large to wait for the next one's lines are read (these would all be
    # parsed in one batch, whose positions all close in it).
    monkeypatch.setattr(ChunkParser, "hold", lambda self: False)
    out = tmp_path / "logs"
    write(Options(scenario="rank-stall", ranks=8, nodes=2, ops=600, noise=False, layout="per-rank"), str(out))
    full, _ = diagnose(out)
    monkeypatch.setattr(digest, "OPEN_POSITIONS", 100)
    folds = []
    fold = accel.digest_fold_positions

    def counted(*args):
        found, still_open = fold(*args)
        folds.append((args[4], still_open))  # positions open before the fold, and after it
        return found, still_open

    monkeypatch.setattr(accel, "digest_fold_positions", counted)
    capped, kept = diagnose(out)
    assert max(before for before, _ in folds) > 100 and all(after <= 100 for _, after in folds)
    assert kept._state.open.count <= 100
    key = lambda r: [(f.code, f.ranks, f.comm, f.seq, f.op) for f in r.findings[:3]]
    assert key(capped) == key(full)


def test_an_error_while_folding_reaches_the_caller(tmp_path, monkeypatch):
    path = tmp_path / "job.log"
    write(Options(scenario="healthy", ranks=4, nodes=1, ops=50, noise=False), str(path))
    analysis = Analysis(TableStream([str(path)], ParseOptions(every_line=False)))

    def broken(calls):
        raise RuntimeError("fold failed")

    monkeypatch.setattr(analysis.digest, "add", broken)
    with pytest.raises(RuntimeError, match="fold failed"):
        for batch in analysis.stream:
            analysis.add(batch)
        analysis.job()


def test_a_world_communicator_interleaved_op_by_op_keeps_the_state_bounded(tmp_path, monkeypatch):
    """32 ranks' FSDP calls on one world communicator, op by op, in ~15 batches: what the digest holds
    after the last batch is no more than after the third (open positions, their tables, the window)."""
    from nccl_logsift.parse import chunks

    path = tmp_path / "world.log"
    options = Options(ranks=32, nodes=4, size=8_000_000, noise=False, comms="world", interleave="op")
    write(replace(options, print_every=50, other_lines=0.001, layout="srun"), str(path))
    monkeypatch.setattr(chunks, "FAST_ROWS", 2000)  # a batch every ~2,600 calls
    analysis = Analysis(TableStream([str(path)], ParseOptions(every_line=False, chunk_bytes=1 << 18)))
    analysis.digest = CollectiveDigest(budget=2000, final=1000, min_window=16)

    def held(digest: CollectiveDigest) -> tuple[int, ...]:
        state = digest._state
        window = sum(len(calls) for calls in digest._window)
        return len(state.position), len(state.open.keys), len(state.calls), len(digest._kept), window > 4000

    sizes = []
    for batch in analysis.stream:
        analysis.add(batch)
        analysis._folded()
        sizes.append(held(analysis.digest))
        assert analysis.digest._state.open.count <= 2 * 32  # an op in flight, never the run's positions
    assert len(sizes) > 10 and analysis.digest.calls > 35_000
    assert set(sizes[2:]) == {sizes[2]} and sizes[2][3:] == (0, False)
    assert analysis.report(views=False).verdict.startswith("No sign of a hang")
