"""Every real log of ../shared/corpus/real parses, and yields the facts its SOURCES.md entry states.

Skipped when ../shared is absent. The expectations are read from SOURCES.md itself (version banner and
world size per file), so the test checks our tables against what a person wrote down about each log.
"""

from __future__ import annotations

import functools
import re

import polars as pl
import pytest
from conftest import CORPUS, CORPUS_ABSENT, corpus_files

from nccl_logsift.pipeline import parse_paths
from nccl_logsift.tables import MemorySink

FILES = corpus_files()
pytestmark = pytest.mark.skipif(not FILES, reason=CORPUS_ABSENT)
MAX_UNPARSED_RATE = 0.01


@functools.cache
def sources_facts() -> dict[str, tuple[str, int | None]]:
    """file-name prefix → (version column, world size) from the summary table of SOURCES.md."""
    facts = {}
    for row in (CORPUS / "SOURCES.md").read_text().splitlines():
        cells = [c.strip() for c in row.split("|")]
        if len(cells) < 8 or not cells[1].isdigit():
            continue
        name = cells[2].strip("`").removesuffix("...")
        ranks = re.match(r"(\d+) ranks", cells[6])
        facts[name] = (cells[5], int(ranks.group(1)) if ranks else None)
    return facts


def facts_for(path) -> tuple[str, int | None]:
    matches = [v for k, v in sources_facts().items() if path.name.startswith(k)]
    assert len(matches) == 1, f"{path.name}: not described in SOURCES.md"
    return matches[0]


@functools.cache
def parsed(path):
    sink = MemorySink()
    summary = parse_paths([str(path)], sink)
    return summary, sink.tables


@pytest.mark.parametrize("path", FILES, ids=[p.name[:60] for p in FILES])
def test_real_log_unparsed_rate_is_under_one_percent(path):
    summary, _ = parsed(path)
    rate = summary.unparsed_envelope_lines / max(summary.envelope_lines, 1)
    shapes = "\n".join(f"{n:6d} {s}" for s, n in summary.unparsed_shapes[:8])
    assert rate < MAX_UNPARSED_RATE, (
        f"{rate:.2%} of {summary.envelope_lines} enveloped lines unparsed:\n{shapes}"
    )


@pytest.mark.parametrize("path", FILES, ids=[p.name[:60] for p in FILES])
def test_real_log_version_and_world_size_match_sources_md(path):
    version_text, world = facts_for(path)
    _, tables = parsed(path)
    stated = re.match(r"(RCCL )?(\d+\.\d+\.\d+)", version_text)
    if stated:
        found = set(tables["versions"]["version"].drop_nulls().to_list())
        assert stated.group(2) in found, f"SOURCES.md says {version_text}, parsed versions {found}"
    communicators = tables["communicators"]
    if world and communicators.height:
        assert communicators["world_size"].max() == world


@pytest.mark.parametrize("path", FILES, ids=[p.name[:60] for p in FILES])
def test_real_log_warn_and_watchdog_lines_land_in_their_tables(path):
    _, tables = parsed(path)
    lines = tables["lines"]
    warns = lines.filter((pl.col("producer") == "nccl") & (pl.col("level") == "WARN")).height
    assert tables["errors"].filter(pl.col("level") == "WARN").height == warns
    # The watchdog's own timeout lines, not the later lines quoting them ("terminated with exception: ...").
    watchdog = lines.filter(
        pl.col("producer").is_in(["torch_cpp", "torch_py"])
        & pl.col("text").str.contains("Watchdog caught collective operation timeout")
        & ~pl.col("text").str.contains("terminated with exception")
    ).height
    if watchdog:
        assert tables["torch"].filter(pl.col("event") == "watchdog_timeout").height == watchdog
