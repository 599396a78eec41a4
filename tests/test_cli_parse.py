import json

import polars as pl
import pytest
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

    import subprocess
    import sys

    from nccl_logsift.cli import cli, main  # noqa: F401

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nccl_logsift",
            "parse",
            str(tmp_path / "nope.log"),
            "-o",
            str(tmp_path / "t"),
        ],
        capture_output=True,
        text=True,
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
        capture_output=True,
        text=True,
    )
    assert (
        proc.returncode == 2
        and "no log lines could be read" in proc.stderr
        and "Traceback" not in proc.stderr
    )


def test_parse_keeps_going_past_one_bad_input(run_cli, tmp_path):
    garbage = tmp_path / "core.bin"
    garbage.write_bytes(bytes(range(256)) * 32)
    result = run_cli(
        "parse", str(garbage), str(FIXTURE), str(tmp_path / "missing"), "-o", str(tmp_path / "t")
    )
    assert result.exit_code == 0
    assert "binary" in result.stderr and "no such file" in result.stderr


def test_every_command_has_help(run_cli):
    import click

    from nccl_logsift.cli import cli

    for name in ["", *cli.list_commands(click.Context(cli))]:
        result = run_cli(*([name] if name else []), "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


def _snapshot(directory):
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())} if directory.exists() else None


def _fail_on_second_table(monkeypatch):
    """Make the second table's final copy fail midway, as a full disk or a crash would."""
    from nccl_logsift.tables import ParquetSink

    original, copied = ParquetSink._ranked, []

    def ranked(name, staged, target, maps):
        if copied:
            target.write_bytes(b"PAR1 half a file")
            raise RuntimeError("injected failure while writing " + name)
        copied.append(name)
        return original(name, staged, target, maps)

    monkeypatch.setattr(ParquetSink, "_ranked", staticmethod(ranked))


def test_parse_interrupted_while_writing_leaves_the_previous_run_whole(run_cli, tmp_path, monkeypatch):
    out = tmp_path / "t"
    assert run_cli("parse", str(FIXTURE), "-o", str(out)).exit_code == 0
    before = _snapshot(out)
    _fail_on_second_table(monkeypatch)
    with pytest.raises(RuntimeError, match="injected"):
        run_cli("parse", str(FIXTURES / "ib_error_4ranks.log"), "-o", str(out))
    assert _snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # nothing left beside it either


def test_parse_interrupted_while_writing_into_a_new_directory_leaves_nothing(run_cli, tmp_path, monkeypatch):
    _fail_on_second_table(monkeypatch)
    with pytest.raises(RuntimeError, match="injected"):
        run_cli("parse", str(FIXTURE), "-o", str(tmp_path / "t"))
    assert list(tmp_path.iterdir()) == []


def test_parse_interrupted_while_moving_the_files_in_leaves_no_manifest(run_cli, tmp_path, monkeypatch):
    import os

    from nccl_logsift.cli import parse

    out = tmp_path / "t"
    assert run_cli("parse", str(FIXTURE), "-o", str(out)).exit_code == 0
    moved = []

    def replace(source, target):
        if len(moved) == 3:
            raise KeyboardInterrupt
        moved.append(target)
        os.replace(source, target)

    monkeypatch.setattr(parse.os, "replace", replace)
    result = run_cli("parse", str(FIXTURES / "ib_error_4ranks.log"), "-o", str(out))
    assert result.exit_code != 0 and len(moved) == 3
    # Three tables of the new run beside the old run's others: it must not look like a complete run.
    assert not (out / "manifest.json").exists()


def test_parse_replaces_the_tables_of_the_previous_run_and_keeps_other_files(run_cli, tmp_path):
    import json

    out = tmp_path / "t"
    assert run_cli("parse", str(FIXTURE), "-o", str(out)).exit_code == 0
    (out / "notes.txt").write_text("mine")
    (out / "old_table.parquet").write_bytes(b"an old run's table")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tables"]["old_table"] = {"file": "old_table.parquet", "rows": 1, "columns": {}}
    (out / "manifest.json").write_text(json.dumps(manifest))
    log = FIXTURES / "ib_error_4ranks.log"
    assert run_cli("parse", str(log), "-o", str(out)).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"][0]["path"] == str(log) and "old_table" not in manifest["tables"]
    assert not (out / "old_table.parquet").exists() and (out / "notes.txt").read_text() == "mine"
    files = {p.name for p in out.iterdir()} - {"notes.txt", "manifest.json"}
    assert files == {entry["file"] for entry in manifest["tables"].values()}
    assert pl.read_parquet(out / "lines.parquet").height == manifest["tables"]["lines"]["rows"]


def test_parse_into_a_place_that_cannot_be_a_directory_fails_before_reading(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "file"
    blocker.write_text("")
    with subprocess.Popen(
        [sys.executable, "-m", "nccl_logsift", "parse", "-", "-o", str(blocker / "t")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            _, stderr = proc.communicate(timeout=30)
        finally:
            proc.kill()
    assert proc.returncode == 2 and stderr.startswith("Error: cannot create output directory")


def test_parse_summary_shows_log_text_and_paths_as_text(tmp_path):
    import subprocess
    import sys

    log = tmp_path / "job.log"
    log.write_text("gpu-node-1:123:456 [0] NCCL INFO something unheard of \x1b]0;title\x07 [bold]x[/bold]\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "nccl_logsift",
            "parse",
            str(log),
            str(tmp_path / "gone\x1b[2J[red]"),
            "-o",
            str(tmp_path / "t"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout + proc.stderr and "\x07" not in proc.stdout + proc.stderr
    assert "something unheard of ^[]<n>;title^G [bold]x[/bold]" in proc.stdout  # not taken for markup either
    assert "skipped" in proc.stderr and "gone^[[2J[red]" in proc.stderr
