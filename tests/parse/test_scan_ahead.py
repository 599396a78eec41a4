"""Scanning chunks ahead in a thread gives the tables of scanning them in turn, and stops cleanly."""

from __future__ import annotations

import threading

import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import LineReader
from nccl_logsift.io.sources import require_sources
from nccl_logsift.parse.chunks import ChunkParser
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.simulate import Options, write


def chunks_of(path, chunk_bytes=1 << 16):
    sources, _ = require_sources([str(path)])
    return LineReader(sources[0], chunk_bytes)


def tables(path, ahead: bool, threads: int = 2) -> list[dict]:
    parser = ChunkParser(LineParser(load_grammars()), every_line=False)
    reader = chunks_of(path)
    out = []
    items = parser.scan_ahead(reader, threads) if ahead else map(parser.scan, reader)
    for scanned in items:
        parser.add(scanned.chunk, scanned)
        if parser.ready:
            out.append(parser.flush())
    out.append(parser.flush())
    return [tables for tables in out if tables is not None]


@pytest.mark.parametrize("threads", [1, 3])
def test_scanning_ahead_gives_the_tables_of_scanning_in_turn(tmp_path, monkeypatch, threads):
    from nccl_logsift.parse import chunks

    monkeypatch.setattr(chunks, "REST_LINES", 500)
    monkeypatch.setattr(chunks, "FAST_ROWS", 500)
    path = tmp_path / "job.log"
    write(Options(scenario="rank-stall", ranks=8, nodes=2, ops=300, torn_rate=0.01), str(path))
    ahead, in_turn = tables(path, True, threads), tables(path, False)
    assert len(ahead) == len(in_turn) > 3
    for a, b in zip(ahead, in_turn):
        assert a.keys() == b.keys()
        for name in a:
            assert a[name].equals(b[name], null_equal=True), name


def test_an_error_while_scanning_reaches_the_consumer(tmp_path):
    path = tmp_path / "job.log"
    write(Options(scenario="healthy", ranks=4, nodes=1, ops=50, noise=False), str(path))
    parser = ChunkParser(LineParser(load_grammars()), every_line=False)

    def failing():
        yield from list(chunks_of(path))[:2]
        raise OSError("disk went away")

    with pytest.raises(OSError, match="disk went away"):
        for scanned in parser.scan_ahead(failing()):
            parser.add(scanned.chunk, scanned)


def test_an_error_in_a_scanning_thread_reaches_the_consumer(tmp_path, monkeypatch):
    path = tmp_path / "job.log"
    write(Options(scenario="healthy", ranks=4, nodes=1, ops=200, noise=False), str(path))
    parser = ChunkParser(LineParser(load_grammars()), every_line=False)
    from nccl_logsift.parse import chunks

    real = chunks._Scanner.scan
    seen = []

    def scan(self, chunk, blocking=None):
        seen.append(chunk)
        if len(seen) == 3:
            raise ValueError("bad chunk")
        return real(self, chunk, blocking)

    monkeypatch.setattr(chunks._Scanner, "scan", scan)
    with pytest.raises(ValueError, match="bad chunk"):
        for scanned in parser.scan_ahead(chunks_of(path, 1 << 12), threads=2):
            parser.add(scanned.chunk, scanned)


def test_a_consumer_that_stops_early_stops_the_thread(tmp_path):
    path = tmp_path / "job.log"
    write(Options(scenario="healthy", ranks=4, nodes=1, ops=400, noise=False), str(path))
    parser = ChunkParser(LineParser(load_grammars()), every_line=False)
    items = parser.scan_ahead(chunks_of(path, 1 << 12))
    next(items)
    items.close()
    assert not any(
        t.name.startswith(("logsift-read", "logsift-scan")) and t.is_alive() for t in threading.enumerate()
    )
