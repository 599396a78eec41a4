"""Parsing in worker processes gives the tables, counts and summaries of parsing in one process."""

from __future__ import annotations

import gzip
import io
import pickle
import sys
from collections import deque

import polars as pl
import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.sources import Source
from nccl_logsift.parse import parallel
from nccl_logsift.parse.lineparser import ParseState
from nccl_logsift.pipeline import ParseOptions, TableStream
from nccl_logsift.simulate import Options, write
from tests.conftest import FIXTURES, corpus_files

GRAMMARS = load_grammars()
SMALL_SEGMENT = 48 << 10


class InProcessWorker:
    """A worker that runs the worker loop here (segments and answers still pickled): no process to start."""

    def __init__(self, setup: tuple):
        self.outstanding = 0
        self._segments: deque = deque()
        self._answers = parallel.serve(pickle.loads(pickle.dumps(setup)), self._feed())

    def _feed(self):
        while True:
            yield self._segments.popleft()

    def send(self, segment) -> None:
        self.outstanding += 1
        self._segments.append(pickle.loads(pickle.dumps(segment)))

    def receive(self):
        self.outstanding -= 1
        return parallel.unpacked(pickle.loads(pickle.dumps(next(self._answers))))

    def close(self) -> None:
        pass


@pytest.fixture
def small_segments(monkeypatch):
    """Workers in this process and segments of 48 KiB, so that even a small log is cut many times."""
    monkeypatch.setattr(parallel, "_Worker", InProcessWorker)
    monkeypatch.setattr(parallel, "SEGMENT_BYTES", SMALL_SEGMENT)
    return lambda path: monkeypatch.setattr(
        parallel, "SEGMENT_BYTES", max(SMALL_SEGMENT, path.stat().st_size // 6)
    )


def streamed(paths: list[str], options: ParseOptions):
    stream = TableStream(paths, options, GRAMMARS)
    parts: dict[str, list[pl.DataFrame]] = {}
    batches = 0
    for batch in stream:
        batches += 1
        for name, frame in batch.tables.items():
            parts.setdefault(name, []).append(frame)
    tables = {name: pl.concat(frames, how="diagonal_relaxed") for name, frames in parts.items()}
    return tables, stream, batches


def same_rows(got: pl.DataFrame, want: pl.DataFrame) -> bool:
    """The same rows in the same order; a column only one side has must be all null there.

    Batches end elsewhere, and in the diagnosis a batch of fast COLL rows only carries the columns the
    fast path fills, so the concatenated batches may differ in their all-null columns.
    """
    columns = want.columns + [c for c in got.columns if c not in want.columns]

    def widened(frame: pl.DataFrame) -> pl.DataFrame:
        other = got if frame is want else want
        return frame.with_columns(
            pl.lit(None, other.schema[c]).alias(c) for c in columns if c not in frame.columns
        ).select(columns)

    return widened(got).equals(widened(want))


def assert_same_as_one_process(paths: list[str], every_line: bool = True, workers: int = 2) -> int:
    """Compare with workers=1; return how many batches the parallel run gave."""
    want, one, _ = streamed(paths, ParseOptions(workers=1, every_line=every_line))
    got, many, batches = streamed(paths, ParseOptions(workers=workers, every_line=every_line))
    assert set(got) == set(want)
    for name in want:
        assert same_rows(got[name], want[name]), f"{name} differs"
    assert many.inputs == one.inputs
    assert many.numbering.instances.equals(one.numbering.instances)
    a, b = one.parser.state, many.parser.state
    for counter in (
        "family_counts",
        "unparsed_shapes",
        "lines",
        "envelope_lines",
        "unparsed_envelope_lines",
        "torn_fragments",
        "known_hosts",
    ):
        assert getattr(b, counter) == getattr(a, counter), counter
    return batches


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.log")), ids=lambda p: p.name)
def test_segments_give_the_tables_of_one_process_on_fixtures(small_segments, path):
    assert_same_as_one_process([str(path)])


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name[:60])
def test_segments_give_the_tables_of_one_process_on_real_logs(small_segments, path):
    small_segments(path)  # six segments or so: the largest logs are a few MB
    assert_same_as_one_process([str(path)], every_line=False)


@pytest.mark.parametrize("layout", ["interleaved", "per-rank", "srun", "torchrun", "mpirun"])
def test_segments_give_the_tables_of_one_process_under_every_launcher(small_segments, tmp_path, layout):
    path = tmp_path / "job"
    write(
        Options(scenario="collective-mismatch", layout=layout, ranks=8, nodes=2, size=250_000),
        str(path),
        None,
    )
    assert assert_same_as_one_process([str(path)]) > 1


