"""The COLL fast path against the grammar-driven parser it stands in for, and its number folding."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import ByteView, LineReader
from nccl_logsift.io.sources import expand_paths
from nccl_logsift.parse import numbers
from nccl_logsift.parse.fastcoll import CollFastPath
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.pipeline import ParseOptions, TableStream
from nccl_logsift.simulate import Options, write
from tests.simulate.simhelp import parse as parse_each_chunk
from tests.conftest import FIXTURES, corpus_files

GRAMMARS = load_grammars()
KEY = ["source_id", "line_no", "part"]


def general(path: Path) -> tuple[dict[str, pl.DataFrame], object]:
    """Every line through LineParser.parse only: the reference."""
    parser, tables = parse_each_chunk(path)
    return tables, parser.state


def streamed(path: Path) -> tuple[dict[str, pl.DataFrame], object]:
    stream = TableStream([str(path)], ParseOptions(), GRAMMARS)
    parts: dict[str, list[pl.DataFrame]] = {}
    for batch in stream:
        for name, frame in batch.tables.items():
            parts.setdefault(name, []).append(frame)
    return {name: pl.concat(frames, how="vertical_relaxed") for name, frames in parts.items()}, stream.parser.state


def assert_same_tables(path: Path) -> None:
    expected, expected_state = general(path)
    got, got_state = streamed(path)
    for name in ("lines", "collectives"):
        want = expected[name].sort(KEY)
        have = got[name].select(want.columns).sort(KEY)
        assert have.equals(want), f"{path.name}: {name} differs"
    assert got_state.family_counts == expected_state.family_counts
    assert got_state.unparsed_envelope_lines == expected_state.unparsed_envelope_lines


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.log")), ids=lambda p: p.name)
def test_fast_path_gives_the_general_parsers_tables_on_fixtures(path):
    assert_same_tables(path)


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name[:60])
def test_fast_path_gives_the_general_parsers_tables_on_real_logs(path):
    assert_same_tables(path)


@pytest.mark.parametrize("layout", ["interleaved", "per-rank", "srun", "torchrun", "mpirun"])
@pytest.mark.parametrize("version", ["2.14.3", "2.26.2"])
def test_fast_path_gives_the_general_parsers_tables_under_every_launcher(tmp_path, layout, version):
    path = tmp_path / "job.log"
    write(Options(scenario="collective-mismatch", layout=layout, nccl_version=version, ranks=8, nodes=2), str(path), None)
    assert_same_tables(path)


LINE = "gpu7:31842:31842 [3] NCCL INFO AllReduce: opCount 1a4 sendbuff 0x7f3a1c000000 recvbuff (nil) count 4194304 datatype 7 op 0 root -1 comm 0x55d2e4b1a6c0 [nranks=16] stream 0x55d2e3f0c900"


def fast_rows(tmp_path, lines: list[str]) -> pl.DataFrame:
    path = tmp_path / "x.log"
    path.write_text("\n".join(lines) + "\n")
    parser = LineParser(GRAMMARS)
    fast = CollFastPath(parser.parse_prefixes)
    chunk = next(iter(LineReader(expand_paths([str(path)])[0][0])))
    found = fast.read(chunk)
    return found.rows.with_columns(pl.Series("index", found.index))


def test_fast_path_reads_every_field(tmp_path):
    row = fast_rows(tmp_path, [LINE]).row(0, named=True)
    assert row["host"] == "gpu7" and row["pid"] == 31842 and row["dev"] == 3 and row["level"] == "INFO"
    assert (row["op"], row["opcount"], row["count"], row["datatype"], row["redop"], row["root"]) == ("AllReduce", 0x1A4, 4194304, 7, 0, -1)
    assert row["comm"] == 0x55D2E4B1A6C0 and row["nranks"] == 16 and row["stream"] == 0x55D2E3F0C900
    assert row["sendbuff"] == 0x7F3A1C000000 and row["recvbuff"] is None


@pytest.mark.parametrize(
    "line",
    [
        LINE + " task 0 globalrank 3",  # RCCL's extra fields: the general parser's pattern
        LINE.replace("opCount 1a4", "opCount 1A4"),  # NCCL prints lowercase hex
        LINE.replace("count 4194304", "count 41x4304"),
        LINE.replace("[nranks=16]", "[nranks=1x]"),
        LINE.replace("stream 0x55d2e3f0c900", "stream 0x55d2e3f0zz00"),
        LINE.replace("AllReduce:", "All-Reduce:"),
        "\x1b[32m" + LINE,  # colours
        "noise from another process" + LINE,  # glued onto the end of a torn line
        LINE.replace("gpu7:31842:31842 [3] NCCL INFO", "gpu7:31842:31842 [3] NCCL INFO Channel 00 x"),
        LINE.replace("NCCL INFO", "NCCL WARN"),
        LINE.replace("comm 0x55d2e4b1a6c0", "comm 55d2e4b1a6c0"),
        LINE.replace("comm 0x55d2e4b1a6c0", "comm 0x55D2E4B1A6C0"),
        LINE.replace("root -1", "root --1"),
        LINE.replace("op 0 root", "op x root"),
        LINE.replace("[nranks=16]", "[nranks=]"),
        LINE.replace("[nranks=16]", "[nranks=16"),
        LINE.replace("datatype 7", "dtype 7"),
    ],
)
def test_fast_path_leaves_anything_unusual_to_the_general_parser(tmp_path, line):
    assert fast_rows(tmp_path, [LINE, line])["index"].to_list() == [0]


def test_fast_path_reads_the_call_fields_of_every_op(tmp_path):
    lines = [LINE.replace("AllReduce:", f"{op}:").replace("root -1", f"root {root}") for op, root in
             [("ReduceScatter", 0), ("Send", 7), ("Recv", 12345)]]
    rows = fast_rows(tmp_path, lines)
    assert rows["op"].to_list() == ["ReduceScatter", "Send", "Recv"]
    assert rows["root"].to_list() == [0, 7, 12345] and rows["nranks"].to_list() == [16] * 3


def test_fast_path_reads_lines_behind_launcher_prefixes(tmp_path):
    rows = fast_rows(tmp_path, ["[rank3]:" + LINE, "[1,3]<stdout>:" + LINE, "node1: " + LINE])
    assert rows["index"].to_list() == [0, 1, 2]
    assert rows["torch_rank"].to_list()[0] == 3 and rows["mpi_rank"].to_list()[1] == 3


TOKENS = ["0", "7", "12345678", "123456789", "9999999999999999", "-1", "-35", "1a4", "ff", "55d2e4b1a6c0",
          "ffffffffffffffff", "x1", "", "12345678901234567"]


def folded(fold, **kw):
    data = " ".join(TOKENS).encode()
    starts = np.cumsum([0] + [len(t) + 1 for t in TOKENS[:-1]])
    stops = starts + np.array([len(t) for t in TOKENS])
    values, ok = fold(ByteView(data), starts, stops, **kw)
    return dict(zip(TOKENS, [int(v) if good else None for v, good in zip(values, ok)]))


def test_decimal_tokens_fold_like_int():
    expect = {t: int(t) for t in TOKENS if t.lstrip("-").isdigit() and len(t.lstrip("-")) <= numbers.MAX_DIGITS}
    got = folded(numbers.decimal, signed=True)
    assert {t: v for t, v in got.items() if v is not None} == expect


def test_hex_tokens_fold_like_int_base_16():
    hexdigits = set("0123456789abcdef")
    expect = {t: int(t, 16) for t in TOKENS if t and set(t) <= hexdigits and len(t) <= numbers.MAX_DIGITS}
    got = folded(numbers.hexadecimal)
    assert {t: v for t, v in got.items() if v is not None} == expect
