"""``logsift batch`` over a simulated fleet of 50 jobs, on both engines: the dataset and the fleet summary
agree with the simulator's ground truth.

The archive (fleet_archive.py) mixes 13 scenarios, four NCCL versions, three layouts, plain, .gz, .zst
and .bz2 files, three run dates and one corrupt .gz; two hosts are the culprit of many jobs.
"""

from __future__ import annotations

import json
from collections import Counter

import polars as pl
import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from fleet_archive import BAD_HOSTS, CORRUPT, DAYS, build

from nccl_logsift.cli import cli


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("archive")
    return root, build(root)


@pytest.fixture(scope="module", params=["local", "ray"])
def batch(request, fleet, tmp_path_factory):
    if request.param == "ray":
        pytest.importorskip("ray", reason="the test extra installs Ray")
    root, truth = fleet
    out = tmp_path_factory.mktemp(f"dataset-{request.param}") / "fleet"
    result = CliRunner().invoke(
        cli,
        ["batch", str(root), "-o", str(out), "--engine", request.param, "--jobs", "2"],
        catch_exceptions=False,
    )
    return result, out, truth


def read(out, table) -> pl.DataFrame:
    return pl.read_parquet(out / table / "*" / "*.parquet", hive_partitioning=True)


def test_batch_exits_0_and_says_what_it_did(batch):
    result, out, truth = batch
    assert result.exit_code == 0, result.output
    assert (
        f"Found {truth.jobs} job(s): analysed {truth.jobs}, skipped 0 already analysed, 1 failed."
        in result.output
    )
    assert (out / "fleet.json").is_file()


def test_every_job_has_a_row_and_only_the_corrupt_one_failed(batch):
    _, out, truth = batch
    jobs = read(out, "jobs")
    assert jobs.height == truth.jobs and jobs["job_key"].n_unique() == truth.jobs
    failed = jobs.filter(pl.col("status") != "ok")
    assert failed["job_id"].to_list() == [f"{CORRUPT}.log.gz"]
    assert failed["status"][0] == "failed" and "corrupt" in failed["message"][0]
    analysed = jobs.filter(pl.col("status") == "ok")
    assert analysed["lines"].min() > 0 and analysed["hosts"].list.len().min() >= 2


def test_root_causes_of_every_job_match_the_truth(batch):
    _, out, truth = batch
    roots = read(out, "findings").filter("primary").explode("hosts")
    got = {
        job: (sorted(set(kinds)), sorted(set(hosts)))
        for job, kinds, hosts in roots.group_by("job_id").agg("kind", "hosts").iter_rows()
    }
    for job_id, t in truth.truths.items():
        primaries = [f for f in t["faults"] if f["primary"]]
        expected = (
            sorted({f["kind"] for f in primaries}),
            sorted({h for f in primaries for h in f["hosts"]}),
        )
        found = next((v for k, v in got.items() if k.startswith(job_id)), ([], []))
        assert found == expected, job_id


def test_fleet_counts_root_causes_by_kind_exactly(batch):
    _, out, truth = batch
    summary = json.loads((out / "fleet.json").read_text())
    assert {
        k["kind"]: k["root_cause_jobs"] for k in summary["kinds"] if k["root_cause_jobs"]
    } == truth.primary_kind_jobs()
    assert (summary["jobs"], summary["ok"], summary["failed"]) == (truth.jobs, truth.jobs - 1, 1)
    assert summary["with_root_cause"] == sum(
        1 for t in truth.truths.values() if any(f["primary"] for f in t["faults"])
    )


def test_fleet_ranks_the_failing_hosts_first(batch):
    _, out, truth = batch
    hosts = json.loads((out / "fleet.json").read_text())["hosts"]
    assert [(h["host"], h["jobs"]) for h in hosts[: len(BAD_HOSTS)]] == list(BAD_HOSTS.items())
    expected = sorted(
        truth.culprit_host_jobs().items(), key=lambda hj: (-hj[1], hj[0])
    )  # most jobs, then by name
    assert [(h["host"], h["jobs"]) for h in hosts] == expected[: len(hosts)]
    gpus = json.loads((out / "fleet.json").read_text())["gpus"]
    assert gpus[0]["host"] == next(iter(BAD_HOSTS)) and gpus[0]["device"].startswith("GPU ")


def test_fleet_breaks_root_causes_down_by_nccl_version(batch):
    _, out, truth = batch
    summary = json.loads((out / "fleet.json").read_text())
    expected = Counter(
        (t["nccl_version"], kind)
        for t in truth.truths.values()
        for kind in {f["kind"] for f in t["faults"] if f["primary"]}
    )
    got = Counter(
        {
            (row["nccl_version"], kind): n
            for row in summary["versions"]
            for kind, n in zip(summary["version_kinds"], row["counts"])
            if n
        }
    )
    assert got == expected
    assert {row["nccl_version"]: row["jobs"] for row in summary["versions"]} == truth.version_jobs()
    assert [row["nccl_version"] for row in summary["versions"]] == sorted(
        truth.version_jobs(), key=lambda v: [int(x) for x in v.split(".")]
    )


