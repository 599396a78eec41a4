"""The COLL fast path against the grammar-driven parser it stands in for."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from nccl_logsift.grammar import load_grammars
from nccl_logsift.io.lines import LineReader
from nccl_logsift.io.sources import expand_paths
from nccl_logsift.parse.collscan import ByteTable
from nccl_logsift.parse.fastcoll import CollFastPath
from nccl_logsift.parse.lineparser import LineParser
from nccl_logsift.pipeline import ParseOptions, TableStream
from nccl_logsift.simulate import Options, write
from tests.conftest import FIXTURES, corpus_files
from tests.simulate.simhelp import parse as parse_each_chunk

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
    return {
        name: pl.concat(frames, how="vertical_relaxed") for name, frames in parts.items()
    }, stream.parser.state


def assert_same_tables(path: Path) -> None:
    expected, expected_state = general(path)
    got, got_state = streamed(path)
    for name in ("lines", "collectives", "transports"):
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
    write(
        Options(scenario="collective-mismatch", layout=layout, nccl_version=version, ranks=8, nodes=2),
        str(path),
        None,
    )
    assert_same_tables(path)


LINE = (
    "gpu7:31842:31842 [3] NCCL INFO AllReduce: opCount 1a4 sendbuff 0x7f3a1c000000 recvbuff (nil) count "
    "4194304 datatype 7 op 0 root -1 comm 0x55d2e4b1a6c0 [nranks=16] stream 0x55d2e3f0c900"
)


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
    assert (row["op"], row["opcount"], row["count"], row["datatype"], row["redop"], row["root"]) == (
        "AllReduce",
        0x1A4,
        4194304,
        7,
        0,
        -1,
    )
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
    lines = [
        LINE.replace("AllReduce:", f"{op}:").replace("root -1", f"root {root}")
        for op, root in [("ReduceScatter", 0), ("Send", 7), ("Recv", 12345)]
    ]
    rows = fast_rows(tmp_path, lines)
    assert rows["op"].to_list() == ["ReduceScatter", "Send", "Recv"]
    assert rows["root"].to_list() == [0, 7, 12345] and rows["nranks"].to_list() == [16] * 3


def test_fast_path_finds_the_message_after_any_n_or_nccl_info_in_the_prefix(tmp_path):
    """The message is sought at each " NCCL INFO " in turn; a prefix holding one is still the general
    parser's to judge."""
    lines = [
        LINE.replace("gpu7", "NCCL-NODE"),
        LINE.replace("gpu7", "gpu7 NCCL INFO x"),
        LINE + " " + LINE,
        LINE.replace("NCCL INFO AllReduce", "NCCL INFO NCCL INFO AllReduce"),
        "N" * 300,
    ]
    rows = agreement(tmp_path, lines)
    assert rows["index"].to_list()[:1] == [0] and rows["host"].to_list()[:1] == ["NCCL-NODE"]


def test_fast_path_reads_lines_behind_launcher_prefixes(tmp_path):
    rows = fast_rows(tmp_path, ["[rank3]:" + LINE, "[1,3]<stdout>:" + LINE, "node1: " + LINE])
    assert rows["index"].to_list() == [0, 1, 2]
    assert rows["torch_rank"].to_list()[0] == 3 and rows["mpi_rank"].to_list()[1] == 3


def agreement(tmp_path, lines: list[str], pointers: bool = True, tables=ByteTable) -> pl.DataFrame:
    """The fast path's rows for ``lines`` (one chunk), after checking each against the general parser's row.

    A line the fast path leaves is fine whatever the general parser makes of it; a line it takes must
    be a ``coll`` row of the general parser with the same values in every column.
    """
    path = tmp_path / "x.log"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape"))
    chunk = next(iter(LineReader(expand_paths([str(path)])[0][0])))
    found = CollFastPath(LineParser(GRAMMARS).parse_prefixes, pointers=pointers, tables=tables).read(chunk)
    if not len(found.index):
        return pl.DataFrame()
    reference = LineParser(GRAMMARS).parse(chunk.lines())["collectives"]
    fast = found.rows
    columns = [c for c in fast.columns if c in reference.columns]
    want = reference.filter(pl.col("line_no").is_in(fast["line_no"].implode())).select(columns)
    assert fast.select(columns).equals(want), (fast.select(columns), want)
    return fast.with_columns(pl.Series("index", found.index))


def taken(tmp_path, lines: list[str], **kw) -> list[int]:
    rows = agreement(tmp_path, lines, **kw)
    return rows["index"].to_list() if len(rows) else []