def test_segments_of_a_compressed_file_and_of_stdin(small_segments, tmp_path, monkeypatch):
    plain = tmp_path / "job.log"
    write(Options(scenario="rank-stall", ranks=8, nodes=2, size=300_000), str(plain), None)
    packed = tmp_path / "job.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert assert_same_as_one_process([str(packed)]) > 1

    class Stdin:
        buffer = io.BytesIO(plain.read_bytes())

    want, _, _ = streamed([str(plain)], ParseOptions(workers=1))
    monkeypatch.setattr(sys, "stdin", Stdin)
    got, stream, _ = streamed(["-"], ParseOptions(workers=2))
    assert stream.inputs[0].lines == plain.read_bytes().count(b"\n")
    for name in want:
        assert same_rows(got[name], want[name]), name


def test_worker_processes_give_the_tables_of_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "SEGMENT_BYTES", 256 << 10)
    path = tmp_path / "job.log"
    write(Options(scenario="rank-stall", ranks=16, nodes=2, size=1_000_000), str(path), None)
    assert assert_same_as_one_process([str(path)], every_line=False) > 1


def test_a_glued_line_naming_a_host_the_worker_had_not_seen_is_parsed_again():
    segment = parallel.Segment(0, 0, 10, "x.log", known_hosts=frozenset({"node1"}))
    result = parallel.SegmentTables([], 0, 0, 0, ParseState(unknown_glued_hosts={"Xnode2"}))
    assert parallel.missed_hosts(
        result, segment, {"node1", "node2"}
    )  # "Xnode2" ends with a host known by then
    assert not parallel.missed_hosts(result, segment, {"node1", "node3"})


def test_worker_count_is_one_for_small_live_or_declined_inputs_and_on_two_cores(tmp_path):
    small = Source(0, str(tmp_path / "a.log"), 1000)
    large = Source(0, str(tmp_path / "b.log"), parallel.MIN_PARALLEL_BYTES)
    stdin = Source(0, "-", None)
    assert parallel.worker_count(None, [large], live=False, cores=8) == parallel.MAX_AUTO_WORKERS
    assert parallel.worker_count(None, [stdin], live=False, cores=3) == 2
    assert parallel.worker_count(None, [small], live=False, cores=8) == 1
    assert parallel.worker_count(None, [large], live=False, cores=2) == 1  # the diagnosis needs a core
    assert parallel.worker_count(None, [large], live=True, cores=8) == 1
    assert parallel.worker_count(1, [large], live=False, cores=8) == 1
    assert parallel.worker_count(3, [small], live=False, cores=2) == 3


def test_file_segments_cut_at_line_starts(tmp_path):
    path = tmp_path / "a.log"
    lines = [b"x" * n + b"\n" for n in range(1, 300)]
    path.write_bytes(b"".join(lines))
    source = Source(0, str(path), path.stat().st_size)
    ranges = list(parallel.file_segments(source, 1000))
    data = path.read_bytes()
    assert ranges[0][0] == 0 and ranges[-1][1] is None
    for (start, length), (following, _) in zip(ranges, ranges[1:]):
        assert start + length == following and data[following - 1 : following] == b"\n"


def test_tables_are_handed_over_on_disk_when_shared_memory_is_small(monkeypatch):
    class Small:
        f_bavail, f_frsize = 64, 1 << 20  # a container's 64 MB /dev/shm

    monkeypatch.setattr(parallel.os, "statvfs", lambda path: Small)
    assert parallel.scratch_directory() is None


@pytest.mark.parametrize("how", ["gzip", "stdin"])
def test_coll_evidence_of_worker_parsed_inputs_that_cannot_be_read_again(
    small_segments, tmp_path, monkeypatch, how
):
    """Workers send back no line text; for a pipe or a compressed file, the calls the diagnosis keeps are
    quoted from the segments this process read, so the findings are those of the plain file."""
    from nccl_logsift.pipeline import analyze
    from nccl_logsift.render.json import to_dict

    plain = tmp_path / "job.log"
    write(Options(scenario="collective-mismatch", ranks=8, nodes=2, size=300_000), str(plain), None)
    if how == "gzip":
        source = tmp_path / "job.log.gz"
        source.write_bytes(gzip.compress(plain.read_bytes()))
        path = str(source)
    else:

        class Stdin:
            buffer = io.BytesIO(plain.read_bytes())

        monkeypatch.setattr(sys, "stdin", Stdin)
        path = "-"
    want = to_dict(analyze([str(plain)], ParseOptions(workers=1), views=False))
    got = to_dict(analyze([path], ParseOptions(workers=2), views=False))
    quoted = [e["text"] for f in got["findings"] for e in f["evidence"]] + [
        r["last_line"]["text"] for r in got["ranks"]
    ]
    assert sum("NCCL INFO AllReduce: opCount" in text for text in quoted) > 8
    for report in (want, got):
        report.pop("inputs")
        for e in [e for f in report["findings"] for e in f["evidence"]] + [
            r["last_line"] for r in report["ranks"]
        ]:
            e.pop("path")
    assert got == want
