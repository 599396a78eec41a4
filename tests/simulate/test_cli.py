"""``logsift simulate`` as a user meets it: --list, output targets, determinism, --size, bad options."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from simhelp import parse, unparsed_nccl

from nccl_logsift.cli import cli
from nccl_logsift.simulate import SCENARIOS


def invoke(*args: str):
    return CliRunner().invoke(cli, ["simulate", *args], catch_exceptions=False)


def test_list_prints_one_line_per_scenario():
    result = invoke("--list")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert [line.split()[0] for line in lines] == list(SCENARIOS)
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines)


def test_same_seed_gives_the_same_bytes_and_another_seed_does_not(tmp_path):
    args = ["-s", "rank-stall", "--ranks", "16", "--seed", "11"]
    for name in ("a.log", "b.log"):
        assert (
            invoke(*args, "-o", str(tmp_path / name), "--truth", str(tmp_path / f"{name}.json")).exit_code
            == 0
        )
    assert (tmp_path / "a.log").read_bytes() == (tmp_path / "b.log").read_bytes()
    assert (tmp_path / "a.log.json").read_bytes() == (tmp_path / "b.log.json").read_bytes()
    assert (
        invoke("-s", "rank-stall", "--ranks", "16", "--seed", "12", "-o", str(tmp_path / "c.log")).exit_code
        == 0
    )
    assert (tmp_path / "c.log").read_bytes() != (tmp_path / "a.log").read_bytes()


def test_per_rank_layout_is_deterministic_and_names_files_host_dot_pid(tmp_path):
    for d in ("x", "y"):
        assert (
            invoke(
                "-s",
                "ib-error",
                "--layout",
                "per-rank",
                "--seed",
                "3",
                "-o",
                str(tmp_path / d),
                "--truth",
                str(tmp_path / f"{d}.json"),
            ).exit_code
            == 0
        )
    files = sorted(p.name for p in (tmp_path / "x").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "y").iterdir())
    assert all((tmp_path / "x" / f).read_bytes() == (tmp_path / "y" / f).read_bytes() for f in files)
    truth = json.loads((tmp_path / "x.json").read_text())
    expected = sorted(f"{p['host']}.{p['pid']}" for p in truth["processes"]) + ["console.log"]
    assert files == sorted(expected)


def test_dash_writes_an_interleaved_stream_to_stdout():
    result = invoke("-s", "healthy", "--ranks", "4", "--no-noise", "-o", "-")
    assert result.exit_code == 0
    assert " NCCL INFO AllReduce: opCount " in result.output
    assert "NCCL INFO Init COMPLETE" not in result.output  # the message, not a bare phrase
    assert "- Init COMPLETE" in result.output


def test_size_streams_about_that_many_bytes_and_keeps_the_fault(tmp_path):
    out = tmp_path / "big.log"
    result = invoke(
        "-s",
        "rank-stall",
        "--size",
        "400KB",
        "--seed",
        "2",
        "-o",
        str(out),
        "--truth",
        str(tmp_path / "t.json"),
    )
    assert result.exit_code == 0
    assert 0.8 * 400_000 < out.stat().st_size < 1.2 * 400_000
    truth = json.loads((tmp_path / "t.json").read_text())
    assert truth["faults"][0]["kind"] == "rank_behind"
    _, tables = parse(out)
    assert unparsed_nccl(tables["lines"]).is_empty()
    coll = tables["collectives"]
    culprit = truth["faults"][0]["ranks"][0]
    proc = next(p for p in truth["processes"] if p["rank"] == culprit)
    mine = coll.filter((pl.col("host") == proc["host"]) & (pl.col("pid") == proc["pid"]))
    # The culprit's COLL lines on the comm stop right before the truth's position.
    comm = next(c for c in truth["communicators"] if c["comm_id"] == truth["faults"][0]["comm"])
    ptrs = (
        tables["comms"]
        .filter(
            (pl.col("host") == proc["host"])
            & (pl.col("pid") == proc["pid"])
            & (pl.col("comm_id") == comm["comm_id"])
        )["comm"]
        .unique()
        .to_list()
    )
    assert mine.filter(pl.col("comm").is_in(ptrs)).height == truth["faults"][0]["seq"] - 1


def test_noise_brings_torn_and_glued_lines_that_the_parser_splits(tmp_path):
    out = tmp_path / "noisy.log"
    assert (
        invoke(
            "-s",
            "healthy",
            "--ranks",
            "16",
            "--nccl-version",
            "2.21",
            "--torn-rate",
            "0.05",
            "--seed",
            "4",
            "-o",
            str(out),
        ).exit_code
        == 0
    )
    text = out.read_bytes().decode()
    assert "\r" in text and "warnings.warn(" in text
    _, tables = parse(out)
    lines = tables["lines"]
    assert lines["torn"].sum() > 0
    assert unparsed_nccl(lines).is_empty()


@pytest.mark.parametrize(
    "args, message",
    [
        (["-s", "no-such-scenario", "-o", "x.log"], "unknown scenario"),
        (["--ranks", "1", "-o", "x.log"], "--ranks"),
        (["--ranks", "5000", "-o", "x.log"], "--ranks"),
        (["--ranks", "12", "--nodes", "5", "-o", "x.log"], "split evenly"),
        (["--nccl-version", "2.19", "-o", "x.log"], "not simulated"),
        (["--nccl-version", "banana", "-o", "x.log"], "not a NCCL version"),
        (["--torch-version", "3.9", "-o", "x.log"], "PyTorch 3.9"),
        (["--layout", "slurm", "-o", "x.log"], "--layout"),
        (["--size", "lots", "-o", "x.log"], "not a size"),
        (["-s", "slow-rank", "--nccl-version", "2.21", "-o", "x.log"], "needs NCCL 2.26.2"),
        (["-s", "init-hang", "--size", "1MB", "-o", "x.log"], "fails before training"),
        (["-s", "veth-interface", "--nodes", "1", "-o", "x.log"], "at least 2 nodes"),
        (["--layout", "per-rank", "-o", "-"], "per-rank"),
        (["-o", "no/such/dir/x.log"], "does not exist"),
        (["-o", "x.log", "--truth", "no/such/dir/t.json"], "does not exist"),
        ([], "Missing option '-o'"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["simulate", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "x.log").exists()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_runs_with_the_default_nccl_version(tmp_path, name):
    # slow-rank needs INFO timestamps (2.26.2+): the default version follows what the scenario can show.
    result = invoke("-s", name, "--ranks", "8", "--nodes", "2", "-o", str(tmp_path / "job.log"))
    assert result.exit_code == 0, result.output
    assert (tmp_path / "job.log").stat().st_size > 0


def test_says_what_it_wrote_on_stderr_and_keeps_stdout_for_the_log(tmp_path):
    result = invoke("-s", "slow-rank", "-o", str(tmp_path / "job.log"), "--truth", str(tmp_path / "t.json"))
    assert result.exit_code == 0
    size = (tmp_path / "job.log").stat().st_size
    assert result.stdout == ""
    assert result.stderr.startswith(
        f"Wrote {tmp_path / 'job.log'} ({size:,} bytes): scenario slow-rank, 8 ranks"
    )
    assert "NCCL 2.26.2" in result.stderr and f"Ground truth: {tmp_path / 't.json'}." in result.stderr
    piped = invoke("-s", "healthy", "-o", "-")
    assert piped.stderr.startswith("Wrote standard output: scenario healthy")
    assert "NCCL INFO" in piped.stdout and "Wrote" not in piped.stdout
