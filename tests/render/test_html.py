"""The HTML report as text: escaping, the Content-Security-Policy, self-containment, size, and the views."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest
from markupsafe import escape

from nccl_logsift.model import CellState
from nccl_logsift.render.html import render_html
from tests.conftest import FIXTURES
from tests.render.reports import (
    PATH_PAYLOAD,
    PAYLOADS,
    fixture_truth,
    hostile_log,
    primary_ranks,
    report_of,
    simulate,
)


def _page(name: str) -> str:
    return render_html(report_of(str(FIXTURES / name)))


def test_log_text_is_escaped_everywhere(tmp_path):
    page = render_html(report_of(str(hostile_log(tmp_path))))
    for payload in (*PAYLOADS.values(), PATH_PAYLOAD):
        assert payload not in page
        assert str(escape(payload)) in page  # it reached the page, as text
    assert "&lt;script&gt;document.body.setAttribute(" in page  # the WARN text is shown, as text
    assert "&lt;img src=x onerror=" in page  # so is the file name
    # Our own script is the only one, and the findings JSON cannot close its element early.
    assert page.count("<script>") == 1
    contract = re.search(
        r'<script type="application/json" id="findings-json">(.*?)</script>', page, re.S
    ).group(1)
    assert "<" not in contract


def test_csp_allows_exactly_the_inline_style_and_script():
    page = _page("rank_stall_8ranks.log")
    policy = (
        re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
        .group(1)
        .replace("&#39;", "'")
    )
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy
    style = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    script = re.search(r"<script>(.*?)</script>", page, re.S).group(1)
    for text, directive in ((style, "style-src"), (script, "script-src")):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"{directive} 'sha256-{digest}'" in policy
    assert ' style="' not in page  # inline style attributes would be refused by the policy


def test_page_loads_nothing_from_anywhere():
    page = _page("socket_fallback_4ranks.log")
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:|//|ftp:)""", page, re.I)
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_rank_stall_grid_marks_the_laggard_missing():
    report = report_of(str(FIXTURES / "rank_stall_8ranks.log"))
    culprit = primary_ranks(fixture_truth("rank_stall_8ranks"))
    grid = report.views.grids[0]
    assert grid.source == "nccl" and grid.culprit
    marked = [row for row in grid.rows if row.culprit]
    assert [row.ranks for row in marked] == [tuple(culprit)]
    stuck = [i for i, c in enumerate(grid.columns) if c.mark == "stuck"]
    assert stuck and marked[0].cells[stuck[0]] is CellState.MISSING
    assert all(row.cells[stuck[0]] is CellState.REACHED for row in grid.rows if not row.culprit)
    assert "stopped at #7" in grid.summary


def test_mismatch_grid_marks_the_divergence():
    report = report_of(str(FIXTURES / "collective_mismatch_4ranks.log"))
    culprit = primary_ranks(fixture_truth("collective_mismatch_4ranks"))
    grid = report.views.grids[0]
    column = next(i for i, c in enumerate(grid.columns) if c.mark == "divergence")
    assert grid.columns[column - 1].mark == "last-common"
    odd = [row.ranks[0] for row in grid.rows if row.cells[column] is CellState.MISMATCH]
    assert odd == culprit


def test_topology_flags_the_socket_fallback():
    topo = report_of(str(FIXTURES / "socket_fallback_4ranks.log")).views.topology
    assert {h.name for h in topo.hosts} == set(fixture_truth("socket_fallback_4ranks")["hosts"])
    assert topo.links and all(link.transport == "NET/Socket" and link.fallback for link in topo.links)
    assert all(h.gpus for h in topo.hosts)


def test_timeline_needs_timestamps(tmp_path):
    assert report_of(str(FIXTURES / "rank_stall_8ranks.log")).views.timeline is None
    log = simulate(tmp_path / "slow.log", "-s", "slow-rank", "--nccl-version", "2.27", "--ranks", "8")
    line = report_of(str(log)).views.timeline
    assert line is not None and line.clock == "timestamp" and len(line.lanes) == 8
    assert all(sum(lane.bins) > 0 for lane in line.lanes)


@pytest.mark.parametrize("ranks", [1024])
def test_large_job_groups_rows_by_node_and_stays_small(tmp_path, ranks):
    log = simulate(
        tmp_path / "big.log", "-s", "rank-stall", "--ranks", str(ranks), "--ops", "6", "--no-noise"
    )
    report = report_of(str(log))
    page = render_html(report)
    assert len(page.encode()) < 5_000_000
    grid = report.views.grids[0]
    assert grid.by_node and len(grid.rows) == ranks // 8
    culprits = {r for f in report.findings if f.primary for r in f.ranks}
    assert culprits and any(row.culprit and culprits & set(row.ranks) for row in grid.rows)


def test_cli_report_writes_one_file(run_cli, tmp_path):
    out = tmp_path / "r.html"
    result = run_cli("report", str(FIXTURES / "rank_stall_8ranks.log"), "-o", str(out))
    assert result.exit_code == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert "wrote" in result.stderr
    again = run_cli("analyze", str(FIXTURES / "rank_stall_8ranks.log"), "--format", "html")
    assert again.exit_code == 0 and again.stdout.startswith("<!DOCTYPE html>")
    failing = run_cli("report", str(FIXTURES / "rank_stall_8ranks.log"), "-o", str(out), "--fail-on", "error")
    assert failing.exit_code == 1