def test_dataset_is_hive_partitioned_by_run_date_for_any_reader(batch):
    _, out, _ = batch
    for table in ("jobs", "findings", "ranks", "gpus"):
        dataset = ds.dataset(
            out / table, format="parquet", partitioning="hive"
        )  # how Spark and DuckDB see it
        assert "run_date" in dataset.schema.names and "job_key" in dataset.schema.names
        assert dataset.count_rows() == read(out, table).height > 0
    dates = read(out, "jobs").get_column("run_date").cast(pl.String).unique().sort().to_list()
    assert dates == list(DAYS)
    assert not list(out.rglob("*.tmp")) and not list(out.glob(".staging*"))
    joined = read(out, "findings").join(read(out, "jobs").select("job_key", "nccl_version"), on="job_key")
    assert joined.height == read(out, "findings").height  # job_key joins every table


def test_fleet_page_in_chromium_names_the_failing_hosts(batch, tmp_path):
    """The fleet page opens in headless Chromium: its script runs, no CSP violation, the worst host leads."""
    from tests.render import browser
    from tests.render.dom import parse

    _, out, _ = batch
    loaded = browser.load(out / "fleet.html")
    dom = parse(loaded.dom)
    assert dom.find("html").attrs.get("data-js") == "ready"
    assert "Refused to" not in loaded.console, loaded.console
    first_host = dom.by_id("hosts").find("tbody").find("td").text
    assert first_host == next(iter(BAD_HOSTS))
    kinds = [row.find("td").text for row in dom.by_id("kinds").find("tbody").find_all("tr")]
    assert kinds, "no kind in the fleet page"
    shot = browser.screenshot(out / "fleet.html", tmp_path / "fleet.png")
    assert shot.stat().st_size > 20_000


def test_batch_writes_each_analysed_jobs_report_and_the_fleet_page_lists_and_links_every_job(batch):
    _, out, truth = batch
    jobs = read(out, "jobs")
    summary = json.loads((out / "fleet.json").read_text())
    listed = {entry["job_id"]: entry for entry in summary["job_list"]}
    assert set(listed) == set(jobs["job_id"])
    for row in jobs.iter_rows(named=True):
        entry = listed[row["job_id"]]
        assert entry["run_date"] == str(row["run_date"]) and entry["status"] == row["status"]
        if row["status"] == "failed":
            assert entry["report"] is None
        else:
            assert entry["root_causes"] == row["primary_kinds"]
            page = out / entry["report"]
            assert (
                page.is_file()
                and entry["report"] == f"reports/run_date={row['run_date']}/{row['job_key']}.html"
            )
            assert "<!DOCTYPE html>" in page.read_text()[:100]
    links = (out / "fleet.html").read_text().count('<a href="reports/run_date=')
    assert links == jobs.filter(pl.col("status") != "failed").height == truth.jobs - 1


def test_fleet_page_filters_its_job_list_by_the_kind_in_its_address(batch):
    from tests.render import browser
    from tests.render.dom import parse

    _, out, truth = batch
    kind, jobs = truth.primary_kind_jobs().most_common(1)[0]
    dom = parse(browser.load(out / "fleet.html", fragment=f"kind={kind}").dom)
    rows = dom.by_id("job-list").find("tbody").find_all("tr")
    shown = [row for row in rows if "hidden" not in row.attrs]
    assert len(rows) == truth.jobs and len(shown) == jobs
    assert all(kind in row.attrs["data-kinds"].split() for row in shown)
    assert dom.by_id("filter-count").text == f"{jobs} of {truth.jobs} job(s)"


def test_an_empty_archive_warns_on_the_terminal_and_on_the_page(tmp_path):
    (tmp_path / "archive").mkdir()
    out = tmp_path / "fleet"
    result = CliRunner().invoke(
        cli, ["batch", str(tmp_path / "archive"), "-o", str(out)], catch_exceptions=False
    )
    assert result.exit_code == 0
    assert "Warning: no job found" in result.stderr
    assert 'id="empty"' in (out / "fleet.html").read_text()


def test_a_job_without_files_has_no_run_date_rather_than_1970(tmp_path):
    import pyarrow as pa

    from nccl_logsift.batch import dataset, fleet
    from nccl_logsift.batch.archive import JobInput

    job = JobInput(job_id="empty", archive=str(tmp_path), files=())
    assert job.run_date is None
    path = dataset.part_path(tmp_path, "jobs", job.run_date, "k")
    dataset.write_part(
        path, pa.Table.from_pylist([{"job_key": "k", "job_id": "empty", "status": "failed"}], dataset.JOBS)
    )
    assert fleet.scan(tmp_path, "jobs").collect()["run_date"].to_list() == [None]
    summary = fleet.summarize(tmp_path)
    assert summary.first_run_date is None and summary.job_list[0].run_date is None
