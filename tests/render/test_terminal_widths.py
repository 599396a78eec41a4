"""The text report at 80 and 200 columns, asked for by COLUMNS (output to a pipe) or by --width: it takes
that width, no evidence line is cut, no ``path:line`` is split, and host names stand whole in the rank
table."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

from nccl_logsift.call_numbers import LEGEND
from nccl_logsift.cli import cli
from nccl_logsift.render.controls import visible

STALL = FIXTURES / "rank_stall_8ranks.log"
HEALTHY = FIXTURES / "healthy_8ranks.log"
SPLITS = FIXTURES / "pp_deadlock_4ranks.log"  # ranks on several communicators, split ones among them
GUTTER = "   | "


def text_report(path, width: int, via: str) -> str:
    # Through --width, a COLUMNS that says otherwise is overruled.
    args, env = (
        (["--width", str(width)], {"COLUMNS": "100"}) if via == "option" else ([], {"COLUMNS": str(width)})
    )
    result = CliRunner().invoke(cli, ["analyze", str(path), *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def contract(path) -> dict:
    result = CliRunner().invoke(cli, ["analyze", str(path), "--format", "json"], catch_exceptions=False)
    return json.loads(result.stdout)


def squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def evidence_blocks(lines: list[str]) -> dict[str, list[str]]:
    """Each ``  --> path:line`` line with the evidence text printed under it, its lines joined."""
    blocks: dict[str, list[str]] = {}
    for i, line in enumerate(lines):
        if not line.startswith("  --> "):
            continue
        text = []
        if i + 1 < len(lines) and lines[i + 1].startswith(GUTTER):
            text.append(lines[i + 1][len(GUTTER) :])
            for more in lines[i + 2 :]:
                if not more.startswith(" " * len(GUTTER)) or more.lstrip().startswith(("-->", "=")):
                    break
                text.append(more[len(GUTTER) :])
        blocks.setdefault(line[len("  --> ") :].rstrip(), []).append(" ".join(text))
    return blocks


def table_cells(lines: list[str], title: str) -> list[list[str]]:
    """The body rows of the table under ``title``, as stripped cells (a folded first cell joined)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    body = []
    for line in lines[start:]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
            if body and not any(cells[1:]):  # the rest of a folded first cell
                body[-1][0] += cells[0]
            else:
                body.append(cells)
    return body


@pytest.mark.parametrize("via", ["env", "option"])
@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("path", [STALL, HEALTHY], ids=["stall", "healthy"])
def test_text_report_takes_the_width_and_cuts_nothing(path, width, via):
    text = text_report(path, width, via)
    lines = text.splitlines()
    report = contract(path)

    # The width asked for: the verdict panel spans it, and nothing but a path:line runs past it.
    assert lines[0].startswith("╭─ Verdict") and len(lines[0]) == width
    assert [line for line in lines if len(line.rstrip()) > width and not line.startswith("  --> ")] == []
    assert "…" not in text

    # Every evidence line of the contract, whole, under its own path:line, which is one line of its own.
    blocks = evidence_blocks(lines)
    for finding in report["findings"]:
        for e in finding["evidence"]:
            where = f"{e['path']}:{e['line']}"
            assert where in blocks, f"{where} not printed on one line"
            assert squeezed(visible(e["text"])) in map(squeezed, blocks[where]), f"evidence of {where} cut"

    # The rank table: host names whole, and the one communicator said once, in its title.
    rows = table_cells(lines, "Where each rank stopped")
    assert sorted({row[1] for row in rows}) == sorted(report["job"]["hosts"])
    assert len(rows) == len(report["ranks"])
    (comm,) = {r["comm"] for r in report["ranks"]}
    assert f"Where each rank stopped (comm {comm})" in text
    assert not any(comm in cell for row in rows for cell in row)


def test_evidence_wraps_under_its_gutter_at_80_columns():
    lines = text_report(STALL, 80, "option").splitlines()
    watchdog = next(i for i, line in enumerate(lines) if line.startswith(f"{GUTTER}3: [rank3]"))
    assert lines[watchdog + 1].startswith(" " * len(GUTTER)) and lines[watchdog + 1][len(GUTTER)] != " "
    assert "SeqNum=8" in " ".join(lines[watchdog : watchdog + 4])


def test_rank_table_shortens_hashes_of_several_communicators_to_a_unique_prefix():
    lines = text_report(SPLITS, 80, "option").splitlines()
    rows = table_cells(lines, "Where each rank stopped")
    report = contract(SPLITS)
    assert len(rows) == len(report["ranks"])
    comms = {row[0] for row in rows if row[0]}
    assert {"0x17c84a", "0x259e7f", "0xd25807"} <= comms  # 6 hex digits tell these hashes apart
    assert "0xd25807/color867251345#2" in comms  # what follows the hash of a split stays whole
    assert sorted({row[2] for row in rows}) == sorted(report["job"]["hosts"])


@pytest.mark.parametrize("path", [STALL, SPLITS], ids=["stall", "splits"])
def test_rank_table_at_the_narrowest_width_overflows_instead_of_cutting(path):
    lines = text_report(path, 40, "option").splitlines()
    rows = table_cells(lines, "Where each rank stopped")
    report = contract(path)
    host = 2 if path == SPLITS else 1
    assert sorted({row[host] for row in rows}) == sorted(report["job"]["hosts"])
    assert [row[host + 1] for row in rows] == [str(r["pid"]) for r in report["ranks"]]
    assert all(row[host + 2] == r["last_op"] for row, r in zip(rows, report["ranks"]))


def test_a_path_longer_than_the_width_overflows_on_one_line(tmp_path):
    deep = tmp_path / ("a-directory-name-longer-than-the-report-is-wide-" * 2)
    deep.mkdir()
    log = deep / STALL.name
    log.write_bytes(STALL.read_bytes())
    lines = text_report(log, 40, "option").splitlines()
    arrows = [line for line in lines if line.startswith("  --> ")]
    assert arrows and all(re.fullmatch(rf"  --> {re.escape(str(log))}:\d+", line) for line in arrows)


@pytest.mark.parametrize("width", [80, 200])
def test_the_rank_table_ends_with_what_its_call_numbers_count(width):
    lines = text_report(STALL, width, "columns").splitlines()
    below = lines.index(next(line for line in lines if line.startswith("└"))) + 1
    assert lines[below].rstrip() == LEGEND  # one line, even at 80 columns
