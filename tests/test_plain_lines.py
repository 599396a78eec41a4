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
    assert not plain.unlabeled_known()
    plain.needed(first)
    assert plain.unlabeled_known()  # the first blank line without a label was kept
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


_TRICKY = [
    "step 12/300 | loss 2.0312 | lr 3.0e-04",
    "",
    "   \t",
    "  3: step 12 loss 2.0",  # srun -l's label
    "[default0]:step 12 loss 2.0",  # torchrun --tee
    "[rank3]: step 12",
    "2026-11-27T05:31:11.123456789Z stdout F step 12",  # a collector's prefix
    '  File "train.py", line 9, in <module>',
    '  File "train.py", line 9, in step',
    "Traceback (most recent call last):",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "\x1b[32mstep 12\x1b[0m",
    "host1:123:456 [0] NCCL INFO Init COMPLETE",
    "an Init COMPLETE in a print",
    "glued host1:123:456 [0] NCCL INFO ring 0",
    "[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout",
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
    "NCCL version 2.21.5+cuda12.4",
    "/workspace/data/loader.py:210: UserWarning: dataset shard index is 4 days older",
    "  warnings.warn(",
]


def test_the_lines_marked_plain_unparsed_are_exactly_the_unlabelled_plain_lines_no_rule_reads():
    """``LineParser.unlabeled_plain`` marks a line (as the scanning threads do) exactly when parsing it gives
    a plain line (text or blank, no envelope) with no launcher label that no rule reads: the lines an
    analysis then drops without parsing them are the ones its plain filter would have dropped."""
    import numpy as np

    from nccl_logsift.grammar.registry import load_grammars
    from nccl_logsift.io.lines import LineChunk
    from nccl_logsift.parse.lineparser import PLAIN_FAMILIES, LineParser
    from nccl_logsift.tables import LINE_LABELS, MODULE_FRAME

    texts = list(_TRICKY)
    for path in sorted(FIXTURES.rglob("*.log")):
        texts += path.read_text(errors="replace").splitlines()
    parser = LineParser(load_grammars())
    parser.plain_filter = PlainLines()
    codes = parser.unlabeled_plain(pl.Series("text", texts))
    parser.plain_filter = None  # nothing dropped: every line's row is there to compare
    chunk = LineChunk(
        0,
        pl.Series("line_no", np.arange(1, len(texts) + 1), dtype=pl.UInt32),
        pl.Series("byte_offset", np.zeros(len(texts)), dtype=pl.UInt64),
        pl.Series("text", texts),
    )
    rows = parser.parse(chunk)["lines"]
    single = rows.group_by("line_no").len().filter(pl.col("len") == 1).get_column("line_no")
    plain = rows.filter(
        pl.col("line_no").is_in(single.implode())
        & pl.col("producer").is_null()
        & pl.col("family").is_in(["text", "blank"])
        & ~pl.col("torn")
        & pl.all_horizontal(pl.col(label).is_null() for label in LINE_LABELS)
        & ~pl.col("text").str.contains(MODULE_FRAME)
    )
    expected = dict(zip(plain["line_no"].to_list(), plain["family"].to_list()))
    marked = {n + 1: PLAIN_FAMILIES[code] for n, code in enumerate(codes.tolist()) if code}
    assert marked.items() <= expected.items()
    assert {"text", "blank"} <= set(marked.values())
    assert len(marked) > 100
    # Left to the parser (which drops them after): a line with an ANSI escape, and one with a launcher
    # prefix that sets no label (a log collector's timestamp and stream).
    missed = plain.filter(~pl.col("line_no").is_in(list(marked)))
    assert missed["line_no"].to_list() == [
        _TRICKY.index(t) + 1 for t in _TRICKY if "\x1b" in t or "stdout F" in t
    ]
    assert missed.filter(pl.col("collector_ts").is_null() & ~pl.col("text").str.contains("\x1b")).is_empty()


def test_the_plain_codes_of_lines_as_read_need_a_plain_filter():
    """``LineParser.unlabeled_plain`` gives a code per line once the parser has a plain filter (the
    scanning threads ask it of their leftover lines), none before, and an empty array for no lines."""
    from nccl_logsift.grammar.registry import load_grammars
    from nccl_logsift.parse.lineparser import LineParser

    texts = list(_TRICKY)
    for path in sorted(FIXTURES.rglob("*.log")):
        texts += path.read_text(errors="replace").splitlines()
    parser = LineParser(load_grammars())
    assert parser.unlabeled_plain(pl.Series("text", texts)) is None
    parser.plain_filter = PlainLines()
    codes = parser.unlabeled_plain(pl.Series("text", texts))
    assert codes is not None and len(codes) == len(texts) and codes.any() and not codes.all()
    assert len(parser.unlabeled_plain(pl.Series("text", [], dtype=pl.String))) == 0
