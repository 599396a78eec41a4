"""The HTML report in headless Chromium: it renders, its own script runs, nothing else does.

For simulated scenarios with a known culprit and for real logs of the corpus, the page is opened from disk,
its DOM read back after load, and checked for the verdict, the grid and the highlighted culprit; a
screenshot is taken. The hostile-log test loads a page whose log carries script payloads, once with the
Content-Security-Policy and once without it, so escaping and the policy are each shown to hold alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nccl_logsift.render.html import render_html
from tests.conftest import CORPUS_ABSENT, FIXTURES
from tests.render import browser
from tests.render.dom import parse
from tests.render.reports import (
    PAYLOADS,
    corpus,
    fixture_truth,
    hostile_log,
    primary_ranks,
    report_of,
    simulate,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _open(report, tmp_path: Path, name: str = "report.html"):
    page = tmp_path / name
    page.write_text(render_html(report), encoding="utf-8")
    loaded = browser.load(page)
    return page, loaded, parse(loaded.dom)


def _check_page(report, page: Path, loaded, dom, culprits: list[int]) -> None:
    html = dom.find("html")
    assert html.attrs.get("data-js") == "ready", "the page's own script did not run"
    assert "Refused to" not in loaded.console, loaded.console  # no CSP violation by our own style or script
    if report.diagnosis.healthy:
        assert " ".join(dom.by_id("verdict-text").text.split()) == " ".join(report.verdict.split())
    else:  # laid out: the cause, then what followed, then the next step
        parts = [dom.by_id(f"verdict-{part}") for part in ("cause", "consequences")]
        assert all(parts) and report.diagnosis.cause.title in " ".join(parts[0].text.split())
    if report.views.grids:
        grid = dom.find("table", cls="grid")
        assert grid is not None and grid.find_all("td")
    if culprits:
        rows = dom.find_all("tr", cls="culprit")
        assert rows, "no grid row is highlighted"
        highlighted = {int(r) for row in rows for r in row.attrs.get("data-ranks", "").split()}
        assert set(culprits) <= highlighted
        chips = {int(a.attrs["data-rank"]) for a in dom.find_all("a", cls="culprit")}
        assert set(culprits) <= chips
    shot = browser.screenshot(page, page.with_suffix(".png"))
    assert shot.read_bytes()[:8] == PNG and shot.stat().st_size > 20_000


@pytest.mark.parametrize(
    "name", ["rank_stall_8ranks", "collective_mismatch_4ranks", "socket_fallback_4ranks", "ib_error_4ranks"]
)
def test_simulated_scenario_report_in_chromium(tmp_path, name):
    log = FIXTURES / f"{name}.log"
    report = report_of(str(log))
    culprits = primary_ranks(fixture_truth(name))
    page, loaded, dom = _open(report, tmp_path)
    _check_page(report, page, loaded, dom, culprits)
    findings = dom.find_all("details", cls="finding")
    assert len(findings) == len(report.findings)
    assert "open" in findings[0].attrs
    # The root-cause badge marks a primary finding; a job that works (sockets chosen on purpose) has none.
    badges = [f for f in findings if f.find("span", cls="root") is not None]
    assert badges == findings[: sum(f.primary for f in report.findings)]


def test_mismatch_report_shows_the_divergence_in_chromium(tmp_path):
    report = report_of(str(FIXTURES / "collective_mismatch_4ranks.log"))
    _, _, dom = _open(report, tmp_path)
    grid = dom.find("table", cls="grid")
    assert grid.find("th", cls="mark-divergence") is not None
    culprit = grid.find("tr", cls="culprit")
    assert culprit.find("td", cls="s-mismatch") is not None


def test_many_rank_report_in_chromium(tmp_path):
    log = simulate(tmp_path / "big.log", "-s", "rank-stall", "--ranks", "512", "--ops", "6", "--no-noise")
    report = report_of(str(log))
    culprits = [r for f in report.findings if f.primary for r in f.ranks]
    page, loaded, dom = _open(report, tmp_path)
    _check_page(report, page, loaded, dom, culprits)
    assert len(dom.find("table", cls="grid").find_all("tr")) == 512 // 8 + 1  # one row per node, and the head


def test_timeline_report_in_chromium(tmp_path):
    log = simulate(tmp_path / "slow.log", "-s", "slow-rank", "--nccl-version", "2.27", "--ranks", "8")
    report = report_of(str(log))
    _, _, dom = _open(report, tmp_path)
    lanes = dom.by_id("timeline").find_all("g", cls="lane")
    assert len(lanes) == 8 and all(lane.find("rect") is not None for lane in lanes)


REAL = {
    "argonne-lcf__alcf-nccl-tests__pytests__VAE__results__2025-01-15": [1],  # desync hang: rank 1 never joins
    "sparticlesteve__pytorch-nccl-test__slurm-nccl-416593": [],  # IB status 12 on one link
    "sparticlesteve__pytorch-nccl-test__slurm-nccl-shifter": [],  # Socket over IPoIB
    "mlcommons__training_results_v4.1__Oracle__results__512xBM": [],  # 512 ranks, healthy
}


@pytest.mark.parametrize("prefix", sorted(REAL))
def test_real_log_report_in_chromium(tmp_path, prefix):
    path = corpus(prefix)
    if path is None:
        pytest.skip(CORPUS_ABSENT)
    report = report_of(str(path))
    page, loaded, dom = _open(report, tmp_path)
    _check_page(report, page, loaded, dom, REAL[prefix])
    assert len(page.read_bytes()) < 5_000_000


@pytest.mark.parametrize(
    "log,width",
    [
        (FIXTURES / "ib_error_4ranks.log", 1280),
        (FIXTURES / "rank_stall_8ranks.log", 1920),
        ("sparticlesteve__pytorch-nccl-test__slurm-nccl-416593", 1280),  # 16 ranks, long evidence lines
        ("sparticlesteve__pytorch-nccl-test__slurm-nccl-416593", 1920),
    ],
    ids=lambda value: str(value) if isinstance(value, int) else getattr(value, "stem", str(value)[:24]),
)
def test_the_page_fits_the_window_and_shows_every_evidence_location_whole(tmp_path, width, log):
    """At 1280 and 1920 pixels wide nothing runs wider than the window, and no path:line is cut (the page's
    script measures both, every finding open, into ``data-layout``)."""
    path = log if isinstance(log, Path) else corpus(log)
    if path is None:
        pytest.skip(CORPUS_ABSENT)
    deep = tmp_path / ("a-directory-name-as-long-as-a-cluster-scratch-path-" * 3)
    deep.mkdir()
    copy = deep / path.name
    copy.write_bytes(path.read_bytes())
    page = tmp_path / "report.html"
    page.write_text(render_html(report_of(str(copy))), encoding="utf-8")
    layout = parse(browser.load(page, width=width).dom).find("html").attrs.get("data-layout")
    assert layout == "fits cut-locations-0"


def test_hostile_log_runs_nothing_in_chromium(tmp_path):
    report = report_of(str(hostile_log(tmp_path)))
    page, _loaded, dom = _open(report, tmp_path, "hostile.html")
    body = dom.find("body")
    assert "data-pwned" not in body.attrs, f"payload ran: {body.attrs}"
    assert dom.find("html").attrs.get("data-js") == "ready"
    text = dom.find("main").text
    assert PAYLOADS["message"] in text  # shown as text, not run
    # The escaping alone holds: the same page without its policy runs nothing either.
    bare = tmp_path / "hostile-no-csp.html"
    bare.write_text(re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page.read_text()))
    unprotected = parse(browser.load(bare).dom)
    assert "data-pwned" not in unprotected.find("body").attrs
    assert unprotected.find("html").attrs.get("data-js") == "ready"


@pytest.mark.parametrize("where", sorted(PAYLOADS))
def test_payloads_would_run_unescaped(tmp_path, where):
    """The hostile-log test can fail: each payload, put into a page raw, does run in this browser."""
    raw = PAYLOADS[where]
    page = tmp_path / "raw.html"
    body = f'<img src="x{raw}">' if where == "attribute" else f"<p>{raw}</p>"
    page.write_text(f"<!DOCTYPE html><html><body>{body}</body></html>")
    assert parse(browser.load(page).dom).find("body").attrs.get("data-pwned") == where
