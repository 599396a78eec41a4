"""A batch restarts where it stopped, records bad jobs instead of stopping, and keeps OUT consistent.

These tests run the per-job task in this process (InlineEngine), which is what both engines call.
"""

from __future__ import annotations

import gzip
import json
import os
import sys

import polars as pl
import pytest
from conftest import FIXTURES

from nccl_logsift.batch import run as batch_run
from nccl_logsift.batch import task
from nccl_logsift.batch.engines import RAY_MISSING, engine_for
from nccl_logsift.batch.run import BatchOptions, run_batch
from nccl_logsift.cli.batch import batch_progress
from nccl_logsift.errors import LogsiftError
from nccl_logsift.simulate import Options, write


class InlineEngine:
    def run(self, jobs, out, with_tables):
        for job in jobs:
            yield task.run_job(job, out, with_tables)


def archive(root):
    (root / "stall").mkdir(parents=True)
    (root / "stall" / "job.log").write_bytes((FIXTURES / "rank_stall_8ranks.log").read_bytes())
    (root / "ib.log.gz").write_bytes(gzip.compress((FIXTURES / "ib_error_4ranks.log").read_bytes()))
    (root / "empty").mkdir()
    (root / "binary.log").write_bytes(bytes(range(256)) * 64)
    return root


def jobs_table(out) -> pl.DataFrame:
    return pl.read_parquet(out / "jobs" / "*" / "*.parquet", hive_partitioning=True).sort("job_id")


def test_bad_jobs_are_recorded_and_the_batch_goes_on(tmp_path):
    options = BatchOptions((str(archive(tmp_path / "a")),), tmp_path / "out")
    result = run_batch(options, InlineEngine())
    assert (result.found, result.analysed, result.failed) == (4, 4, 2)
    rows = {r["job_id"]: r for r in jobs_table(options.out).iter_rows(named=True)}
    assert rows["empty"]["status"] == "failed" and "no files" in rows["empty"]["message"]
    assert rows["binary.log"]["status"] == "failed" and "binary" in rows["binary.log"]["message"]
    assert rows["ib.log.gz"]["status"] == "ok" and rows["ib.log.gz"]["primary_kinds"] == ["net_error"]
    assert rows["stall"]["primary_kinds"] == ["rank_behind"] and rows["stall"]["nccl_version"]
    assert result.summary.failed == 2 and [p.job_id for p in result.summary.problems] == [
        "binary.log",
        "empty",
    ]


def test_a_second_run_skips_what_did_not_change_and_redoes_what_did(tmp_path):
    root = archive(tmp_path / "a")
    options = BatchOptions((str(root),), tmp_path / "out")
    run_batch(options, InlineEngine())
    files = sorted(p.relative_to(options.out) for p in options.out.rglob("*.parquet"))
    again = run_batch(options, InlineEngine())
    assert (again.skipped, again.analysed) == (4, 0)
    log = root / "stall" / "job.log"
    os.utime(log, (1_600_000_000, 1_600_000_000))  # another run date: the old partition's files must go
    changed = run_batch(options, InlineEngine())
    assert (changed.skipped, changed.analysed) == (3, 1)
    now = sorted(p.relative_to(options.out) for p in options.out.rglob("*.parquet"))
    assert len(now) == len(files) and any("run_date=2020-09-13" in str(p) for p in now)
    assert jobs_table(options.out).height == 4
    assert (
        run_batch(BatchOptions(options.archives, options.out, retry_failed=True), InlineEngine()).analysed
        == 2
    )


def test_parts_an_interrupted_job_left_are_removed_when_its_files_move_to_another_day(tmp_path):
    """Its findings were written, its ``jobs`` row was not (an interrupt in between); then its newest file
    moved to another UTC day. The rerun wrote the job under the new run date and left the old partition's
    parts: a query over all partitions counted its findings twice."""
    root = archive(tmp_path / "a")
    options = BatchOptions((str(root),), tmp_path / "out")
    run_batch(options, InlineEngine())
    findings = lambda: pl.read_parquet(options.out / "findings" / "*" / "*.parquet", hive_partitioning=True)
    before = findings().height
    key = jobs_table(options.out).filter(pl.col("job_id") == "stall")["job_key"].item()
    (row,) = options.out.glob(f"jobs/*/{key}.parquet")  # the interrupt: every part but the jobs row
    row.unlink()
    os.utime(root / "stall" / "job.log", (1_600_000_000, 1_600_000_000))
    again = run_batch(options, InlineEngine())
    assert again.analysed == 1
    assert findings().height == before
    stall = findings().filter(pl.col("job_key") == key)
    assert stall.height and set(stall["run_date"].cast(pl.String)) == {"2020-09-13"}


