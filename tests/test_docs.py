from pathlib import Path

import polars as pl
import pytest
from conftest import FIXTURES

from nccl_logsift.grammar import load_grammars
from nccl_logsift.tables import table_docs

DOC = Path(__file__).resolve().parents[1] / "docs" / "tables.md"


def test_tables_doc_is_generated_from_the_current_grammars():
    assert DOC.read_text() == table_docs(load_grammars()) + "\n", (
        "regenerate: logsift tables > docs/tables.md"
    )


def documented_tables() -> dict[str, dict[str, str]]:
    """Table → column → type, as docs/tables.md lists them."""
    tables: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in DOC.read_text().splitlines():
        if line.startswith("## `"):
            current = tables.setdefault(line.strip("#` "), {})
        elif line.startswith("| `"):
            column, dtype = (cell.strip(" `") for cell in line.split("|")[1:3])
            current[column] = dtype
    return tables


@pytest.mark.parametrize("fixture", ["rank_stall_8ranks.log", "duplicate_gpu_4ranks_per_rank"])
def test_tables_doc_lists_every_column_parse_writes_with_its_type(run_cli, tmp_path, fixture):
    # The doc is generated from declared schemas; this holds those declarations to what `parse -o` writes.
    out = tmp_path / "tables"
    assert run_cli("parse", str(FIXTURES / fixture), "-o", str(out)).exit_code == 0
    written = {
        path.stem: {name: str(dtype) for name, dtype in pl.read_parquet_schema(path).items()}
        for path in sorted(out.glob("*.parquet"))
    }
    documented = documented_tables()
    assert {name: columns for name, columns in documented.items() if name in written} == written
