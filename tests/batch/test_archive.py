"""Finding jobs in an archive: a directory or file per job, or files grouped by --job-pattern."""

from __future__ import annotations

import os

import pytest

from nccl_logsift.batch.archive import compile_pattern, find_jobs
from nccl_logsift.errors import InputError


def touch(path, text="x\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_each_directory_and_each_file_in_the_archive_is_a_job(tmp_path):
    touch(tmp_path / "train-1" / "node0.log")
    touch(tmp_path / "train-1" / "ranks" / "node1.log.gz")
    touch(tmp_path / "train-2.log.zst")
    touch(tmp_path / ".partial" / "x.log")
    touch(tmp_path / "train-1" / ".nfs0001")
    jobs = find_jobs([str(tmp_path)])
    assert [(j.job_id, [os.path.relpath(p, tmp_path) for p in j.paths]) for j in jobs] == [
        ("train-1", ["train-1/node0.log", "train-1/ranks/node1.log.gz"]),
        ("train-2.log.zst", ["train-2.log.zst"]),
    ]
    assert len({j.key for j in jobs}) == 2 and all(j.archive == str(tmp_path) for j in jobs)


def test_a_file_given_as_archive_is_one_job(tmp_path):
    log = touch(tmp_path / "job.log")
    [job] = find_jobs([str(log)])
    assert job.job_id == "job.log" and job.paths == (str(log),)


def test_job_pattern_groups_files_by_the_part_named_job(tmp_path):
    for name in ("a.rank0.log.gz", "a.rank1.log.gz", "b.rank0.log", "README.md"):
        touch(tmp_path / "2025" / name)
    jobs = find_jobs([str(tmp_path)], "**/{job}.rank*.log*")
    assert [(j.job_id, len(j.files)) for j in jobs] == [("a", 2), ("b", 1)]
    assert find_jobs([str(tmp_path)], "{job}.rank*.log*") == []  # * and {job} stay within one directory


def test_job_pattern_translation(tmp_path):
    regex = compile_pattern("logs/{job}/[!.]*.log?")
    assert regex.match("logs/run7/rank0.log1").group("job") == "run7"
    assert regex.match("logs/run7/.rank0.log1") is None
    assert regex.match("logs/a/b/rank0.log1") is None
    with pytest.raises(InputError, match="once"):
        compile_pattern("{job}/{job}")
    with pytest.raises(InputError, match="closing"):
        compile_pattern("[abc")


def test_fingerprint_changes_with_size_or_mtime_only(tmp_path):
    log = touch(tmp_path / "j" / "a.log")
    before = find_jobs([str(tmp_path)])[0].fingerprint
    assert find_jobs([str(tmp_path)])[0].fingerprint == before
    os.utime(log, (1_700_000_000, 1_700_000_000))
    touched = find_jobs([str(tmp_path)])[0]
    assert touched.fingerprint != before and touched.run_date == "2023-11-14"


def test_missing_archive_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        find_jobs([str(tmp_path / "nope")])
