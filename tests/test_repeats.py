"""An analysis keeps the first lines of each content and counts the repeats, so memory stays flat over a log
that says the same NCCL lines again and again."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl
import pytest
from conftest import FIXTURES

from nccl_logsift.memory import detached
from nccl_logsift.pipeline import ParseOptions, TableStream, analyze
from nccl_logsift.tables import DIAGNOSIS_COLUMNS, Repeats


def frame(rows: list[dict], **schema) -> pl.DataFrame:
    base = {
        "source_id": pl.UInt16,
        "line_no": pl.UInt32,
        "part": pl.UInt8,
        "host": pl.String,
        "pid": pl.Int64,
    }
    return pl.DataFrame(
        [{"source_id": 0, "part": 0, "host": "h", "pid": 1, **row} for row in rows], schema={**base, **schema}
    )


def lines(rows: list[dict]) -> pl.DataFrame:
    return frame(rows, producer=pl.String, family=pl.String, ts=pl.String, text=pl.String)


def network(rows: list[dict]) -> pl.DataFrame:
    return frame(rows, ts=pl.String, pattern=pl.String, ifname=pl.String)


def test_repeats_keep_the_first_of_each_content_across_batches_with_their_lines():
    repeats = Repeats(DIAGNOSIS_COLUMNS, kept=2)
    said = "h:1:1 [0] NCCL INFO NET/IB : Using interface ib0"
    first = repeats.fold(
        {
            "network": network(
                [
                    {"line_no": n, "ts": f"10:00:0{n}", "pattern": "ib-devices", "ifname": name}
                    for n, name in [(1, "ib0"), (2, "ib0"), (3, "ib1"), (4, "ib0")]
                ]
            ),
            "lines": lines(
                [{"line_no": n, "producer": "nccl", "family": "network", "text": said} for n in (1, 2, 3, 4)]
            ),
        }
    )
    # Times differ, content does not: the third ib0 line is a repeat; ib1 is new.
    assert first["network"]["line_no"].to_list() == [1, 2, 3]
    assert first["lines"]["line_no"].to_list() == [1, 2, 3]
    second = repeats.fold(
        {
            "network": network(
                [{"line_no": 9, "pattern": "ib-devices", "ifname": name} for name in ("ib1", "ib0")]
            ),
            "lines": lines([{"line_no": 9, "producer": "nccl", "family": "network", "text": said}]),
        }
    )
    assert second["network"]["ifname"].to_list() == ["ib1"]  # ib0 was seen twice in the batch before
    assert repeats.folded == 2


def test_a_batch_of_distinct_contents_is_kept_whole_and_counted_for_the_batches_after():
    repeats = Repeats(DIAGNOSIS_COLUMNS, kept=1)
    first = repeats.fold(
        {"network": network([{"line_no": n, "pattern": "p", "ifname": f"ib{n}"} for n in (1, 2)])}
    )
    assert first["network"]["line_no"].to_list() == [1, 2]
    rows = [
        {"line_no": n, "pattern": "p", "ifname": name} for n, name in [(3, "ib1"), (4, "ib3"), (5, "ib3")]
    ]
    assert repeats.fold({"network": network(rows)})["network"]["line_no"].to_list() == [4]
    assert repeats.folded == 2


def test_another_process_or_source_is_another_content():
    repeats = Repeats(DIAGNOSIS_COLUMNS, kept=1)
    rows = [
        {"line_no": 1, "pattern": "p", "ifname": "ib0"},
        {"line_no": 2, "pattern": "p", "ifname": "ib0", "pid": 2},
        {"line_no": 1, "pattern": "p", "ifname": "ib0", "source_id": 1},
        {"line_no": 3, "pattern": "p", "ifname": "ib0"},
    ]
    assert repeats.fold({"network": network(rows)})["network"].height == 3


def test_init_rows_of_communicators_are_never_folded():
    repeats = Repeats(DIAGNOSIS_COLUMNS, kept=1)
    comms = frame(
        [{"line_no": n, "what": what, "phase": "COMPLETE", "comm": "0x1"} for n, what in enumerate("IIDD")],
        what=pl.String,
        phase=pl.String,
        comm=pl.String,
    ).with_columns(pl.col("what").replace({"I": "Init", "D": "Destroy"}))
    assert repeats.fold({"comms": comms})["comms"]["line_no"].to_list() == [0, 1, 2]


def test_enveloped_lines_no_family_parsed_fold_on_their_text_without_times():
    repeats = Repeats(DIAGNOSIS_COLUMNS, kept=1)
    texts = [
        "2026-11-26T10:00:01.5Z h:1:1 [0] NCCL INFO proxy progress 7",
        "2026-11-26T10:00:02.5Z h:1:1 [0] NCCL INFO proxy progress 7",
        "2026-11-26T10:00:03.5Z h:1:1 [0] NCCL INFO proxy progress 8",
        "step 1 loss 2.5",  # not enveloped: PlainLines' business, never folded here
        "step 1 loss 2.5",
    ]
    rows = [
        {
            "line_no": n,
            "producer": "nccl" if "NCCL" in t else None,
            "family": None if "NCCL" in t else "text",
            "text": t,
        }
        for n, t in enumerate(texts)
    ]
    assert repeats.fold({"lines": lines(rows)})["lines"]["line_no"].to_list() == [0, 2, 3, 4]
    assert repeats.folded == 1


def test_counters_every_line_advances_are_not_content():
    repeats = Repeats(DIAGNOSIS_COLUMNS, kept=1)
    tuning = frame(
        [{"line_no": n, "opcount": n, "op": "AllReduce", "bytes": 1024} for n in range(5)],
        opcount=pl.Int64,
        op=pl.String,
        bytes=pl.Int64,
    )
    assert repeats.fold({"tuning": tuning})["tuning"]["line_no"].to_list() == [0]


# The fixtures whose logs say something again: init and channel lines of every rank, retried connects, IB and
# socket WARNs, watchdog lines (the others fold nothing that these do not).
FOLDED = [
    "healthy_8ranks.log",
    "rank_stall_8ranks.log",
    "ib_error_4ranks.log",
    "socket_fallback_4ranks.log",
    "bootstrap_failure_4ranks.log",
    "collective_mismatch_4ranks.log",
    "segfault_4ranks.log",
    "init_hang_4ranks.log",
]


@pytest.mark.parametrize("log", FOLDED)
def test_the_diagnosis_of_a_fixture_is_the_same_when_each_content_is_kept_once(log, monkeypatch):
    """The strictest fold (one row of each content) changes no verdict, finding or quoted line."""
    path = [str(FIXTURES / log)]
    whole = analyze(path, ParseOptions(workers=1), views=False)
    monkeypatch.setattr("nccl_logsift.tables.REPEATS_KEPT", 1)
    once = analyze(path, ParseOptions(workers=1), views=False)
    assert once.verdict == whole.verdict
    assert [f.title for f in once.findings] == [f.title for f in whole.findings]
    quoted = [[[e.text for e in f.evidence] for f in report.findings] for report in (once, whole)]
    assert quoted[0] == quoted[1]


def test_folded_lines_are_counted_in_the_summary():
    text = (FIXTURES / "healthy_8ranks.log").read_text()
    chatter = "".join(line for line in text.splitlines(True) if "NET/IB" in line)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "chatter.log"
        path.write_text(text + chatter * 100)
        from nccl_logsift.pipeline import Analysis

        options = ParseOptions(workers=1, every_line=False, chunk_bytes=1 << 13)
        analysis = Analysis(TableStream([str(path)], options))
        for batch in analysis.stream:
            analysis.add(batch)
        summary, _ = analysis.job()
    assert summary.repeats_folded >= chatter.count("\n") * 100 - 64 * chatter.count("\n")
    # Every line is still read and counted by its family.
    assert summary.lines == text.count("\n") + chatter.count("\n") * 100
    said = summary.family_counts["network"] + summary.family_counts["transport"]
    assert said >= chatter.count("\n") * 101


def test_an_analysis_keeps_nothing_more_of_a_log_that_repeats_itself(tmp_path, monkeypatch):
    """Past the first repeats, a batch adds no row to what an analysis keeps: not to its tables, not to the
    Init/Destroy rows the numbering of calls holds (merged, their repeated ends dropped)."""
    monkeypatch.setattr("nccl_logsift.resolve.progress.COMPACT_ROWS", 256)
    monkeypatch.setattr("nccl_logsift.parse.chunks.REST_LINES", 2000)  # batches of 2000 lines
    text = (FIXTURES / "healthy_8ranks.log").read_bytes()  # as is: the fixture holds a lone CR
    said = [line for line in text.splitlines(True) if b" NCCL INFO " in line and b"opCount" not in line]
    chatter = b"".join(line for line in said if b" Init " not in line)  # teardown lines included
    path = tmp_path / "chatter.log"
    path.write_bytes(text + chatter * 160)  # each line 160 times: past the first 64, nothing more is kept
    from nccl_logsift.pipeline import Analysis

    options = ParseOptions(workers=1, every_line=False, chunk_bytes=1 << 17)
    analysis = Analysis(TableStream([str(path)], options))
    kept, numbering = [], analysis.stream.numbering
    for batch in analysis.stream:
        analysis.add(batch)
        parts = analysis.sink._parts.values()
        kept.append(sum(frame.height for frames in parts for frame in frames))
    assert len(kept) > 12
    assert kept[-1] == kept[len(kept) * 2 // 3]
    assert sum(frame.height for frame in numbering._comms) < 3 * 256
    alone = Analysis(TableStream([str(FIXTURES / "healthy_8ranks.log")], options))
    for batch in alone.stream:
        alone.add(batch)
    columns = ["host", "pid", "comm", "generation", "ended", "end_seq", "global_rank"]
    assert numbering.instances.select(columns).equals(alone.stream.numbering.instances.select(columns))


_PINNED = """
import sys
import polars as pl
from nccl_logsift.memory import detached

