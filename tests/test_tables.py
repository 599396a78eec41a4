"""The sinks: the columns an analysis keeps, null columns that take no memory, ranks in row order, and the
Parquet files of ``logsift parse`` holding the rows the memory sink holds, in line order."""

import ast
import functools
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from conftest import FIXTURES

from nccl_logsift.grammar import load_grammars
from nccl_logsift.parse.schema import TableSchemas
from nccl_logsift.pipeline import Analysis, ParseOptions, TableStream, parse_paths
from nccl_logsift.tables import (
    COMPACT_ROWS,
    DIAGNOSIS_COLUMNS,
    MemorySink,
    ParquetSink,
    RankMaps,
    compact,
    with_ranks,
)

PACKAGE = Path(__file__).resolve().parents[1] / "nccl_logsift"
# The code that reads the tables of a Job: every string it contains may name a column. The digest reads
# the parser's calls, not the Job (its list of columns to drop would count as names).
READERS = [
    path
    for path in [
        *PACKAGE.glob("findings/**/*.py"),
        *PACKAGE.glob("views/*.py"),
        *PACKAGE.glob("resolve/*.py"),
        PACKAGE / "report.py",
    ]
    if path.name != "digest.py"
]


@functools.cache
def mentioned_names() -> frozenset[str]:
    # Parsing every reader takes ~0.2 s: once per session, not once per column checked.
    return frozenset(
        node.value
        for path in READERS
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def parsed_tables() -> dict[str, dict[str, pl.DataType]]:
    schemas = TableSchemas.from_grammars(load_grammars(), keep_text=True)
    return {"lines": schemas.lines, **schemas.tables}


@pytest.mark.parametrize("table", sorted(parsed_tables()))
def test_diagnosis_columns_hold_every_column_the_diagnosis_names(table):
    columns = parsed_tables()[table]
    mentioned = mentioned_names()
    named = [c for c in columns if c in mentioned]
    kept = DIAGNOSIS_COLUMNS.get(table, columns)
    assert [c for c in named if c not in kept] == []


def test_diagnosis_columns_name_only_columns_of_their_table():
    tables = parsed_tables()
    assert {name: [c for c in kept if c not in tables[name]] for name, kept in DIAGNOSIS_COLUMNS.items()} == {
        name: [] for name in DIAGNOSIS_COLUMNS
    }


def full_and_kept(path: Path) -> tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]:
    full, kept = MemorySink(), MemorySink(DIAGNOSIS_COLUMNS)
    parse_paths([str(path)], full)
    parse_paths([str(path)], kept)
    return full.tables, kept.tables


@pytest.mark.parametrize(
    "fixture", ["rank_stall_8ranks.log", "ib_error_4ranks.log", "pp_deadlock_4ranks.log"]
)
def test_memory_sink_with_columns_keeps_those_columns_of_the_same_rows(fixture):
    full, kept = full_and_kept(FIXTURES / fixture)
    assert kept.keys() == full.keys()
    for name, table in kept.items():
        wanted = [
            c
            for c in full[name].columns
            if c in DIAGNOSIS_COLUMNS.get(name, full[name].columns) or c in ("rank", "global_rank")
        ]
        assert table.columns == wanted, name
        assert table.equals(full[name].select(wanted)), name


def test_memory_sink_tables_keep_rows_in_line_order():
    full, _ = full_and_kept(FIXTURES / "rank_stall_8ranks.log")
    for name in ("lines", "comms", "topology", "transports"):
        assert full[name].select("source_id", "line_no", "part").rows() == sorted(
            full[name].select("source_id", "line_no", "part").rows()
        ), name


def test_parquet_sink_files_hold_the_memory_sinks_rows_with_their_ranks_in_line_order(tmp_path):
    log = FIXTURES / "rank_stall_8ranks.log"
    memory = MemorySink()
    parse_paths([str(log)], memory, ParseOptions())
    files = ParquetSink(tmp_path)
    parse_paths([str(log)], files, ParseOptions())
    assert set(files.files) == set(memory.tables)
    for name, path in files.files.items():
        written, held = pl.read_parquet(path), memory.tables[name]
        assert written.columns == held.columns, name
        assert written.equals(held.cast(written.schema)), name  # the same rows, in the same (line) order
    ranks = pl.read_parquet(files.files["comms"]).select("host", "pid", "global_rank").unique()
    assert ranks["global_rank"].null_count() == 0 and ranks.height == 8


