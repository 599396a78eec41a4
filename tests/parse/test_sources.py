"""A directory of per-rank files is parsed as one file of the same lines would be: the general parser runs a
bounded number of times whatever the number of files, each prefix is parsed once, and the tables are
those of parsing each file on its own."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from nccl_logsift.parse.chunks import ChunkParser
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.parse.sources import cut_alike
from nccl_logsift.pipeline import ParseOptions, parse_job
from nccl_logsift.simulate import Options, write

# Small chunks, so that every file is read in several and each scanning thread meets its prefix.
OPTIONS = ParseOptions(workers=1, chunk_bytes=2048)


@pytest.fixture
def ranks(tmp_path: Path) -> Path:
    """A 4-rank job as NCCL_DEBUG_FILE writes it: a file per process (and the launcher's console.log), one of
    them with an NCCL line that no family parses."""
    out = tmp_path / "job"
    write(Options(scenario="healthy", ranks=4, nodes=2, ops=10, noise=False, layout="per-rank"), str(out))
    odd = second_rank(out)
    envelope = odd.read_text().split(" NCCL ", 1)[0]
    odd.write_text(f"{envelope} NCCL INFO a line no grammar knows 42\n" + odd.read_text())
    return out


def second_rank(job: Path) -> Path:
    return sorted(path for path in job.iterdir() if path.name != "console.log")[1]


class Calls:
    """Counts the calls of a method (wrapped in place by monkeypatch)."""

    def __init__(self, monkeypatch, cls, name: str):
        self.count = 0
        method = getattr(cls, name)

        def counted(*args, **kwargs):
            self.count += 1
            return method(*args, **kwargs)

        monkeypatch.setattr(cls, name, counted)


def test_the_general_parser_runs_a_bounded_number_of_times_not_once_per_file(ranks, monkeypatch):
    files = len(list(ranks.iterdir()))
    parses = [Calls(monkeypatch, LineParser, name) for name in ("parse", "parse_unfit")]
    heads = Calls(monkeypatch, LineParser, "_read_heads")
    read: list[str] = []
    read_heads = LineParser._read_heads  # counted above

    def recorded(self: LineParser, asked: pl.Series):
        read.extend(asked.to_list())
        return read_heads(self, asked)

    monkeypatch.setattr(LineParser, "_read_heads", recorded)
    summary, _ = parse_job([str(ranks)], OPTIONS)
    assert files == 5 and len(summary.inputs) == files
    assert sum(calls.count for calls in parses) == 1
    # Each process's COLL lines (its main thread) and transport lines (its init thread) have a head each,
    # met by both scanning threads and read once; the heads of the other lines left to the general parser
    # are read in its one call.
    assert heads.count <= 2 * (files - 1) + 1
    assert len(read) == len(set(read)), "a head was read twice"


def test_the_tables_are_those_of_parsing_each_file_on_its_own(ranks, monkeypatch):
    summary, job = parse_job([str(ranks)], OPTIONS)
    monkeypatch.setattr(ChunkParser, "hold", lambda self: False)  # every file's lines parsed at its end
    alone, job_alone = parse_job([str(ranks)], OPTIONS)
    assert summary.inputs == alone.inputs
    assert [i.unparsed_lines for i in summary.inputs if i.path == str(second_rank(ranks))] == [1]
    assert summary.unparsed_envelope_lines == 1
    assert job.tables.keys() == job_alone.tables.keys()
    for name, table in job.tables.items():
        assert table.equals(job_alone.tables[name], null_equal=True), name


def test_held_files_flush_once_held_rows_calls_wait(ranks, monkeypatch):
    """The files held for the next one's leftovers flush as one batch when HELD_ROWS calls wait in all, not
    at FAST_ROWS (a directory of per-rank files is flushed every HELD_ROWS calls, in one call of the general
    parser each): with room for fewer calls than a file has, every file is parsed at its end; the tables
    are the same either way."""
    from nccl_logsift.parse import chunks

    summary, job = parse_job([str(ranks)], OPTIONS)
    per_file = job.tables["collectives"].group_by("source_id").len().get_column("len")
    assert per_file.len() == 4 and per_file.min() > 1
    monkeypatch.setattr(chunks, "FAST_ROWS", 10 * int(per_file.sum()))  # never reached within a file
    parses = Calls(monkeypatch, LineParser, "parse_unfit"), Calls(monkeypatch, LineParser, "parse")
    parse_job([str(ranks)], OPTIONS)
    assert sum(calls.count for calls in parses) == 1
    monkeypatch.setattr(chunks, "HELD_ROWS", int(per_file.min()))  # a file's own calls fill it
    flushed, flushed_job = parse_job([str(ranks)], OPTIONS)
    assert sum(calls.count for calls in parses) - 1 >= per_file.len()  # each rank's file at its end
    assert flushed.inputs == summary.inputs
    for name, table in job.tables.items():
        assert table.equals(flushed_job.tables[name], null_equal=True), name


def test_a_file_with_a_line_cut_by_the_hosts_known_is_parsed_at_its_end(ranks, monkeypatch):
    glued = second_rank(ranks)
    glued.write_text(glued.read_text() + "teardown gpu-9:2205442:2205442 [2] NCCL INFO cudaDriverVersion 1\n")
    parses = Calls(monkeypatch, LineParser, "parse_unfit"), Calls(monkeypatch, LineParser, "parse")
    parse_job([str(ranks)], OPTIONS)
    assert sum(calls.count for calls in parses) == 2


@pytest.mark.parametrize(
    "line, alike",
    [
        ("nid1:12:34 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", True),
        ("nid1:12:34 NCCL WARN Cuda failure 'out of memory'", True),
        ("nid1:12:34 [0] NCCL INFO NCCL version 2.21.5+cuda12.4", True),
        ("epoch 3 loss 0.25", True),
        ("[rank3]:[W ProcessGroupNCCL.cpp:1168] Warning: WorkNCCL timed out", True),
        # Another process's line glued in, or the tail of a torn line before one: where to cut depends on
        # whether its host was seen.
        ("nid1:12:34 [0] NCCL INFO Channel 00/0 :nid2:56:78 [1] NCCL INFO Connected all rings", False),
        ("CUMEM/readnid2:56:78 [1] NCCL INFO Connected all rings", False),
        ("\x1b[32mnid1:12:34 [0] NCCL INFO Connected all rings\x1b[0m", False),
        ("[2024-05-01 10:00:00] nid1:12:34 [0] NCCL INFO Connected all rings", False),
    ],
)
@pytest.mark.parametrize("engine", ["python", "polars"])
def test_cut_alike_vouches_only_for_lines_without_a_glued_envelope(line, alike, engine, monkeypatch):
    """A few lines are read in Python's ``re``, more in polars: both read the same regex alike."""
    if engine == "polars":
        monkeypatch.setattr("nccl_logsift.parse.sources._FEW_LINES", 0)
    plain = "nid1:12:34 [0] NCCL INFO Connected all trees"
    assert cut_alike(pl.Series([line])) is alike
    assert cut_alike(pl.Series([plain, None, line, plain])) is alike


def test_each_file_learns_its_own_repeats_when_files_are_parsed_together(ranks, monkeypatch):
    """The leftovers of several files parsed in one call learn each file's texts from its own lines
    (``RepeatSkip.learn`` with their sources), in one query: the same texts are skipped as when each file
    is parsed at its end, and a text repeated once in each of two files is no repeat in either."""
    from nccl_logsift.parse.repeats import RepeatSkip
    from nccl_logsift.pipeline import Analysis, TableStream

    monkeypatch.setattr("nccl_logsift.tables.REPEATS_KEPT", 2)
    files = sorted(path for path in ranks.iterdir() if path.name != "console.log")
    for n, path in enumerate(files):
        envelope = path.read_text().split(" NCCL ", 1)[0]
        own = [f"{envelope} NCCL INFO NET/IB : Using [0]mlx5_{n}:1/IB ; OOB eth0:10.0.0.{n}<0>\n"] * (n + 2)
        shared = "gpu-0:1:1 [0] NCCL INFO Using network IB\n"  # one copy a file: no file repeats it
        path.write_text(path.read_text() + "".join(own) + shared)
    learnt = Calls(monkeypatch, RepeatSkip, "learn")

    def analysed(hold: bool):
        if not hold:
            monkeypatch.setattr(ChunkParser, "hold", lambda self: False)
        analysis = Analysis(TableStream([str(ranks)], ParseOptions(workers=1, every_line=False)))
        for batch in analysis.stream:
            analysis.add(batch)
        repeats = analysis.stream.repeats
        assert repeats is not None
        texts = {
            sid: [t.keys.tolist(), t.family.tolist(), t.limit.tolist(), t.seen.tolist()]
            for sid, t in repeats._texts.items()
        }
        return (*analysis.job(), texts)

    together, together_job, texts = analysed(hold=True)
    assert learnt.count == 1  # every file's leftovers in one call, learnt in one query
    alone, alone_job, texts_alone = analysed(hold=False)
    assert learnt.count == 1 + len(files) + 1  # and then at each file's end (and console.log's)
    # Each file remembers its own repeated lines (its NET/IB line among them), and no file the line that
    # every file says once.
    assert texts == texts_alone
    assert len([keys for keys, *_ in texts.values() if keys]) == len(files)
    for name in ("repeats_folded", "family_counts", "envelope_lines", "lines"):
        assert getattr(together, name) == getattr(alone, name), name
    for name, table in together_job.tables.items():
        assert table.equals(alone_job.tables[name], null_equal=True), name