@pytest.mark.parametrize(
    "field, value, fast",
    [
        ("count 4194304", "count 12345678", True),  # 8 digits: one word
        ("count 4194304", "count 123456789", True),  # 9: two
        ("count 4194304", "count 1234567:", False),  # ":" and "/" border the digits
        ("count 4194304", "count /", False),
        ("count 4194304", "count 0", True),
        ("count 4194304", "count 9999999999999999", True),  # 16 digits
        ("count 4194304", "count 12345678901234567", True),  # 17 digits: still an int64
        ("count 4194304", "count 999999999999999999", True),  # 18 digits
        ("count 4194304", "count 9999999999999999999", False),  # 19 digits, beyond int64
        ("count 4194304", "count 9223372036854775807", True),  # the largest int64
        ("count 4194304", "count 9223372036854775808", False),  # beyond: null for the general parser
        ("count 4194304", "count 000000000000000000000042", True),  # leading zeros
        ("count 4194304", "count \u0663", False),  # an Arabic-Indic digit: \d matches it, int64 does not
        ("count 4194304", "count -5", False),
        ("count 4194304", "count +5", False),
        ("root -1", "root -35", True),
        ("root -1", "root -0", True),
        ("root -1", "root -9223372036854775808", True),
        ("root -1", "root -9223372036854775809", False),
        ("root -1", "root -", False),
        ("opCount 1a4", "opCount 7fffffffffffffff", True),  # 16 hex digits
        ("opCount 1a4", "opCount 8000000000000000", False),  # beyond int64: null for the general parser
        ("opCount 1a4", "opCount 10000000000000000", False),  # 17 hex digits
        ("opCount 1a4", "opCount 0", True),
        ("sendbuff 0x7f3a1c000000", "sendbuff (nil)", True),
        ("sendbuff 0x7f3a1c000000", "sendbuff 0xffffffffffffffff", True),
        ("sendbuff 0x7f3a1c000000", "sendbuff 0x1ffffffffffffffff", False),  # 17 hex digits
        ("sendbuff 0x7f3a1c000000", "sendbuff 0x", False),
        ("sendbuff 0x7f3a1c000000", "sendbuff 0xzz", False),
        ("sendbuff 0x7f3a1c000000", "sendbuff (nul)", False),
        ("comm 0x55d2e4b1a6c0", "comm (nil)", False),
        ("comm 0x55d2e4b1a6c0", "comm 0x0", True),
        ("[nranks=16]", "[nranks=0016]", True),
        ("[nranks=16]", "[nranks=123456789]", True),
        ("[nranks=16]", "[nranks=16]x", False),
        ("[nranks=16] stream", "[nranks=16]  stream", False),
        ("[nranks=16]", "[nranks=16]]", False),
        ("AllReduce:", "A:", True),
        ("AllReduce:", ":", False),
        ("AllReduce:", "All\x1bReduce:", False),
    ],
)
@pytest.mark.parametrize("pointers", [True, False])
def test_fast_path_takes_a_value_only_when_the_general_parser_reads_it_alike(
    tmp_path, field, value, fast, pointers
):
    assert field in LINE
    assert taken(tmp_path, [LINE, LINE.replace(field, value)], pointers=pointers) == ([0, 1] if fast else [0])


def test_fast_path_survives_lines_cut_anywhere(tmp_path):
    lines = [LINE[:n] for n in range(len(LINE) + 1)] + [LINE[n:] for n in range(len(LINE))]
    lines += [" " * 40, " " * 21, "\x1b" * 30, "x " * 30, LINE.replace(" ", "  "), LINE + " ", " " + LINE]
    rows = agreement(tmp_path, lines)
    assert len(LINE) in rows["index"].to_list()


def test_fast_path_agrees_with_the_general_parser_on_damaged_lines(tmp_path):
    rng = random.Random(5)
    alphabet = " 0123456789abcdefx-()[]=:\x1bAZ"
    lines = []
    for _ in range(3000):
        line = list(LINE)
        for _ in range(rng.randint(1, 3)):
            line[rng.randrange(len(line))] = rng.choice(alphabet)
        lines.append("".join(line))
    assert len(taken(tmp_path, lines)) > 100


def test_fast_path_with_tiny_tables_gives_the_same_rows(tmp_path):
    """Every prefix collides (hash mask 0), the slot table starts at two slots and grows, and the tables
    are emptied between chunks when they hold more than four strings."""
    lines = [
        LINE.replace("gpu7:31842", f"gpu{i % 7}:{31842 + i % 13}").replace(
            "AllReduce", ("Send", "Recv", "AllGather")[i % 3]
        )
        for i in range(200)
    ]
    path = tmp_path / "x.log"
    path.write_text("\n".join(lines) + "\n")
    source = expand_paths([str(path)])[0][0]
    tiny = lambda: ByteTable(max_ids=4, slots=2, hash_mask=0)
    parser = LineParser(GRAMMARS)
    small, usual = CollFastPath(parser.parse_prefixes, tables=tiny), CollFastPath(parser.parse_prefixes)
    chunks = list(LineReader(source, chunk_bytes=2000))
    assert len(chunks) > 5
    for chunk in chunks:
        a, b = small.read(chunk), usual.read(chunk)
        assert np.array_equal(a.index, b.index) and a.rows.equals(b.rows)
    assert small.read(chunks[0]).rows["host"].n_unique() == 7
