"""Ctrl-C stops `logsift batch` (local engine) within seconds, ends its workers, and a rerun finishes the
job."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from conftest import ROOT, foreground

from nccl_logsift.simulate import Options, write

JOBS = 12


def archive(root: Path) -> Path:
    """``JOBS`` copies of one simulated stalled job of ~3 MB, so that each takes a worker a while."""
    first = root / "job-00"
    first.mkdir(parents=True)
    write(Options(scenario="rank-stall", ranks=8, nodes=2, seed=5, size=3_000_000), str(first / "job.log"))
    for n in range(1, JOBS):
        shutil.copytree(first, root / f"job-{n:02d}")
    return root


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` still running (zombies are gone already: nothing runs)."""
    members = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def jobs_written(out: Path) -> int:
    return len(list(out.glob("jobs/*/*.parquet")))


def busy(out: Path, tables: bool) -> bool:
    """A job is done, and (with --tables) a worker is writing a job's tables."""
    return jobs_written(out) > 0 and (not tables or any(out.glob(".staging-*")))


@pytest.mark.parametrize("tables", [False, True], ids=["jobs", "with-tables"])
def test_ctrl_c_stops_the_batch_and_its_workers_and_a_rerun_completes(tmp_path, tables):
    source, out = archive(tmp_path / "archive"), tmp_path / "fleet"
    command = [
        sys.executable,
        "-m",
        "nccl_logsift",
        "batch",
        str(source),
        "-o",
        str(out),
        "--jobs",
        "2",
        *(["--tables"] if tables else []),
    ]
    # A session of its own: Ctrl-C in a terminal signals the whole foreground process group, workers included.
    proc = subprocess.Popen(
        foreground(command),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not busy(out, tables) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if proc.poll() is not None:
            raise AssertionError(f"the batch ended before it was interrupted: {proc.communicate()}")
        assert 0 < jobs_written(out) < JOBS, "the batch was not interrupted mid-way"
        os.killpg(proc.pid, signal.SIGINT)
        interrupted = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - interrupted
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and took < 10, (proc.returncode, took, stderr)
    assert "Aborted." in stderr and "Traceback" not in stderr
    time.sleep(1)  # the forkserver and the resource tracker see the driver's end of their pipes close
    assert group_members(proc.pid) == []
    # Nothing half-written is left: no staging directory of a stopped worker, no part not yet renamed.
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".staging")]

    done = jobs_written(out)
    rerun = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"Found {JOBS} job(s): analysed {JOBS - done}, skipped {done} already analysed." in rerun.stdout
    jobs = pl.read_parquet(out / "jobs" / "*" / "*.parquet")
    findings = pl.read_parquet(out / "findings" / "*" / "*.parquet")
    assert jobs["job_key"].n_unique() == jobs.height == JOBS and set(jobs["status"]) == {"ok"}
    per_job = findings.group_by("job_key").len()["len"]
    assert per_job.n_unique() == 1 and findings["job_key"].n_unique() == JOBS  # the same findings, once each
    if tables:
        lines = pl.read_parquet(out / "tables" / "lines" / "*" / "*.parquet")
        assert lines["job_key"].n_unique() == JOBS and lines.group_by("job_key").len()["len"].n_unique() == 1