def test_another_logsift_version_analyses_everything_again(tmp_path, monkeypatch):
    options = BatchOptions((str(archive(tmp_path / "a")),), tmp_path / "out")
    run_batch(options, InlineEngine())
    monkeypatch.setattr(task, "__version__", "9.9.9")
    monkeypatch.setattr(batch_run, "__version__", "9.9.9")
    assert run_batch(options, InlineEngine()).analysed == 4
    assert set(jobs_table(options.out)["logsift_version"]) == {"9.9.9"}


def test_tables_are_written_per_job_with_its_key_and_name_the_culprit_nic(tmp_path):
    root = tmp_path / "a"
    job = root / "ib27"
    job.mkdir(parents=True)
    write(
        Options(scenario="ib-error", ranks=4, nodes=2, ops=6, seed=3, nccl_version="2.27"),
        str(job / "job.log"),
    )
    options = BatchOptions((str(root),), tmp_path / "out", tables=True)
    result = run_batch(options, InlineEngine())
    processes = pl.read_parquet(options.out / "tables" / "processes" / "*" / "*.parquet")
    assert (
        processes.height == 4
        and set(processes["job_id"]) == {"ib27"}
        and processes["job_key"].n_unique() == 1
    )
    assert (options.out / "tables" / "lines").is_dir() and not list(options.out.glob(".staging*"))
    [nic] = result.summary.nics
    assert (
        nic.device.startswith("mlx5_")
        and nic.host == result.summary.hosts[0].host
        and nic.kinds == ("net_error",)
    )


def test_output_that_is_not_a_batch_dataset_is_refused(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "thesis.tex").write_text("")
    with pytest.raises(LogsiftError, match="not a logsift batch dataset"):
        batch_run.plan(BatchOptions((str(archive(tmp_path / "a")),), tmp_path / "out"))


def test_ray_engine_without_ray_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(LogsiftError) as error:
        engine_for("ray")
    assert str(error.value) == RAY_MISSING and "pip install 'nccl-logsift[ray]'" in RAY_MISSING
    with pytest.raises(LogsiftError, match="--address is for --engine ray"):
        engine_for("local", address="auto")


def test_fleet_json_holds_the_summary(tmp_path):
    options = BatchOptions((str(archive(tmp_path / "a")),), tmp_path / "out")
    run_batch(options, InlineEngine())
    document = json.loads((options.out / "fleet.json").read_text())
    assert document["jobs"] == 4 and document["hosts"][0]["name"] == document["hosts"][0]["host"]
    assert {k["kind"] for k in document["kinds"] if k["root_cause_jobs"]} == {"rank_behind", "net_error"}


class FakeTerminal:
    def __init__(self):
        self.text = []

    def isatty(self):
        return True

    def write(self, text):
        self.text.append(text)

    def flush(self):
        pass


def test_progress_is_drawn_on_a_terminal_only():
    with batch_progress(3, stream=FakeTerminal()) as advance:
        assert advance is not None
        advance(task.JobOutcome("k", "j", "ok", None, 5_000_000, 0.1))
    with batch_progress(3, stream=open(os.devnull, "w")) as advance:
        assert advance is None


def test_fleet_page_escapes_what_came_from_the_archive(tmp_path):
    root = archive(tmp_path / "a")
    (root / "<img src=x onerror=alert(1)>.log").write_bytes(
        bytes(range(256)) * 64
    )  # a job name is archive text too
    options = BatchOptions((str(root),), tmp_path / "out")
    run_batch(options, InlineEngine())
    page = (options.out / "fleet.html").read_text()
    assert "Content-Security-Policy" in page and "fleet: 5 job(s), 2 with a root cause" in page
    assert "&lt;img src=x onerror=alert(1)&gt;.log" in page and "<img" not in page
    assert page.index('id="hosts"') < page.index('id="versions"') < page.index('id="problems"')


def test_a_worker_that_dies_fails_its_job_only(tmp_path):
    from dying_task import run_or_die

    from nccl_logsift.batch.engines import LocalEngine

    root = tmp_path / "a"
    root.mkdir()
    for name in ("killed.log", "ib.log"):
        (root / name).write_bytes((FIXTURES / "ib_error_4ranks.log").read_bytes())
    options = BatchOptions((str(root),), tmp_path / "out")
    result = run_batch(options, LocalEngine(2, task=run_or_die))
    rows = {r["job_id"]: r for r in jobs_table(options.out).iter_rows(named=True)}
    assert (result.found, result.failed) == (2, 1)
    assert rows["killed.log"]["status"] == "failed" and "worker process" in rows["killed.log"]["message"]
    assert rows["ib.log"]["status"] == "ok" and rows["ib.log"]["primary_kinds"] == ["net_error"]


def test_each_job_is_parsed_in_its_worker_alone():
    assert task.ANALYZE_OPTIONS.workers == 1  # the pool is the parallelism; no parsing processes per job
