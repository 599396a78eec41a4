"""Every lazy query of an analysis names the engine it runs on (``parse.schema.ENGINE``).

Polars 2 runs a lazy query on its streaming engine unless told otherwise, and that costs ~2 ms a query
however few its rows; an analysis runs thousands of small ones (each batch's patterns, the numbering's
instances). A ``collect()`` that forgets the engine is not wrong, only slow, so no other test would notice.
``batch/`` is left out: its queries scan a parquet dataset of many jobs, where the streaming engine's
bounded memory is the point.
"""

from __future__ import annotations

import ast
from pathlib import Path

import polars as pl

from nccl_logsift.parse.schema import ENGINE

PACKAGE = Path(__file__).resolve().parents[1] / "nccl_logsift"
STREAMING_ALLOWED = ("batch",)


def _collects(tree: ast.Module) -> list[ast.Call]:
    """The calls of ``.collect(...)``, ``pl.collect_all(...)`` and ``collect_all(...)`` in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("collect", "collect_all"):
                found.append(node)
    return found


def test_every_lazy_query_names_its_engine():
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] in STREAMING_ALLOWED:
            continue
        for call in _collects(ast.parse(path.read_text(), str(path))):
            if not any(keyword.arg == "engine" for keyword in call.keywords):
                missing.append(f"{relative}:{call.lineno}")
    assert not missing, f"lazy queries without engine=ENGINE: {missing}"


def test_the_guard_sees_a_collect_without_its_engine():
    tree = ast.parse("frame.lazy().collect()\npl.collect_all(frames, engine=ENGINE)\n")
    calls = _collects(tree)
    assert [any(k.arg == "engine" for k in call.keywords) for call in calls] == [False, True]


def test_the_engine_runs_a_query():
    frame = pl.DataFrame({"a": [3, 1, 2]})
    assert frame.lazy().sort("a").collect(engine=ENGINE)["a"].to_list() == [1, 2, 3]
    assert pl.collect_all([frame.lazy().head(1)], engine=ENGINE)[0].height == 1
