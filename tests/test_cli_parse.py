import json

import polars as pl

from conftest import FIXTURES

FIXTURE = FIXTURES / "rank3_stalled_4ranks.log"


def test_parse_writes_tables_and_manifest(run_cli, tmp_path):
    result = run_cli("parse", str(FIXTURE), "-o", str(tmp_path / "t"))
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert manifest["schema"] == "nccl-logsift/tables/v1"
    assert manifest["inputs"][0]["lines"] == len(FIXTURE.read_text().splitlines())
    coll = pl.read_parquet(tmp_path / "t" / "collectives.parquet")
    # The last collective each rank logged: rank 3 stopped at ordinal 3, the others reached 5.
    last = coll.group_by("global_rank").agg(pl.col("ordinal").max()).sort("global_rank")
    assert last.rows() == [(0, 5), (1, 5), (2, 5), (3, 3)]
    comms = pl.read_parquet(tmp_path / "t" / "communicators.parquet")
    assert sorted(comms["rank"].to_list()) == [0, 1, 2, 3] and comms["comm_uid"].n_unique() == 1


def test_parse_reads_stdin(run_cli, tmp_path):
    result = run_cli("parse", "-", "-o", str(tmp_path / "t"), input=FIXTURE.read_bytes())
    assert result.exit_code == 0
    assert pl.read_parquet(tmp_path / "t" / "lines.parquet").height == len(FIXTURE.read_text().splitlines())


def test_parse_missing_path_is_a_clear_error(tmp_path):

    from nccl_logsift.cli import cli, main  # noqa: F401

    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "parse", str(tmp_path / "nope.log"), "-o", str(tmp_path / "t")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: nothing to read") and "no such file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_parse_empty_file_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, "-m", "nccl_logsift", "parse", str(empty), "-o", str(tmp_path / "t")],
        capture_output=True, text=True,
    )
    assert proc.returncode == 2 and "no log lines could be read" in proc.stderr and "Traceback" not in proc.stderr


def test_parse_keeps_going_past_one_bad_input(run_cli, tmp_path):
    garbage = tmp_path / "core.bin"
    garbage.write_bytes(bytes(range(256)) * 32)
    result = run_cli("parse", str(garbage), str(FIXTURE), str(tmp_path / "missing"), "-o", str(tmp_path / "t"))
    assert result.exit_code == 0
    assert "binary" in result.stderr and "no such file" in result.stderr


def test_every_command_has_help(run_cli):
    import click

    from nccl_logsift.cli import cli

    for name in ["", *cli.list_commands(click.Context(cli))]:
        result = run_cli(*([name] if name else []), "--help")
        assert result.exit_code == 0 and "Usage:" in result.output