def test_compact_keeps_values_and_a_null_column_takes_no_memory():
    frame = pl.DataFrame({"a": range(100_000), "b": pl.Series([None] * 100_000, dtype=pl.Int64)})
    compacted = compact(frame)
    assert (
        compacted.estimated_size() < frame.estimated_size() * 0.6
    )  # before equals(), which fills the column
    assert compacted.equals(frame) and compacted.schema == frame.schema
    small = frame.head(COMPACT_ROWS - 1)
    assert compact(small) is small  # too few rows to be worth replacing a column


def test_with_ranks_adds_the_process_rank_in_row_order_and_the_line_rank_from_labels():
    maps = RankMaps(
        processes=pl.DataFrame(
            {"host": ["b", "a"], "pid": [2, 1], "global_rank": [1, 0], "world_size": [2, 2]}
        ),
        instances=pl.DataFrame(),
    )
    lines = pl.DataFrame(
        {"host": ["a", "x", "b", "a"], "pid": [1, 9, 2, 1], "torch_rank": [None, 5, None, None]}
    )
    assert with_ranks("lines", lines, maps)["rank"].to_list() == [0, 5, 1, 0]
    assert with_ranks("comms", lines, maps)["global_rank"].to_list() == [0, None, 1, 0]


def test_with_ranks_looked_up_slice_by_slice_are_those_of_one_lookup(monkeypatch):
    maps = RankMaps(
        processes=pl.DataFrame(
            {"host": ["b", "a"], "pid": [2, 1], "global_rank": [1, 0], "world_size": [2, 2]}
        ),
        instances=pl.DataFrame(),
    )
    comms = pl.DataFrame({"host": ["a", "x", "b", "a", None, "b", "a"], "pid": [1, 9, 2, 1, 1, 2, 2]})
    monkeypatch.setattr("nccl_logsift.tables.RANK_SLICE_ROWS", 3)
    assert with_ranks("comms", comms, maps)["global_rank"].to_list() == [0, None, 1, 0, None, 1, None]
    assert with_ranks("comms", comms.clear(), maps).schema == {**comms.schema, "global_rank": pl.Int64}


def test_analysis_drops_the_columns_the_diagnosis_never_reads_as_each_batch_is_written():
    analysis = Analysis(TableStream([str(FIXTURES / "ib_error_4ranks.log")], ParseOptions(every_line=False)))
    for batch in analysis.stream:
        analysis.add(batch)
        assert any(
            set(frame.columns) - set(DIAGNOSIS_COLUMNS.get(name, frame.columns))
            for name, frame in batch.tables.items()
        )
    held = {name: {c for part in parts for c in part.columns} for name, parts in analysis.sink._parts.items()}
    assert held and {name: columns - set(DIAGNOSIS_COLUMNS[name]) for name, columns in held.items()} == {
        name: set() for name in held
    }


# Writes a few rows of each of ten 20 MB batches of text into a MemorySink and prints how much the RSS
# grew over the last eight: the rows a polars filter cuts share the batch's text buffers unless copied.
_KEPT_ROWS = """
import polars as pl
from nccl_logsift.tables import MemorySink

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 1e6

sink = MemorySink()
for k in range(10):
    batch = pl.select(
        text=pl.int_range(0, 100_000).cast(pl.String).str.zfill(10) + pl.lit("x" * 190),
        line_no=pl.int_range(0, 100_000),
    )
    sink.write("lines", batch.filter(pl.col("line_no") % 10_000 == 0))
    del batch
    if k == 1:
        start = rss()
print(rss() - start)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the RSS from /proc")
def test_memory_sink_keeps_the_rows_it_is_given_not_their_batchs_text():
    run = subprocess.run([sys.executable, "-c", _KEPT_ROWS], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert float(run.stdout) < 60  # 160 MB when each batch's 20 MB of text stays alive behind its 10 rows