keep = []
for batch_no in range(24):
    batch = pl.DataFrame({"text": [f"line {n} of batch {batch_no} " + "x" * 150 for n in range(50_000)]})
    row = batch.filter(pl.col("text").str.starts_with("line 7 "))
    keep.append(detached(row) if sys.argv[1] == "detached" else row)
    del batch, row
print(int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024)
"""


def test_only_a_column_that_shares_far_larger_buffers_is_copied():
    batch = pl.DataFrame({"text": [f"line {n} " + "x" * 150 for n in range(50_000)], "n": range(50_000)})
    assert detached(batch) is batch  # kept whole: nothing to copy
    most = batch.filter(pl.col("n") > 1_000)
    assert detached(most) is most  # most of the batch: its buffers are its own text
    one = batch.filter(pl.col("n") == 7)
    copied = detached(one)
    assert copied is not one and copied.equals(one)


def test_a_detached_row_does_not_hold_the_batch_it_was_filtered_from():
    """One kept line held its whole batch's text (its column a view into the batch's buffers): 24 batches
    of 8 MB pinned ~200 MB for 24 rows."""
    env = {"_RJEM_MALLOC_CONF": "dirty_decay_ms:0,muzzy_decay_ms:0"}  # polars' allocator: freed is freed
    run = lambda how: int(
        subprocess.run(
            [sys.executable, "-c", _PINNED, how], capture_output=True, text=True, check=True, env=env
        ).stdout
    )
    pinned, detached = run("pinned"), run("detached")
    assert detached < pinned - 120, f"{detached} MB detached, {pinned} MB pinned"


@pytest.mark.parametrize("forget", [False, True])
def test_repeats_skipped_before_parsing_leave_the_tables_and_counts_as_parsing_them(
    tmp_path, monkeypatch, forget
):
    """The lines the folds drop are counted instead of parsed (parse/repeats.py) once a text was parsed
    enough: the kept rows, the counts and the folded count are those of parsing every line. Lines that
    are never skipped repeat too: Init lines (the numbering reads them), a number out of range, a glued
    line (cut by the hosts known), a plain line a rule reads. With ``forget``, a source's texts are
    forgotten again and again, also between the scan that found lines skipped in any case and their
    batch (``RepeatSkip.skip_saturated`` says no, and those lines are parsed or skipped as usual)."""
    monkeypatch.setattr("nccl_logsift.parse.chunks.REST_LINES", 100)  # many batches
    monkeypatch.setattr("nccl_logsift.tables.REPEATS_KEPT", 2)
    counted: list[bool] = []
    if forget:
        from nccl_logsift.parse.repeats import RepeatSkip

        monkeypatch.setattr("nccl_logsift.parse.repeats.MAX_TEXTS", 16)
        skip_saturated = RepeatSkip.skip_saturated
        monkeypatch.setattr(
            RepeatSkip,
            "skip_saturated",
            lambda self, *args: counted.append(skip_saturated(self, *args)) or counted[-1],
        )
    text = (FIXTURES / "healthy_8ranks.log").read_text()
    said = [line for line in text.splitlines(True) if " NCCL INFO " in line and "opCount" not in line]
    chatter = "".join(said[:12] + [line for line in said if " Init " in line][:2]) + (
        "step 1 | loss 2.5\n  warnings.warn(\n"
        "h:99999999999999999999:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.1<0>\n"
        "step5:xgpu-node-1:12:13 [0] NCCL INFO cudaDriverVersion 12040\n"
        '  File "/w/train.py", line 9, in <module>\n'
    )
    path = tmp_path / "chatter.log"
    # The glued line's host becomes known halfway: from then on the parser cuts "xgpu-node-1" there.
    known = "gpu-node-1:12:12 [0] NCCL INFO cudaDriverVersion 12040\n"
    times = 20 if forget else 5
    path.write_text(text + chatter * times + known + chatter * times)
    from nccl_logsift.pipeline import Analysis

    def parsed(skip: bool):
        options = ParseOptions(workers=1, every_line=False, chunk_bytes=1 << 13)
        analysis = Analysis(TableStream([str(path)], options))
        if not skip:
            analysis.stream.repeats = None
        for batch in analysis.stream:
            analysis.add(batch)
        return (*analysis.job(), analysis.stream.parser.state.repeats_skipped)

    every, every_job, none_skipped = parsed(skip=False)
    skipped, skipped_job, count = parsed(skip=True)
    assert none_skipped == 0 and count >= 10
    if forget:
        assert True in counted and False in counted
    for name in ("repeats_folded", "family_counts", "envelope_lines", "lines", "values_out_of_range"):
        assert getattr(skipped, name) == getattr(every, name), name
    assert skipped.table_rows == every.table_rows
    for name, table in every_job.tables.items():
        assert skipped_job.tables[name].equals(table), name


def test_a_source_whose_batch_learnt_no_text_has_nothing_skipped_in_any_case():
    """``RepeatSkip.learn`` makes a source's table before it knows whether a text repeats; a batch of
    distinct lines leaves it empty, and a scanning thread asking then (``saturated``) finds nothing, as
    ``skip`` does. It raised IndexError, now and then, on a training log read from standard input."""
    import numpy as np

    from nccl_logsift.grammar.registry import load_grammars
    from nccl_logsift.io.lines import LineChunk
    from nccl_logsift.parse.lineparser import LineParser, ParseState
    from nccl_logsift.parse.repeats import RepeatSkip
    from nccl_logsift.tables import MODULE_FRAME, REPEATS_KEPT, UNFOLDED

    grammars = load_grammars()
    repeats = RepeatSkip(grammars, REPEATS_KEPT, UNFOLDED, MODULE_FRAME)
    texts = [f"step {n} | loss 2.5" for n in range(4)]
    chunk = LineChunk(
        3,
        pl.Series("line_no", range(1, 5), dtype=pl.UInt32),
        pl.Series("byte_offset", range(4), dtype=pl.UInt64),
        pl.Series("text", texts),
    )
    keys = np.arange(1, 5, dtype=np.uint64)
    tables, unfit = LineParser(grammars).parse_unfit(chunk)
    repeats.learn(chunk, keys, tables["lines"], unfit)
    assert repeats.saturated(3, keys) is None
    assert repeats.skip(3, keys, ParseState()) is None


def test_transport_rows_are_learnt_as_the_general_parser_learns_their_lines():
    """``RepeatSkip.learn_rows`` (the transport fast path's rows: no join with their ``lines`` rows) remembers
    what ``learn`` remembers of the same lines parsed by the general parser: texts said at least twice in
    their source, none that may be glued, none already known, each source's own, with the same counts."""
    import numpy as np

    from nccl_logsift import accel
    from nccl_logsift.grammar.registry import load_grammars
    from nccl_logsift.io.lines import ReadStats, split_lines
    from nccl_logsift.parse.lineparser import LineParser
    from nccl_logsift.parse.repeats import RepeatSkip
    from nccl_logsift.tables import MODULE_FRAME, REPEATS_KEPT, UNFOLDED

    said = [
        "h1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "h1:10:11 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
        "[1]:[2] h1:10:11 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM/read",  # may be glued
        "h1:10:11 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA",
    ]
    # Source 1 says 0 and 1 twice in the first batch, 3 twice in the second; source 2 says 0 and 3 once.
    texts = [said[n % 4] for n in range(11)] + [said[3], said[0], said[3]]
    sources = np.array([1] * 12 + [2, 2], dtype=np.uint16)
    grammars = load_grammars()
    remembered = []
    for fast in (False, True):
        repeats = RepeatSkip(grammars, REPEATS_KEPT, UNFOLDED, MODULE_FRAME)
        for batch in (slice(0, 6), slice(6, 14)):  # the second batch finds some texts known
            part = texts[batch]
            raw = split_lines("\n".join(part).encode(), 0, 1, 0, ReadStats())
            keys = np.empty(len(part), dtype=np.uint64)
            accel.split_keys(raw.view.raw, raw.starts, raw.ends, np.arange(len(part)), keys)
            chunk = raw.lines()
            if fast:
                repeats.learn_rows(keys, sources[batch], chunk.text, "transport")
                continue
            tables, unfit = LineParser(grammars).parse_unfit(chunk)
            assert set(tables["transports"].get_column("line_no")) == set(range(1, len(part) + 1))
            repeats.learn(chunk, keys, tables["lines"], unfit, sources[batch])
        remembered.append(
            {
                sid: tuple(np.asarray(getattr(t, name)).tolist() for name in t.__dataclass_fields__)[1:]
                for sid, t in repeats._texts.items()
            }
        )
    assert remembered[0] == remembered[1]
    assert len(remembered[0][1][0]) == 3 and len(remembered[0][2][0]) == 0
