"""An analysis keeps only the plain lines a rule reads, so memory stays flat over a training log's output."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
from conftest import FIXTURES, cli_peak_mb

from nccl_logsift.parse.chunks import ChunkParser
from nccl_logsift.pipeline import ParseOptions, analyze
from nccl_logsift.tables import PlainLines


def lines(rows: list[dict]) -> pl.DataFrame:
    schema = {
        "source_id": pl.UInt16,
        "line_no": pl.UInt32,
        "part": pl.UInt8,
        "producer": pl.String,
        "family": pl.String,
        "torch_rank": pl.Int64,
        "local_rank": pl.Int64,
        "text": pl.String,
    }
    return pl.DataFrame(
        [
            {"source_id": 0, "part": 0, "producer": None, "torch_rank": None, "local_rank": None, **row}
            for row in rows
        ],
        schema=schema,
    )


def test_plain_lines_keep_envelopes_module_frames_and_the_first_line_of_each_label():
    plain = PlainLines()
    first = plain.needed(
        lines(
            [
                {"line_no": 1, "family": "text", "text": "step 1 loss 2.3", "local_rank": 0},
                {"line_no": 2, "family": "text", "text": "step 1 loss 2.3", "local_rank": 1},
                {"line_no": 3, "family": "text", "text": "step 2 loss 2.2", "local_rank": 0},
                {"line_no": 4, "family": "blank", "text": "", "local_rank": None},
                {
                    "line_no": 5,
                    "family": "text",
                    "text": '  File "train.py", line 9, in <module>',
                    "local_rank": 0,
                },
                {"line_no": 6, "family": "blank", "producer": "nccl", "text": "h:1:1 [0] NCCL WARN "},
                {
                    "line_no": 7,
                    "family": None,
                    "producer": "nccl",
                    "text": "h:1:1 [0] NCCL INFO something new",
                },
                {"line_no": 8, "family": "app_errors", "text": "RuntimeError: boom", "torch_rank": 3},
                {"line_no": 9, "family": "text", "text": "step 3", "torch_rank": 5},
            ]
        )
    )
    assert first["line_no"].to_list() == [1, 2, 4, 5, 6, 7, 8, 9]
    # A later batch: labels seen before add nothing, a new one adds its first line.
    second = plain.needed(
        lines(
            [
                {"line_no": 10, "family": "text", "text": "step 4", "local_rank": 0},
                {"line_no": 11, "family": "blank", "text": ""},
                {"line_no": 12, "family": "text", "text": "step 4", "local_rank": 2},
                {"line_no": 13, "family": "text", "text": "step 5", "local_rank": 2},
            ]
        )
    )
    assert second["line_no"].to_list() == [12]


def test_known_plain_lines_are_those_needed_drops_in_any_batch():
    """``known`` says of plain rows which ``needed`` drops whatever batch they come in: not a module frame,
    and labels whose first line was kept in an earlier batch; a new label's lines are left to ``needed``."""
    plain = PlainLines()
    first = lines(
        [
            {"line_no": 1, "family": "text", "text": "step 1", "local_rank": 0},
            {"line_no": 2, "family": "blank", "text": ""},
        ]
    )
    assert not plain.known(first).any()  # nothing kept yet: every label's first line is to come
    plain.needed(first)
    later = lines(
        [
            {"line_no": 3, "family": "text", "text": "step 2", "local_rank": 0},
            {"line_no": 4, "family": "text", "text": "step 2", "local_rank": 1},
            {"line_no": 5, "family": "text", "text": '  File "t.py", line 9, in <module>', "local_rank": 0},
            {"line_no": 6, "family": "text", "text": "step 3"},
            {"line_no": 7, "family": "text", "text": "step 3", "local_rank": 1},
        ]
    )
    known = plain.known(later)
    assert later.filter(known)["line_no"].to_list() == [3, 6]
    # What is left of the batch gives what the whole batch gives.
    assert plain.needed(later.filter(~known)).equals(_needed_after(first, later))


def test_without_their_text_no_plain_lines_are_known():
    """A lines table without text (``keep_text=False``) is kept whole by ``needed``: none is known."""
    plain = PlainLines()
    first = lines([{"line_no": 1, "family": "text", "text": "step 1", "local_rank": 0}])
    plain.needed(first)
    assert not plain.known(first.drop("text")).any()


def _needed_after(first: pl.DataFrame, later: pl.DataFrame) -> pl.DataFrame:
    plain = PlainLines()
    plain.needed(first)
    return plain.needed(later)


