"""Damaged inputs through every command: what could be read is read, and what went wrong is said, on stderr
and in the findings JSON (``inputs[].problems``)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

from nccl_logsift.io.sources import Source
from nccl_logsift.pipeline import analyze

STALL = FIXTURES / "rank_stall_8ranks.log"
HEALTHY = FIXTURES / "healthy_8ranks.log"
PER_RANK = FIXTURES / "duplicate_gpu_4ranks_per_rank"


def primary(report: dict) -> list[tuple[str, list[int]]]:
    return [(f["code"], f["ranks"]) for f in report["findings"] if f["primary"]]


def analyzed(run_cli, *paths) -> tuple[dict, str]:
    result = run_cli("analyze", *map(str, paths), "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), result.stderr


@pytest.fixture(scope="module")
def big_stall(tmp_path_factory) -> tuple[Path, Path, int]:
    """A 5 MB rank-stall log (more than one 4 MiB read), its gzip cut at 99 %, and what zcat recovers."""
    from click.testing import CliRunner

    from nccl_logsift.cli import cli

    folder = tmp_path_factory.mktemp("big")
    log = folder / "stall.log"
    args = ["simulate", "-s", "rank-stall", "--ranks", "16", "--size", "5MB", "-o", str(log)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    packed = gzip.compress(log.read_bytes(), compresslevel=1)
    cut = folder / "stall.log.gz"
    cut.write_bytes(packed[: len(packed) * 99 // 100])
    recovered = len(zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut.read_bytes()))
    assert 4 << 20 < recovered < log.stat().st_size
    return log, cut, recovered


def test_analyze_of_a_gzip_log_cut_at_99_percent_keeps_the_root_cause_and_says_so(run_cli, big_stall):
    log, cut, recovered = big_stall
    intact, _ = analyzed(run_cli, log)
    report, stderr = analyzed(run_cli, cut)
    # The last 1 % of the job is gone (a second finding may go with it); the root cause stays.
    assert primary(report)[:1] == primary(intact)[:1] == [("LS101", [7])]
    assert report["verdict"].split(". ")[0] == intact["verdict"].split(". ")[0]
    (problem,) = report["inputs"][0]["problems"]
    assert problem["kind"] == "truncated" and problem["offset"] == recovered == report["inputs"][0]["bytes"]
    assert intact["inputs"][0]["problems"] == []
    (note,) = stderr.splitlines()
    assert note.startswith(f"note: {cut}: compressed stream is truncated") and f"{recovered:,} bytes" in note


def test_parse_watch_and_report_keep_the_tail_of_a_cut_gzip_log_too(run_cli, big_stall, tmp_path):
    _, cut, recovered = big_stall
    result = run_cli("parse", str(cut), "-o", str(tmp_path / "tables"))
    assert result.exit_code == 0 and "truncated" in result.stderr
    (summary,) = json.loads((tmp_path / "tables" / "manifest.json").read_text())["inputs"]
    assert summary["bytes"] == recovered and summary["problems"][0]["kind"] == "truncated"

    result = run_cli("watch", str(cut), "--format", "json")
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["event"] == "report" and last["report"]["inputs"][0]["bytes"] == recovered
    assert last["report"]["inputs"][0]["problems"][0]["offset"] == recovered and "truncated" in result.stderr

    result = run_cli("report", str(cut), "-o", str(tmp_path / "r.html"))
    assert result.exit_code == 0 and f"note: {cut}: compressed stream is truncated" in result.stderr


def test_nul_padding_that_a_crash_leaves_ends_a_rank_file_without_dropping_it(run_cli, tmp_path):
    shutil.copytree(PER_RANK, tmp_path / "logs")
    victim = sorted((tmp_path / "logs").iterdir())[1]
    lines = victim.read_bytes().count(b"\n")
    intact, _ = analyzed(run_cli, tmp_path / "logs")
    victim.write_bytes(victim.read_bytes() + b"\0" * 4096)
    report, stderr = analyzed(run_cli, tmp_path / "logs")
    (entry,) = [i for i in report["inputs"] if i["path"] == str(victim)]
    assert entry["lines"] == lines and entry["problems"] == [{"kind": "nul_padded", "bytes": 4096}]
    assert primary(report) == primary(intact) and report["verdict"] == intact["verdict"]
    assert f"note: {victim}: 4,096 NUL bytes" in stderr


def test_a_hole_of_nul_bytes_inside_a_line_is_left_out_and_the_lines_around_it_still_parse(tmp_path):
    """A file a crash left a hole in: a line cut short, NUL bytes to where writing resumed, and the next
    line's tail. The NUL bytes made the line plain text and nothing said so; now they are counted and the
    line that resumed after them is read."""
    lines = [line + b"\n" for line in STALL.read_bytes().split(b"\n")[:-1]]  # a lone CR is no line end
    at = next(i for i, line in enumerate(lines) if b"NCCL INFO" in line and b"opCount" not in line and i > 20)
    cut = lines[at].index(b"NCCL INFO")
    holed = lines[at][:cut] + b"\0" * 512 + lines[at][cut:]  # the hole inside the line
    path = tmp_path / "holed.log"
    path.write_bytes(b"".join([*lines[:at], holed, *lines[at + 1 :]]))
    holed_report, whole = analyze([str(path)], views=False), analyze([str(STALL)], views=False)
    (entry,) = holed_report.inputs
    assert entry.lines == len(lines)
    assert [(p.kind.value, p.bytes) for p in entry.problems] == [("nul_padded", 512)]
    assert entry.unparsed_lines == 0 and holed_report.verdict == whole.verdict


@pytest.mark.parametrize("damage", ["nul_run", "binary_block"])
def test_a_damaged_block_near_the_start_costs_its_own_lines_not_the_log(run_cli, tmp_path, damage):
    text = STALL.read_bytes()
    at = text.index(b"\n", 2000) + 1
    block = b"\0" * 300 if damage == "nul_run" else np.random.default_rng(5).bytes(8192)
    path = tmp_path / "damaged.log"
    path.write_bytes(text[:at] + block + b"\n" + text[at:])
    intact, _ = analyzed(run_cli, STALL)
    report, _ = analyzed(run_cli, path)
    assert primary(report) == primary(intact)
    kinds = {p["kind"] for p in report["inputs"][0]["problems"]}
    if damage == "nul_run":
        assert kinds == {"nul_padded"}
    else:
        assert "invalid_utf8" in kinds and "binary" not in kinds


def test_a_binary_file_is_still_refused_and_says_so(run_cli, tmp_path):
    blob = tmp_path / "core"
    blob.write_bytes(np.random.default_rng(1).bytes(200_000))
    report, stderr = analyzed(run_cli, STALL, blob)
    (entry,) = [i for i in report["inputs"] if i["path"] == str(blob)]
    assert entry["lines"] == 0 and entry["problems"][0]["kind"] == "binary"
    assert f"note: {blob}: looks like binary data" in stderr


def test_a_file_in_a_directory_that_cannot_be_opened_is_reported_not_skipped(run_cli, tmp_path, monkeypatch):
    shutil.copytree(PER_RANK, tmp_path / "logs")
    denied = str(sorted((tmp_path / "logs").iterdir())[2])
    real_open = Source.open

    def open_denied(source: Source):
        if source.path == denied:
            raise PermissionError(13, "Permission denied", source.path)
        return real_open(source)

    monkeypatch.setattr(Source, "open", open_denied)
    report, stderr = analyzed(run_cli, tmp_path / "logs")
    (entry,) = [i for i in report["inputs"] if i["path"] == denied]
    assert entry["lines"] == 0
    assert entry["problems"] == [{"kind": "unreadable", "reason": "Permission denied"}]
    assert f"note: {denied}: could not be read: Permission denied" in stderr


def test_a_file_without_read_permission_in_a_directory_is_a_report_input(run_cli, tmp_path, monkeypatch):
    shutil.copytree(PER_RANK, tmp_path / "logs")
    denied = str(sorted((tmp_path / "logs").iterdir())[2])
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: str(path) != denied and real_access(path, mode))
    report, stderr = analyzed(run_cli, tmp_path / "logs")
    (entry,) = [i for i in report["inputs"] if i["path"] == denied]
    assert entry == {
        "path": denied,
        "bytes": 0,
        "lines": 0,
        "unparsed_lines": 0,
        "problems": [{"kind": "unreadable", "reason": "permission denied"}],
    }
    assert f"note: {denied}: could not be read: permission denied" in stderr


def test_a_directory_walk_reports_a_broken_link(run_cli, tmp_path):
    shutil.copytree(PER_RANK, tmp_path / "logs")
    (tmp_path / "logs" / "rank9.log").symlink_to(tmp_path / "gone.log")
    report, _ = analyzed(run_cli, tmp_path / "logs")
    (entry,) = [i for i in report["inputs"] if i["path"].endswith("rank9.log")]
    assert entry["problems"] == [{"kind": "unreadable", "reason": "broken symbolic link"}]


def test_invalid_utf8_is_counted_and_a_coll_line_ending_in_it_is_still_a_call(run_cli, tmp_path):
    lines = STALL.read_bytes().split(b"\n")
    # The culprit's last COLL line: lost, rank 1 would seem to stop one call earlier.
    index = max(i for i, line in enumerate(lines) if line.startswith(b"1: ") and b"INFO AllReduce" in line)
    lines[index] += b"\xff\xfe"
    lines[3] += b" \xc3"
    path = tmp_path / "damaged.log"
    path.write_bytes(b"\n".join(lines))
    intact, _ = analyzed(run_cli, STALL)
    report, stderr = analyzed(run_cli, path)
    assert report["findings"][0]["title"] == intact["findings"][0]["title"]
    assert report["inputs"][0]["problems"] == [{"kind": "invalid_utf8", "lines": 2}]
    assert "2 line(s) held bytes that are not UTF-8" in stderr


def _write_later(path: Path, data: bytes) -> threading.Thread:
    def write() -> None:
        with open(path, "wb") as pipe:
            pipe.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return writer


@pytest.mark.parametrize("packed", [False, True])
def test_a_fifo_is_read_as_a_stream(run_cli, tmp_path, packed):
    fifo = tmp_path / "job.pipe"
    os.mkfifo(fifo)
    data = STALL.read_bytes()
    writer = _write_later(fifo, gzip.compress(data) if packed else data)
    report, _ = analyzed(run_cli, fifo)
    writer.join(5)
    intact, _ = analyzed(run_cli, STALL)
    assert primary(report) == primary(intact) and report["inputs"][0]["bytes"] == len(data)
    assert report["inputs"][0]["problems"] == []


def test_dev_stdin_and_process_substitution_are_read_as_streams():
    command = [sys.executable, "-m", "nccl_logsift", "analyze", "/dev/stdin", "--format", "json"]
    proc = subprocess.run(command, input=STALL.read_bytes(), capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["findings"][0]["ranks"] == [1]
    if not shutil.which("bash"):
        pytest.skip("no bash for a process substitution")
    script = f'"{sys.executable}" -m nccl_logsift analyze <(cat "{STALL}") --format json'
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run(["bash", "-c", script], capture_output=True, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["findings"][0]["ranks"] == [1]


def test_a_missing_path_given_alone_keeps_its_clear_error(tmp_path):
    command = [sys.executable, "-m", "nccl_logsift", "analyze", str(tmp_path / "missing.log")]
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_subdirectory_that_cannot_be_listed_is_reported(run_cli, tmp_path, monkeypatch):
    shutil.copytree(PER_RANK, tmp_path / "logs")
    (tmp_path / "logs" / "node2").mkdir()
    (tmp_path / "logs" / "node2" / "rank8.log").write_bytes(STALL.read_bytes()[:1000])
    locked = str(tmp_path / "logs" / "node2")
    real_scandir = os.scandir

    def scandir(path="."):
        if str(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    report, stderr = analyzed(run_cli, tmp_path / "logs")
    (entry,) = [i for i in report["inputs"] if i["path"] == locked]
    assert entry["problems"] == [
        {"kind": "unreadable", "reason": "directory cannot be read: Permission denied"}
    ]
    assert f"note: {locked}: could not be read" in stderr


def test_a_rank_file_of_nul_bytes_only_is_an_empty_input_with_its_padding_counted(run_cli, tmp_path):
    shutil.copytree(PER_RANK, tmp_path / "logs")
    crashed = tmp_path / "logs" / "gpu-node-099.1"
    crashed.write_bytes(b"\0" * 8192)
    report, _ = analyzed(run_cli, tmp_path / "logs")
    (entry,) = [i for i in report["inputs"] if i["path"] == str(crashed)]
    assert entry["lines"] == 0 and entry["problems"] == [{"kind": "nul_padded", "bytes": 8192}]


def test_a_utf16_log_is_refused_with_a_hint_to_convert_it(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(STALL.read_text().encode("utf-16"))
    command = [sys.executable, "-m", "nccl_logsift", "analyze", str(path), "--format", "json"]
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 2 and "UTF-16" in proc.stderr and "iconv" in proc.stderr


def test_batch_keeps_a_cut_gzip_job_and_marks_it_incomplete_with_the_bytes_it_read(tmp_path):
    import polars as pl

    from nccl_logsift.batch import task
    from nccl_logsift.batch.run import BatchOptions, run_batch

    class InlineEngine:
        def run(self, jobs, out, with_tables):
            for job in jobs:
                yield task.run_job(job, out, with_tables)

    (tmp_path / "a").mkdir()
    packed = gzip.compress(STALL.read_bytes())
    cut = packed[: len(packed) * 99 // 100]
    (tmp_path / "a" / "stall.log.gz").write_bytes(cut)
    recovered = len(zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut))
    options = BatchOptions((str(tmp_path / "a"),), tmp_path / "out")
    run_batch(options, InlineEngine())
    (row,) = pl.read_parquet(tmp_path / "out" / "jobs" / "*" / "*.parquet", hive_partitioning=True).to_dicts()
    assert row["status"] == "incomplete" and row["primary_kinds"] == ["rank_behind"]
    assert "compressed stream is truncated" in row["message"] and f"{recovered:,} bytes" in row["message"]


def test_a_verdict_over_input_cut_short_says_it_covers_only_what_was_read(tmp_path):
    # "Looks healthy" over a log whose tail was lost must not read as a clean bill of health.
    cut = tmp_path / "healthy.log.gz"
    whole = gzip.compress((FIXTURES / "healthy_8ranks.log").read_bytes())
    cut.write_bytes(whole[: len(whole) * 6 // 10])
    report = analyze([str(cut)])
    assert "Not all input could be read (" in report.verdict and str(cut) in report.verdict
    intact = tmp_path / "intact.log.gz"
    intact.write_bytes(whole)
    assert "Not all input" not in analyze([str(intact)]).verdict
