"""An analysis lets the COLL calls of a batch go out ahead of the few leftover lines between them (training
prints), which wait to be parsed with the next ones, in fewer calls of the general parser: the diagnosis is
the same. A leftover line that can change how calls are numbered (a communicator's Init or Destroy line, a
COLL line the fast path left) or that may be glued is parsed with the calls around it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nccl_logsift.parse import chunks
from nccl_logsift.parse.chunks import ChunkParser
from nccl_logsift.pipeline import ParseOptions, read_job, report_of
from nccl_logsift.render.json import render_json
from nccl_logsift.simulate import Options, write

SIZE = 200_000  # bytes of steady state: ~1,000 COLL lines, 13 chunks of 16 KB
CASES = {
    "prints": Options(scenario="collective-mismatch", ranks=4, nodes=2, print_every=10, size=SIZE),
    "world": Options(
        scenario="rank-stall",
        ranks=4,
        nodes=2,
        comms="world",
        interleave="op",
        print_every=7,
        layout="srun",
        size=SIZE,
    ),
    "inits and glued lines": Options(
        scenario="healthy", ranks=4, nodes=2, print_every=10, other_lines=0.01, torn_rate=0.005, size=SIZE
    ),
}


def diagnosis(path, options):
    """The findings JSON, and every table of the job (the kept calls with their numbering among them)."""
    summary, job = read_job([str(path)], options)
    return render_json(report_of(summary, job)), job.tables


@pytest.mark.parametrize("case", CASES)
def test_calls_going_out_ahead_of_waiting_leftovers_change_no_finding(tmp_path, monkeypatch, case):
    path = tmp_path / "job.log"
    write(CASES[case], str(path))
    monkeypatch.setattr(chunks, "FAST_ROWS", 150)
    options = ParseOptions(workers=1, chunk_bytes=1 << 14)
    alone = []
    leftovers_wait = ChunkParser._leftovers_wait
    monkeypatch.setattr(
        ChunkParser, "_leftovers_wait", lambda self, pieces: alone.append(1) or leftovers_wait(self, pieces)
    )
    waited, tables = diagnosis(path, options)
    assert alone, "no batch of calls went out ahead of its leftover lines"
    flush_calls = ChunkParser.flush_calls
    monkeypatch.setattr(ChunkParser, "flush_calls", lambda self, final=True: flush_calls(self, True))
    expected, expected_tables = diagnosis(path, options)
    assert waited == expected
    assert tables.keys() == expected_tables.keys()
    for name, table in expected_tables.items():
        assert tables[name].equals(table, null_equal=True), name


def test_a_waiting_leftover_chunk_has_its_text_copied_out_once(tmp_path, monkeypatch):
    """Leftover lines that wait through several flushes of calls have their text copied out of the chunk
    they were read in once, not again at every flush (here 50 chunks of leftovers were copied 506 times: the
    cost grew with the square of how long lines wait)."""
    from nccl_logsift.io.lines import RawChunk

    path = tmp_path / "job.log"
    write(replace(CASES["world"], scenario="healthy", size=4 * SIZE), str(path))
    monkeypatch.setattr(chunks, "FAST_ROWS", 150)
    copied, waiting = [], []
    copy, lines = chunks.copied, RawChunk.lines
    monkeypatch.setattr(chunks, "copied", lambda text: copied.append(1) or copy(text))
    monkeypatch.setattr(RawChunk, "lines", lambda self, index=None: waiting.append(1) or lines(self, index))
    diagnosis(path, ParseOptions(workers=1, chunk_bytes=1 << 14))
    assert len(waiting) > 20 and len(copied) <= len(waiting)


def test_the_first_batch_ends_sooner_and_changes_no_table(tmp_path, monkeypatch):
    """The first batch ends after FIRST_ROWS calls, so that its leftovers (the job's init lines) are parsed
    while the next chunks are read; the later ones after FAST_ROWS. The tables are those of batches all
    alike."""
    from nccl_logsift.pipeline import TableStream

    path = tmp_path / "job.log"
    write(CASES["inits and glued lines"], str(path))
    monkeypatch.setattr(chunks, "FAST_ROWS", 600)
    monkeypatch.setattr(chunks, "FIRST_ROWS", 100)
    options = ParseOptions(workers=1, chunk_bytes=1 << 12)
    sizes = [len(batch.calls) for batch in TableStream([str(path)], replace(options, every_line=False))]
    assert 100 <= sizes[0] < 300 and max(sizes[1:]) >= 600
    sooner, sooner_tables = diagnosis(path, options)
    monkeypatch.setattr(chunks, "FIRST_ROWS", 600)
    alike, alike_tables = diagnosis(path, options)
    assert sooner == alike
    for name, table in alike_tables.items():
        assert sooner_tables[name].equals(table, null_equal=True), name