def test_a_training_log_gives_the_same_tables_and_counts_when_its_prints_are_left_out_as_parsed(
    tmp_path, monkeypatch
):
    """Prints past the first of each launcher label are counted as they are parsed, not kept in any table:
    the tables and the counts of an analysis are those of keeping them until ``PlainLines`` drops them."""
    from nccl_logsift.pipeline import Analysis, TableStream

    monkeypatch.setattr("nccl_logsift.parse.chunks.REST_LINES", 500)  # batches of 500 leftover lines
    # Chunks scanned one ahead: the scans mark plain lines to drop once a batch kept the first unlabelled one.
    monkeypatch.setattr("nccl_logsift.parse.chunks.SCAN_AHEAD", 1)

    text = (FIXTURES / "healthy_8ranks.log").read_text()
    prints = "".join(
        f"[default{i % 3}]:step {i} | loss {2.5 - i * 0.001:.4f}\n"
        + (f"step {i} unlabelled\n" if i % 2 == 0 else "")
        + ('  File "train.py", line 9, in <module>\n' if i % 97 == 0 else "")
        + ("\n" if i % 11 == 0 else "")
        for i in range(3000)
    )
    path = tmp_path / "train.log"
    path.write_text(text + prints + text)

    def parsed(early: bool):
        options = ParseOptions(workers=1, every_line=False, chunk_bytes=1 << 14)
        analysis = Analysis(TableStream([str(path)], options))
        plain = analysis.stream.parser.plain_filter
        assert plain is not None
        known = plain.known
        if early:  # what the parser drops of its lines, and the lines the scans let it drop unparsed
            monkeypatch.setattr(
                plain, "known", lambda lines: dropped.append(int(known(lines).sum())) or known(lines)
            )
            add = ChunkParser._drop_plain
            monkeypatch.setattr(
                ChunkParser,
                "_drop_plain",
                lambda self, codes: unparsed.append(int(codes.astype(bool).sum())) or add(self, codes),
            )
        else:
            analysis.stream.parser.plain_filter = None
        for batch in analysis.stream:
            analysis.add(batch)
        return (*analysis.job(), analysis.stream.parser.state.lines)

    dropped: list[int] = []
    unparsed: list[int] = []
    (early, early_job, early_lines), (late, late_job, late_lines) = parsed(True), parsed(False)
    monkeypatch.undo()
    assert sum(dropped) > 2500  # the prints but the first of each label
    assert sum(unparsed) > 500  # the unlabelled prints but the first, never parsed
    assert early_lines == late_lines  # every line the parser was given, counted
    for name in ("lines", "family_counts", "envelope_lines", "repeats_folded", "table_rows"):
        assert getattr(early, name) == getattr(late, name), name
    assert early.family_counts["text"] > 3000
    for name, table in late_job.tables.items():
        assert early_job.tables[name].equals(table, null_equal=True), name


def test_the_diagnosis_of_every_fixture_is_the_same_without_the_plain_lines(monkeypatch):
    logs = sorted(p for p in FIXTURES.glob("*.log"))
    kept = [analyze([str(p)], ParseOptions(workers=1), views=False) for p in logs]
    monkeypatch.setattr(PlainLines, "needed", lambda self, frame: frame)
    whole = [analyze([str(p)], ParseOptions(workers=1), views=False) for p in logs]
    for log, a, b in zip(logs, kept, whole):
        titles_a, titles_b = [f.title for f in a.findings], [f.title for f in b.findings]
        assert (a.verdict, titles_a) == (b.verdict, titles_b), log.name
        quoted = [[[e.text for e in f.evidence] for f in report.findings] for report in (a, b)]
        assert quoted[0] == quoted[1], log.name


_TRAINING = """
import sys
sys.stdout.write(open(sys.argv[2]).read())
n = int(sys.argv[1])
for start in range(0, n, 10000):
    sys.stdout.write("".join(f"[default{i % 8}]:step {i} | loss {2.5 - (i % 1000) * 0.001:.4f} | lr 0.0001 | "
                             f"tokens/s {12000 + i % 997}\\n" for i in range(start, min(n, start + 10000))))
"""


def _peak_mb(lines: int, tmp_dir: Path) -> float:
    """Peak RSS of ``analyze -`` reading a healthy job's log, then ``lines`` lines of training output."""
    healthy = str(FIXTURES / "healthy_8ranks.log")
    feed = subprocess.Popen([sys.executable, "-c", _TRAINING, str(lines), healthy], stdout=subprocess.PIPE)
    with tempfile.TemporaryFile() as out:
        status, peak = cli_peak_mb(["analyze", "-", "--format", "json"], feed.stdout, out, tmp_dir)
        feed.stdout.close()
        feed.wait()
    assert status == 0
    return peak


def test_memory_of_analyze_does_not_grow_with_lines_of_training_output(tmp_path):
    # Before, each such line held ~290 bytes: 750k more lines took ~220 MB more. The smaller run is past the
    # first batches, whose peak the allocators' first arenas make lower (125k lines peaked 70-85 MB below 1M,
    # 250k 45-55 MB, 1M and 3M within 20 MB of each other).
    small, large = _peak_mb(250_000, tmp_path), _peak_mb(1_000_000, tmp_path)
    assert large - small < 80, f"{small:.0f} MB for 250k lines, {large:.0f} MB for 1M"
