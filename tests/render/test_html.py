"""The HTML report as text: escaping, the Content-Security-Policy, self-containment, size, and the views."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest
from markupsafe import escape

from nccl_logsift.model import CellState, RankRole, Report, Severity
from nccl_logsift.render.html import render_html
from tests.conftest import CORPUS_ABSENT, FIXTURES
from tests.render.dom import parse
from tests.render.reports import (
    PATH_PAYLOAD,
    PAYLOADS,
    corpus,
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


@pytest.mark.parametrize(
    "name, collective", [("ib_error_4ranks", None), ("rank_stall_8ranks", "AllReduce #8")]
)
def test_verdict_is_laid_out_as_cause_consequences_and_next_step(name, collective):
    report = report_of(str(FIXTURES / f"{name}.log"))
    verdict = parse(render_html(report)).by_id("verdict")
    lead = report.findings[0]
    assert lead.primary
    cause = verdict.by_id("verdict-cause")
    link = cause.find("a", cls="code")
    assert (link.attrs["href"], link.text) == ("#finding-1", lead.code)
    who = cause.find("span", cls="who").text
    assert who.startswith("rank(s) " + ", ".join(map(str, primary_ranks(fixture_truth(name)))))
    assert all(host in who for host in lead.hosts)
    assert collective is None or collective in who
    # Every other finding at error or worse, each linked to its place among the findings; nothing less.
    links = verdict.by_id("verdict-consequences").find_all("a", cls="code")
    expected = [
        (f"#finding-{i}", f.code)
        for i, f in enumerate(report.findings, 1)
        if not f.primary and f.severity >= Severity.ERROR
    ]
    assert expected and [(a.attrs["href"], a.text) for a in links] == expected
    assert " ".join(verdict.by_id("verdict-next").find("dd").text.split()) == " ".join(lead.advice.split())
    assert verdict.by_id("verdict-text") is None  # the one paragraph that mixed them is gone


@pytest.mark.parametrize("name", ["healthy_8ranks", "socket_fallback_4ranks"])
def test_a_healthy_verdict_says_so_and_shows_no_cause(name):
    report = report_of(str(FIXTURES / f"{name}.log"))
    dom = parse(render_html(report))
    verdict = dom.by_id("verdict")
    assert "the job looks healthy" in verdict.by_id("verdict-text").text
    for part in ("verdict-cause", "verdict-consequences", "verdict-next", "culprits"):
        assert verdict.by_id(part) is None, part
    assert not dom.find_all("span", cls="root") and not dom.find_all("tr", cls="culprit")
    legend = dom.by_id("grid-legend")  # nothing to tell a culprit from a consequence by
    assert legend is None or legend.find("span", cls="culprit") is legend.find("span", cls="s-held") is None


def _roles(report: Report) -> tuple[set[int], set[int]]:
    """The ranks the verdict blames and those its consequences name (and it does not blame)."""
    culprits = {r for f in report.diagnosis.causes for r in f.ranks}
    return culprits, {r for f in report.diagnosis.consequences for r in f.ranks} - culprits


@pytest.mark.parametrize("name", ["ib_error_4ranks", "rank_stall_8ranks"])
def test_grid_rows_take_the_roles_the_verdict_gives_their_ranks(name):
    report = report_of(str(FIXTURES / f"{name}.log"))
    culprits, consequences = _roles(report)
    assert culprits == set(primary_ranks(fixture_truth(name))) and consequences
    for grid in report.views.grids:
        roles = {row.ranks[0]: row.role for row in grid.rows}
        assert {r for r, role in roles.items() if role is RankRole.ROOT_CAUSE} == culprits & set(roles)
        assert {r for r, role in roles.items() if role is RankRole.CONSEQUENCE} == consequences & set(roles)
        # Where the culprit stopped, its cells and the waiting ranks' cells differ, and no waiting rank is
        # painted as a laggard.
        (culprit,) = (row for row in grid.rows if row.culprit)
        for row in grid.rows:
            if row.role is RankRole.CONSEQUENCE:
                assert CellState.MISSING not in row.cells
                if culprit.behind:
                    assert any(a != b for a, b in zip(culprit.cells, row.cells))


def test_a_rank_behind_that_the_verdict_makes_a_consequence_is_held_not_missing(tmp_path):
    """A 16-rank mismatch: rank 2 stops short on a sub-communicator, and the verdict lists that (LS101) as
    a consequence of the mismatch; its missing call is drawn as held up, the page's legend says so."""
    log = simulate(tmp_path / "mismatch.log", "-s", "collective-mismatch", "--ranks", "16")
    report = report_of(str(log))
    culprits, consequences = _roles(report)
    rows = [row for g in report.views.grids for row in g.rows]
    held = [row for row in rows if CellState.HELD in row.cells]
    assert held and all(row.role is RankRole.CONSEQUENCE and set(row.ranks) <= consequences for row in held)
    assert not [row for row in rows if CellState.MISSING in row.cells and not row.culprit]
    dom = parse(render_html(report))
    legend = dom.by_id("grid-legend")
    assert (
        legend.find("span", cls="s-held") is not None and legend.find("span", cls="consequence") is not None
    )
    drawn = [tr for tr in dom.find_all("tr") if tr.find("td", cls="s-held") is not None]
    assert drawn and all(
        tr.attrs["data-role"] == "consequence" and "consequence" in tr.classes for tr in drawn
    )
    assert all(int(tr.attrs["data-ranks"]) in consequences - culprits for tr in drawn)


def test_a_real_ib_error_paints_only_its_culprit_as_a_laggard():
    """The real IB error (status 12 on one link) whose grid read as the opposite of its verdict: 14 of 16
    ranks short of the front, 13 of them drawn as laggards."""
    path = corpus("sparticlesteve__pytorch-nccl-test__slurm-nccl-416593")
    if path is None:
        pytest.skip(CORPUS_ABSENT)
    report = report_of(str(path))
    (grid,) = report.views.grids
    missing = [row.ranks for row in grid.rows if CellState.MISSING in row.cells]
    held = [row.ranks for row in grid.rows if CellState.HELD in row.cells]
    assert missing == [(10,)] and len(held) == 13
    assert {row.ranks: row.role for row in grid.rows}[(10,)] is RankRole.ROOT_CAUSE


def test_the_grid_and_the_rank_table_say_what_a_call_number_counts():
    from nccl_logsift.call_numbers import LEGEND

    report = report_of(str(FIXTURES / "rank_stall_8ranks.log"))
    dom = parse(render_html(report))
    notes = [p.text for p in dom.find_all("p", cls="call-numbers")]
    assert notes == [LEGEND, LEGEND]  # under the grids' legend, and under the rank table
    # Both sources name a call the same way: PyTorch's SeqNum 8 is call #8, as NCCL's 8th call is.
    (torch,) = (g for g in report.views.grids if g.source == "pytorch")
    column = next(i for i, c in enumerate(torch.columns) if c.position == 8)
    assert all("call #8" in row.notes[column] and "SeqNum" not in row.notes[column] for row in torch.rows)
