"""``logsift simulate --flight-recorder``: dumps in PyTorch's forms, with the truth of who dumped."""

from __future__ import annotations

import json

import pytest

from nccl_logsift.flight import dump as fr_dump


@pytest.mark.parametrize("form", ["pickle", "json"])
def test_simulate_flight_recorder_writes_plain_dumps_and_their_truth(tmp_path, run_cli, form):
    result = run_cli(
        "simulate",
        "-s",
        "rank-stall",
        "--ranks",
        "4",
        "-o",
        str(tmp_path / "job.log"),
        "--truth",
        str(tmp_path / "truth.json"),
        "--flight-recorder",
        str(tmp_path / "fr"),
        "--flight-recorder-format",
        form,
    )
    assert result.exit_code == 0, result.output
    truth = json.loads((tmp_path / "truth.json").read_text())["flight_recorder"]
    assert truth["format"] == form and truth["dumped"] == [0, 1, 2, 3] and truth["not_dumped"] == []
    suffix = ".json" if form == "json" else ""
    for rank in truth["dumped"]:
        path = tmp_path / "fr" / f"nccl_trace_rank_{rank}{suffix}"
        assert fr_dump.sniff_path(path) == form
        loaded = fr_dump.load(path)  # the restricted unpickler: only plain data in it
        assert loaded.rank == rank and loaded.version == "2.10" and loaded.entries
        assert {e["state"] for e in loaded.entries} <= {"scheduled", "completed"}
        assert all(e["profiling_name"].startswith("nccl:") for e in loaded.entries)


def test_simulate_flight_recorder_culprit_stops_one_collective_short(tmp_path, run_cli):
    run_cli(
        "simulate",
        "-s",
        "rank-stall",
        "--ranks",
        "4",
        "-o",
        str(tmp_path / "job.log"),
        "--truth",
        str(tmp_path / "truth.json"),
        "--flight-recorder",
        str(tmp_path / "fr"),
    )
    truth = json.loads((tmp_path / "truth.json").read_text())
    (culprit,) = next(f for f in truth["faults"] if f["primary"])["ranks"]
    status = {r: fr_dump.load(tmp_path / "fr" / f"nccl_trace_rank_{r}").pg_status["0"] for r in range(4)}
    front = max(s["last_enqueued_collective"] for s in status.values())
    assert status[culprit]["last_enqueued_collective"] < front
    assert all(s["last_enqueued_collective"] == front for r, s in status.items() if r != culprit)


def test_simulate_flight_recorder_buffer_keeps_the_newest_entries(tmp_path, run_cli):
    run_cli(
        "simulate",
        "-s",
        "rank-stall",
        "--ranks",
        "4",
        "-o",
        str(tmp_path / "job.log"),
        "--flight-recorder",
        str(tmp_path / "fr"),
        "--flight-recorder-buffer",
        "3",
    )
    entries = fr_dump.load(tmp_path / "fr" / "nccl_trace_rank_0").entries
    assert len(entries) == 3 and entries[0]["record_id"] > 0
    assert [e["record_id"] for e in entries] == list(
        range(entries[0]["record_id"], entries[0]["record_id"] + 3)
    )


def test_simulate_default_prefix_dumps_are_found_when_the_logs_say_ranks_dumped(tmp_path, monkeypatch):
    from nccl_logsift.pipeline import analyze
    from nccl_logsift.simulate import Options, write

    cache = tmp_path / "cache"
    fr = cache / "torch"
    run_log = tmp_path / "logs" / "job.log"
    run_log.parent.mkdir()

    write(Options(scenario="rank-stall", ranks=4, seed=3), str(run_log), flight_dir=str(fr))
    for path in fr.iterdir():  # PyTorch 2.6+'s default name
        path.rename(fr / path.name.replace("nccl_trace_rank_", "comm_lib_trace_rank_"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    report = analyze([str(run_log)])
    assert report.dumps.dumped == (0, 1, 2, 3)
    assert all("comm_lib_trace_rank_" in f.path for f in report.dumps.files)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
    assert analyze([str(run_log)]).dumps.dumped == ()
