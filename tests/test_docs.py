from pathlib import Path

from nccl_logsift.grammar import load_grammars
from nccl_logsift.parse.schema import table_docs

DOC = Path(__file__).resolve().parents[1] / "docs" / "tables.md"


def test_tables_doc_is_generated_from_the_current_grammars():
    assert DOC.read_text() == table_docs(load_grammars()) + "\n", "regenerate: logsift tables > docs/tables.md"
