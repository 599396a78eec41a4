"""Derived tables that several rules and views read are computed once per Job."""

from __future__ import annotations

import gzip

import polars as pl
from conftest import FIXTURES

from nccl_logsift.pipeline import load_job
from nccl_logsift.resolve.job import per_job, read_lines
from nccl_logsift.resolve.work import timeouts, work_states


def test_timeouts_and_work_states_are_computed_once_per_job():
    job = load_job([str(FIXTURES / "collective_mismatch_4ranks.log")])
    assert timeouts(job) is timeouts(job) and not timeouts(job).is_empty()
    assert work_states(job) is work_states(job)
    other = load_job([str(FIXTURES / "collective_mismatch_4ranks.log")])
    assert timeouts(other) is not timeouts(job) and timeouts(other).equals(timeouts(job))


def test_helpers_of_the_same_name_in_two_modules_are_kept_apart():
    def helper(job):
        return "first"

    def twin(job):
        return "second"

    twin.__qualname__ = helper.__qualname__
    twin.__module__ = "nccl_logsift.findings.elsewhere"
    job = load_job([str(FIXTURES / "collective_mismatch_4ranks.log")])
    assert (per_job(helper)(job), per_job(twin)(job)) == ("first", "second")


def test_read_lines_gives_each_offset_its_line_in_the_order_asked(tmp_path):
    path = tmp_path / "job.log"
    path.write_bytes(b"first\nsecond line\r\nthird\n")
    assert read_lines(str(path), [19, 0, 6, 0]) == ["third", "first", "second line", "first"]


def test_read_lines_gives_none_for_a_pipe_a_compressed_file_or_a_missing_one(tmp_path):
    packed = tmp_path / "job.log.gz"
    packed.write_bytes(gzip.compress(b"first\n"))
    for path in ("-", str(packed), str(tmp_path / "absent.log")):
        assert read_lines(path, [0, 0]) == [None, None]


def test_evidence_gives_each_named_line_its_text_when_two_sources_share_line_numbers(tmp_path):
    paths = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.log"
        path.write_text("".join(f"host-{name}:1:1 [0] NCCL INFO line {i} of {name}\n" for i in range(1, 6)))
        paths.append(str(path))
    job = load_job(paths)
    rows = pl.DataFrame({"source_id": [1, 0, 1], "line_no": [4, 2, 2]})
    assert [(e.path, e.line, e.text) for e in job.evidence(rows)] == [
        (paths[0], 2, "host-a:1:1 [0] NCCL INFO line 2 of a"),
        (paths[1], 2, "host-b:1:1 [0] NCCL INFO line 2 of b"),
        (paths[1], 4, "host-b:1:1 [0] NCCL INFO line 4 of b"),
    ]


def test_a_parsed_job_holds_every_table_with_its_columns_even_when_no_line_filled_it(tmp_path):
    full = load_job([str(FIXTURES / "segfault_4ranks.log")])
    log = tmp_path / "one.log"
    log.write_text("nothing a grammar knows\n")
    bare = load_job([str(log)])
    assert set(bare.tables) == set(full.tables)
    for name, table in full.tables.items():
        # The empty collectives table has every column of the table's schema; a full one those its rows had.
        assert {c: t for c, t in bare.tables[name].schema.items() if c in table.columns} == dict(
            table.schema
        ), name
