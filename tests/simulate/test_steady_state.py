"""``logsift simulate --size`` in the shapes the benchmarks measure: --comms world, --interleave op,
--print-every and --other-lines (benchmarks/README.md "What is measured")."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from click.testing import CliRunner

from nccl_logsift.cli import cli

COLL = re.compile(r"NCCL INFO (\w+): opCount ([0-9a-f]+) .* comm (0x[0-9a-f]+) \[nranks=(\d+)\]")
PRINT = re.compile(r"^(?: ?0: )?step +\d+/\d+ \| loss")


def simulate(tmp_path, *args: str) -> list[str]:
    out = tmp_path / "job.log"
    result = CliRunner().invoke(
        cli,
        ["simulate", "--ranks", "32", "--nodes", "4", "--no-noise", "-o", str(out), *args],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return out.read_text().splitlines()


def steady_state(lines: list[str]) -> list[str]:
    """The lines from the first training print to the last: the --size block."""
    prints = [i for i, line in enumerate(lines) if PRINT.match(line)]
    return lines[prints[0] : prints[-1] + 1]


def test_comms_world_calls_allgather_reducescatter_and_allreduce_on_the_world_communicator(tmp_path):
    lines = simulate(tmp_path, "--comms", "world", "--size", "1MB")
    calls = [m for m in map(COLL.search, lines) if m]
    assert {m[4] for m in calls} == {"32"}  # every call on the 32-rank world communicator
    assert {m[1] for m in calls} >= {"AllGather", "ReduceScatter", "AllReduce"}
    assert len({m[3] for m in calls}) == 32  # one communicator: one handle per rank


def test_interleave_op_writes_every_ranks_nth_call_before_any_ranks_next(tmp_path):
    shape = ["--comms", "world", "--interleave", "op", "--print-every", "50"]
    lines = simulate(tmp_path, *shape, "--layout", "srun", "--size", "1MB")
    opcounts = [int(m[2], 16) for m in map(COLL.search, steady_state(lines)) if m]
    assert len(opcounts) > 2000
    assert opcounts == sorted(opcounts)  # one communicator, so each op's opCount is every rank's
    runs = [len(list(group)) for _, group in itertools.groupby(opcounts)]
    assert set(runs[1:-1]) == {32}  # 32 ranks call each op, one after the other


def test_print_every_puts_a_training_print_after_every_nth_coll_line_of_a_step(tmp_path):
    lines = steady_state(
        simulate(tmp_path, "--comms", "world", "--interleave", "op", "--print-every", "50", "--size", "1MB")
    )
    gaps, since = [], 0
    for line in lines[1:]:
        if PRINT.match(line):
            gaps.append(since)
            since = 0
        elif COLL.search(line):
            since += 1
    # 17 calls of 32 ranks a step (FSDP: 4 + 4 × 3, and the loss): 10 prints 50 lines apart, 44 to the end
    assert gaps.count(50) > 0.8 * len(gaps)
    assert set(gaps) <= {50, 50 + 17 * 32 % 50}
    assert sum(1 for line in lines if COLL.search(line)) / len(lines) > 0.97  # ~98% COLL lines


def test_other_lines_are_that_fraction_of_the_steady_state_and_of_every_kind(tmp_path):
    lines = steady_state(simulate(tmp_path, "--other-lines", "0.3", "--size", "4MB"))
    others = [line for line in lines if not COLL.search(line)]
    assert 0.27 < len(others) / len(lines) < 0.33
    assert any("NCCL INFO NET/" in line for line in others)
    assert any("Init COMPLETE" in line for line in others)
    assert any("NCCL INFO Channel" in line or "Connected all" in line for line in others)
    assert any("Warning:" in line for line in others) and any("warnings.warn(" in line for line in others)
    assert sum(1 for line in others if PRINT.match(line)) > 10


def test_shaped_logs_stay_healthy_for_the_analyzer(tmp_path):
    out = tmp_path / "job.log"
    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--ranks",
            "16",
            "--comms",
            "world",
            "--interleave",
            "op",
            "--print-every",
            "50",
            "--other-lines",
            "0.2",
            "--size",
            "1MB",
            "-o",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    analyzed = CliRunner().invoke(cli, ["analyze", str(out), "--format", "json"], catch_exceptions=False)
    assert analyzed.exit_code == 0, analyzed.output
    report = json.loads(analyzed.output)
    assert report["verdict"].startswith("No sign of a hang"), report["verdict"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--print-every", "50"], "give --size"),
        (["--interleave", "op"], "give --size"),
        (["--other-lines", "0.3", "--size", "1MB", "--layout", "per-rank"], "per-rank"),
        (["-s", "pp-deadlock", "--comms", "world"], "pipeline"),
    ],
)
def test_shape_options_without_what_they_shape_are_usage_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["simulate", *args, "-o", "x.log"])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_comms_world_writes_per_rank_files_too(tmp_path):
    out = tmp_path / "logs"
    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "--ranks",
            "8",
            "--comms",
            "world",
            "--layout",
            "per-rank",
            "--size",
            "1MB",
            "-o",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    files = [p for p in out.iterdir() if p.name != "console.log"]
    assert len(files) == 8
    assert all("ReduceScatter: opCount" in p.read_text() for p in files)
